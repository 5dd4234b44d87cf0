//! `acpi::find_rsdp` over a simulated first MiB: the EBDA, then the BIOS
//! area, ACPI 1.0 and 2.0 pointers, and hostile memory.

use clockhal_sim::{AcpiTablesBuilder, LowMemory};
use clockhal_x86::acpi::{discover, find_rsdp, rsdp_at, AcpiError, Rsdp};
use clockhal_x86::PhysMemory;

/// q35 tables (RSDP revision 0) at 0x07FE0000, nothing placed low yet.
fn q35() -> LowMemory {
    LowMemory::with_tables(AcpiTablesBuilder::q35().build())
}

/// Tables with an ACPI 2.0 RSDP (XSDT) above 1 MiB.
fn v2() -> LowMemory {
    let mut b = AcpiTablesBuilder::microvm();
    b.base = 0x07FE_0000;
    LowMemory::with_tables(b.build())
}

fn sum(b: &[u8]) -> u8 {
    b.iter().fold(0u8, |s, &x| s.wrapping_add(x))
}

#[test]
fn bios_area_rsdp_v1_is_found_and_leads_to_the_tables() {
    let mut mem = q35();
    mem.place_rsdp(0xF_5A40);
    let rsdp = find_rsdp(&mem).unwrap();
    assert_eq!(rsdp, 0xF_5A40);
    let clocks = discover(&mem, rsdp).unwrap();
    assert_eq!(clocks.hpet.unwrap().base, 0xFED0_0000);
    assert_eq!(clocks.pm_timer.unwrap().port, 0x608);
    let r = rsdp_at(&mem, rsdp).unwrap();
    assert_eq!(r.revision, 0);
    assert_eq!(r.xsdt, None);
    assert_eq!(
        r.rsdt as u64,
        mem.tables().unwrap().table(b"RSDT").unwrap().0
    );
}

#[test]
fn bios_area_rsdp_v2_checks_the_extended_checksum_and_names_the_xsdt() {
    let mut mem = v2();
    mem.place_rsdp(0xE_0000);
    let rsdp = find_rsdp(&mem).unwrap();
    let r: Rsdp = rsdp_at(&mem, rsdp).unwrap();
    assert_eq!(r.revision, 2);
    assert_eq!(r.xsdt, mem.tables().unwrap().table(b"XSDT").map(|t| t.0));
    assert!(discover(&mem, rsdp).is_ok());
}

#[test]
fn tables_inside_the_first_mib_are_found_where_they_are() {
    // microvm's image lives at 0xE0000 itself.
    let mem = LowMemory::with_tables(AcpiTablesBuilder::microvm().build());
    assert_eq!(find_rsdp(&mem), Ok(0xE_0000));
}

#[test]
fn ebda_is_searched_first_and_only_its_first_kib() {
    let mut mem = q35();
    mem.set_ebda_segment(0x8000); // EBDA at 0x80000
    mem.place_rsdp(0x8_03F0); // last paragraph of its first KiB
    mem.place_rsdp(0xF_0000); // another one in the BIOS area
    assert_eq!(find_rsdp(&mem), Ok(0x8_03F0));

    let mut mem = q35();
    mem.set_ebda_segment(0x8000);
    mem.place_rsdp(0x8_0400); // just past the EBDA window: not searched
    assert_eq!(find_rsdp(&mem), Err(AcpiError::NotFound { table: "RSDP" }));
    mem.place_rsdp(0xF_FFE0);
    assert_eq!(find_rsdp(&mem), Ok(0xF_FFE0));
}

#[test]
fn ebda_window_stops_at_the_end_of_conventional_memory() {
    // EBDA at 0x9FF00: its 1 KiB would run into video memory at 0xA0000,
    // where a signature must not count.
    let mut mem = q35();
    mem.set_ebda_segment(0x9FF0);
    mem.place_rsdp(0xA_0000);
    assert_eq!(find_rsdp(&mem), Err(AcpiError::NotFound { table: "RSDP" }));
    mem.place_rsdp(0x9_FFF0);
    assert_eq!(find_rsdp(&mem), Ok(0x9_FFF0));
}

#[test]
fn garbage_ebda_pointers_are_skipped_not_followed() {
    // Pointers into the interrupt vector table or BDA, video memory, or
    // (0xFFFF) past 1 MiB: a decoy RSDP where each points must not win
    // over the one in the BIOS area.
    for seg in [0u16, 0x0001, 0x0030, 0xA000, 0xB800, 0xFFFF] {
        let mut mem = q35();
        let at = (seg as u64) << 4;
        if at + 20 <= 0x40E || (0xA_0000..0xE_0000).contains(&at) {
            mem.place_rsdp(at);
            assert_eq!(rsdp_at(&mem, at).map(|r| r.phys), Ok(at));
        }
        mem.set_ebda_segment(seg);
        mem.place_rsdp(0xE_1230);
        assert_eq!(find_rsdp(&mem), Ok(0xE_1230), "EBDA segment {seg:#x}");
    }
    // The EBDA pointer itself unreadable (an OS mapping that starts above
    // the BDA is not modelled; a truncated one below it is): the BIOS area
    // is then unreadable too, and that is the error.
    let mut mem = q35();
    mem.place_rsdp(0xE_1230);
    mem.truncate(0x400);
    assert_eq!(
        find_rsdp(&mem),
        Err(AcpiError::Unreadable {
            table: "RSDP",
            phys: 0xE_0000
        })
    );
}

#[test]
fn misaligned_signatures_are_not_candidates() {
    let mut mem = q35();
    mem.place_rsdp(0xE_0008);
    assert_eq!(find_rsdp(&mem), Err(AcpiError::NotFound { table: "RSDP" }));
}

#[test]
fn a_bad_v1_checksum_is_skipped_and_reported_when_alone() {
    let mut mem = q35();
    mem.place_rsdp(0xE_0000);
    mem.write(0xE_0000 + 9, b"X"); // OEM id byte: checksum now wrong
    assert_eq!(
        find_rsdp(&mem),
        Err(AcpiError::BadChecksum { table: "RSDP" })
    );
    mem.place_rsdp(0xE_0010);
    assert_eq!(find_rsdp(&mem), Ok(0xE_0010));
}

#[test]
fn a_bad_extended_checksum_is_skipped() {
    let mut mem = v2();
    mem.place_rsdp(0xE_0000);
    // Byte 33 is reserved: covered by the extended checksum only.
    mem.write(0xE_0000 + 33, &[1]);
    let mut head = [0u8; 20];
    assert!(mem.read(0xE_0000, &mut head));
    assert_eq!(sum(&head), 0, "the 1.0 checksum still holds");
    assert_eq!(
        find_rsdp(&mem),
        Err(AcpiError::BadChecksum { table: "RSDP" })
    );
    mem.place_rsdp(0xF_0000);
    assert_eq!(find_rsdp(&mem), Ok(0xF_0000));
}

#[test]
fn hostile_v2_lengths_are_bounded() {
    for len in [0u32, 20, 35, 1025, u32::MAX] {
        let mut mem = v2();
        mem.place_rsdp(0xE_0000);
        mem.write(0xE_0000 + 20, &len.to_le_bytes());
        // Fix both checksums so only the length is wrong.
        let mut b = [0u8; 36];
        assert!(mem.read(0xE_0000, &mut b));
        b[8] = 0;
        b[8] = sum(&b[..20]).wrapping_neg();
        b[32] = 0;
        b[32] = sum(&b).wrapping_neg();
        mem.write(0xE_0000, &b);
        assert_eq!(
            find_rsdp(&mem),
            Err(AcpiError::BadLength { table: "RSDP", len }),
            "length {len}"
        );
    }
}

#[test]
fn a_revision_1_pointer_is_read_as_acpi_1_0() {
    let mut mem = v2();
    mem.place_rsdp(0xE_0000);
    // Revision 1 (never defined) with a wrong extended checksum: only the
    // 1.0 checksum applies, and the XSDT is not used.
    let mut b = [0u8; 36];
    assert!(mem.read(0xE_0000, &mut b));
    b[15] = 1;
    b[32] ^= 0x55;
    b[8] = 0;
    b[8] = sum(&b[..20]).wrapping_neg();
    mem.write(0xE_0000, &b);
    let r = rsdp_at(&mem, find_rsdp(&mem).unwrap()).unwrap();
    assert_eq!((r.revision, r.xsdt), (1, None));
}

#[test]
fn a_signature_at_the_end_of_the_area_runs_past_it_and_is_not_read_beyond() {
    // v1 at the last paragraph: its 20 bytes cross 1 MiB, which this memory
    // does not have.
    let mut mem = q35();
    let rsdp = mem.rsdp_bytes().to_vec();
    mem.write(0xF_FFF0, &rsdp[..16]);
    assert_eq!(
        find_rsdp(&mem),
        Err(AcpiError::Unreadable {
            table: "RSDP",
            phys: 0xF_FFF0
        })
    );
    // v2 whose 36 bytes cross it: the 1.0 part fits, the rest does not.
    let mut mem = v2();
    let rsdp = mem.rsdp_bytes().to_vec();
    mem.write(0xF_FFE8 - 8, &rsdp[..24]);
    assert_eq!(
        find_rsdp(&mem),
        Err(AcpiError::Unreadable {
            table: "RSDP",
            phys: 0xF_FFE0
        })
    );
}

#[test]
fn an_rsdp_pointing_nowhere_is_found_and_discover_says_why() {
    let mut mem = q35();
    mem.place_rsdp(0xE_0000);
    let mut b = [0u8; 20];
    assert!(mem.read(0xE_0000, &mut b));
    b[16..20].copy_from_slice(&0xDEAD_0000u32.to_le_bytes());
    b[8] = 0;
    b[8] = sum(&b).wrapping_neg();
    mem.write(0xE_0000, &b);
    let rsdp = find_rsdp(&mem).unwrap();
    assert!(matches!(
        discover(&mem, rsdp),
        Err(AcpiError::Unreadable { table: "RSDT", .. })
    ));
}

#[test]
fn empty_memory_is_a_clear_not_found() {
    let mem = LowMemory::new();
    let e = find_rsdp(&mem).unwrap_err();
    assert_eq!(e, AcpiError::NotFound { table: "RSDP" });
    let text = e.to_string();
    assert!(text.contains("EBDA") && text.contains("UEFI"), "{text}");
}

#[test]
fn random_low_memory_with_scattered_signatures_never_misleads() {
    // Deterministic xorshift: garbage everywhere, "RSD PTR " on random
    // paragraphs (some with a fixed 1.0 checksum), random EBDA pointers.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..40 {
        let mut mem = LowMemory::new();
        for p in (0..0x10_0000u64).step_by(4096) {
            let junk: Vec<u8> = (0..64).map(|_| next() as u8).collect();
            mem.write(p, &junk);
        }
        mem.set_ebda_segment(next() as u16);
        for _ in 0..64 {
            let at = (next() % (0x10_0000 - 64)) & !0xF;
            let mut b: Vec<u8> = (0..36).map(|_| next() as u8).collect();
            b[..8].copy_from_slice(b"RSD PTR ");
            if next() % 2 == 0 {
                b[8] = 0;
                b[8] = sum(&b[..20]).wrapping_neg();
            }
            mem.write(at, &b);
        }
        match find_rsdp(&mem) {
            Ok(at) => {
                let r = rsdp_at(&mem, at).expect("find_rsdp returned an invalid RSDP");
                assert_eq!(at % 16, 0);
                assert!(r.revision < 2 || r.xsdt.is_some());
            }
            Err(e) => assert!(
                matches!(
                    e,
                    AcpiError::BadChecksum { .. }
                        | AcpiError::BadLength { .. }
                        | AcpiError::Unreadable { .. }
                        | AcpiError::NotFound { .. }
                ),
                "{e:?}"
            ),
        }
        // Every table walk from whatever was found stays an error, not a
        // panic.
        if let Ok(at) = find_rsdp(&mem) {
            let _ = discover(&mem, at);
        }
    }
}
