//! Multiboot2 (GRUB): from the `BootInformation` the kernel loaded from
//! the physical address the loader passed in EBX.
//!
//! Multiboot2 maps nothing: the kernel gives its own mapping of physical
//! memory (here all of it below 4 GiB at `PHYS_OFFSET`). The RSDP is the
//! copy in the ACPI 2.0 tag, else the 1.0 one; without either it is
//! searched for in the BIOS areas.
//!
//! ```no_run
//! # const PHYS_OFFSET: u64 = 0xFFFF_8000_0000_0000;
//! # fn this_cpu() -> usize { 0 }
//! # fn map_uncached(_: u64, _: usize) -> Option<clockhal::x86::MmioRegion> { None }
//! # fn kmain(mbi: &multiboot2::BootInformation, mbi_phys: u64) {
//! use clockhal::boot::{BootMemory, BootPlatform};
//! // SAFETY: physical memory below 4 GiB is mapped readable at PHYS_OFFSET.
//! let phys = unsafe { clockhal::x86::OffsetMapping::new(PHYS_OFFSET, 1 << 32) };
//! let boot = BootMemory::from_multiboot2(mbi, mbi_phys, phys);
//! // SAFETY: CPL0; `this_cpu` names the executing CPU for a whole read.
//! let hw = unsafe { clockhal::x86::Native::new() }.with_cpu_index(this_cpu);
//! let mut map_hpet = |phys, len| map_uncached(phys, len);
//! let clock = clockhal::probe(hw, boot.platform().hpet_mapper(&mut map_hpet)).into_clock();
//! # let _ = clock; }
//! ```
//!
//! multiboot2 0.24 (the newest that builds on clockhal's MSRV, Rust 1.85):
//! a kernel on another 0.x has a different `BootInformation` type. The
//! conversion is host-tested in `clockhal-x86` against boot informations
//! from the crate's own `Builder`, loaded with `BootInformation::load`.
