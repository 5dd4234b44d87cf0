//! QEMU-like ACPI tables for testing [`acpi::discover`](clockhal_x86::acpi::discover).
//!
//! [`AcpiTablesBuilder`] lays out an RSDP, a root table (RSDT, plus an XSDT
//! for RSDP revision 2), a FADT, an optional "HPET" table and a MADT stub in
//! one byte image; [`AcpiImage`] serves it as [`SliceMemory`] and lets tests
//! corrupt it (patch fields with or without fixing the checksum, truncate).
//!
//! ```
//! use clockhal_sim::AcpiTablesBuilder;
//! use clockhal_x86::acpi;
//! let image = AcpiTablesBuilder::q35().build();
//! let clocks = acpi::discover(&image.memory(), image.rsdp()).unwrap();
//! assert_eq!(clocks.hpet.unwrap().base, 0xFED0_0000);
//! assert_eq!(clocks.pm_timer.unwrap().port, 0x608);
//! ```

use clockhal_x86::SliceMemory;
use std::vec::Vec;

/// The FADT fields that matter for the PM timer and the RTC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FadtSpec {
    /// FADT revision: 1 gives the 116-byte ACPI 1.0 layout (no X_ fields),
    /// 3 the 244-byte ACPI 2.0 layout, 5 and up the 268-byte one.
    pub revision: u8,
    /// PM_TMR_BLK (offset 76).
    pub pm_tmr_blk: u32,
    /// PM_TMR_LEN (offset 91).
    pub pm_tmr_len: u8,
    /// CENTURY (offset 108): CMOS index of the RTC's century register, 0
    /// for none. QEMU q35/pc: 0x32 (`RTC_CENTURY`); microvm leaves it 0.
    pub century: u8,
    /// X_PM_TMR_BLK (offset 208) as (address space, address); only written
    /// for revision 3+.
    pub x_pm_tmr_blk: Option<(u8, u64)>,
    /// Flags bit 8: 32-bit PM timer.
    pub tmr_val_ext: bool,
    /// Flags bit 20: hardware-reduced ACPI (microvm).
    pub hw_reduced: bool,
}

/// The "HPET" table's contents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HpetTableSpec {
    /// Base address GAS: address space (0 = memory).
    pub space: u8,
    /// Base address.
    pub base: u64,
    /// COUNT_SIZE_CAP in the event timer block ID.
    pub counter_64bit: bool,
}

impl HpetTableSpec {
    /// QEMU's: 64-bit, system memory at 0xFED00000.
    pub fn qemu() -> Self {
        HpetTableSpec {
            space: 0,
            base: 0xFED0_0000,
            counter_64bit: true,
        }
    }
}

/// Builds an ACPI table image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcpiTablesBuilder {
    /// Physical address of the first byte of the image (the RSDP).
    pub base: u64,
    /// RSDP revision: 0 (RSDT only, as SeaBIOS) or 2 (XSDT and RSDT).
    pub rsdp_revision: u8,
    /// The FADT, if any.
    pub fadt: Option<FadtSpec>,
    /// The HPET table, if any.
    pub hpet: Option<HpetTableSpec>,
}

impl AcpiTablesBuilder {
    /// Like QEMU `-M q35` with SeaBIOS: RSDP rev 0 → RSDT; FADT rev 3 with
    /// the PM timer at port 0x608 in both PM_TMR_BLK and X_PM_TMR_BLK,
    /// 24-bit, and the RTC century register at CMOS index 0x32; HPET at
    /// 0xFED00000.
    pub fn q35() -> Self {
        AcpiTablesBuilder {
            base: 0x07FE_0000,
            rsdp_revision: 0,
            fadt: Some(FadtSpec {
                revision: 3,
                pm_tmr_blk: 0x608,
                pm_tmr_len: 4,
                century: 0x32,
                x_pm_tmr_blk: Some((1, 0x608)),
                tmr_val_ext: false,
                hw_reduced: false,
            }),
            hpet: Some(HpetTableSpec::qemu()),
        }
    }

    /// Like QEMU `-M pc`: ACPI 1.0 FADT (revision 1, no X_ fields) with the
    /// PIIX4 PM timer at port 0xb008, 24-bit, century register 0x32; HPET at
    /// 0xFED00000.
    pub fn pc() -> Self {
        AcpiTablesBuilder {
            fadt: Some(FadtSpec {
                revision: 1,
                pm_tmr_blk: 0xb008,
                pm_tmr_len: 4,
                century: 0x32,
                x_pm_tmr_blk: None,
                tmr_val_ext: false,
                hw_reduced: false,
            }),
            ..Self::q35()
        }
    }

    /// Like QEMU `-M microvm`: RSDP rev 2 → XSDT; hardware-reduced FADT
    /// (revision 5) without a PM timer or century register
    /// (hw/i386/acpi-microvm.c sets neither); no HPET table.
    pub fn microvm() -> Self {
        AcpiTablesBuilder {
            base: 0x000E_0000,
            rsdp_revision: 2,
            fadt: Some(FadtSpec {
                revision: 5,
                pm_tmr_blk: 0,
                pm_tmr_len: 0,
                century: 0,
                x_pm_tmr_blk: Some((0, 0)),
                tmr_val_ext: false,
                hw_reduced: true,
            }),
            hpet: None,
        }
    }

    /// Lays the tables out.
    pub fn build(&self) -> AcpiImage {
        let mut img = AcpiImage {
            base: self.base,
            bytes: Vec::new(),
            tables: Vec::new(),
        };
        // RSDP first; root table addresses patched in once known.
        let rsdp_len = if self.rsdp_revision >= 2 { 36 } else { 20 };
        let mut rsdp = vec![0u8; rsdp_len];
        rsdp[..8].copy_from_slice(b"RSD PTR ");
        rsdp[9..15].copy_from_slice(b"BOCHS ");
        rsdp[15] = self.rsdp_revision;
        if rsdp_len == 36 {
            rsdp[20..24].copy_from_slice(&36u32.to_le_bytes());
        }
        img.push(*b"RSDP", rsdp);

        // Root tables right after the RSDP (so truncating a later table
        // leaves them intact); their entries are filled in below.
        let n = self.fadt.is_some() as usize + self.hpet.is_some() as usize + 1;
        let rsdt = img.push(*b"RSDT", sdt(b"RSDT", 1, &vec![0u8; 4 * n]));
        img.write(0, 16, &(rsdt as u32).to_le_bytes());
        if self.rsdp_revision >= 2 {
            let xsdt = img.push(*b"XSDT", sdt(b"XSDT", 1, &vec![0u8; 8 * n]));
            img.write(0, 24, &xsdt.to_le_bytes());
        }
        let mut entries = Vec::new();
        // A table the parser must skip over.
        entries.push(img.push(*b"APIC", sdt(b"APIC", 1, &[0u8; 8])));
        if let Some(f) = &self.fadt {
            entries.push(img.push(*b"FACP", fadt_bytes(f)));
        }
        if let Some(h) = &self.hpet {
            entries.push(img.push(*b"HPET", hpet_bytes(h)));
        }
        for (i, &a) in entries.iter().enumerate() {
            img.poke(b"RSDT", 36 + 4 * i, &(a as u32).to_le_bytes());
            if self.rsdp_revision >= 2 {
                img.poke(b"XSDT", 36 + 8 * i, &a.to_le_bytes());
            }
        }
        for t in img.tables.clone() {
            img.fix_checksum(&t.0);
        }
        img
    }
}

/// A header plus `body`, checksum left for `fix_checksum`.
fn sdt(sig: &[u8; 4], revision: u8, body: &[u8]) -> Vec<u8> {
    let mut t = vec![0u8; 36];
    t[..4].copy_from_slice(sig);
    t[4..8].copy_from_slice(&((36 + body.len()) as u32).to_le_bytes());
    t[8] = revision;
    t[10..16].copy_from_slice(b"BOCHS ");
    t[16..24].copy_from_slice(b"BXPC    ");
    t[24..28].copy_from_slice(&1u32.to_le_bytes());
    t[28..32].copy_from_slice(b"BXPC");
    t[32..36].copy_from_slice(&1u32.to_le_bytes());
    t.extend_from_slice(body);
    t
}

fn fadt_bytes(f: &FadtSpec) -> Vec<u8> {
    let len = match f.revision {
        0..=2 => 116,
        3 | 4 => 244,
        _ => 268,
    };
    let mut t = sdt(b"FACP", f.revision, &vec![0u8; len - 36]);
    t[76..80].copy_from_slice(&f.pm_tmr_blk.to_le_bytes());
    t[91] = f.pm_tmr_len;
    t[108] = f.century;
    let flags = (f.tmr_val_ext as u32) << 8 | (f.hw_reduced as u32) << 20;
    t[112..116].copy_from_slice(&flags.to_le_bytes());
    if let (Some((space, addr)), true) = (f.x_pm_tmr_blk, len >= 220) {
        t[208] = space;
        t[209] = 32; // bit width
        t[211] = 3; // dword access
        t[212..220].copy_from_slice(&addr.to_le_bytes());
    }
    t
}

fn hpet_bytes(h: &HpetTableSpec) -> Vec<u8> {
    let mut body = vec![0u8; 20];
    // Event timer block ID: vendor 0x8086, legacy-capable, 3 timers.
    let id = 0x8086u32 << 16 | 1 << 15 | (h.counter_64bit as u32) << 13 | 2 << 8 | 1;
    body[0..4].copy_from_slice(&id.to_le_bytes());
    body[4] = h.space;
    body[5] = 64;
    body[8..16].copy_from_slice(&h.base.to_le_bytes());
    sdt(b"HPET", 1, &body)
}

/// A built table image: physical memory from `base` on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcpiImage {
    base: u64,
    bytes: Vec<u8>,
    /// (signature, offset in image, length).
    tables: Vec<([u8; 4], usize, usize)>,
}

impl AcpiImage {
    /// Appends `t` 16-byte aligned; returns its physical address.
    fn push(&mut self, sig: [u8; 4], t: Vec<u8>) -> u64 {
        let off = self.bytes.len().next_multiple_of(16);
        self.bytes.resize(off, 0);
        self.tables.push((sig, off, t.len()));
        self.bytes.extend_from_slice(&t);
        self.base + off as u64
    }

    fn write(&mut self, off: usize, field: usize, data: &[u8]) {
        self.bytes[off + field..off + field + data.len()].copy_from_slice(data);
    }

    /// Physical address of the RSDP (the image's first byte).
    pub fn rsdp(&self) -> u64 {
        self.base
    }

    /// The image as physical memory.
    pub fn memory(&self) -> SliceMemory<'_> {
        SliceMemory::new(self.base, &self.bytes)
    }

    /// The raw image.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Physical address and length of the table with `sig` (`b"RSDP"` for
    /// the root pointer).
    pub fn table(&self, sig: &[u8; 4]) -> Option<(u64, usize)> {
        self.find(sig)
            .map(|(off, len)| (self.base + off as u64, len))
    }

    fn find(&self, sig: &[u8; 4]) -> Option<(usize, usize)> {
        self.tables.iter().find(|t| &t.0 == sig).map(|t| (t.1, t.2))
    }

    /// Overwrites bytes at `field` within table `sig` and leaves its
    /// checksum wrong (corruption). Panics if the table is absent.
    pub fn poke(&mut self, sig: &[u8; 4], field: usize, data: &[u8]) {
        let (off, _) = self.find(sig).expect("no such table");
        self.write(off, field, data);
    }

    /// Overwrites bytes at `field` within table `sig` and fixes the
    /// checksum, so only the new value is wrong.
    pub fn patch(&mut self, sig: &[u8; 4], field: usize, data: &[u8]) {
        self.poke(sig, field, data);
        self.fix_checksum(sig);
    }

    /// Recomputes the checksum(s) of table `sig`.
    pub fn fix_checksum(&mut self, sig: &[u8; 4]) {
        let Some((off, len)) = self.find(sig) else {
            return;
        };
        let sum = |b: &[u8]| b.iter().fold(0u8, |s, &x| s.wrapping_add(x));
        if sig == b"RSDP" {
            self.bytes[off + 8] = 0;
            self.bytes[off + 8] = sum(&self.bytes[off..off + 20]).wrapping_neg();
            if len >= 36 {
                self.bytes[off + 32] = 0;
                self.bytes[off + 32] = sum(&self.bytes[off..off + 36]).wrapping_neg();
            }
        } else {
            self.bytes[off + 9] = 0;
            self.bytes[off + 9] = sum(&self.bytes[off..off + len]).wrapping_neg();
        }
    }

    /// Cuts the image so memory ends `keep` bytes into table `sig` (tables
    /// after it are lost too; the order is RSDP, RSDT, XSDT, APIC, FACP,
    /// HPET).
    pub fn truncate_in(&mut self, sig: &[u8; 4], keep: usize) {
        let (off, _) = self.find(sig).expect("no such table");
        self.bytes.truncate(off + keep);
    }
}
