//! ACPI discovery and table lookup over arbitrary memory.
//!
//! Input layout (so that seeds are plain table images): byte 0 flags
//! (bit 0: fix every checksum first, so mutations reach the fields behind
//! them; bits 1..: which signature `find_table` looks up), bytes 1..9 the
//! image's physical base (little endian), bytes 9..13 the RSDP's offset
//! from it, then the image.
//!
//! - Bounded reads: `discover` and `find_table` read at most 270,000 bytes
//!   in at most 5,200 calls (4 tables of at most 64 KiB, 256 root entries
//!   per walk, the RSDP), whatever the memory holds.
//! - Every table reported is at an address the RSDT or XSDT lists, has the
//!   signature asked for, the length it reports (36 ..= 64 KiB) and a zero
//!   byte sum; `discover` succeeds only on an RSDP with its signature and
//!   valid checksum(s).
//! - The HPET and PM timer results decode that table's bytes: a non-zero,
//!   8-aligned HPET base in system memory; a non-zero PM timer port in I/O
//!   space (X_PM_TMR_BLK when present and non-zero, else PM_TMR_BLK) with
//!   PM_TMR_LEN 4 and TMR_VAL_EXT as `bits32`.
//! - Deterministic: the same memory gives the same answer.

use clockhal_x86::acpi::{self, AcpiTable};
use clockhal_x86::{PhysMemory, SliceMemory};
use std::cell::Cell;
use std::vec::Vec;

/// Most bytes one call may read (see the module docs).
pub const MAX_BYTES_READ: usize = 270_000;
/// Most `PhysMemory::read` calls one call may make.
pub const MAX_READS: usize = 5_200;

const SIGNATURES: [&str; 8] = [
    "FACP", "HPET", "APIC", "RSDT", "XSDT", "SSDT", "MCFG", "WAET",
];

/// Encodes a seed: the image at `base` with the RSDP at `rsdp`.
pub fn encode(base: u64, rsdp: u64, image: &[u8]) -> Vec<u8> {
    let mut v = std::vec![0u8];
    v.extend_from_slice(&base.to_le_bytes());
    v.extend_from_slice(&(rsdp.wrapping_sub(base) as u32).to_le_bytes());
    v.extend_from_slice(image);
    v
}

/// The seeds: clockhal-sim's QEMU-like q35, pc and microvm tables, by name
/// (`fuzz/seeds/acpi/` holds them as files for libFuzzer).
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    use clockhal_sim::AcpiTablesBuilder;
    [
        ("q35", AcpiTablesBuilder::q35()),
        ("pc", AcpiTablesBuilder::pc()),
        ("microvm", AcpiTablesBuilder::microvm()),
    ]
    .into_iter()
    .map(|(name, b)| {
        let image = b.build();
        (name, encode(image.rsdp(), image.rsdp(), image.bytes()))
    })
    .collect()
}

/// Memory that counts what is read from it.
struct Counting<'a> {
    inner: SliceMemory<'a>,
    reads: Cell<usize>,
    bytes: Cell<usize>,
}

impl PhysMemory for Counting<'_> {
    fn read(&self, phys: u64, buf: &mut [u8]) -> bool {
        self.reads.set(self.reads.get() + 1);
        self.bytes.set(self.bytes.get() + buf.len());
        self.inner.read(phys, buf)
    }
}

impl Counting<'_> {
    fn bounded<R>(&self, what: &str, f: impl FnOnce(&Self) -> R) -> R {
        self.reads.set(0);
        self.bytes.set(0);
        let r = f(self);
        assert!(
            self.bytes.get() <= MAX_BYTES_READ && self.reads.get() <= MAX_READS,
            "{what}: {} bytes in {} reads",
            self.bytes.get(),
            self.reads.get()
        );
        r
    }
}

/// Runs the check on `data`.
pub fn check(data: &[u8]) {
    if data.len() < 13 {
        return;
    }
    let flags = data[0];
    let base = u64::from_le_bytes(data[1..9].try_into().unwrap());
    let rsdp = base.wrapping_add(u32::from_le_bytes(data[9..13].try_into().unwrap()) as u64);
    let mut image = data[13..].to_vec();
    if flags & 1 != 0 {
        fix_checksums(&mut image, base, rsdp);
    }
    let raw = Raw {
        base,
        bytes: &image,
    };
    let mem = Counting {
        inner: SliceMemory::new(base, &image),
        reads: Cell::new(0),
        bytes: Cell::new(0),
    };
    let listed = raw.listed_tables(rsdp);
    let found = |sig: &'static str| {
        let r = mem.bounded(sig, |m| acpi::find_table(m, rsdp, sig));
        if let Ok(t) = r {
            raw.check_table(&t, sig, &listed);
        }
        r
    };
    let sig = SIGNATURES[(flags >> 1) as usize % SIGNATURES.len()];
    let _ = found(sig);
    let discovered = mem.bounded("discover", |m| acpi::discover(m, rsdp));
    assert_eq!(
        discovered,
        acpi::discover(&mem.inner, rsdp),
        "not deterministic"
    );
    let Ok(clocks) = discovered else {
        return;
    };
    raw.check_rsdp(rsdp);
    let hpet_table = found("HPET");
    if let Ok(h) = clocks.hpet {
        let t = hpet_table.expect("HPET reported but find_table finds none");
        let b = raw.get(t.phys, 56).expect("HPET table readable");
        assert!(h.base != 0 && h.base % 8 == 0, "{h:?}");
        assert_eq!(b[40], 0, "HPET not in system memory");
        assert_eq!(h.base, u64_at(b, 44));
        assert_eq!(h.counter_64bit, u32_at(b, 36) & (1 << 13) != 0);
    } else if let Err(e) = hpet_table {
        assert!(
            clocks.hpet.is_err(),
            "find_table: {e:?}, discover: {clocks:?}"
        );
    }
    let fadt = found("FACP");
    if let Ok(p) = clocks.pm_timer {
        let t = fadt.expect("PM timer reported but find_table finds no FACP");
        assert!(t.len >= 116);
        let b = raw.get(t.phys, t.len.min(220) as usize).unwrap();
        assert_eq!(b[91], 4, "PM_TMR_LEN");
        let port = if b.len() >= 220 && u64_at(b, 212) != 0 {
            assert_eq!(b[208], 1, "X_PM_TMR_BLK not in I/O space");
            u64_at(b, 212)
        } else {
            u32_at(b, 76) as u64
        };
        assert!(port != 0 && port == p.port as u64, "{p:?} vs {port:#x}");
        assert_eq!(p.bits32, u32_at(b, 112) & (1 << 8) != 0);
    } else if let Err(e) = fadt {
        assert!(
            clocks.pm_timer.is_err(),
            "find_table: {e:?}, discover: {clocks:?}"
        );
    }
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}

fn sum(b: &[u8]) -> u8 {
    b.iter().fold(0, |s, &x| s.wrapping_add(x))
}

/// The image read directly (the checker's own, minimal view of ACPI).
struct Raw<'a> {
    base: u64,
    bytes: &'a [u8],
}

impl Raw<'_> {
    fn get(&self, phys: u64, len: usize) -> Option<&[u8]> {
        let start = usize::try_from(phys.checked_sub(self.base)?).ok()?;
        self.bytes.get(start..start.checked_add(len)?)
    }

    /// A table header's length, if the table at `phys` is readable whole
    /// and has a plausible length.
    fn table_len(&self, phys: u64) -> Option<usize> {
        let len = u32_at(self.get(phys, 8)?, 4) as usize;
        ((36..=65536).contains(&len) && self.get(phys, len).is_some()).then_some(len)
    }

    /// Root-table entries (the first 256 of the RSDT and of the XSDT).
    fn entries(&self, phys: u64, size: usize) -> Vec<u64> {
        let Some(len) = self.table_len(phys) else {
            return Vec::new();
        };
        let t = self.get(phys, len).unwrap();
        t[36..]
            .chunks_exact(size)
            .take(256)
            .map(|e| {
                let mut w = [0u8; 8];
                w[..size].copy_from_slice(e);
                u64::from_le_bytes(w)
            })
            .collect()
    }

    fn roots(&self, rsdp: u64) -> (u64, u64) {
        let Some(r) = self.get(rsdp, 20) else {
            return (0, 0);
        };
        let xsdt = match self.get(rsdp, 36) {
            Some(v2) if r[15] >= 2 => u64_at(v2, 24),
            _ => 0,
        };
        (u32_at(r, 16) as u64, xsdt)
    }

    fn listed_tables(&self, rsdp: u64) -> Vec<u64> {
        let (rsdt, xsdt) = self.roots(rsdp);
        let mut v = self.entries(rsdt, 4);
        if xsdt != 0 {
            v.extend(self.entries(xsdt, 8));
        }
        v
    }

    fn check_table(&self, t: &AcpiTable, sig: &str, listed: &[u64]) {
        assert!(
            listed.contains(&t.phys),
            "{sig} at {:#x} is not listed",
            t.phys
        );
        let b = self.get(t.phys, t.len as usize).expect("table readable");
        assert_eq!(&b[..4], sig.as_bytes());
        assert_eq!(u32_at(b, 4), t.len);
        assert!((36..=65536).contains(&t.len), "{sig}: length {}", t.len);
        assert_eq!(sum(b), 0, "{sig}: bad checksum");
    }

    fn check_rsdp(&self, rsdp: u64) {
        let r = self.get(rsdp, 20).expect("RSDP readable");
        assert_eq!(&r[..8], b"RSD PTR ");
        assert_eq!(sum(r), 0, "RSDP checksum");
        if r[15] >= 2 {
            let len = u32_at(self.get(rsdp, 36).unwrap(), 20) as usize;
            assert!((36..=1024).contains(&len));
            assert_eq!(
                sum(self.get(rsdp, len).unwrap()),
                0,
                "RSDP extended checksum"
            );
        }
    }
}

/// Makes every checksum the tables name right (leaf tables, then roots,
/// then the RSDP), so mutated fields are seen past the checksum checks.
fn fix_checksums(image: &mut [u8], base: u64, rsdp: u64) {
    let offset = |phys: u64| usize::try_from(phys.checked_sub(base)?).ok();
    let fix = |image: &mut [u8], phys: u64, len: usize, at: usize| {
        let Some(start) = offset(phys) else { return };
        let Some(t) = image.get_mut(start..start.saturating_add(len)) else {
            return;
        };
        if t.len() == len && at < len {
            t[at] = 0;
            t[at] = sum(t).wrapping_neg();
        }
    };
    let (rsdt, xsdt) = Raw { base, bytes: image }.roots(rsdp);
    for (root, size) in [(rsdt, 4), (xsdt, 8)] {
        let raw = Raw { base, bytes: image };
        let tables: Vec<(u64, usize)> = raw
            .entries(root, size)
            .into_iter()
            .filter_map(|p| Some((p, raw.table_len(p)?)))
            .collect();
        for (p, len) in tables {
            fix(image, p, len, 9);
        }
        if let Some(len) = (Raw { base, bytes: image }).table_len(root) {
            fix(image, root, len, 9);
        }
    }
    fix(image, rsdp, 20, 8);
    let ext = Raw { base, bytes: image }
        .get(rsdp, 36)
        .map(|r| (r[15], u32_at(r, 20) as usize));
    if let Some((rev, len)) = ext {
        if rev >= 2 && (36..=1024).contains(&len) {
            fix(image, rsdp, len, 32);
        }
    }
}
