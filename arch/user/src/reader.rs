//! The user-side reader: [`UserClock`] (a checked view of the window,
//! stateless, `Copy`, usable from any thread) and [`ClockReader`] (a handle
//! that also never returns less than its own last value).

use crate::abi::{
    AskReason, ClockPage, WindowLayout, FLAG_WALL_VALID, MAGIC, MODE_ASK_KERNEL, MODE_HYPERV,
    MODE_PVCLOCK, MODE_TSC, MODE_TSC_SHIFTED, PAGE_SIZE, V1_SIZE, VERSION,
};
use crate::paravirt::{
    hv_units, pvclock_ns, HvReferenceTscPage, PageFault, PvclockVcpuTimeInfo, HV_NS_PER_UNIT,
};
use crate::sync::{fence, Ordering};
use crate::tsc::load_after;
use crate::TscRead;
use core::fmt;

/// How many times a read samples a clock page whose sequence is odd or
/// changes under it before answering [`AskKernel::Busy`]. A publication
/// takes well under a microsecond; 64 attempts with a `pause` between them
/// last a few microseconds, so a writer stopped mid-update (or preempted),
/// or a page the kernel keeps open on purpose while its own clock holds
/// ([`ClockPageWriter::begin`](crate::ClockPageWriter::begin): a source
/// switch), cannot hang a reader: it asks the kernel.
pub const READ_ATTEMPTS: u32 = 64;

/// "Fall back to your system call", and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AskKernel {
    /// The page says so (its current source is not one user code reads).
    Page(AskReason),
    /// The kernel was mid-update for [`READ_ATTEMPTS`] samples.
    Busy,
    /// A mode this reader does not know (a newer kernel).
    UnknownMode(u32),
    /// The state names a hypervisor page (or pvclock area) the window does
    /// not map.
    NotMapped,
    /// The hypervisor's page failed the kernel's checks (see [`PageFault`]).
    Hypervisor(PageFault),
    /// The kernel has no wall-clock mapping (only for wall time).
    NoWallClock,
}

impl fmt::Display for AskKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AskKernel::Page(r) => write!(f, "the clock page says ask the kernel ({r})"),
            AskKernel::Busy => write!(f, "kernel mid-update for {READ_ATTEMPTS} samples"),
            AskKernel::UnknownMode(m) => write!(f, "unknown clock page mode {m}"),
            AskKernel::NotMapped => f.write_str("the state's hypervisor page is not in the window"),
            AskKernel::Hypervisor(p) => write!(f, "hypervisor page unusable: {p}"),
            AskKernel::NoWallClock => f.write_str("no wall-clock mapping"),
        }
    }
}

impl fmt::Display for AskReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AskReason::NotPublished => f.write_str("nothing published yet"),
            AskReason::NotUserReadable => f.write_str("source not readable from user space"),
            AskReason::Suspended => f.write_str("suspended"),
            AskReason::NoClock => f.write_str("the kernel has no clock"),
            AskReason::PerCpuOnly => f.write_str("source only consistent per CPU"),
            AskReason::Misconfigured => f.write_str("kernel published an invalid state"),
            AskReason::Other(c) => write!(f, "reason code {c}"),
        }
    }
}

impl fmt::Display for PageFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PageFault::PvclockNotWritten => f.write_str("pvclock not written (multiplier 0)"),
            PageFault::PvclockShiftOutOfRange(s) => write!(f, "pvclock shift {s} outside -32..=32"),
            PageFault::PvclockNotStable => f.write_str("pvclock TSC-stable flag clear"),
            PageFault::PvclockBusy => f.write_str("pvclock version odd or changing"),
            PageFault::HvInvalidSequence => f.write_str("Hyper-V page sequence invalid"),
            PageFault::HvZeroScale => f.write_str("Hyper-V page scale 0"),
            PageFault::HvBusy => f.write_str("Hyper-V page sequence changing"),
        }
    }
}

/// Why a window cannot be read at all (checked once, when a view is made).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PageError {
    /// No clock page header (`magic` is not [`MAGIC`]: not initialised, or
    /// not a clock page).
    BadMagic(u32),
    /// An ABI major version this reader does not speak.
    UnsupportedVersion(u32),
    /// `size` smaller than version 1 defines.
    TooSmall(u32),
    /// An unknown TSC read method.
    BadTscRead(u32),
    /// The window layout in the header is inconsistent, or does not match
    /// the pages given to [`UserClock::new`].
    BadWindow,
    /// The address is not page aligned.
    Misaligned,
}

impl fmt::Display for PageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PageError::BadMagic(m) => write!(f, "not a clock page (magic {m:#x})"),
            PageError::UnsupportedVersion(v) => write!(f, "clock page ABI version {v} unsupported"),
            PageError::TooSmall(s) => write!(f, "clock page size {s} below {V1_SIZE}"),
            PageError::BadTscRead(c) => write!(f, "unknown TSC read method {c}"),
            PageError::BadWindow => f.write_str("inconsistent clock window layout"),
            PageError::Misaligned => f.write_str("clock window not page aligned"),
        }
    }
}

/// Which page a reading came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The TSC, through the page's mapping.
    Tsc,
    /// The kvmclock (pvclock) area the OS mapped.
    Pvclock,
    /// The Hyper-V reference TSC page the OS mapped.
    HypervPage,
}

/// One consistent reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    /// Nanoseconds on the kernel clock's timeline.
    pub clock_ns: u64,
    /// Unix time in ns (`boot_wall_ns + clock_ns`), when the kernel has a
    /// wall-clock mapping.
    pub unix_ns: Option<u64>,
    /// Which page it came from.
    pub source: Source,
    /// The page sequence it was read under (even).
    pub seq: u32,
}

/// A checked view of one clock window: the clock page and the hypervisor
/// pages its header says the window maps.
///
/// Stateless (`Copy`, `Sync`): every reading is consistent (never torn) and
/// at least the page's floor, and readings taken one after the other on any
/// threads never decrease while the kernel's source is consistent across
/// CPUs (which the kernel only publishes for such sources) and its host
/// does not step it back: a correction back that the kernel accepts (up to
/// a millisecond, `clockhal_core::UpdateBounds::max_backward_ns`; the
/// kernel's own floor holds its time) shows here as that step back, until
/// the kernel publishes again. Wrap it in a [`ClockReader`] for readings
/// that never decrease whatever the hardware does.
#[derive(Clone, Copy, Debug)]
pub struct UserClock<'a> {
    page: &'a ClockPage,
    pvclock: &'a [PvclockVcpuTimeInfo],
    hyperv: Option<&'a HvReferenceTscPage>,
    tsc: TscRead,
}

impl<'a> UserClock<'a> {
    /// A view of `page` and the hypervisor pages it may name, checking the
    /// header. `pvclock` must be exactly the areas the header announces
    /// (empty if none) and `hyperv` present exactly when it announces one.
    ///
    /// Kernels use this to read their own page, and tests to read a page in
    /// the same address space; a process gets its window from the OS as an
    /// address and uses [`from_window`](Self::from_window).
    /// Interrupt-safe: yes.
    pub fn new(
        page: &'a ClockPage,
        pvclock: &'a [PvclockVcpuTimeInfo],
        hyperv: Option<&'a HvReferenceTscPage>,
    ) -> Result<UserClock<'a>, PageError> {
        let header = Header::load(page)?;
        if header.layout.pvclock_areas as usize != pvclock.len()
            || (header.layout.hyperv_page != 0) != hyperv.is_some()
        {
            return Err(PageError::BadWindow);
        }
        Ok(UserClock {
            page,
            pvclock,
            hyperv,
            tsc: header.tsc,
        })
    }

    /// The view of the clock window the OS mapped at `base`: the clock page
    /// at `base`, and the hypervisor pages at the window pages its header
    /// names.
    /// Interrupt-safe: yes.
    ///
    /// # Safety
    /// `base` is the address of a clock window the OS mapped readable into
    /// this process for the rest of its life: the clock page at `base` and,
    /// if its header (written by clockhal's writer) names them, the
    /// pvclock-areas page and the Hyper-V page at `base + index * 4096`.
    /// The OS (or hypervisor) may change the memory at any time; nothing
    /// here writes it, so the mapping may be read-only.
    pub unsafe fn from_window(base: usize) -> Result<UserClock<'static>, PageError> {
        if base == 0 || base % PAGE_SIZE != 0 {
            return Err(PageError::Misaligned);
        }
        // SAFETY: the caller guarantees a readable, 'static mapping of a
        // clock page at `base` (page aligned, checked above); every bit
        // pattern is a valid `ClockPage` (all fields are integer atomics),
        // and atomics may be shared with a concurrent writer.
        let page: &'static ClockPage = unsafe { &*(base as *const ClockPage) };
        let header = Header::load(page)?;
        // Checked: a window at the top of the address space must not wrap
        // to low memory (the indices are below `MAX_WINDOW_PAGES` here).
        let at = |index: u32| {
            (index as usize)
                .checked_mul(PAGE_SIZE)
                .and_then(|off| base.checked_add(off))
                .ok_or(PageError::BadWindow)
        };
        let (pv_at, hv_at) = (
            at(header.layout.pvclock_page)?,
            at(header.layout.hyperv_page)?,
        );
        let pvclock: &'static [PvclockVcpuTimeInfo] = if header.layout.pvclock_page == 0 {
            &[]
        } else {
            // SAFETY: the header names this window page, which the caller
            // guarantees is mapped readable for 'static; it holds
            // `pvclock_areas` (checked ≤ 128) 32-byte areas from its
            // page-aligned start; any bit pattern is valid for these atomics.
            unsafe {
                core::slice::from_raw_parts(
                    pv_at as *const PvclockVcpuTimeInfo,
                    header.layout.pvclock_areas as usize,
                )
            }
        };
        let hyperv: Option<&'static HvReferenceTscPage> = if header.layout.hyperv_page == 0 {
            None
        } else {
            // SAFETY: as above, for the page-aligned Hyper-V page the header
            // names.
            Some(unsafe { &*(hv_at as *const HvReferenceTscPage) })
        };
        Ok(UserClock {
            page,
            pvclock,
            hyperv,
            tsc: header.tsc,
        })
    }

    /// The clock page.
    /// Interrupt-safe: yes.
    pub fn page(&self) -> &'a ClockPage {
        self.page
    }

    /// How this view reads the TSC (from the header).
    /// Interrupt-safe: yes.
    pub fn tsc_read(&self) -> TscRead {
        self.tsc
    }

    /// How many pvclock areas the window maps.
    /// Interrupt-safe: yes.
    pub fn pvclock_len(&self) -> usize {
        self.pvclock.len()
    }

    /// Whether the window maps a Hyper-V reference TSC page.
    /// Interrupt-safe: yes.
    pub fn has_hyperv(&self) -> bool {
        self.hyperv.is_some()
    }

    /// Nanoseconds on the kernel clock's timeline, or why to ask the kernel.
    /// Interrupt-safe: yes.
    #[inline]
    pub fn now(&self) -> Result<u64, AskKernel> {
        let tsc = self.tsc;
        let raw = self.sample(&mut move || tsc.read(), false)?;
        Ok(not_before(raw.ns, raw.floor))
    }

    /// Clock and wall time from one consistent state, and its source.
    /// Interrupt-safe: yes.
    #[inline]
    pub fn read(&self) -> Result<Reading, AskKernel> {
        let tsc = self.tsc;
        self.sample(&mut move || tsc.read(), true).map(Raw::reading)
    }

    /// Unix time in ns, or why to ask the kernel.
    /// Interrupt-safe: yes.
    pub fn unix_ns(&self) -> Result<u64, AskKernel> {
        self.read()?.unix_ns.ok_or(AskKernel::NoWallClock)
    }

    /// [`read`](Self::read) with a caller-supplied TSC: for simulators and
    /// tests (`rdtsc` must return the counter the page's states map, read
    /// in order).
    /// Interrupt-safe: yes.
    pub fn read_with(&self, mut rdtsc: impl FnMut() -> u64) -> Result<Reading, AskKernel> {
        self.sample(&mut rdtsc, true).map(Raw::reading)
    }

    /// The seqlock read: sample the state, compute, re-check the sequence
    /// (after the TSC read: [`load_after`]). The common case — a TSC state,
    /// not mid-update — is one inlined attempt; everything else (other
    /// modes, retries) is out of line.
    #[inline(always)]
    pub(crate) fn sample(
        &self,
        rdtsc: &mut impl FnMut() -> u64,
        wall: bool,
    ) -> Result<Raw, AskKernel> {
        use Ordering::{Acquire, Relaxed};
        let p = self.page;
        // Relaxed loads and fences only: valid on read-only memory.
        let seq = p.seq.load(Relaxed);
        fence(Acquire);
        let mode = p.mode.load(Relaxed);
        if seq & 1 == 0 && mode == MODE_TSC {
            let floor = p.floor_ns.load(Relaxed);
            let mul = p.tsc_mul.load(Relaxed);
            let add_lo = p.tsc_add_lo.load(Relaxed);
            let add_hi = p.tsc_add_hi.load(Relaxed);
            let wall = if wall { self.wall() } else { None };
            let tsc = rdtsc();
            fence(Acquire);
            if load_after(&p.seq, tsc as u32 as u64) == seq {
                let add = ((add_hi as u128) << 64) | add_lo as u128;
                return Ok(Raw {
                    ns: tsc_map(tsc, mul, add),
                    floor,
                    seq,
                    source: Source::Tsc,
                    wall,
                });
            }
        }
        self.sample_slow(rdtsc, wall)
    }

    /// `boot_wall_ns` if valid (read inside the caller's seqlock window).
    #[inline(always)]
    fn wall(&self) -> Option<u64> {
        let p = self.page;
        (p.flags.load(Ordering::Relaxed) & FLAG_WALL_VALID != 0)
            .then(|| p.boot_wall_ns.load(Ordering::Relaxed))
    }

    /// Every mode, with the remaining retries (the inlined attempt was the
    /// first of [`READ_ATTEMPTS`]).
    #[inline(never)]
    fn sample_slow(&self, rdtsc: &mut impl FnMut() -> u64, wall: bool) -> Result<Raw, AskKernel> {
        use Ordering::{Acquire, Relaxed};
        let p = self.page;
        for _ in 1..READ_ATTEMPTS {
            let seq = p.seq.load(Relaxed);
            fence(Acquire);
            if seq & 1 == 0 {
                let mode = p.mode.load(Relaxed);
                let floor = p.floor_ns.load(Relaxed);
                let wall = if wall { self.wall() } else { None };
                let mut last_tsc = 0;
                let value = self.evaluate(mode, &mut || {
                    last_tsc = rdtsc();
                    last_tsc
                });
                fence(Acquire);
                if load_after(&p.seq, last_tsc) == seq {
                    return value.map(|(ns, source)| Raw {
                        ns,
                        floor,
                        seq,
                        source,
                        wall,
                    });
                }
            }
            core::hint::spin_loop();
        }
        Err(AskKernel::Busy)
    }

    /// The current state's time before the floor, for any mode. Loads
    /// fields relaxed: the caller re-checks the sequence before trusting
    /// anything, including an error (a torn mode or index is only ever
    /// bounds-checked, never dereferenced blindly).
    #[inline(always)]
    pub(crate) fn evaluate(
        &self,
        mode: u32,
        rdtsc: &mut impl FnMut() -> u64,
    ) -> Result<(u64, Source), AskKernel> {
        use Ordering::Relaxed;
        let p = self.page;
        if mode == MODE_TSC {
            let mul = p.tsc_mul.load(Relaxed);
            let add =
                ((p.tsc_add_hi.load(Relaxed) as u128) << 64) | p.tsc_add_lo.load(Relaxed) as u128;
            return Ok((tsc_map(rdtsc(), mul, add), Source::Tsc));
        }
        self.evaluate_other(mode, rdtsc)
    }

    /// [`evaluate`](Self::evaluate) for every mode but the TSC's, out of
    /// line so that the TSC path stays small.
    #[inline(never)]
    fn evaluate_other(
        &self,
        mode: u32,
        rdtsc: &mut impl FnMut() -> u64,
    ) -> Result<(u64, Source), AskKernel> {
        use Ordering::Relaxed;
        let p = self.page;
        match mode {
            MODE_TSC_SHIFTED => {
                let shift = p.arg.load(Relaxed);
                if !(1..=63).contains(&shift) {
                    return Err(AskKernel::Page(AskReason::Misconfigured));
                }
                let scale = TscScale {
                    mul: p.tsc_mul.load(Relaxed),
                    shift,
                };
                let add = ((p.tsc_add_hi.load(Relaxed) as u128) << 64)
                    | p.tsc_add_lo.load(Relaxed) as u128;
                Ok((tsc_map_scaled(rdtsc(), scale, add), Source::Tsc))
            }
            MODE_PVCLOCK => {
                let offset = p.pv_offset_ns.load(Relaxed);
                let area = self
                    .pvclock
                    .get(p.arg.load(Relaxed) as usize)
                    .ok_or(AskKernel::NotMapped)?;
                let ns = pvclock_ns(area, rdtsc).map_err(AskKernel::Hypervisor)?;
                Ok((ns.wrapping_add(offset), Source::Pvclock))
            }
            MODE_HYPERV => {
                let offset = p.pv_offset_ns.load(Relaxed);
                let page = self.hyperv.ok_or(AskKernel::NotMapped)?;
                let units = hv_units(page, rdtsc).map_err(AskKernel::Hypervisor)?;
                Ok((
                    units.wrapping_mul(HV_NS_PER_UNIT).wrapping_add(offset),
                    Source::HypervPage,
                ))
            }
            MODE_ASK_KERNEL => Err(AskKernel::Page(AskReason::from_code(p.arg.load(Relaxed)))),
            m => Err(AskKernel::UnknownMode(m)),
        }
    }
}

/// The TSC mode's mapping: `high64(tsc * mul + add)`, 128-bit wrapping.
/// Interrupt-safe: yes.
///
/// ```
/// use clockhal_user::tsc_map;
/// // 0.5 ns per tick (mul = 2^63), starting at 7 ns for TSC 0.
/// assert_eq!(tsc_map(1_000, 1 << 63, 7u128 << 64), 507);
/// ```
#[inline(always)]
pub const fn tsc_map(tsc: u64, mul: u64, add: u128) -> u64 {
    ((tsc as u128 * mul as u128).wrapping_add(add) >> 64) as u64
}

/// A TSC rate as the page's TSC modes encode it: `clock_ns` advances
/// `mul / 2^(64 - shift)` ns per tick. Build it with
/// [`TscScale::from_hz`]; `shift` is 0 for a TSC faster than 1 GHz
/// ([`MODE_TSC`](crate::abi::MODE_TSC), every reader) and the smallest
/// that keeps `mul` below `2^64` otherwise
/// ([`MODE_TSC_SHIFTED`](crate::abi::MODE_TSC_SHIFTED)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TscScale {
    /// Fixed-point ns per tick, `64 - shift` fraction bits.
    pub mul: u64,
    /// `0..=63`.
    pub shift: u32,
}

impl TscScale {
    /// The scale of a TSC at `num / den` Hz: the smallest `shift` with
    /// `10^9 · den < num · 2^shift`, and `mul = floor(10^9 · den ·
    /// 2^(64 - shift) / num)` (truncated: the page's line never runs faster
    /// than the rate). `None` for `num == 0`, `den == 0`, or a rate so slow
    /// (under about 1 Hz: 2^63 ns per tick) that no shift fits.
    ///
    /// ```
    /// use clockhal_user::{tsc_mul, TscScale};
    /// let two_ghz = TscScale::from_hz(2_000_000_000, 1).unwrap();
    /// assert_eq!(two_ghz, TscScale { mul: tsc_mul(2_000_000_000, 1).unwrap(), shift: 0 });
    /// // 1 GHz: one ns per tick, as 2^63 with one bit of shift.
    /// assert_eq!(TscScale::from_hz(1_000_000_000, 1), Some(TscScale { mul: 1 << 63, shift: 1 }));
    /// assert!(TscScale::from_hz(999_999_975, 1).is_some());
    /// assert_eq!(TscScale::from_hz(0, 1), None);
    /// ```
    ///
    /// Interrupt-safe: yes (pure arithmetic).
    pub const fn from_hz(num: u64, den: u64) -> Option<TscScale> {
        if num == 0 || den == 0 {
            return None;
        }
        let a = 1_000_000_000u128 * den as u128; // < 2^94
        let mut shift = 0;
        while shift < 64 {
            if a < (num as u128) << shift {
                // a < num · 2^shift, so a · 2^(64 - shift) < num · 2^64 < 2^128
                // and the quotient is below 2^64.
                let mul = ((a << (64 - shift)) / num as u128) as u64;
                return Some(TscScale { mul, shift });
            }
            shift += 1;
        }
        None
    }
}

/// [`tsc_map`] with a shift: `low64((tsc * mul + add) >> (64 - shift))`,
/// 128-bit wrapping (`shift` is taken modulo 64).
///
/// ```
/// use clockhal_user::{tsc_map_scaled, TscScale};
/// let s = TscScale::from_hz(500_000_000, 1).unwrap(); // 2 ns per tick
/// assert_eq!(tsc_map_scaled(1_000, s, 0), 2_000);
/// ```
///
/// Interrupt-safe: yes (pure arithmetic).
#[inline(always)]
pub const fn tsc_map_scaled(tsc: u64, scale: TscScale, add: u128) -> u64 {
    let x = (tsc as u128 * scale.mul as u128).wrapping_add(add);
    (x >> (64 - (scale.shift & 63))) as u64
}

/// `max(ns, floor)`, where `ns` lies before `floor` also when the state's
/// arithmetic wrapped past zero (a TSC or kvmclock that restarted below
/// the line's start, before the kernel republished), which reads as a
/// time centuries ahead, not behind. As the kernel's timeline does, more
/// than 2^63 ns ahead is behind.
/// Interrupt-safe: yes.
#[inline(always)]
pub(crate) const fn not_before(ns: u64, floor: u64) -> u64 {
    if ns.wrapping_sub(floor) > 1 << 63 {
        floor
    } else {
        ns
    }
}

/// One consistent sample of a state, before the floor is applied.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Raw {
    /// The state's time (not yet raised to the floor: [`not_before`]).
    pub(crate) ns: u64,
    /// The state's floor.
    pub(crate) floor: u64,
    /// The (even) sequence it was read under.
    pub(crate) seq: u32,
    pub(crate) source: Source,
    /// `boot_wall_ns` when valid (and asked for).
    pub(crate) wall: Option<u64>,
}

impl Raw {
    fn reading(self) -> Reading {
        let clock_ns = not_before(self.ns, self.floor);
        Reading {
            clock_ns,
            unix_ns: self.wall.map(|w| w.saturating_add(clock_ns)),
            source: self.source,
            seq: self.seq,
        }
    }
}

/// The header fields a view caches.
struct Header {
    tsc: TscRead,
    layout: WindowLayout,
}

impl Header {
    fn load(page: &ClockPage) -> Result<Header, PageError> {
        use Ordering::{Acquire, Relaxed};
        let magic = page.magic.load(Relaxed);
        fence(Acquire);
        if magic != MAGIC {
            return Err(PageError::BadMagic(magic));
        }
        let version = page.version.load(Relaxed);
        if version != VERSION {
            return Err(PageError::UnsupportedVersion(version));
        }
        let size = page.size.load(Relaxed);
        if size < V1_SIZE {
            return Err(PageError::TooSmall(size));
        }
        let code = page.tsc_read.load(Relaxed);
        let tsc = TscRead::from_code(code).ok_or(PageError::BadTscRead(code))?;
        let layout = WindowLayout {
            pvclock_page: page.pvclock_page.load(Relaxed),
            pvclock_areas: page.pvclock_areas.load(Relaxed),
            hyperv_page: page.hyperv_page.load(Relaxed),
        };
        // `pages()` is `Some` for a valid layout; checked all the same.
        match layout.pages() {
            Some(pages) if layout.is_valid() && pages <= page.window_pages.load(Relaxed) => {}
            _ => return Err(PageError::BadWindow),
        }
        Ok(Header { tsc, layout })
    }
}

/// A reader handle: a [`UserClock`] plus the last value it returned, so
/// that its readings never decrease — across source switches, rate
/// changes, migrations between CPUs and hypervisor updates alike.
///
/// One per thread (it is `Send`, and `&mut` to read): no shared write, so
/// a read costs what the page read costs plus one compare. Not `Copy`: a
/// copy would keep its own last value.
#[derive(Clone, Debug)]
pub struct ClockReader<'a> {
    clock: UserClock<'a>,
    last: u64,
    /// The sequence whose floor `last` already covers (odd: none yet).
    seq: u32,
}

impl<'a> ClockReader<'a> {
    /// A handle on `clock` that has returned nothing yet.
    /// Interrupt-safe: yes.
    pub const fn new(clock: UserClock<'a>) -> ClockReader<'a> {
        ClockReader {
            clock,
            last: 0,
            seq: 1,
        }
    }

    /// Nanoseconds on the kernel clock's timeline, never less than this
    /// handle returned before; or why to ask the kernel (then pass the
    /// kernel's answer to [`observe`](Self::observe), or use
    /// [`now_or_else`](Self::now_or_else)).
    /// Interrupt-safe: yes.
    #[inline]
    pub fn now(&mut self) -> Result<u64, AskKernel> {
        let tsc = self.clock.tsc;
        let raw = self.clock.sample(&mut move || tsc.read(), false)?;
        // A state's floor only changes with its sequence: fold it into
        // `last` once per publication, keeping one compare on the path.
        if raw.seq != self.seq {
            self.seq = raw.seq;
            self.last = self.last.max(raw.floor);
        }
        // Ahead of `last` (never more than 2^63 ns: see `not_before`).
        if raw.ns.wrapping_sub(self.last).wrapping_sub(1) < 1 << 63 {
            self.last = raw.ns;
        }
        Ok(self.last)
    }

    /// [`now`](Self::now), or `syscall(why)` — the kernel's clock — when
    /// the page cannot answer; either way never less than before.
    /// Interrupt-safe: yes.
    #[inline]
    pub fn now_or_else(&mut self, syscall: impl FnOnce(AskKernel) -> u64) -> u64 {
        match self.now() {
            Ok(ns) => ns,
            Err(why) => self.observe(syscall(why)),
        }
    }

    /// Folds a time obtained elsewhere (the kernel's answer) into the
    /// handle: returns `max(ns, last)` and remembers it.
    /// Interrupt-safe: yes.
    pub fn observe(&mut self, ns: u64) -> u64 {
        if ns > self.last {
            self.last = ns;
        }
        self.last
    }

    /// The last value returned (0 before the first).
    /// Interrupt-safe: yes.
    pub fn last(&self) -> u64 {
        self.last
    }

    /// The view underneath.
    /// Interrupt-safe: yes.
    pub fn clock(&self) -> UserClock<'a> {
        self.clock
    }
}
