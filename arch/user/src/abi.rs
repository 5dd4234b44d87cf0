//! The clock page: one 4 KiB page, `#[repr(C)]`, little endian, version 1.
//!
//! See the crate documentation for the diagram and the seqlock protocol.
//! Everything here is ABI: offsets are checked at compile time, and a
//! field, once published, keeps its offset and meaning in every later
//! version (new fields go after [`V1_SIZE`]; `size` says how far a page
//! fills them in).

use crate::sync::{AtomicU32, AtomicU64};

/// `magic`: "CHPG" in memory order.
pub const MAGIC: u32 = u32::from_le_bytes(*b"CHPG");
/// `version` a v1 reader understands (the major version: a change that
/// old readers would misread gets a new one).
pub const VERSION: u32 = 1;
/// Bytes of the page that version 1 defines (`size` is at least this).
pub const V1_SIZE: u32 = 0x60;
/// The page size (and alignment).
pub const PAGE_SIZE: usize = 4096;
/// Most pages a clock window spans (the clock page included).
pub const MAX_WINDOW_PAGES: u32 = 64;
/// Most pvclock areas one window page holds (4096 / 32).
pub const MAX_PVCLOCK_AREAS: u32 = (PAGE_SIZE / 32) as u32;

/// `mode`: ask the kernel (`arg` says why, an [`AskReason`] code). A zeroed
/// page is in this mode.
pub const MODE_ASK_KERNEL: u32 = 0;
/// `mode`: `clock_ns = high64(tsc * tsc_mul + tsc_add)` (128-bit, wrapping).
pub const MODE_TSC: u32 = 1;
/// `mode`: `clock_ns = pvclock_ns(area[arg]) + pv_offset_ns` (wrapping);
/// the area must carry the TSC-stable flag.
pub const MODE_PVCLOCK: u32 = 2;
/// `mode`: `clock_ns = hv_units(page) * 100 + pv_offset_ns` (wrapping).
pub const MODE_HYPERV: u32 = 3;

/// `mode`: `clock_ns = low64((tsc * tsc_mul + tsc_add) >> (64 - arg))`
/// (128-bit, wrapping), `arg` the shift in `1..=63`: the TSC mode for a TSC
/// at or below 1 GHz (one ns per tick or more), as Linux's vDSO scales any
/// rate by `mult >> shift`. Readers that predate it ask the kernel
/// ([`MODE_TSC`] pages, shift 0, are unchanged); a shift outside `1..=63`
/// is a misconfigured page.
pub const MODE_TSC_SHIFTED: u32 = 4;

/// `flags` bit: `boot_wall_ns` is valid (`unix_ns = boot_wall_ns + clock_ns`).
pub const FLAG_WALL_VALID: u32 = 1 << 0;

/// Why the page sends readers to the kernel (`arg` in [`MODE_ASK_KERNEL`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AskReason {
    /// The kernel has not published a state yet (code 0: a zeroed page).
    NotPublished,
    /// The kernel's source cannot be read without privileges (ACPI PM
    /// timer ports, an HPET the OS does not map, the Hyper-V MSR).
    NotUserReadable,
    /// Between suspend and resume.
    Suspended,
    /// The kernel has no clock.
    NoClock,
    /// The source is only consistent per CPU (a pvclock without the stable
    /// flag, an unsynchronised TSC): user code cannot stay on one CPU.
    PerCpuOnly,
    /// The kernel asked to publish a state the page cannot describe (see
    /// `PublishError`).
    Misconfigured,
    /// A reason this reader does not know (a newer kernel).
    Other(u32),
}

impl AskReason {
    /// The page encoding.
    /// Interrupt-safe: yes.
    pub const fn code(self) -> u32 {
        match self {
            AskReason::NotPublished => 0,
            AskReason::NotUserReadable => 1,
            AskReason::Suspended => 2,
            AskReason::NoClock => 3,
            AskReason::PerCpuOnly => 4,
            AskReason::Misconfigured => 5,
            AskReason::Other(c) => c,
        }
    }

    /// Decodes `arg`.
    /// Interrupt-safe: yes.
    pub const fn from_code(code: u32) -> AskReason {
        match code {
            0 => AskReason::NotPublished,
            1 => AskReason::NotUserReadable,
            2 => AskReason::Suspended,
            3 => AskReason::NoClock,
            4 => AskReason::PerCpuOnly,
            5 => AskReason::Misconfigured,
            c => AskReason::Other(c),
        }
    }
}

/// The clock page (version 1). All fields are atomics: the kernel writes
/// the page while user programs read it through a read-only mapping.
///
/// Offsets (bytes): header `0x00..0x0C`, sequence `0x0C`, the seqlocked
/// state `0x10..0x4C`, more header `0x4C..0x60`, reserved (zero) to the end
/// of the page. Everything a TSC read needs sits in the first cache line.
#[repr(C, align(4096))]
#[derive(Debug)]
pub struct ClockPage {
    /// 0x00 [`MAGIC`] (header: written once, before the page is mapped).
    pub magic: AtomicU32,
    /// 0x04 ABI major version ([`VERSION`]).
    pub version: AtomicU32,
    /// 0x08 bytes of the page the writer's ABI defines (≥ [`V1_SIZE`]).
    pub size: AtomicU32,
    /// 0x0C seqlock: odd while the kernel writes, +2 per publication.
    pub seq: AtomicU32,
    /// 0x10 [`MODE_ASK_KERNEL`], [`MODE_TSC`], [`MODE_PVCLOCK`], [`MODE_HYPERV`]
    /// or [`MODE_TSC_SHIFTED`].
    pub mode: AtomicU32,
    /// 0x14 mode argument: the [`AskReason`] code, the pvclock area index,
    /// or the [`MODE_TSC_SHIFTED`] shift.
    pub arg: AtomicU32,
    /// 0x18 monotonic floor: no reading of this state is below it (ns).
    pub floor_ns: AtomicU64,
    /// 0x20 TSC modes: 64.64 fixed-point ns per tick (per `2^shift` ticks in
    /// [`MODE_TSC_SHIFTED`]).
    pub tsc_mul: AtomicU64,
    /// 0x28 TSC mode: low half of the 128-bit addend.
    pub tsc_add_lo: AtomicU64,
    /// 0x30 TSC mode: high half of the 128-bit addend.
    pub tsc_add_hi: AtomicU64,
    /// 0x38 pvclock / Hyper-V modes: ns added (wrapping) to the page's time.
    pub pv_offset_ns: AtomicU64,
    /// 0x40 Unix time (ns) at clock time 0, when [`FLAG_WALL_VALID`].
    pub boot_wall_ns: AtomicU64,
    /// 0x48 [`FLAG_WALL_VALID`].
    pub flags: AtomicU32,
    /// 0x4C how to read the TSC: a [`TscRead`](crate::TscRead) code
    /// (header).
    pub tsc_read: AtomicU32,
    /// 0x50 pages in the window the OS maps (≥ 1: the clock page itself
    /// is page 0) (header).
    pub window_pages: AtomicU32,
    /// 0x54 window page holding the pvclock areas, 0 = none (header).
    pub pvclock_page: AtomicU32,
    /// 0x58 pvclock areas on that page (≤ [`MAX_PVCLOCK_AREAS`]) (header).
    pub pvclock_areas: AtomicU32,
    /// 0x5C window page holding the Hyper-V reference TSC page, 0 = none
    /// (header).
    pub hyperv_page: AtomicU32,
    /// 0x60.. reserved, zero.
    pub reserved: [AtomicU64; 500],
}

#[cfg(not(loom))]
const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<ClockPage>() == PAGE_SIZE);
    assert!(align_of::<ClockPage>() == PAGE_SIZE);
    assert!(offset_of!(ClockPage, magic) == 0x00);
    assert!(offset_of!(ClockPage, version) == 0x04);
    assert!(offset_of!(ClockPage, size) == 0x08);
    assert!(offset_of!(ClockPage, seq) == 0x0C);
    assert!(offset_of!(ClockPage, mode) == 0x10);
    assert!(offset_of!(ClockPage, arg) == 0x14);
    assert!(offset_of!(ClockPage, floor_ns) == 0x18);
    assert!(offset_of!(ClockPage, tsc_mul) == 0x20);
    assert!(offset_of!(ClockPage, tsc_add_lo) == 0x28);
    assert!(offset_of!(ClockPage, tsc_add_hi) == 0x30);
    assert!(offset_of!(ClockPage, pv_offset_ns) == 0x38);
    assert!(offset_of!(ClockPage, boot_wall_ns) == 0x40);
    assert!(offset_of!(ClockPage, flags) == 0x48);
    assert!(offset_of!(ClockPage, tsc_read) == 0x4C);
    assert!(offset_of!(ClockPage, window_pages) == 0x50);
    assert!(offset_of!(ClockPage, pvclock_page) == 0x54);
    assert!(offset_of!(ClockPage, pvclock_areas) == 0x58);
    assert!(offset_of!(ClockPage, hyperv_page) == 0x5C);
    assert!(offset_of!(ClockPage, reserved) == V1_SIZE as usize);
};

impl ClockPage {
    crate::__clockhal_const_fn! {
    /// A zeroed page: no header, mode "ask the kernel, not published".
    /// Every all-zero 4 KiB frame is a valid `ClockPage` too.
    /// Interrupt-safe: yes.
    pub fn new() -> ClockPage {
        ClockPage {
            magic: AtomicU32::new(0),
            version: AtomicU32::new(0),
            size: AtomicU32::new(0),
            seq: AtomicU32::new(0),
            mode: AtomicU32::new(MODE_ASK_KERNEL),
            arg: AtomicU32::new(0),
            floor_ns: AtomicU64::new(0),
            tsc_mul: AtomicU64::new(0),
            tsc_add_lo: AtomicU64::new(0),
            tsc_add_hi: AtomicU64::new(0),
            pv_offset_ns: AtomicU64::new(0),
            boot_wall_ns: AtomicU64::new(0),
            flags: AtomicU32::new(0),
            tsc_read: AtomicU32::new(0),
            window_pages: AtomicU32::new(0),
            pvclock_page: AtomicU32::new(0),
            pvclock_areas: AtomicU32::new(0),
            hyperv_page: AtomicU32::new(0),
            reserved: crate::__clockhal_array![AtomicU64::new(0); 500],
        }
    }
    }
}

impl Default for ClockPage {
    fn default() -> Self {
        Self::new()
    }
}

/// Where the OS maps the hypervisor's pages in a process's clock window:
/// `[clock page][...]`, contiguous, read-only. Page indices count from the
/// clock page (index 0); 0 means "not mapped".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct WindowLayout {
    /// Window page holding the pvclock areas (0 = not mapped).
    pub pvclock_page: u32,
    /// How many 32-byte pvclock areas that page holds (from its start).
    pub pvclock_areas: u32,
    /// Window page holding the Hyper-V reference TSC page (0 = not mapped).
    pub hyperv_page: u32,
}

impl WindowLayout {
    /// Only the clock page (TSC and "ask the kernel" states).
    pub const CLOCK_PAGE_ONLY: WindowLayout = WindowLayout {
        pvclock_page: 0,
        pvclock_areas: 0,
        hyperv_page: 0,
    };

    /// Pages in the window: the clock page plus the highest mapped index;
    /// `None` when that does not fit a `u32` (an index of `u32::MAX`: no
    /// such window exists). Checked: the indices are page input.
    ///
    /// Interrupt-safe: yes (pure arithmetic).
    pub const fn pages(&self) -> Option<u32> {
        let mut last = 0;
        if self.pvclock_page > last {
            last = self.pvclock_page;
        }
        if self.hyperv_page > last {
            last = self.hyperv_page;
        }
        last.checked_add(1)
    }

    /// Whether the layout is one a reader accepts: mapped pages distinct,
    /// area count within a page, no count without a page, at most
    /// [`MAX_WINDOW_PAGES`] pages.
    ///
    /// Interrupt-safe: yes (pure arithmetic).
    pub const fn is_valid(&self) -> bool {
        let pv = self.pvclock_page != 0;
        if self.pvclock_areas > MAX_PVCLOCK_AREAS || (!pv && self.pvclock_areas != 0) {
            return false;
        }
        if pv && self.pvclock_page == self.hyperv_page {
            return false;
        }
        match self.pages() {
            Some(pages) => pages <= MAX_WINDOW_PAGES,
            None => false,
        }
    }
}
