//! The Limine protocol: from the kernel's answered Limine requests (base
//! revision, HHDM, RSDP).
//!
//! The HHDM is the physical-memory mapping; the RSDP request's answer is
//! converted by revision (virtual before base revision 3, physical from
//! it). From revision 3 Limine does not map the BIOS areas, so without an
//! RSDP answer nothing is searched.
//!
//! ```no_run
//! # fn this_cpu() -> usize { 0 }
//! # fn map_uncached(_: u64, _: usize) -> Option<clockhal::x86::MmioRegion> { None }
//! use limine::{request::{HhdmRequest, RsdpRequest}, BaseRevision};
//! static BASE_REVISION: BaseRevision = BaseRevision::new();
//! static HHDM: HhdmRequest = HhdmRequest::new();
//! static RSDP: RsdpRequest = RsdpRequest::new();
//! # fn kmain() {
//! use clockhal::boot::{BootMemory, BootPlatform};
//! // SAFETY: our request statics, answered by Limine; the HHDM stays mapped.
//! let boot = unsafe { BootMemory::from_limine(&BASE_REVISION, &HHDM, &RSDP) }.expect("HHDM");
//! // SAFETY: CPL0; `this_cpu` names the executing CPU for a whole read.
//! let hw = unsafe { clockhal::x86::Native::new() }.with_cpu_index(this_cpu);
//! let mut map_hpet = |phys, len| map_uncached(phys, len);
//! let clock = clockhal::probe(hw, boot.platform().hpet_mapper(&mut map_hpet)).into_clock();
//! # let _ = clock; }
//! ```
//!
//! (The request statics also need the kernel's `.requests` section
//! markers and linker script, as in Limine's template.) Host-tested in
//! `clockhal-x86` with the crate's request constructors; Limine has no
//! constructors for answers, so the tests write them as the loader does
//! (the response pointer into the request, the loaded revision into the
//! base-revision tag). No Limine binary boots here.
