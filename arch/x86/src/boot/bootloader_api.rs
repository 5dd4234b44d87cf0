//! bootloader_api 0.11 (rust-osdev's UEFI/BIOS loader): the physical
//! memory mapping (`BootInfo::physical_memory_offset`, present when the
//! kernel's `BootloaderConfig` asks for `mappings.physical_memory`) over
//! the memory map's extent, and `BootInfo::rsdp_addr`.

use super::{map_end, BootError, BootMemory};
use bootloader_api::BootInfo;

impl BootMemory {
    /// From bootloader_api 0.11's boot information.
    ///
    /// Errors: [`BootError::NoPhysicalMemoryMapping`] when the kernel's
    /// `BootloaderConfig` did not ask for the physical-memory mapping,
    /// [`BootError::EmptyMemoryMap`] without memory regions.
    ///
    /// # Safety
    /// `info` is the boot information the loader passed to the kernel's
    /// entry point (its offset and memory map are the loader's real ones),
    /// and the kernel keeps physical memory mapped there, readable, while
    /// the value (and any `Platform` or `Clock` made from it) is used.
    ///
    /// Interrupt-safe: yes (reads `info` only).
    pub unsafe fn from_bootloader_api(info: &BootInfo) -> Result<BootMemory, BootError> {
        let offset = info
            .physical_memory_offset
            .into_option()
            .ok_or(BootError::NoPhysicalMemoryMapping)?;
        let limit = map_end(info.memory_regions.iter().map(|r| r.end))?;
        // SAFETY: the loader mapped physical 0..limit at `offset` (it maps
        // at least up to the end of its memory map), as the caller promised.
        Ok(unsafe { BootMemory::new(offset, limit, info.rsdp_addr.into_option()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::boot::tests::first_mib_with_microvm_tables;
    use bootloader_api::info::{MemoryRegion, MemoryRegionKind};
    use std::boxed::Box;

    fn info(regions: &[(u64, u64)]) -> BootInfo {
        let regions: Box<[MemoryRegion]> = regions
            .iter()
            .map(|&(start, end)| MemoryRegion {
                start,
                end,
                kind: MemoryRegionKind::Usable,
            })
            .collect();
        BootInfo::new(Box::leak(regions).into())
    }

    #[test]
    fn the_mapping_spans_the_memory_map_and_the_rsdp_is_passed_on() {
        let mut i = info(&[
            (0, 0x9_F000),
            (0x10_0000, 0x800_0000),
            (0xF_0000, 0x10_0000),
        ]);
        i.physical_memory_offset = Some(0xFFFF_8000_0000_0000).into();
        i.rsdp_addr = Some(0xF_5A40).into();
        // SAFETY: nothing is read through this mapping.
        let boot = unsafe { BootMemory::from_bootloader_api(&i) }.unwrap();
        assert_eq!(boot.loader_rsdp(), Some(0xF_5A40));
        assert_eq!(boot.rsdp(), Ok(0xF_5A40));
        let m = std::format!("{:?}", boot.phys_memory());
        assert!(
            m.contains("offset: 18446603336221196288") && m.contains("limit: 134217728"),
            "{m}"
        );
    }

    #[test]
    fn without_the_physical_memory_mapping_it_says_so() {
        let i = info(&[(0, 0x800_0000)]);
        // SAFETY: fails before anything is mapped.
        let r = unsafe { BootMemory::from_bootloader_api(&i) };
        assert_eq!(r.map(|_| ()), Err(BootError::NoPhysicalMemoryMapping));
        let mut i = info(&[]);
        i.physical_memory_offset = Some(0).into();
        // SAFETY: as above.
        let r = unsafe { BootMemory::from_bootloader_api(&i) };
        assert_eq!(r.map(|_| ()), Err(BootError::EmptyMemoryMap));
    }

    #[test]
    fn without_a_loader_rsdp_the_bios_area_is_searched_through_the_mapping() {
        // "Physical memory" 0..1 MiB is this buffer: the offset is its
        // address, so the scan reads it through the real OffsetMapping.
        let bytes = first_mib_with_microvm_tables();
        let mut i = info(&[(0, 0x10_0000)]);
        i.physical_memory_offset = Some(bytes.as_ptr() as u64).into();
        // SAFETY: `bytes` (physical 0..1 MiB at its address) outlives
        // `boot`, and reading it has no side effects.
        let boot = unsafe { BootMemory::from_bootloader_api(&i) }.unwrap();
        assert_eq!(boot.loader_rsdp(), None);
        assert_eq!(boot.rsdp(), Ok(0xE_0000));
        let clocks = crate::acpi::discover(boot.phys_memory(), 0xE_0000).unwrap();
        assert!(clocks.pm_timer.is_err()); // microvm: none
        drop(bytes);
    }
}
