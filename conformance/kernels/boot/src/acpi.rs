//! Just enough ACPI to find tables and the CPUs: RSDP -> XSDT/RSDT -> table,
//! and the local APIC entries of the MADT ("APIC").
//!
//! Tables are found and checksum-verified by clockhal-x86's ACPI parser;
//! anything malformed or above 4 GiB (not identity mapped) is treated as
//! absent. Kernels may use
//! [`find_table`] for their own tables (HPET, FACP, ...).

use crate::phys;
pub use clockhal_x86::acpi::AcpiTable;
use clockhal_x86::OffsetMapping;

/// Length of an ACPI table header (signature, length, ..., creator revision).
pub const HEADER_LEN: u64 = 36;

fn checksum_ok(paddr: u64, len: u64) -> bool {
    if !phys::is_mapped(paddr, len) {
        return false;
    }
    // SAFETY: the range is identity-mapped; firmware tables are plain memory.
    let bytes = unsafe { phys::bytes(paddr, len as usize) };
    bytes.iter().fold(0u8, |sum, &b| sum.wrapping_add(b)) == 0
}

/// Whether `paddr` holds a valid RSDP ("RSD PTR ", checksummed).
pub fn rsdp_is_valid(paddr: u64) -> bool {
    if !phys::is_mapped(paddr, 36) {
        return false;
    }
    // SAFETY: 36 bytes at paddr are mapped (checked above).
    let signature: [u8; 8] = unsafe { phys::read(paddr) };
    if &signature != b"RSD PTR " || !checksum_ok(paddr, 20) {
        return false;
    }
    // SAFETY: as above; offset 15 is the revision byte.
    let revision: u8 = unsafe { phys::read(paddr + 15) };
    revision < 2 || checksum_ok(paddr, 36)
}

/// Looks for the RSDP where BIOSes put it: the first KiB of the EBDA, then
/// 0xE0000..0xFFFFF on 16-byte boundaries. For when PVH gives none.
pub fn find_rsdp_in_bios() -> Option<u64> {
    // SAFETY: 0x40E (BDA: EBDA segment) is in identity-mapped low memory.
    let ebda = u64::from(unsafe { phys::read::<u16>(0x40E) }) << 4;
    let ebda_range = if (0x8_0000..0xA_0000).contains(&ebda) {
        ebda..ebda + 1024
    } else {
        0..0
    };
    ebda_range
        .chain(0xE_0000..0x10_0000)
        .step_by(16)
        .find(|&p| rsdp_is_valid(p))
}

/// The first ACPI table with `signature` (e.g. `"HPET"`), found through the
/// XSDT (ACPI 2.0+) or the RSDT by clockhal's own parser
/// ([`clockhal_x86::acpi::find_table`]: checksums, length caps, bounded walk).
pub fn find_table(rsdp_paddr: u64, signature: &'static str) -> Option<AcpiTable> {
    // SAFETY: the boot page tables identity-map the low 4 GiB, and firmware
    // tables there are plain memory (reading them has no side effects).
    let memory = unsafe { OffsetMapping::new(0, phys::MAPPED_END) };
    clockhal_x86::acpi::find_table(&memory, rsdp_paddr, signature).ok()
}

/// One processor from the MADT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalApic {
    /// ACPI processor UID.
    pub processor_uid: u32,
    /// Local APIC ID (x2APIC ID for MADT type 9 entries).
    pub apic_id: u32,
}

/// Calls `f` for every enabled (flags bit 0) local APIC in the MADT, in table
/// order: type 0 (xAPIC) and type 9 (x2APIC) entries. Returns `false` if
/// there is no valid MADT.
pub fn for_each_local_apic(rsdp_paddr: u64, mut f: impl FnMut(LocalApic)) -> bool {
    for_each_madt_entry(rsdp_paddr, |kind, at, entry_len| {
        match (kind, entry_len) {
            (0, 8..) => {
                // SAFETY: an 8-byte type-0 entry lies inside the table.
                let [_, _, uid, apic_id]: [u8; 4] = unsafe { phys::read(at) };
                // SAFETY: as above; flags at offset 4.
                let flags: u32 = unsafe { phys::read(at + 4) };
                if flags & 1 != 0 {
                    f(LocalApic {
                        processor_uid: u32::from(uid),
                        apic_id: u32::from(apic_id),
                    });
                }
            }
            (9, 16..) => {
                // SAFETY: a 16-byte type-9 entry lies inside the table.
                let apic_id: u32 = unsafe { phys::read(at + 4) };
                // SAFETY: as above.
                let flags: u32 = unsafe { phys::read(at + 8) };
                // SAFETY: as above.
                let uid: u32 = unsafe { phys::read(at + 12) };
                if flags & 1 != 0 {
                    f(LocalApic {
                        processor_uid: uid,
                        apic_id,
                    });
                }
            }
            _ => {}
        }
    })
}

/// Calls `f(type, address, length)` for every entry of the MADT, in
/// table order, stopping at a malformed one (a length below 2 or past
/// the table). Returns `false` if there is no valid MADT.
fn for_each_madt_entry(rsdp_paddr: u64, mut f: impl FnMut(u8, u64, u64)) -> bool {
    let Some(AcpiTable { phys: madt, len }) = find_table(rsdp_paddr, "APIC") else {
        return false;
    };
    let end = madt + u64::from(len);
    // Entries follow the header, the local APIC address (u32) and flags (u32).
    let mut at = madt + HEADER_LEN + 8;
    while at + 2 <= end {
        // SAFETY: `at + 2 <= end`: inside the validated table.
        let [kind, entry_len]: [u8; 2] = unsafe { phys::read(at) };
        let entry_len = u64::from(entry_len);
        if entry_len < 2 || at + entry_len > end {
            break; // malformed: stop rather than read past the table
        }
        f(kind, at, entry_len);
        at += entry_len;
    }
    true
}

/// One I/O APIC from the MADT (entry type 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoApicEntry {
    /// Its I/O APIC ID.
    pub id: u8,
    /// Physical address of its register window (IOREGSEL; IOWIN at +0x10).
    pub address: u32,
    /// The first GSI its inputs serve.
    pub gsi_base: u32,
}

/// One interrupt source override from the MADT (entry type 2): ISA IRQ
/// `source` arrives at `gsi` with `flags` (MPS INTI: bits 1:0 polarity,
/// 3:2 trigger mode; 0 = conforming to the bus).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceOverride {
    /// The ISA IRQ.
    pub source: u8,
    /// Where it arrives.
    pub gsi: u32,
    /// MPS INTI flags.
    pub flags: u16,
}

/// Calls `io` for every I/O APIC entry and `iso` for every interrupt
/// source override of the MADT, in table order. Returns `false` if there
/// is no valid MADT.
pub fn for_each_interrupt_entry(
    rsdp_paddr: u64,
    mut io: impl FnMut(IoApicEntry),
    mut iso: impl FnMut(SourceOverride),
) -> bool {
    for_each_madt_entry(rsdp_paddr, |kind, at, entry_len| {
        match (kind, entry_len) {
            (1, 12..) => {
                // SAFETY: a 12-byte type-1 entry lies inside the table:
                // type, length, id, reserved, address (u32), GSI base (u32).
                let [_, _, id, _]: [u8; 4] = unsafe { phys::read(at) };
                // SAFETY: as above.
                let address: u32 = unsafe { phys::read(at + 4) };
                // SAFETY: as above.
                let gsi_base: u32 = unsafe { phys::read(at + 8) };
                io(IoApicEntry { id, address, gsi_base });
            }
            (2, 10..) => {
                // SAFETY: a 10-byte type-2 entry lies inside the table:
                // type, length, bus, source, GSI (u32), flags (u16).
                let [_, _, _, source]: [u8; 4] = unsafe { phys::read(at) };
                // SAFETY: as above.
                let gsi: u32 = unsafe { phys::read(at + 4) };
                // SAFETY: as above.
                let flags: u16 = unsafe { phys::read(at + 8) };
                iso(SourceOverride { source, gsi, flags });
            }
            _ => {}
        }
    })
}
