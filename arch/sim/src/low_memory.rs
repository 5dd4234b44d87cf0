//! The first MiB of a BIOS machine, for testing
//! [`acpi::find_rsdp`](clockhal_x86::acpi::find_rsdp).
//!
//! [`LowMemory`] is physical `0..0x100000` (the BIOS Data Area with its EBDA
//! segment pointer at 0x40E, conventional memory, the BIOS area
//! `0xE0000..=0xFFFFF`) plus, optionally, an [`AcpiImage`] wherever its base
//! says (QEMU puts the tables near the top of RAM and only the RSDP in the
//! BIOS area). Tests place copies of the image's RSDP where firmware would,
//! and corrupt the rest.
//!
//! ```
//! use clockhal_sim::{AcpiTablesBuilder, LowMemory};
//! use clockhal_x86::acpi;
//! let mut mem = LowMemory::with_tables(AcpiTablesBuilder::q35().build());
//! mem.place_rsdp(0xF_5A40); // where SeaBIOS puts it
//! let rsdp = acpi::find_rsdp(&mem).unwrap();
//! assert_eq!(rsdp, 0xF_5A40);
//! assert_eq!(acpi::discover(&mem, rsdp).unwrap().hpet.unwrap().base, 0xFED0_0000);
//! ```

use crate::AcpiImage;
use clockhal_x86::PhysMemory;
use std::vec::Vec;

/// Size of the emulated low memory: the first MiB.
pub const LOW_MEMORY_LEN: usize = 0x10_0000;

/// Physical memory `0..1 MiB` plus an optional ACPI table image.
#[derive(Clone, Debug)]
pub struct LowMemory {
    low: Vec<u8>,
    /// Readable length of `low` (see [`LowMemory::truncate`]).
    limit: usize,
    tables: Option<AcpiImage>,
}

impl Default for LowMemory {
    fn default() -> Self {
        Self::new()
    }
}

impl LowMemory {
    /// Zeroed low memory (EBDA pointer 0: no EBDA), no tables.
    ///
    /// Interrupt-safe: no (allocates 1 MiB).
    pub fn new() -> Self {
        LowMemory {
            low: vec![0; LOW_MEMORY_LEN],
            limit: LOW_MEMORY_LEN,
            tables: None,
        }
    }

    /// Zeroed low memory with `tables` readable at their own base: an image
    /// above 1 MiB (q35, pc) stays separate, its RSDP to be copied low with
    /// [`place_rsdp`](Self::place_rsdp); one inside the first MiB (microvm's
    /// at 0xE0000) is written into low memory, RSDP included.
    ///
    /// Interrupt-safe: no (allocates 1 MiB).
    pub fn with_tables(tables: AcpiImage) -> Self {
        let mut mem = Self::new();
        let (base, len) = (tables.rsdp(), tables.bytes().len());
        if base as usize + len <= LOW_MEMORY_LEN {
            mem.write(base, tables.bytes());
        }
        mem.tables = Some(tables);
        mem
    }

    /// Writes the EBDA segment pointer (the `u16` at 0x40E): the EBDA starts
    /// at `segment << 4`.
    ///
    /// Interrupt-safe: yes (no locks; a test helper).
    pub fn set_ebda_segment(&mut self, segment: u16) {
        self.write(0x40E, &segment.to_le_bytes());
    }

    /// Copies the table image's RSDP (20 or 36 bytes, as built) to `phys`.
    /// Panics without tables.
    ///
    /// Interrupt-safe: no (copies through a `Vec`; a test helper).
    pub fn place_rsdp(&mut self, phys: u64) {
        let rsdp = self.rsdp_bytes().to_vec();
        self.write(phys, &rsdp);
    }

    /// The table image's RSDP bytes. Panics without tables.
    ///
    /// Interrupt-safe: yes (no locks; a test helper).
    pub fn rsdp_bytes(&self) -> &[u8] {
        let tables = self.tables.as_ref().expect("no ACPI tables");
        let (phys, len) = tables.table(b"RSDP").expect("image without RSDP");
        let off = (phys - tables.rsdp()) as usize;
        &tables.bytes()[off..off + len]
    }

    /// Overwrites low memory at `phys` (panics past 1 MiB).
    ///
    /// Interrupt-safe: yes (no locks; a test helper).
    pub fn write(&mut self, phys: u64, data: &[u8]) {
        let at = phys as usize;
        self.low[at..at + data.len()].copy_from_slice(data);
    }

    /// Low memory ends at `len` bytes (an OS that mapped less than the
    /// first MiB); the table image stays readable.
    ///
    /// Interrupt-safe: yes (no locks; a test helper).
    pub fn truncate(&mut self, len: usize) {
        self.limit = len.min(LOW_MEMORY_LEN);
    }

    /// The table image, if any.
    ///
    /// Interrupt-safe: yes (no locks; a test helper).
    pub fn tables(&self) -> Option<&AcpiImage> {
        self.tables.as_ref()
    }
}

impl PhysMemory for LowMemory {
    fn read(&self, phys: u64, buf: &mut [u8]) -> bool {
        let Some(end) = phys.checked_add(buf.len() as u64) else {
            return false;
        };
        if end <= self.limit as u64 {
            buf.copy_from_slice(&self.low[phys as usize..end as usize]);
            return true;
        }
        // A read must lie wholly in one of the two regions: low memory and
        // the image are not contiguous.
        phys >= LOW_MEMORY_LEN as u64
            && self
                .tables
                .as_ref()
                .is_some_and(|t| t.memory().read(phys, buf))
    }
}
