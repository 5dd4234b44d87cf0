//! Finding the HPET and the ACPI PM timer in the firmware's ACPI tables.
//!
//! Only what the clock backends need is parsed: the RSDP (v1 and v2), the
//! root table (XSDT, else RSDT), the FADT's PM timer fields and CENTURY
//! index (the CMOS RTC's century register) and the "HPET" table's base
//! address. Every byte comes through an OS-supplied
//! [`PhysMemory`] and is treated as untrusted: checksums are verified, table
//! lengths are bounded, loops over root-table entries are capped, and every
//! problem becomes an [`AcpiError`] (never a panic).
//!
//! An OS that already parsed ACPI skips this module and passes the HPET base
//! or the PM timer port to the backends directly.
//!
//! Why not the `acpi` crate: 5.2 (the last stable release) builds on stable
//! without default features and has `HpetInfo` and `Fadt::pm_timer_block`,
//! but its `AcpiHandler` must hand out *virtual pointers* to mapped tables
//! that it then reads through raw pointer casts, which does not fit the
//! copy-based, bounds-checked [`PhysMemory`] (and [`SliceMemory`] in tests);
//! it turns `PM_TMR_LEN != 4` into "no PM timer" rather than an error, and
//! pulls `log`/`bit_field`. 7.0 is a pre-release whose `Handler` has ~30
//! methods (AML, PCI, mutexes). The subset needed here is small.
//!
//! ```
//! use clockhal_x86::acpi;
//! use clockhal_x86::SliceMemory;
//! # fn tables() -> (u64, Vec<u8>) { (0, vec![0; 16]) }
//! let (base, image) = tables(); // e.g. copied from firmware
//! let mem = SliceMemory::new(base, &image);
//! match acpi::discover(&mem, base) {
//!     Ok(clocks) => {
//!         if let Ok(hpet) = clocks.hpet { let _ = hpet.base; }
//!         if let Ok(pm) = clocks.pm_timer { let _ = (pm.port, pm.bits32); }
//!         if let Ok(rtc) = clocks.rtc { let _ = rtc.century_index; }
//!     }
//!     Err(e) => { let _ = e; /* no usable ACPI: probe the TSC only */ }
//! }
//! ```
//!
//! [`SliceMemory`]: crate::SliceMemory

use crate::PhysMemory;
use core::fmt;

/// Largest table clockhal will checksum (real FADT/HPET/RSDT are < 1 KiB;
/// a hostile length must not make us read gigabytes).
const MAX_TABLE_LEN: u32 = 64 * 1024;
/// Most root-table entries examined (real firmware has < 64).
const MAX_ROOT_ENTRIES: usize = 256;
/// Standard system description table header size.
const SDT_HEADER_LEN: u32 = 36;

/// GAS address space: system memory.
const SPACE_MEMORY: u8 = 0;
/// GAS address space: system I/O.
const SPACE_IO: u8 = 1;

/// FADT field offsets (ACPI 6.5, table 5.9).
mod fadt {
    pub const PM_TMR_BLK: usize = 76;
    pub const PM_TMR_LEN: usize = 91;
    /// CMOS index of the RTC's century register (0: none). ACPI 1.0 on.
    pub const CENTURY: usize = 108;
    pub const FLAGS: usize = 112;
    pub const X_PM_TMR_BLK: usize = 208;
    /// Flags bit 8: the PM timer is 32 bits wide.
    pub const TMR_VAL_EXT: u32 = 1 << 8;
}

/// "HPET" table field offsets (IA-PC HPET 1.0a, table 3).
mod hpet {
    pub const EVENT_TIMER_BLOCK_ID: usize = 36;
    pub const BASE_ADDRESS: usize = 40;
    pub const LEN: usize = 56;
    /// Block ID bit 13: COUNT_SIZE_CAP.
    pub const COUNT_SIZE_CAP: u32 = 1 << 13;
}

/// The HPET as the "HPET" table describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct HpetInfo {
    /// Physical base of the 1 KiB register block (system memory).
    pub base: u64,
    /// The table's copy of COUNT_SIZE_CAP (64-bit main counter). Advisory:
    /// the device's own capabilities register decides.
    pub counter_64bit: bool,
}

/// The ACPI PM timer as the FADT describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PmTimerInfo {
    /// I/O port of the 32-bit counter register.
    pub port: u16,
    /// TMR_VAL_EXT: the counter is 32 bits wide (else 24).
    pub bits32: bool,
}

/// What the FADT says about the CMOS real-time clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RtcInfo {
    /// FADT `CENTURY` (byte at offset 108): the CMOS RAM index of the
    /// century register, `None` when the field is 0 (no century register;
    /// QEMU microvm). Passed on as found: the RTC backend checks that it
    /// names a usable register (QEMU q35/pc: 0x32).
    pub century_index: Option<u8>,
}

/// What [`discover`] found: each clock independently present or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AcpiClocks {
    /// The HPET, or why there is none usable.
    pub hpet: Result<HpetInfo, AcpiError>,
    /// The PM timer, or why there is none usable.
    pub pm_timer: Result<PmTimerInfo, AcpiError>,
    /// The RTC's century register, or why the FADT could not be read.
    pub rtc: Result<RtcInfo, AcpiError>,
    /// Processors the MADT ("APIC") lists as enabled (local APIC and
    /// x2APIC entries with the Enabled flag), or why it could not be read:
    /// how many CPUs may read the TSC, for a probe that must not trust a
    /// TSC across CPUs it has no warp-test result for.
    pub processors: Result<u32, AcpiError>,
}

/// Why the tables (or one clock in them) could not be used.
///
/// Table names are the 4-character signatures (`"RSDP"` for the root
/// pointer, `"FACP"` for the FADT).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum AcpiError {
    /// The memory reader refused `len` bytes at `phys` (unmapped, or the
    /// table runs past the end of what the OS mapped).
    Unreadable {
        /// Table being read.
        table: &'static str,
        /// Physical address of the refused read.
        phys: u64,
    },
    /// The signature at the address is not the expected one.
    BadSignature {
        /// Table expected.
        table: &'static str,
    },
    /// The bytes do not sum to zero.
    BadChecksum {
        /// Table whose checksum failed.
        table: &'static str,
    },
    /// The table's length field is too small for the fields clockhal needs,
    /// or larger than clockhal accepts (64 KiB).
    BadLength {
        /// Table.
        table: &'static str,
        /// The length it claims.
        len: u32,
    },
    /// No root table (both RSDT and XSDT addresses zero or unusable).
    NoRootTable,
    /// The root table lists no table with this signature (`"RSDP"`: the
    /// legacy BIOS areas hold no RSDP, see [`find_rsdp`]).
    NotFound {
        /// Missing table.
        table: &'static str,
    },
    /// The table is present but the device address in it is zero (the
    /// device is absent, e.g. microvm's PM timer).
    ZeroAddress {
        /// Table.
        table: &'static str,
    },
    /// FADT `PM_TMR_LEN` is not 4: the PM timer is not supported.
    PmTimerLength(u8),
    /// A generic address structure names the wrong address space (the HPET
    /// must be in memory, the PM timer in I/O space).
    WrongAddressSpace {
        /// Table.
        table: &'static str,
        /// The `address_space_id` found.
        space: u8,
    },
    /// The PM timer address does not fit a 16-bit port.
    PortOutOfRange(u64),
    /// The HPET base is not 8-byte aligned (its 64-bit counter could not be
    /// read with one access).
    Misaligned(u64),
}

impl fmt::Display for AcpiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            AcpiError::Unreadable { table, phys } => {
                write!(
                    f,
                    "ACPI {table}: memory at {phys:#x} not readable (truncated or unmapped)"
                )
            }
            AcpiError::BadSignature { table } => write!(f, "ACPI {table}: wrong signature"),
            AcpiError::BadChecksum { table } => write!(f, "ACPI {table}: bad checksum"),
            AcpiError::BadLength { table, len } => {
                write!(f, "ACPI {table}: implausible length {len}")
            }
            AcpiError::NoRootTable => f.write_str("ACPI: no usable RSDT or XSDT"),
            AcpiError::NotFound { table: "RSDP" } => f.write_str(
                "ACPI: no RSDP in the EBDA or at 0xE0000..0xFFFFF (UEFI: pass the configuration table's)",
            ),
            AcpiError::NotFound { table } => write!(f, "ACPI: no {table} table"),
            AcpiError::ZeroAddress { table } => write!(f, "ACPI {table}: device address is zero"),
            AcpiError::PmTimerLength(n) => write!(f, "ACPI FACP: PM_TMR_LEN is {n}, not 4"),
            AcpiError::WrongAddressSpace { table, space } => {
                write!(
                    f,
                    "ACPI {table}: address space {space} is not the expected one"
                )
            }
            AcpiError::PortOutOfRange(a) => {
                write!(f, "ACPI FACP: PM timer address {a:#x} is not a port")
            }
            AcpiError::Misaligned(a) => write!(f, "ACPI HPET: base {a:#x} not 8-byte aligned"),
        }
    }
}

/// Reads `buf.len()` bytes or reports which table could not be read.
fn read(
    mem: &impl PhysMemory,
    table: &'static str,
    phys: u64,
    buf: &mut [u8],
) -> Result<(), AcpiError> {
    if mem.read(phys, buf) {
        Ok(())
    } else {
        Err(AcpiError::Unreadable { table, phys })
    }
}

/// Byte sum of `len` bytes at `phys`, read in chunks (no allocation).
fn byte_sum(
    mem: &impl PhysMemory,
    table: &'static str,
    phys: u64,
    len: u32,
) -> Result<u8, AcpiError> {
    let mut sum = 0u8;
    let mut chunk = [0u8; 64];
    let mut done = 0u64;
    while done < len as u64 {
        let n = (len as u64 - done).min(chunk.len() as u64) as usize;
        let at = phys
            .checked_add(done)
            .ok_or(AcpiError::Unreadable { table, phys })?;
        read(mem, table, at, &mut chunk[..n])?;
        sum = chunk[..n].iter().fold(sum, |s, &b| s.wrapping_add(b));
        done += n as u64;
    }
    Ok(sum)
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}
fn u64_at(b: &[u8], off: usize) -> u64 {
    (u32_at(b, off) as u64) | (u32_at(b, off + 4) as u64) << 32
}

/// A generic address structure (12 bytes).
#[derive(Clone, Copy)]
struct Gas {
    space: u8,
    address: u64,
}

impl Gas {
    fn parse(b: &[u8], off: usize) -> Gas {
        Gas {
            space: b[off],
            address: u64_at(b, off + 4),
        }
    }
}

/// A validated table: its address and length (checksum verified).
#[derive(Clone, Copy)]
struct Table {
    phys: u64,
    len: u32,
}

impl Table {
    /// Validates the table at `phys`: signature, length within
    /// `min_len..=MAX_TABLE_LEN`, checksum.
    fn open(
        mem: &impl PhysMemory,
        phys: u64,
        table: &'static str,
        min_len: u32,
    ) -> Result<Table, AcpiError> {
        if phys == 0 {
            return Err(AcpiError::ZeroAddress { table });
        }
        let mut hdr = [0u8; 8];
        read(mem, table, phys, &mut hdr)?;
        if &hdr[..4] != table.as_bytes() {
            return Err(AcpiError::BadSignature { table });
        }
        let len = u32_at(&hdr, 4);
        if len < min_len.max(SDT_HEADER_LEN) || len > MAX_TABLE_LEN {
            return Err(AcpiError::BadLength { table, len });
        }
        if byte_sum(mem, table, phys, len)? != 0 {
            return Err(AcpiError::BadChecksum { table });
        }
        Ok(Table { phys, len })
    }

    /// Copies `buf.len()` bytes from table offset `off` (within `len`).
    fn bytes(
        &self,
        mem: &impl PhysMemory,
        table: &'static str,
        off: usize,
        buf: &mut [u8],
    ) -> Result<(), AcpiError> {
        if off + buf.len() > self.len as usize {
            return Err(AcpiError::BadLength {
                table,
                len: self.len,
            });
        }
        let at = self
            .phys
            .checked_add(off as u64)
            .ok_or(AcpiError::Unreadable {
                table,
                phys: self.phys,
            })?;
        read(mem, table, at, buf)
    }
}

/// The root table: RSDT (32-bit entries) or XSDT (64-bit entries).
#[derive(Clone, Copy)]
struct Root {
    table: Table,
    entry_size: u32,
    name: &'static str,
}

impl Root {
    fn open(mem: &impl PhysMemory, phys: u64, xsdt: bool) -> Result<Root, AcpiError> {
        let name = if xsdt { "XSDT" } else { "RSDT" };
        Ok(Root {
            table: Table::open(mem, phys, name, SDT_HEADER_LEN)?,
            entry_size: if xsdt { 8 } else { 4 },
            name,
        })
    }

    /// The first listed table with signature `sig`, validated.
    fn find(
        &self,
        mem: &impl PhysMemory,
        sig: &'static str,
        min_len: u32,
    ) -> Result<Table, AcpiError> {
        let count = ((self.table.len - SDT_HEADER_LEN) / self.entry_size) as usize;
        for i in 0..count.min(MAX_ROOT_ENTRIES) {
            let mut e = [0u8; 8];
            let size = self.entry_size as usize;
            self.table.bytes(
                mem,
                self.name,
                SDT_HEADER_LEN as usize + i * size,
                &mut e[..size],
            )?;
            let phys = u64_at(&e, 0);
            if phys == 0 {
                continue;
            }
            let mut s = [0u8; 4];
            // An entry pointing at unreadable memory is skipped, not fatal:
            // the table we want may be further down.
            if !mem.read(phys, &mut s) || s != sig.as_bytes() {
                continue;
            }
            return Table::open(mem, phys, sig, min_len);
        }
        Err(AcpiError::NotFound { table: sig })
    }
}

/// Finds the root table from the RSDP at `rsdp`: the XSDT when the RSDP is
/// revision 2+ and the XSDT is valid, else the RSDT.
fn root(mem: &impl PhysMemory, rsdp: u64) -> Result<Root, AcpiError> {
    let Rsdp { rsdt, xsdt, .. } = read_rsdp(mem, rsdp)?;
    let (rsdt, xsdt) = (rsdt as u64, xsdt.unwrap_or(0));
    // Prefer the XSDT; fall back to the RSDT if the XSDT is broken (Linux
    // does the same), reporting the XSDT's error if both fail.
    let mut first_err = None;
    if xsdt != 0 {
        match Root::open(mem, xsdt, true) {
            Ok(r) => return Ok(r),
            Err(e) => first_err = Some(e),
        }
    }
    if rsdt != 0 {
        match Root::open(mem, rsdt, false) {
            Ok(r) => return Ok(r),
            Err(e) => first_err = first_err.or(Some(e)),
        }
    }
    Err(first_err.unwrap_or(AcpiError::NoRootTable))
}

/// Where a BIOS keeps the segment of the Extended BIOS Data Area (a `u16`
/// in the BIOS Data Area).
pub const EBDA_SEGMENT_POINTER: u64 = 0x40E;
/// How much of the EBDA is searched for the RSDP (ACPI 6.5, 5.2.5.1: the
/// first 1 KiB).
pub const EBDA_SEARCH_LEN: u64 = 1024;
/// The BIOS read-only memory area searched after the EBDA
/// (`0xE0000..=0xFFFFF`).
pub const BIOS_AREA: core::ops::Range<u64> = 0xE_0000..0x10_0000;
/// The RSDP's alignment in both search areas.
const RSDP_ALIGN: u64 = 16;
/// Largest RSDP length (field at offset 20, ACPI 2.0+) accepted: the
/// structure is 36 bytes; a hostile length must not make us sum a
/// megabyte.
const MAX_RSDP_LEN: u32 = 1024;

/// A validated Root System Description Pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Rsdp {
    /// Physical address of the structure (what [`discover`] and
    /// `Platform::acpi` take).
    pub phys: u64,
    /// The revision byte: 0 for ACPI 1.0 (20 bytes, RSDT only), 2 and up
    /// for ACPI 2.0+ (extended checksum and XSDT verified). Revision 1 was
    /// never defined; like ACPICA, anything below 2 is read as 1.0.
    pub revision: u8,
    /// The RSDT's physical address (0: none).
    pub rsdt: u32,
    /// The XSDT's physical address, for revision 2 and up (may be 0).
    pub xsdt: Option<u64>,
}

/// Validates the RSDP at `rsdp`: signature `"RSD PTR "`, the ACPI 1.0
/// checksum over its first 20 bytes, and for revision 2 and up the
/// extended checksum over its `length` bytes (36..=1024).
fn read_rsdp(mem: &impl PhysMemory, rsdp: u64) -> Result<Rsdp, AcpiError> {
    const T: &str = "RSDP";
    let mut v1 = [0u8; 20];
    read(mem, T, rsdp, &mut v1)?;
    if &v1[..8] != b"RSD PTR " {
        return Err(AcpiError::BadSignature { table: T });
    }
    if v1.iter().fold(0u8, |s, &b| s.wrapping_add(b)) != 0 {
        return Err(AcpiError::BadChecksum { table: T });
    }
    let revision = v1[15];
    let rsdt = u32_at(&v1, 16);
    let mut xsdt = None;
    if revision >= 2 {
        let mut v2 = [0u8; 36];
        read(mem, T, rsdp, &mut v2)?;
        let len = u32_at(&v2, 20);
        if !(36..=MAX_RSDP_LEN).contains(&len) {
            return Err(AcpiError::BadLength { table: T, len });
        }
        if byte_sum(mem, T, rsdp, len)? != 0 {
            return Err(AcpiError::BadChecksum { table: T });
        }
        xsdt = Some(u64_at(&v2, 24));
    }
    Ok(Rsdp {
        phys: rsdp,
        revision,
        rsdt,
        xsdt,
    })
}

/// Validates the RSDP at a known address (from a boot protocol or the UEFI
/// configuration table): signature, ACPI 1.0 checksum, and for revision 2
/// and up the bounded length and extended checksum.
///
/// Interrupt-safe: yes (reads memory through `mem` only; no locks).
pub fn rsdp_at(mem: &impl PhysMemory, phys: u64) -> Result<Rsdp, AcpiError> {
    read_rsdp(mem, phys)
}

/// Searches for the RSDP where a legacy BIOS puts it and returns its
/// physical address, for kernels whose loader does not pass one
/// (bootloader 0.9, multiboot1, most BIOS boots):
///
/// 1. the first 1 KiB of the Extended BIOS Data Area, whose segment is the
///    `u16` at physical 0x40E (skipped when that pointer is unreadable or
///    does not point into conventional memory, 0x400..0xA0000);
/// 2. the BIOS area `0xE0000..=0xFFFFF`.
///
/// Candidates are the 16-byte boundaries carrying `"RSD PTR "`; the first
/// that passes [`rsdp_at`]'s checks (ACPI 1.0 checksum; for revision 2+
/// the bounded length and extended checksum) wins, a failing one is
/// skipped, as ACPICA does. Paragraphs `mem` cannot read are skipped too,
/// so `mem` must cover the first MiB (an [`OffsetMapping`] of all physical
/// memory does).
///
/// Errors: the first rejected candidate's error ([`AcpiError::BadChecksum`],
/// [`AcpiError::BadLength`], or [`AcpiError::Unreadable`] when one runs
/// past what `mem` can read) if there were candidates but none was valid;
/// [`AcpiError::Unreadable`] at 0xE0000 when `mem` could read none of the
/// BIOS area; else [`AcpiError::NotFound`] with table `"RSDP"`.
///
/// Under UEFI there is no such scan: the RSDP's physical address is the
/// `VendorTable` of the system table's configuration-table entry with
/// `ACPI_20_TABLE_GUID` (`8868e871-e4f1-11d3-bc22-0080c73c8881`, preferred)
/// or `ACPI_TABLE_GUID` (`eb9d2d30-2d88-11d3-9a16-0090273fc14d`, ACPI 1.0);
/// boot protocols pass it on (bootloader_api's `rsdp_addr`, Limine's RSDP
/// request, multiboot2's ACPI tags). The OS hands that address to
/// [`discover`] or `Platform::acpi` directly (or checks it with
/// [`rsdp_at`]).
///
/// ```
/// use clockhal_x86::acpi::{find_rsdp, AcpiError};
/// use clockhal_x86::SliceMemory;
/// let low = vec![0u8; 0x10_0000]; // the first MiB, as the OS maps it
/// let mem = SliceMemory::new(0, &low);
/// assert_eq!(find_rsdp(&mem), Err(AcpiError::NotFound { table: "RSDP" }));
/// ```
///
/// Interrupt-safe: yes (reads memory through `mem` only; no locks), but it
/// reads up to 129 KiB: call it once at boot.
///
/// [`OffsetMapping`]: crate::OffsetMapping
pub fn find_rsdp(mem: &impl PhysMemory) -> Result<u64, AcpiError> {
    let (mut first_err, mut readable) = (None, false);
    if let Some(ebda) = ebda_base(mem) {
        let end = (ebda + EBDA_SEARCH_LEN).min(EBDA_END);
        if let Some(found) = scan(mem, ebda..end, &mut first_err, &mut readable) {
            return Ok(found);
        }
    }
    readable = false; // the error below is about the BIOS area
    if let Some(found) = scan(mem, BIOS_AREA, &mut first_err, &mut readable) {
        return Ok(found);
    }
    Err(match first_err {
        Some(e) => e,
        None if !readable => AcpiError::Unreadable {
            table: "RSDP",
            phys: BIOS_AREA.start,
        },
        None => AcpiError::NotFound { table: "RSDP" },
    })
}

/// End of conventional memory: an EBDA segment must point below it.
const EBDA_END: u64 = 0xA_0000;

/// The EBDA's physical base from the BIOS Data Area, if it is plausible
/// (inside conventional memory, above the BDA itself).
fn ebda_base(mem: &impl PhysMemory) -> Option<u64> {
    let mut seg = [0u8; 2];
    if !mem.read(EBDA_SEGMENT_POINTER, &mut seg) {
        return None;
    }
    let base = (u16::from_le_bytes(seg) as u64) << 4;
    (0x400..EBDA_END).contains(&base).then_some(base)
}

/// The first valid RSDP on a 16-byte boundary in `area`, noting the first
/// rejected candidate's error and whether any paragraph was readable.
fn scan(
    mem: &impl PhysMemory,
    area: core::ops::Range<u64>,
    first_err: &mut Option<AcpiError>,
    readable: &mut bool,
) -> Option<u64> {
    let mut at = area.start.next_multiple_of(RSDP_ALIGN);
    while at < area.end {
        let mut sig = [0u8; 8];
        if !mem.read(at, &mut sig) {
            at += RSDP_ALIGN;
            continue;
        }
        *readable = true;
        if &sig == b"RSD PTR " {
            match read_rsdp(mem, at) {
                Ok(_) => return Some(at),
                Err(e) => *first_err = first_err.or(Some(e)),
            }
        }
        at += RSDP_ALIGN;
    }
    None
}

fn hpet_info(mem: &impl PhysMemory, root: &Root) -> Result<HpetInfo, AcpiError> {
    const T: &str = "HPET";
    let table = root.find(mem, T, hpet::LEN as u32)?;
    let mut b = [0u8; hpet::LEN];
    table.bytes(mem, T, 0, &mut b)?;
    let gas = Gas::parse(&b, hpet::BASE_ADDRESS);
    if gas.space != SPACE_MEMORY {
        return Err(AcpiError::WrongAddressSpace {
            table: T,
            space: gas.space,
        });
    }
    if gas.address == 0 {
        return Err(AcpiError::ZeroAddress { table: T });
    }
    if gas.address % 8 != 0 {
        return Err(AcpiError::Misaligned(gas.address));
    }
    Ok(HpetInfo {
        base: gas.address,
        counter_64bit: u32_at(&b, hpet::EVENT_TIMER_BLOCK_ID) & hpet::COUNT_SIZE_CAP != 0,
    })
}

/// The FADT's fields up to the end of X_PM_TMR_BLK (only up to the flags
/// for an ACPI 1.0 table, which ends there), checksum verified.
struct Fadt {
    b: [u8; fadt::X_PM_TMR_BLK + 12],
    have_x: bool,
}

const FADT: &str = "FACP";

fn read_fadt(mem: &impl PhysMemory, root: &Root) -> Result<Fadt, AcpiError> {
    // ACPI 1.0 FADT (116 bytes) is the smallest with the flags field.
    let table = root.find(mem, FADT, (fadt::FLAGS + 4) as u32)?;
    let mut b = [0u8; fadt::X_PM_TMR_BLK + 12];
    let have_x = table.len as usize >= b.len();
    let n = if have_x { b.len() } else { fadt::FLAGS + 4 };
    table.bytes(mem, FADT, 0, &mut b[..n])?;
    Ok(Fadt { b, have_x })
}

fn rtc_info(f: &Fadt) -> RtcInfo {
    RtcInfo {
        century_index: match f.b[fadt::CENTURY] {
            0 => None,
            i => Some(i),
        },
    }
}

fn pm_timer_info(f: &Fadt) -> Result<PmTimerInfo, AcpiError> {
    const T: &str = FADT;
    let b = &f.b;
    let x = if f.have_x {
        Some(Gas::parse(b, fadt::X_PM_TMR_BLK))
    } else {
        None
    };
    let address = match x {
        Some(g) if g.address != 0 => {
            if g.space != SPACE_IO {
                return Err(AcpiError::WrongAddressSpace {
                    table: T,
                    space: g.space,
                });
            }
            g.address
        }
        _ => u32_at(b, fadt::PM_TMR_BLK) as u64,
    };
    if address == 0 {
        return Err(AcpiError::ZeroAddress { table: T });
    }
    let len = b[fadt::PM_TMR_LEN];
    if len != 4 {
        return Err(AcpiError::PmTimerLength(len));
    }
    let port = u16::try_from(address).map_err(|_| AcpiError::PortOutOfRange(address))?;
    Ok(PmTimerInfo {
        port,
        bits32: u32_at(b, fadt::FLAGS) & fadt::TMR_VAL_EXT != 0,
    })
}

/// Finds the HPET, the PM timer and the RTC's century register from the
/// RSDP at physical address `rsdp`.
///
/// Errors in the RSDP or root table fail the whole call; a missing or bad
/// HPET or FADT only fails the fields of [`AcpiClocks`] that depend on it
/// (a bad FADT fails both `pm_timer` and `rtc`, with the same error).
/// Interrupt-safe: no (one-time walk of firmware tables).
pub fn discover(mem: &impl PhysMemory, rsdp: u64) -> Result<AcpiClocks, AcpiError> {
    let root = root(mem, rsdp)?;
    let fadt = read_fadt(mem, &root);
    Ok(AcpiClocks {
        hpet: hpet_info(mem, &root),
        pm_timer: fadt.as_ref().map_err(|e| *e).and_then(pm_timer_info),
        rtc: fadt.as_ref().map(rtc_info).map_err(|e| *e),
        processors: processor_count(mem, &root),
    })
}

/// MADT layout: entries start after the header, the local APIC address
/// and the flags; each entry is `type, length, ...`.
mod madt {
    pub const ENTRIES: usize = 44;
    /// Processor Local APIC: flags (u32) at 4.
    pub const LOCAL_APIC: u8 = 0;
    pub const LOCAL_APIC_FLAGS: usize = 4;
    /// Processor Local x2APIC: flags (u32) at 8.
    pub const LOCAL_X2APIC: u8 = 9;
    pub const LOCAL_X2APIC_FLAGS: usize = 8;
    /// Flags bit 0: the processor is usable now.
    pub const ENABLED: u32 = 1;
}

/// Counts the MADT's enabled processors (bounded by the table's length,
/// at most 64 KiB). An entry whose length is below 2 or runs past the end
/// ends the walk: the processors counted before it stand (as Linux keeps
/// the entries it parsed; firmware pads tables with zeros), an error only
/// when there were none.
fn processor_count(mem: &impl PhysMemory, root: &Root) -> Result<u32, AcpiError> {
    const T: &str = "APIC";
    let table = root.find(mem, T, madt::ENTRIES as u32)?;
    let end = table.len as usize;
    let (mut off, mut n) = (madt::ENTRIES, 0u32);
    while off + 2 <= end {
        let mut h = [0u8; 2];
        table.bytes(mem, T, off, &mut h)?;
        let len = h[1] as usize;
        if len < 2 || off + len > end {
            if n > 0 {
                break;
            }
            return Err(AcpiError::BadLength {
                table: T,
                len: table.len,
            });
        }
        let flags_at = match h[0] {
            madt::LOCAL_APIC => Some(madt::LOCAL_APIC_FLAGS),
            madt::LOCAL_X2APIC => Some(madt::LOCAL_X2APIC_FLAGS),
            _ => None,
        };
        if let Some(at) = flags_at.filter(|at| at + 4 <= len) {
            let mut f = [0u8; 4];
            table.bytes(mem, T, off + at, &mut f)?;
            if u32::from_le_bytes(f) & madt::ENABLED != 0 {
                n += 1;
            }
        }
        off += len;
    }
    Ok(n)
}

/// A validated ACPI table: where it is and how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct AcpiTable {
    /// Physical address of the table header.
    pub phys: u64,
    /// Length in bytes (from the header, checked against the 64 KiB cap).
    pub len: u32,
}

/// Finds the first table with `signature` (e.g. `"APIC"`, the MADT) through
/// the XSDT or RSDT that the RSDP at `rsdp` names, with the same checks as
/// [`discover`] (checksums, lengths, bounded entry walk). For an OS's own
/// tables; clockhal itself only needs [`discover`].
/// Interrupt-safe: yes.
pub fn find_table(
    mem: &impl PhysMemory,
    rsdp: u64,
    signature: &'static str,
) -> Result<AcpiTable, AcpiError> {
    let t = root(mem, rsdp)?.find(mem, signature, SDT_HEADER_LEN)?;
    Ok(AcpiTable {
        phys: t.phys,
        len: t.len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SliceMemory;

    #[test]
    fn garbage_and_empty_memory_are_errors() {
        let mem = SliceMemory::new(0x1000, &[0u8; 64]);
        assert_eq!(
            discover(&mem, 0x1000),
            Err(AcpiError::BadSignature { table: "RSDP" })
        );
        assert_eq!(
            discover(&mem, 0x0),
            Err(AcpiError::Unreadable {
                table: "RSDP",
                phys: 0
            })
        );
        assert_eq!(
            discover(&mem, u64::MAX - 4),
            Err(AcpiError::Unreadable {
                table: "RSDP",
                phys: u64::MAX - 4
            })
        );
    }

    #[test]
    fn helpers_decode_little_endian() {
        let b = [1u8, 2, 3, 4, 5, 6, 7, 8];
        assert_eq!(u32_at(&b, 0), 0x0403_0201);
        assert_eq!(u64_at(&b, 0), 0x0807_0605_0403_0201);
    }
}
