//! ACPI discovery against QEMU-like tables and corrupted variants.

use clockhal_sim::{AcpiTablesBuilder, HpetTableSpec};
use clockhal_x86::acpi::{discover, AcpiError, HpetInfo, PmTimerInfo, RtcInfo};
use clockhal_x86::{PhysMemory, SliceMemory};

#[test]
fn q35_finds_hpet_and_pm_timer() {
    let img = AcpiTablesBuilder::q35().build();
    let c = discover(&img.memory(), img.rsdp()).unwrap();
    assert_eq!(
        c.hpet,
        Ok(HpetInfo {
            base: 0xFED0_0000,
            counter_64bit: true
        })
    );
    assert_eq!(
        c.pm_timer,
        Ok(PmTimerInfo {
            port: 0x608,
            bits32: false
        })
    );
}

#[test]
fn pc_uses_legacy_pm_tmr_blk_of_acpi1_fadt() {
    let img = AcpiTablesBuilder::pc().build();
    assert_eq!(img.table(b"FACP").unwrap().1, 116);
    let c = discover(&img.memory(), img.rsdp()).unwrap();
    assert_eq!(
        c.pm_timer,
        Ok(PmTimerInfo {
            port: 0xb008,
            bits32: false
        })
    );
    assert_eq!(c.hpet.unwrap().base, 0xFED0_0000);
}

#[test]
fn microvm_has_neither_and_uses_xsdt() {
    let img = AcpiTablesBuilder::microvm().build();
    assert!(img.table(b"XSDT").is_some());
    let c = discover(&img.memory(), img.rsdp()).unwrap();
    assert_eq!(c.hpet, Err(AcpiError::NotFound { table: "HPET" }));
    assert_eq!(c.pm_timer, Err(AcpiError::ZeroAddress { table: "FACP" }));
}

#[test]
fn x_pm_tmr_blk_wins_over_legacy_and_32bit_flag_is_read() {
    let mut b = AcpiTablesBuilder::q35();
    let f = b.fadt.as_mut().unwrap();
    f.pm_tmr_blk = 0x1008;
    f.x_pm_tmr_blk = Some((1, 0x608));
    f.tmr_val_ext = true;
    let img = b.build();
    let c = discover(&img.memory(), img.rsdp()).unwrap();
    assert_eq!(
        c.pm_timer,
        Ok(PmTimerInfo {
            port: 0x608,
            bits32: true
        })
    );
}

#[test]
fn zero_x_pm_tmr_blk_falls_back_to_legacy() {
    let mut b = AcpiTablesBuilder::q35();
    b.fadt.as_mut().unwrap().x_pm_tmr_blk = Some((1, 0));
    let img = b.build();
    assert_eq!(
        discover(&img.memory(), img.rsdp())
            .unwrap()
            .pm_timer
            .unwrap()
            .port,
        0x608
    );
}

#[test]
fn xsdt_is_preferred_and_broken_xsdt_falls_back_to_rsdt() {
    let mut b = AcpiTablesBuilder::q35();
    b.rsdp_revision = 2;
    let mut img = b.build();
    assert!(discover(&img.memory(), img.rsdp()).unwrap().hpet.is_ok());
    // Point the XSDT's only HPET entry away: with a valid XSDT that would
    // lose the HPET, so a corrupted checksum must instead fall back to the
    // RSDT, which still lists it.
    img.poke(b"XSDT", 36, &[0xAA]);
    let c = discover(&img.memory(), img.rsdp()).unwrap();
    assert_eq!(c.hpet.unwrap().base, 0xFED0_0000);
    assert_eq!(c.pm_timer.unwrap().port, 0x608);
}

#[test]
fn rsdp_checksums() {
    let mut img = AcpiTablesBuilder::q35().build();
    img.poke(b"RSDP", 9, b"X");
    assert_eq!(
        discover(&img.memory(), img.rsdp()),
        Err(AcpiError::BadChecksum { table: "RSDP" })
    );
    // v2: the first 20 bytes fine, the extended checksum wrong.
    let mut img = AcpiTablesBuilder::microvm().build();
    img.poke(b"RSDP", 33, &[1]);
    assert_eq!(
        discover(&img.memory(), img.rsdp()),
        Err(AcpiError::BadChecksum { table: "RSDP" })
    );
}

#[test]
fn table_checksums_fail_only_that_clock() {
    let mut img = AcpiTablesBuilder::q35().build();
    img.poke(b"HPET", 44, &[0x10]);
    let c = discover(&img.memory(), img.rsdp()).unwrap();
    assert_eq!(c.hpet, Err(AcpiError::BadChecksum { table: "HPET" }));
    assert!(c.pm_timer.is_ok());

    let mut img = AcpiTablesBuilder::q35().build();
    img.poke(b"FACP", 76, &[0x10]);
    let c = discover(&img.memory(), img.rsdp()).unwrap();
    assert_eq!(c.pm_timer, Err(AcpiError::BadChecksum { table: "FACP" }));
    assert!(c.hpet.is_ok());

    let mut img = AcpiTablesBuilder::q35().build();
    img.poke(b"RSDT", 20, &[0x10]);
    assert_eq!(
        discover(&img.memory(), img.rsdp()),
        Err(AcpiError::BadChecksum { table: "RSDT" })
    );
}

#[test]
fn truncated_tables() {
    // Memory ends inside the HPET table.
    let mut img = AcpiTablesBuilder::q35().build();
    let (hpet_at, _) = img.table(b"HPET").unwrap();
    img.truncate_in(b"HPET", 40);
    let c = discover(&img.memory(), img.rsdp()).unwrap();
    assert!(
        matches!(c.hpet, Err(AcpiError::Unreadable { table: "HPET", phys }) if phys >= hpet_at),
        "{:?}",
        c.hpet
    );
    assert!(c.pm_timer.is_ok());

    // Memory ends inside the FADT (the HPET after it is lost too).
    let mut img = AcpiTablesBuilder::q35().build();
    img.truncate_in(b"FACP", 100);
    let c = discover(&img.memory(), img.rsdp()).unwrap();
    assert!(matches!(
        c.pm_timer,
        Err(AcpiError::Unreadable { table: "FACP", .. })
    ));

    // A length field too short for the fields we need, checksum fixed.
    let mut img = AcpiTablesBuilder::q35().build();
    img.patch(b"HPET", 4, &40u32.to_le_bytes());
    let c = discover(&img.memory(), img.rsdp()).unwrap();
    assert_eq!(
        c.hpet,
        Err(AcpiError::BadLength {
            table: "HPET",
            len: 40
        })
    );

    // A hostile length: no gigabyte reads, just an error.
    let mut img = AcpiTablesBuilder::q35().build();
    img.patch(b"FACP", 4, &u32::MAX.to_le_bytes());
    let c = discover(&img.memory(), img.rsdp()).unwrap();
    assert_eq!(
        c.pm_timer,
        Err(AcpiError::BadLength {
            table: "FACP",
            len: u32::MAX
        })
    );

    // Memory ends inside the RSDP.
    let img = AcpiTablesBuilder::q35().build();
    let mem = SliceMemory::new(img.rsdp(), &img.bytes()[..12]);
    assert!(matches!(
        discover(&mem, img.rsdp()),
        Err(AcpiError::Unreadable { table: "RSDP", .. })
    ));
}

#[test]
fn zero_addresses() {
    let mut b = AcpiTablesBuilder::q35();
    b.hpet = Some(HpetTableSpec {
        base: 0,
        ..HpetTableSpec::qemu()
    });
    let f = b.fadt.as_mut().unwrap();
    f.pm_tmr_blk = 0;
    f.x_pm_tmr_blk = None;
    let img = b.build();
    let c = discover(&img.memory(), img.rsdp()).unwrap();
    assert_eq!(c.hpet, Err(AcpiError::ZeroAddress { table: "HPET" }));
    assert_eq!(c.pm_timer, Err(AcpiError::ZeroAddress { table: "FACP" }));

    // RSDT address zero in a v1 RSDP: nothing to walk.
    let mut img = AcpiTablesBuilder::q35().build();
    img.patch(b"RSDP", 16, &0u32.to_le_bytes());
    assert_eq!(
        discover(&img.memory(), img.rsdp()),
        Err(AcpiError::NoRootTable)
    );
}

#[test]
fn pm_tmr_len_must_be_4() {
    for len in [0u8, 3, 8, 255] {
        let mut b = AcpiTablesBuilder::q35();
        b.fadt.as_mut().unwrap().pm_tmr_len = len;
        let img = b.build();
        let c = discover(&img.memory(), img.rsdp()).unwrap();
        assert_eq!(c.pm_timer, Err(AcpiError::PmTimerLength(len)));
    }
}

#[test]
fn wrong_address_spaces() {
    let mut b = AcpiTablesBuilder::q35();
    b.hpet = Some(HpetTableSpec {
        space: 1,
        ..HpetTableSpec::qemu()
    });
    b.fadt.as_mut().unwrap().x_pm_tmr_blk = Some((0, 0x608));
    let img = b.build();
    let c = discover(&img.memory(), img.rsdp()).unwrap();
    assert_eq!(
        c.hpet,
        Err(AcpiError::WrongAddressSpace {
            table: "HPET",
            space: 1
        })
    );
    assert_eq!(
        c.pm_timer,
        Err(AcpiError::WrongAddressSpace {
            table: "FACP",
            space: 0
        })
    );
}

#[test]
fn out_of_range_port_and_misaligned_hpet() {
    let mut b = AcpiTablesBuilder::q35();
    b.hpet = Some(HpetTableSpec {
        base: 0xFED0_0004,
        ..HpetTableSpec::qemu()
    });
    b.fadt.as_mut().unwrap().x_pm_tmr_blk = Some((1, 0x1_0008));
    let img = b.build();
    let c = discover(&img.memory(), img.rsdp()).unwrap();
    assert_eq!(c.hpet, Err(AcpiError::Misaligned(0xFED0_0004)));
    assert_eq!(c.pm_timer, Err(AcpiError::PortOutOfRange(0x1_0008)));
}

#[test]
fn wrong_signature_at_table_is_not_found() {
    // Rename the HPET table: the root's entry now points at something else.
    let mut img = AcpiTablesBuilder::q35().build();
    img.patch(b"HPET", 0, b"HPEX");
    let c = discover(&img.memory(), img.rsdp()).unwrap();
    assert_eq!(c.hpet, Err(AcpiError::NotFound { table: "HPET" }));
}

/// Counts reads, to show that walks are bounded.
struct Counting<'a>(SliceMemory<'a>, std::cell::Cell<usize>);
impl PhysMemory for Counting<'_> {
    fn read(&self, phys: u64, buf: &mut [u8]) -> bool {
        self.1.set(self.1.get() + 1);
        self.0.read(phys, buf)
    }
}

#[test]
fn root_entry_count_is_bounded() {
    // A root table with 16,000 entries (64 KiB) that all point nowhere:
    // the walk stops at the entry cap and reports not found.
    const N: usize = 16_000;
    let mut bytes = vec![0u8; 36 + 36 + N * 4];
    let base = 0x10_0000u64;
    let rsdt = base + 36;
    bytes[..8].copy_from_slice(b"RSD PTR ");
    bytes[16..20].copy_from_slice(&(rsdt as u32).to_le_bytes());
    let s = bytes[..20].iter().fold(0u8, |a, &b| a.wrapping_add(b));
    bytes[8] = s.wrapping_neg();
    let t = &mut bytes[36..];
    t[..4].copy_from_slice(b"RSDT");
    let len = (36 + N * 4) as u32;
    t[4..8].copy_from_slice(&len.to_le_bytes());
    for e in t[36..].chunks_mut(4) {
        e.copy_from_slice(&0xDEAD_0000u32.to_le_bytes());
    }
    let s = t.iter().fold(0u8, |a, &b| a.wrapping_add(b));
    t[9] = s.wrapping_neg();
    let mem = Counting(SliceMemory::new(base, &bytes), Default::default());
    let c = discover(&mem, base).unwrap();
    assert_eq!(c.hpet, Err(AcpiError::NotFound { table: "HPET" }));
    assert_eq!(c.pm_timer, Err(AcpiError::NotFound { table: "FACP" }));
    // ~1,000 checksum chunks + 2 walks of at most 256 entries x 2 reads;
    // an unbounded walk would need 64,000.
    assert!(mem.1.get() < 3_500, "{} reads", mem.1.get());
}

#[test]
fn errors_display() {
    let e = AcpiError::PmTimerLength(3);
    assert_eq!(e.to_string(), "ACPI FACP: PM_TMR_LEN is 3, not 4");
    assert_eq!(
        AcpiError::BadChecksum { table: "HPET" }.to_string(),
        "ACPI HPET: bad checksum"
    );
}

#[test]
fn find_table_locates_listed_tables_only() {
    let img = AcpiTablesBuilder::q35().build();
    let (phys, len) = img.table(b"HPET").unwrap();
    assert_eq!(
        clockhal_x86::acpi::find_table(&img.memory(), img.rsdp(), "HPET"),
        Ok(clockhal_x86::acpi::AcpiTable {
            phys,
            len: len as u32
        })
    );
    assert_eq!(
        clockhal_x86::acpi::find_table(&img.memory(), img.rsdp(), "SRAT"),
        Err(AcpiError::NotFound { table: "SRAT" })
    );
}

#[test]
fn century_index_comes_from_the_fadt() {
    // q35 (FADT rev 3) and pc (ACPI 1.0, 116 bytes: offset 108 is inside)
    // name QEMU's century register; microvm's FADT leaves it 0.
    for (b, want) in [
        (AcpiTablesBuilder::q35(), Some(0x32)),
        (AcpiTablesBuilder::pc(), Some(0x32)),
        (AcpiTablesBuilder::microvm(), None),
    ] {
        let img = b.build();
        let c = discover(&img.memory(), img.rsdp()).unwrap();
        assert_eq!(
            c.rtc,
            Ok(RtcInfo {
                century_index: want
            })
        );
    }
    // Whatever byte the firmware put there is passed on (the RTC backend
    // judges it), and only that byte is read.
    let mut b = AcpiTablesBuilder::q35();
    b.fadt.as_mut().unwrap().century = 0xFF;
    let img = b.build();
    let c = discover(&img.memory(), img.rsdp()).unwrap();
    assert_eq!(c.rtc.unwrap().century_index, Some(0xFF));
    let mut img = AcpiTablesBuilder::q35().build();
    img.patch(b"FACP", 108, &[0x48]);
    let c = discover(&img.memory(), img.rsdp()).unwrap();
    assert_eq!(c.rtc.unwrap().century_index, Some(0x48));
    assert_eq!(c.pm_timer.unwrap().port, 0x608);
}

#[test]
fn a_bad_or_missing_fadt_fails_rtc_and_pm_timer_alike() {
    let mut img = AcpiTablesBuilder::q35().build();
    img.poke(b"FACP", 108, &[0x33]);
    let c = discover(&img.memory(), img.rsdp()).unwrap();
    assert_eq!(c.rtc, Err(AcpiError::BadChecksum { table: "FACP" }));
    assert_eq!(c.pm_timer, Err(AcpiError::BadChecksum { table: "FACP" }));
    assert!(c.hpet.is_ok());

    let mut b = AcpiTablesBuilder::q35();
    b.fadt = None;
    let img = b.build();
    let c = discover(&img.memory(), img.rsdp()).unwrap();
    assert_eq!(c.rtc, Err(AcpiError::NotFound { table: "FACP" }));

    // A FADT too short for the flags (and so for CENTURY): a length error.
    let mut img = AcpiTablesBuilder::pc().build();
    img.patch(b"FACP", 4, &100u32.to_le_bytes());
    let c = discover(&img.memory(), img.rsdp()).unwrap();
    assert_eq!(
        c.rtc,
        Err(AcpiError::BadLength {
            table: "FACP",
            len: 100
        })
    );
}
