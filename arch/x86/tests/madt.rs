//! The MADT processor count `acpi::discover` reports: enabled local APIC
//! and x2APIC entries only, and malformed entries as errors (no loop).

use clockhal_x86::acpi::{discover, AcpiError};
use clockhal_x86::SliceMemory;

const BASE: u64 = 0x1000;
const RSDT: usize = 0x100;
const MADT: usize = 0x200;

fn checksum(b: &mut [u8], at: usize) {
    b[at] = 0;
    let sum = b.iter().fold(0u8, |s, x| s.wrapping_add(*x));
    b[at] = sum.wrapping_neg();
}

fn header(sig: &[u8; 4], len: usize) -> Vec<u8> {
    let mut h = vec![0u8; 36];
    h[..4].copy_from_slice(sig);
    h[4..8].copy_from_slice(&(len as u32).to_le_bytes());
    h[8] = 1;
    h
}

/// RSDP (v1) -> RSDT -> MADT with `entries`.
fn image(entries: &[u8]) -> Vec<u8> {
    let mut img = vec![0u8; 0x400];
    img[..8].copy_from_slice(b"RSD PTR ");
    img[16..20].copy_from_slice(&((BASE as u32) + RSDT as u32).to_le_bytes());
    checksum(&mut img[..20], 8);
    let mut rsdt = header(b"RSDT", 40);
    rsdt.extend_from_slice(&((BASE as u32) + MADT as u32).to_le_bytes());
    checksum(&mut rsdt, 9);
    img[RSDT..RSDT + 40].copy_from_slice(&rsdt);
    let len = 44 + entries.len();
    let mut madt = header(b"APIC", len);
    madt.extend_from_slice(&0xFEE0_0000u32.to_le_bytes());
    madt.extend_from_slice(&1u32.to_le_bytes());
    madt.extend_from_slice(entries);
    checksum(&mut madt, 9);
    img[MADT..MADT + len].copy_from_slice(&madt);
    img
}

fn lapic(id: u8, flags: u32) -> Vec<u8> {
    let mut e = vec![0, 8, id, id];
    e.extend_from_slice(&flags.to_le_bytes());
    e
}

fn x2apic(id: u32, flags: u32) -> Vec<u8> {
    let mut e = vec![9, 16, 0, 0];
    e.extend_from_slice(&id.to_le_bytes());
    e.extend_from_slice(&flags.to_le_bytes());
    e.extend_from_slice(&id.to_le_bytes());
    e
}

fn processors(entries: &[u8]) -> Result<u32, AcpiError> {
    let img = image(entries);
    let mem = SliceMemory::new(BASE, &img);
    discover(&mem, BASE).unwrap().processors
}

#[test]
fn counts_enabled_local_apics_and_x2apics() {
    let mut e = Vec::new();
    e.extend(lapic(0, 1));
    e.extend(lapic(1, 1));
    e.extend(lapic(2, 0)); // disabled
    e.extend(lapic(3, 2)); // online capable, not enabled now
    e.extend([1, 12, 0, 0, 0, 0, 0xC0, 0xFE, 0, 0, 0, 0]); // an I/O APIC
    e.extend(x2apic(300, 1));
    assert_eq!(processors(&e), Ok(3));
    assert_eq!(processors(&[]), Ok(0));
}

#[test]
fn malformed_entries_are_errors_not_loops() {
    // Length 0 would never advance; length past the end is truncated.
    for bad in [vec![0u8, 0, 0, 0], vec![0u8, 200, 0, 0, 1, 0, 0, 0]] {
        assert!(matches!(
            processors(&bad),
            Err(AcpiError::BadLength { table: "APIC", .. })
        ));
    }
    // A trailing single byte is ignored (no room for an entry header).
    let mut e = lapic(0, 1);
    e.push(0);
    assert_eq!(processors(&e), Ok(1));
}
