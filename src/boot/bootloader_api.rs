//! bootloader_api 0.11: from the `BootInfo` the entry point receives.
//!
//! The kernel's `BootloaderConfig` must map physical memory
//! (`config.mappings.physical_memory = Some(Mapping::Dynamic)`); the RSDP
//! is `BootInfo::rsdp_addr`.
//!
//! ```no_run
//! # fn this_cpu() -> usize { 0 }
//! # fn map_uncached(_: u64, _: usize) -> Option<clockhal::x86::MmioRegion> { None }
//! # fn kernel_main(boot_info: &'static mut bootloader_api::BootInfo) {
//! use clockhal::boot::{BootMemory, BootPlatform};
//! // SAFETY: the loader's boot info; physical memory stays mapped there.
//! let boot = unsafe { BootMemory::from_bootloader_api(boot_info) }.expect("map physical memory");
//! // SAFETY: CPL0; `this_cpu` names the executing CPU for a whole read.
//! let hw = unsafe { clockhal::x86::Native::new() }.with_cpu_index(this_cpu);
//! let mut map_hpet = |phys, len| map_uncached(phys, len);
//! let clock = clockhal::probe(hw, boot.platform().hpet_mapper(&mut map_hpet)).into_clock();
//! # let _ = clock; }
//! ```
//!
//! The conversion is host-tested in `clockhal-x86` against boot infos
//! built with `BootInfo::new`.
