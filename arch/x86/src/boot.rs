//! What a boot loader hands the kernel, as clockhal needs it: physical
//! memory mapped at a fixed offset (for the ACPI tables) and, where the
//! loader passes one, the RSDP's address.
//!
//! One module per protocol builds a [`BootMemory`] from that protocol
//! crate's own boot information type; the facade turns it into a `Platform`
//! (`clockhal::boot`). What no protocol says, and the OS must still give:
//! the executing CPU's index (`Native::with_cpu_index`), a mapping of the
//! HPET's registers (`Platform::hpet_mapper`), memory for kvmclock and
//! Hyper-V pages, and the CPU count when it has no MADT.

#[cfg(feature = "bootloader")]
#[cfg_attr(docsrs, doc(cfg(feature = "bootloader")))]
mod bootloader;
#[cfg(feature = "bootloader_api")]
#[cfg_attr(docsrs, doc(cfg(feature = "bootloader_api")))]
mod bootloader_api;
#[cfg(feature = "limine")]
#[cfg_attr(docsrs, doc(cfg(feature = "limine")))]
mod limine;
#[cfg(feature = "multiboot2")]
#[cfg_attr(docsrs, doc(cfg(feature = "multiboot2")))]
mod multiboot2;

use crate::acpi::{find_rsdp, AcpiError};
use crate::OffsetMapping;
use core::fmt;

/// Physical memory as the boot loader mapped it, and the RSDP it passed.
#[derive(Clone, Copy, Debug)]
pub struct BootMemory {
    phys: OffsetMapping,
    loader_rsdp: Option<u64>,
    /// Whether the BIOS areas are mapped and may be searched for an RSDP.
    search_bios: bool,
}

/// Why a boot information cannot give clockhal its memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum BootError {
    /// The loader did not map physical memory (bootloader_api: set
    /// `BootloaderConfig::mappings.physical_memory`; bootloader 0.9: the
    /// `map_physical_memory` feature).
    NoPhysicalMemoryMapping,
    /// The memory map is empty, so the mapping's extent is unknown.
    EmptyMemoryMap,
}

impl fmt::Display for BootError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BootError::NoPhysicalMemoryMapping => {
                "the boot loader did not map physical memory (enable its physical-memory mapping)"
            }
            BootError::EmptyMemoryMap => "the boot loader's memory map is empty",
        })
    }
}

impl BootMemory {
    /// # Safety
    /// As [`OffsetMapping::new`]: physical `0..limit` is mapped readable at
    /// `phys + offset`, without side effects, while the value is used.
    #[cfg_attr(
        not(any(feature = "bootloader", feature = "bootloader_api", feature = "limine")),
        allow(dead_code)
    )]
    pub(crate) const unsafe fn new(
        offset: u64,
        limit: u64,
        loader_rsdp: Option<u64>,
    ) -> BootMemory {
        BootMemory {
            // SAFETY: the caller's promise, passed on.
            phys: unsafe { OffsetMapping::new(offset, limit) },
            loader_rsdp,
            search_bios: true,
        }
    }

    /// From a mapping the kernel made itself and the RSDP it knows (or
    /// `None`: [`rsdp`](Self::rsdp) searches the BIOS areas), for loaders
    /// without an adapter here.
    ///
    /// Interrupt-safe: yes (no locks).
    pub const fn from_parts(phys: OffsetMapping, loader_rsdp: Option<u64>) -> BootMemory {
        BootMemory {
            phys,
            loader_rsdp,
            search_bios: true,
        }
    }

    /// The loader's mapping of physical memory (for `Platform::acpi`).
    ///
    /// Interrupt-safe: yes (returns a reference).
    pub fn phys_memory(&self) -> &OffsetMapping {
        &self.phys
    }

    /// The RSDP address the loader passed, if any (not yet validated).
    ///
    /// Interrupt-safe: yes (returns a copy).
    pub fn loader_rsdp(&self) -> Option<u64> {
        self.loader_rsdp
    }

    /// The RSDP: the loader's, else the one [`find_rsdp`] finds in the
    /// EBDA and the BIOS area through the loader's mapping (for loaders
    /// that pass none, such as bootloader 0.9; not where the loader leaves
    /// those areas unmapped, Limine from base revision 3).
    ///
    /// Interrupt-safe: yes (no locks), but a search reads up to 129 KiB:
    /// call it at boot.
    pub fn rsdp(&self) -> Result<u64, AcpiError> {
        match self.loader_rsdp {
            Some(rsdp) => Ok(rsdp),
            None if self.search_bios => find_rsdp(&self.phys),
            // Limine 3+: the BIOS areas are not mapped.
            None => Err(AcpiError::NotFound { table: "RSDP" }),
        }
    }
}

/// The end of the highest region of a memory map: how far a loader that
/// maps "all physical memory" mapped it (bootloader_api and bootloader 0.9
/// map from 0 up to there; the first MiB, with the BIOS areas, included).
#[cfg_attr(
    not(any(feature = "bootloader", feature = "bootloader_api")),
    allow(dead_code)
)]
fn map_end(ends: impl Iterator<Item = u64>) -> Result<u64, BootError> {
    ends.max()
        .filter(|&end| end > 0)
        .ok_or(BootError::EmptyMemoryMap)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::vec::Vec;

    /// Physical 0..1 MiB of a BIOS machine: QEMU microvm's tables (RSDP
    /// at 0xE0000) and an EBDA pointer to 0x9FC00 (no RSDP there). (The
    /// simulator's `LowMemory` is the other copy of this crate's
    /// `PhysMemory` in unit tests, so its bytes are built here.)
    #[allow(dead_code)]
    pub(crate) fn first_mib_with_microvm_tables() -> Vec<u8> {
        let image = clockhal_sim::AcpiTablesBuilder::microvm().build();
        let mut low = std::vec![0u8; 0x10_0000];
        let at = image.rsdp() as usize;
        low[at..at + image.bytes().len()].copy_from_slice(image.bytes());
        low[0x40E..0x410].copy_from_slice(&0x9FC0u16.to_le_bytes());
        low
    }
}
