//! bootloader 0.9 (blog_os with `bootimage`): from the `&'static BootInfo`
//! of `entry_point!`.
//!
//! This feature turns on bootloader's `map_physical_memory` (the adapter
//! reads the ACPI tables through it). bootloader 0.9 passes no RSDP, so
//! [`BootMemory::rsdp`](super::BootMemory::rsdp) finds it in the EBDA or
//! the BIOS area.
//!
//! ```no_run
//! # fn this_cpu() -> usize { 0 }
//! # fn map_uncached(_: u64, _: usize) -> Option<clockhal::x86::MmioRegion> { None }
//! # fn kernel_main(boot_info: &'static bootloader::BootInfo) {
//! use clockhal::boot::{BootMemory, BootPlatform};
//! // SAFETY: the loader's boot info; physical memory stays mapped there.
//! let boot = unsafe { BootMemory::from_bootloader_0_9(boot_info) };
//! // SAFETY: CPL0; `this_cpu` names the executing CPU for a whole read.
//! let hw = unsafe { clockhal::x86::Native::new() }.with_cpu_index(this_cpu);
//! let mut map_hpet = |phys, len| map_uncached(phys, len);
//! let clock = clockhal::probe(hw, boot.platform().hpet_mapper(&mut map_hpet)).into_clock();
//! # let _ = clock; }
//! ```
//!
//! The conversion is host-tested in `clockhal-x86` against boot infos
//! built with the crate's `BootInfo::new` and `MemoryMap::add_region`.
