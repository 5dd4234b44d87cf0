//! bootloader 0.9 (blog_os up to its second edition's last posts, booted
//! with `bootimage`): the physical memory mapping (`BootInfo::
//! physical_memory_offset`, feature `map_physical_memory`, which this
//! feature turns on in the kernel's `bootloader` dependency) over the
//! memory map's extent. It passes no RSDP: [`BootMemory::rsdp`] searches
//! the EBDA and the BIOS area for it.

use super::{map_end, BootMemory};
use bootloader::BootInfo;

impl BootMemory {
    /// From bootloader 0.9's boot information. Infallible: with the
    /// `map_physical_memory` feature (always on with this adapter) the
    /// loader maps physical memory from 0 up to the end of its memory map,
    /// which always has regions (the loader refuses to boot without).
    ///
    /// # Safety
    /// `info` is the boot information the loader passed to the kernel's
    /// entry point, and the kernel keeps physical memory mapped at its
    /// offset, readable, while the value (and any `Platform` or `Clock`
    /// made from it) is used.
    ///
    /// Interrupt-safe: yes (reads `info` only).
    pub unsafe fn from_bootloader_0_9(info: &BootInfo) -> BootMemory {
        // An empty map (impossible from the loader) maps nothing readable.
        let limit = map_end(info.memory_map.iter().map(|r| r.range.end_addr())).unwrap_or(0);
        // SAFETY: the loader mapped physical 0..limit at the offset (it
        // maps every frame up to the end of its memory map), as the caller
        // promised.
        unsafe { BootMemory::new(info.physical_memory_offset, limit, None) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::boot::tests::first_mib_with_microvm_tables;
    use bootloader::bootinfo::{FrameRange, MemoryMap, MemoryRegion, MemoryRegionType};

    /// A boot info as the loader builds it (`BootInfo::new` and
    /// `MemoryMap::add_region` are public but `#[doc(hidden)]`, "for
    /// internal purposes": the loader's own constructors).
    fn info(regions: &[(u64, u64, MemoryRegionType)], offset: u64) -> BootInfo {
        let mut map = MemoryMap::new();
        for &(start, end, region_type) in regions {
            map.add_region(MemoryRegion {
                range: FrameRange::new(start, end),
                region_type,
            });
        }
        BootInfo::new(map, None, 0, offset)
    }

    #[test]
    fn the_rsdp_is_found_in_the_bios_area_through_the_loaders_mapping() {
        let bytes = first_mib_with_microvm_tables();
        let i = info(
            &[
                (0, 0x9_F000, MemoryRegionType::Usable),
                (0x9_F000, 0x10_0000, MemoryRegionType::Reserved),
            ],
            bytes.as_ptr() as u64,
        );
        // SAFETY: `bytes` stands for physical 0..1 MiB at its own address,
        // outlives `boot`, and reading it has no side effects.
        let boot = unsafe { BootMemory::from_bootloader_0_9(&i) };
        assert_eq!(boot.loader_rsdp(), None);
        assert_eq!(boot.rsdp(), Ok(0xE_0000));
        assert!(crate::acpi::discover(boot.phys_memory(), 0xE_0000).is_ok());
        drop(bytes);
    }

    #[test]
    fn the_mapping_ends_where_the_memory_map_does() {
        let i = info(
            &[
                (0, 0x9_F000, MemoryRegionType::Usable),
                (0x10_0000, 0x800_0000, MemoryRegionType::Usable),
            ],
            0x100_0000_0000,
        );
        // SAFETY: nothing is read through this mapping.
        let boot = unsafe { BootMemory::from_bootloader_0_9(&i) };
        let m = std::format!("{:?}", boot.phys_memory());
        assert!(
            m.contains("offset: 1099511627776") && m.contains("limit: 134217728"),
            "{m}"
        );
        // Without tables in "memory" there (nothing readable in the test
        // process at that offset is asked for: the limit check comes
        // first for a mapping that ends at 0).
        let empty = info(&[], 0x100_0000_0000);
        // SAFETY: limit 0: nothing is readable, nothing is read.
        let boot = unsafe { BootMemory::from_bootloader_0_9(&empty) };
        assert!(matches!(
            boot.rsdp(),
            Err(crate::acpi::AcpiError::Unreadable { .. })
        ));
    }
}
