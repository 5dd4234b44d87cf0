//! The kernel side: [`ClockPageWriter::publish`], one call per clock event.

use crate::abi::{
    AskReason, ClockPage, WindowLayout, FLAG_WALL_VALID, MAGIC, MODE_ASK_KERNEL, MODE_HYPERV,
    MODE_PVCLOCK, MODE_TSC, MODE_TSC_SHIFTED, V1_SIZE, VERSION,
};
use crate::paravirt::{HvReferenceTscPage, PvclockVcpuTimeInfo};
use crate::reader::{PageError, UserClock};
use crate::sync::{fence, Ordering};
use crate::{TscRead, TscScale};
use core::fmt;

/// What the page should map user reads onto.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageSource {
    /// `clock_ns = low64((tsc * mul + add) >> (64 - shift))` (see
    /// [`tsc_map_scaled`](crate::tsc_map_scaled); build it with
    /// [`PageSource::tsc_scaled`]), for a TSC at any rate
    /// ([`TscScale::from_hz`]) that is synchronised across CPUs. Shift 0
    /// (a TSC faster than 1 GHz) is the v1 TSC mode every reader knows;
    /// other shifts need a reader that knows
    /// [`MODE_TSC_SHIFTED`](crate::abi::MODE_TSC_SHIFTED) (older ones ask
    /// the kernel).
    Tsc {
        /// Fixed-point ns per tick, `64 - shift` fraction bits.
        mul: u64,
        /// `0..=63` ([`PublishError::BadShift`] otherwise).
        shift: u32,
        /// 128-bit addend.
        add: u128,
    },
    /// `clock_ns = pvclock_ns(area) + offset_ns` (wrapping), on the pvclock
    /// area at index `area` of the window's pvclock page. Publish it only
    /// when the kernel trusts the area's stable flag (KVM's CPUID
    /// `CLOCKSOURCE_STABLE_BIT`); readers also require the flag on every
    /// read and ask the kernel when the host clears it.
    Pvclock {
        /// Index of the area in the window's pvclock page.
        area: u32,
        /// ns added to the area's time (`clock_ns - pvclock_ns`, wrapping).
        offset_ns: u64,
    },
    /// `clock_ns = hv_units * 100 + offset_ns` (wrapping), on the window's
    /// Hyper-V reference TSC page.
    HypervPage {
        /// ns added to the page's time in ns (`clock_ns - units * 100`).
        offset_ns: u64,
    },
    /// User programs must ask the kernel, for this reason.
    AskKernel(AskReason),
}

impl PageSource {
    /// The TSC mapping that gives `clock_ns` at TSC value `tsc` and then
    /// advances `mul / 2^64` ns per tick (exactly: `tsc_map(tsc, mul, add)
    /// == clock_ns`).
    ///
    /// The shift-0 form, for a TSC above 1 GHz ([`tsc_scaled`](Self::tsc_scaled) serves any rate).
    ///
    /// Interrupt-safe: yes (pure arithmetic).
    ///
    /// ```
    /// use clockhal_user::{tsc_map, tsc_mul, PageSource};
    /// let mul = tsc_mul(2_000_000_000, 1).unwrap(); // 2 GHz
    /// let PageSource::Tsc { mul, add, .. } = PageSource::tsc_anchored(mul, 5_000, 1_000_000) else { unreachable!() };
    /// assert_eq!(tsc_map(5_000, mul, add), 1_000_000);
    /// assert_eq!(tsc_map(7_000, mul, add), 1_001_000);
    /// ```
    pub const fn tsc_anchored(mul: u64, tsc: u64, clock_ns: u64) -> PageSource {
        PageSource::tsc_scaled(TscScale { mul, shift: 0 }, tsc, clock_ns)
    }

    /// [`tsc_anchored`](Self::tsc_anchored) at any rate: the mapping that
    /// gives `clock_ns` at TSC value `tsc` and then advances
    /// `scale.mul / 2^(64 - scale.shift)` ns per tick.
    ///
    /// ```
    /// use clockhal_user::{tsc_map_scaled, PageSource, TscScale};
    /// let scale = TscScale::from_hz(999_999_975, 1).unwrap();
    /// let PageSource::Tsc { mul, shift, add } = PageSource::tsc_scaled(scale, 5_000, 1_000_000) else { unreachable!() };
    /// assert_eq!(tsc_map_scaled(5_000, TscScale { mul, shift }, add), 1_000_000);
    /// assert_eq!(tsc_map_scaled(1_005_000, scale, add), 2_000_000); // 1.000000025 ms, truncated
    /// ```
    ///
    /// Interrupt-safe: yes (pure arithmetic).
    pub const fn tsc_scaled(scale: TscScale, tsc: u64, clock_ns: u64) -> PageSource {
        let shift = scale.shift & 63;
        let add =
            ((clock_ns as u128) << (64 - shift)).wrapping_sub(tsc as u128 * scale.mul as u128);
        PageSource::Tsc {
            mul: scale.mul,
            shift: scale.shift,
            add,
        }
    }
}

/// The 64.64 fixed-point ns-per-tick multiplier of a TSC running at
/// `num / den` Hz: `floor(10^9 · 2^64 · den / num)`, exact. `None` unless
/// the rate is above 1 GHz and `den != 0`: the shift-0 scale (slower TSCs
/// need [`TscScale::from_hz`]).
///
/// Interrupt-safe: yes.
///
/// ```
/// use clockhal_user::tsc_mul;
/// assert_eq!(tsc_mul(2_000_000_000, 1), Some(1 << 63)); // 0.5 ns per tick
/// assert_eq!(tsc_mul(1_000_000_000, 1), None);
/// assert_eq!(tsc_mul(5_000_000_001, 2), Some(((2_000_000_000u128 << 64) / 5_000_000_001) as u64));
/// ```
pub const fn tsc_mul(num: u64, den: u64) -> Option<u64> {
    if num == 0 || den == 0 {
        return None;
    }
    let a = 1_000_000_000u128 * den as u128;
    if a >= num as u128 {
        return None;
    }
    // a < num < 2^64, so a << 64 fits.
    Some(((a << 64) / num as u128) as u64)
}

/// One clock event's state (see [`ClockPageWriter::publish`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Publication {
    /// What user reads map onto from now on.
    pub source: PageSource,
    /// The kernel clock's monotonic floor (its last returned ns, or more).
    pub floor_ns: u64,
    /// Unix time (ns) at clock time 0, if the kernel has one.
    pub boot_wall_ns: Option<u64>,
}

/// A publication's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Published {
    /// The floor the page now carries: the maximum of the previous floor,
    /// the requested one, and what the replaced state read at the switch.
    /// A kernel clock that must never be behind its user programs raises
    /// its own floor to this.
    pub floor_ns: u64,
    /// The new (even) sequence.
    pub seq: u32,
}

/// Why a publication did not go through as asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PublishError {
    /// Another publication is in progress (concurrent writers): nothing was
    /// changed. Serialise publications (e.g. under the clock's switch lock).
    Busy,
    /// `Tsc { mul: 0 }`.
    ZeroMultiplier,
    /// A pvclock area index the window does not map.
    NoSuchArea(u32),
    /// A Hyper-V state, but the window maps no Hyper-V page.
    HypervNotMapped,
    /// `Tsc { shift }` above 63.
    BadShift(u32),
}

impl fmt::Display for PublishError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PublishError::Busy => f.write_str("another publication is in progress"),
            PublishError::ZeroMultiplier => f.write_str("TSC multiplier 0"),
            PublishError::NoSuchArea(a) => write!(f, "pvclock area {a} not in the window"),
            PublishError::HypervNotMapped => f.write_str("no Hyper-V page in the window"),
            PublishError::BadShift(s) => write!(f, "TSC shift {s} above 63"),
        }
    }
}

/// The kernel's writer of one clock page.
///
/// Holds the kernel's view of the same window user programs map (the clock
/// page, the pvclock areas, the Hyper-V page) so that it can read the state
/// it replaces. Publications are serialised by the page's sequence itself
/// (a compare-and-swap to odd): two writers on one page never interleave;
/// the loser gets [`PublishError::Busy`].
#[derive(Clone, Copy, Debug)]
pub struct ClockPageWriter<'a> {
    view: UserClock<'a>,
}

impl<'a> ClockPageWriter<'a> {
    /// Writes the page header (magic, version, size, TSC read method, window
    /// layout), takes the page's state back, and returns the writer. Call
    /// it before the page is mapped into any process.
    ///
    /// The writer owns the frame from here: whatever it held before (a
    /// zeroed frame, a previous boot's page, a frame reused after a crash
    /// mid-update with an odd sequence, garbage), its state becomes "ask
    /// the kernel: not published" with floor 0, published through the
    /// seqlock (sequence odd, fields, sequence even and past any value a
    /// reader could have sampled), so no reader sees it torn and nothing
    /// from the old contents (a floor, a mapping) survives to put user time
    /// ahead of the kernel's.
    ///
    /// `pvclock` are the areas at `layout.pvclock_page` (as many as
    /// `layout.pvclock_areas`) and `hyperv` the page at
    /// `layout.hyperv_page`, in the kernel's own mapping.
    ///
    /// Interrupt-safe: yes (lock-free stores), though it belongs in setup.
    pub fn new(
        page: &'a ClockPage,
        layout: WindowLayout,
        pvclock: &'a [PvclockVcpuTimeInfo],
        hyperv: Option<&'a HvReferenceTscPage>,
        tsc: TscRead,
    ) -> Result<ClockPageWriter<'a>, PageError> {
        use Ordering::{Acquire, Relaxed, Release};
        let Some(pages) = layout.pages().filter(|_| layout.is_valid()) else {
            return Err(PageError::BadWindow);
        };
        // Odd from here (an odd sequence stays as it is: a dead update's).
        let odd = page.seq.fetch_or(1, Acquire) | 1;
        fence(Release);
        write_state(page, &Fields::NOT_PUBLISHED, 0);
        for r in &page.reserved {
            r.store(0, Relaxed);
        }
        page.seq.store(odd.wrapping_add(1), Release);
        page.version.store(VERSION, Relaxed);
        page.size.store(V1_SIZE, Relaxed);
        page.tsc_read.store(tsc.code(), Relaxed);
        page.window_pages.store(pages, Relaxed);
        page.pvclock_page.store(layout.pvclock_page, Relaxed);
        page.pvclock_areas.store(layout.pvclock_areas, Relaxed);
        page.hyperv_page.store(layout.hyperv_page, Relaxed);
        fence(Release);
        page.magic.store(MAGIC, Relaxed);
        let view = UserClock::new(page, pvclock, hyperv)?;
        Ok(ClockPageWriter { view })
    }

    /// Publishes one clock event's state: at clock creation, at every
    /// source switch, at resume, and whenever a paravirtual rate changes.
    ///
    /// A seqlock write that no reader sees torn or backwards:
    /// 1. the sequence goes odd (compare-and-swap: one writer at a time);
    /// 2. the state being replaced is read at this moment (the TSC read
    ///    comes after the odd sequence is visible), so the new floor covers
    ///    every reading any reader took from it;
    /// 3. the floor becomes `max(old floor, that reading, p.floor_ns)` —
    ///    floors only ever rise;
    /// 4. the fields are written and the sequence goes even (release).
    ///
    /// Steps 1–3 are [`begin`](Self::begin) and step 4 is
    /// [`PageUpdate::publish`]: a kernel whose own readers stop following
    /// the replaced state for a while (a source switch) opens the page
    /// first and publishes when it is done, so that user programs ask the
    /// kernel meanwhile.
    ///
    /// An invalid request (see [`PublishError`]) publishes "ask the kernel"
    /// ([`AskReason::Misconfigured`]) instead, so no process keeps reading a
    /// mapping the kernel meant to replace; only [`PublishError::Busy`]
    /// leaves the page unchanged.
    /// Interrupt-safe: yes.
    pub fn publish(&self, p: &Publication) -> Result<Published, PublishError> {
        let tsc = self.view.tsc_read();
        self.publish_with(p, || tsc.read())
    }

    /// [`publish`](Self::publish) with a caller-supplied TSC (read after the
    /// sequence went odd): for simulators and tests whose states map a
    /// simulated counter.
    /// Interrupt-safe: yes.
    pub fn publish_with(
        &self,
        p: &Publication,
        rdtsc: impl FnMut() -> u64,
    ) -> Result<Published, PublishError> {
        self.open(p.floor_ns, rdtsc, true)?.publish(p)
    }

    /// [`publish_with`](Self::publish_with) for the first publication after
    /// a restore (resume from a snapshot or S3): the state being replaced
    /// is not read (step 2), because the restored host's pvclock areas or
    /// reference page no longer continue what readers saw (a host whose
    /// clock kept running while the guest slept would put the floor hours
    /// ahead). The floor is `max(old floor, p.floor_ns)`: a process that
    /// read after the kernel's last reading before the suspend may see
    /// its clock continue from the kernel's, a little below its own last
    /// reading.
    /// Interrupt-safe: yes.
    pub fn publish_after_restore_with(
        &self,
        p: &Publication,
        rdtsc: impl FnMut() -> u64,
    ) -> Result<Published, PublishError> {
        self.open(p.floor_ns, rdtsc, false)?.publish(p)
    }

    /// Opens an update of the page: steps 1–3 of
    /// [`publish`](Self::publish), with `floor_ns` the kernel's floor now.
    /// From here until the [`PageUpdate`] is published, cancelled or
    /// dropped, the sequence is odd: readers retry, and after
    /// [`READ_ATTEMPTS`](crate::READ_ATTEMPTS) samples answer
    /// [`AskKernel::Busy`](crate::AskKernel::Busy) (they never wait for the
    /// writer). No reading of the replaced state is above
    /// [`PageUpdate::floor_ns`] (to the TSC's synchronisation).
    ///
    /// For a kernel that stops following the page's state before it has
    /// the next one, e.g. a clock whose readers hold while it switches
    /// source: open the page *before* they hold, and raise the floor they
    /// hold at to [`PageUpdate::floor_ns`], and no user program reads
    /// ahead of a kernel reading taken after its own. Keep it open only
    /// that long: every user read meanwhile costs its retries and a system
    /// call. `Err(Busy)`: another update is open (nothing changed).
    /// Interrupt-safe: yes.
    pub fn begin(&self, floor_ns: u64) -> Result<PageUpdate<'a>, PublishError> {
        let tsc = self.view.tsc_read();
        self.begin_with(floor_ns, || tsc.read())
    }

    /// [`begin`](Self::begin) with a caller-supplied TSC (read after the
    /// sequence went odd), as [`publish_with`](Self::publish_with).
    /// Interrupt-safe: yes.
    pub fn begin_with(
        &self,
        floor_ns: u64,
        rdtsc: impl FnMut() -> u64,
    ) -> Result<PageUpdate<'a>, PublishError> {
        self.open(floor_ns, rdtsc, true)
    }

    /// [`begin`](Self::begin) for the first publication after a restore:
    /// the replaced state is not read (see
    /// [`publish_after_restore_with`](Self::publish_after_restore_with)),
    /// the floor is `max(old floor, floor_ns)`.
    /// Interrupt-safe: yes.
    pub fn begin_after_restore(&self, floor_ns: u64) -> Result<PageUpdate<'a>, PublishError> {
        self.open(floor_ns, || 0, false)
    }

    /// Takes the page back from an update that will never be closed (a
    /// [`PageUpdate`] leaked with `mem::forget`, a writer stopped for good
    /// mid-update) and opens it for this update: what [`begin`](Self::begin)
    /// does, but never [`PublishError::Busy`].
    ///
    /// Only for a kernel whose publications are serialised (under its
    /// clock's lock): a `Busy` there means no other update is in progress,
    /// only a dead one. Taking the page from a *live* update would let the
    /// two writers' fields interleave.
    ///
    /// If the page was odd, nothing it holds is read (the dead update may
    /// have half written the state and the floor): the floor is
    /// `floor_ns`, so pass the kernel clock's reading now (every user
    /// reading of the state before the dead update is at most that, for a
    /// page that was never ahead of the kernel). If it was even, this is
    /// [`begin_with`](Self::begin_with).
    ///
    /// Interrupt-safe: yes (lock-free; never waits), but only where the
    /// interrupted code cannot be inside an update of this page.
    pub fn reclaim_with(&self, floor_ns: u64, rdtsc: impl FnMut() -> u64) -> PageUpdate<'a> {
        use Ordering::{Acquire, Relaxed, Release};
        let page = self.view.page();
        let prev = page.seq.fetch_or(1, Acquire);
        fence(Release);
        let floor = if prev & 1 == 0 {
            self.fold(page.floor_ns.load(Relaxed).max(floor_ns), rdtsc)
        } else {
            // Not even the floor: a dead update may have half written it.
            floor_ns
        };
        PageUpdate {
            writer: *self,
            seq: prev | 1,
            floor,
            open: true,
        }
    }

    /// `floor` raised to the current state's reading now (the sequence is
    /// odd and ours: the state is whole).
    fn fold(&self, floor: u64, mut rdtsc: impl FnMut() -> u64) -> u64 {
        let mode = self.view.page().mode.load(Ordering::Relaxed);
        match self.view.evaluate(mode, &mut rdtsc) {
            // (A state that wrapped past zero reads as behind the floor.)
            Ok((ns, _)) => crate::reader::not_before(ns, floor),
            Err(_) => floor,
        }
    }

    /// Steps 1–3 of the seqlock write; `fold`: whether the replaced
    /// state's reading now joins the floor.
    fn open(
        &self,
        floor_ns: u64,
        mut rdtsc: impl FnMut() -> u64,
        fold: bool,
    ) -> Result<PageUpdate<'a>, PublishError> {
        use Ordering::{Acquire, Relaxed, Release};
        let page = self.view.page();
        let seq = page.seq.load(Relaxed);
        if seq & 1 != 0
            || page
                .seq
                .compare_exchange(seq, seq.wrapping_add(1), Acquire, Relaxed)
                .is_err()
        {
            return Err(PublishError::Busy);
        }
        // Field stores below may not become visible before the odd sequence.
        fence(Release);

        let mut floor = page.floor_ns.load(Relaxed).max(floor_ns);
        if fold {
            floor = self.fold(floor, &mut rdtsc);
        }
        Ok(PageUpdate {
            writer: *self,
            seq: seq.wrapping_add(1),
            floor,
            open: true,
        })
    }

    /// Whether the window can carry `source`.
    fn check(&self, source: PageSource) -> Result<(), PublishError> {
        match source {
            PageSource::Tsc { mul: 0, .. } => Err(PublishError::ZeroMultiplier),
            PageSource::Tsc { shift, .. } if shift > 63 => Err(PublishError::BadShift(shift)),
            PageSource::Pvclock { area, .. } if area as usize >= self.view.pvclock_len() => {
                Err(PublishError::NoSuchArea(area))
            }
            PageSource::HypervPage { .. } if !self.view.has_hyperv() => {
                Err(PublishError::HypervNotMapped)
            }
            _ => Ok(()),
        }
    }

    /// The kernel's own reading of the page (what a user program in the
    /// same state reads).
    /// Interrupt-safe: yes.
    pub fn view(&self) -> UserClock<'a> {
        self.view
    }
}

/// An open update of a clock page ([`ClockPageWriter::begin`]): the
/// page's sequence is odd, and user reads ask the kernel
/// ([`AskKernel::Busy`](crate::AskKernel::Busy)) until it is closed.
///
/// Closed by [`publish`](Self::publish) (the new state),
/// [`cancel`](Self::cancel) or dropping it (the old state, under its raised
/// floor): however the kernel's code leaves the scope that opened it
/// (an early return, an error, an unwinding panic), the page does not stay
/// odd.
#[derive(Debug)]
#[must_use = "dropping the update closes the page at once, unchanged"]
pub struct PageUpdate<'a> {
    writer: ClockPageWriter<'a>,
    /// The odd sequence the page carries while open.
    seq: u32,
    /// `max(old floor, requested, the replaced state's reading)`.
    floor: u64,
    /// Not yet closed.
    open: bool,
}

impl PageUpdate<'_> {
    /// The floor the page carries when closed (at least): the maximum of
    /// its previous floor, the one asked for, and the replaced state's
    /// reading when the update was opened — above every reading any
    /// reader took from the replaced state. A kernel clock that must never
    /// be behind its user programs raises its own floor to this.
    /// Interrupt-safe: yes.
    pub fn floor_ns(&self) -> u64 {
        self.floor
    }

    /// Step 4 of [`ClockPageWriter::publish`]: writes `p`'s state with the
    /// floor `max(floor_ns(), p.floor_ns)` and closes the page. The
    /// replaced state is not read again (that was done when the update was
    /// opened). An invalid `p` publishes "ask the kernel"
    /// ([`AskReason::Misconfigured`]) and returns its error.
    /// Interrupt-safe: yes.
    pub fn publish(mut self, p: &Publication) -> Result<Published, PublishError> {
        let outcome = self.writer.check(p.source);
        let source = match outcome {
            Ok(()) => p.source,
            Err(_) => PageSource::AskKernel(AskReason::Misconfigured),
        };
        let published = self.close(Some((source, p)));
        outcome.map(|()| published)
    }

    /// [`publish`](Self::publish), with the floor carried from the
    /// replaced state capped at `ceiling_ns`: the floor becomes
    /// `max(p.floor_ns, min(floor_ns(), ceiling_ns))`.
    ///
    /// For a kernel whose clock checks its source and may reject what the
    /// page mapped (a host update jumping ahead): user programs read the
    /// raw page until the kernel republishes, and folding what they could
    /// read into the new floor would keep user time ahead of the kernel's
    /// for as long as the jump. Pass the kernel clock's own reading, taken
    /// after the update was opened (above every reading of the replaced
    /// state the kernel accepts), and user time starts the new state at
    /// most there. A user program that read the rejected values may see
    /// its stateless readings step back to the kernel's
    /// ([`ClockReader`](crate::ClockReader) keeps its own, never less).
    ///
    /// Interrupt-safe: yes (lock-free stores).
    pub fn publish_at_most(
        mut self,
        p: &Publication,
        ceiling_ns: u64,
    ) -> Result<Published, PublishError> {
        self.floor = self.floor.min(ceiling_ns);
        self.publish(p)
    }

    /// Closes the page with its old state unchanged (under the raised
    /// floor): what dropping the update does.
    /// Interrupt-safe: yes.
    pub fn cancel(mut self) -> Published {
        self.close(None)
    }

    /// Writes the state (if any) and the floor, and makes the sequence
    /// even again (release).
    fn close(&mut self, state: Option<(PageSource, &Publication)>) -> Published {
        use Ordering::{Relaxed, Release};
        let page = self.writer.view.page();
        let mut floor = self.floor;
        if let Some((source, p)) = state {
            floor = floor.max(p.floor_ns);
            write_state(page, &Fields::of(source, p.boot_wall_ns), floor);
        } else {
            page.floor_ns.store(floor, Relaxed);
        }
        let seq = self.seq.wrapping_add(1);
        page.seq.store(seq, Release);
        self.open = false;
        Published {
            floor_ns: floor,
            seq,
        }
    }
}

impl Drop for PageUpdate<'_> {
    fn drop(&mut self) {
        if self.open {
            self.close(None);
        }
    }
}

/// The seqlocked fields of one state, as the page encodes them.
struct Fields {
    mode: u32,
    arg: u32,
    mul: u64,
    add: u128,
    offset: u64,
    wall: Option<u64>,
}

impl Fields {
    /// A writer's first state: ask the kernel, nothing published.
    const NOT_PUBLISHED: Fields = Fields {
        mode: MODE_ASK_KERNEL,
        arg: AskReason::NotPublished.code(),
        mul: 0,
        add: 0,
        offset: 0,
        wall: None,
    };

    fn of(source: PageSource, wall: Option<u64>) -> Fields {
        let (mode, arg, mul, add, offset) = match source {
            PageSource::Tsc { mul, shift: 0, add } => (MODE_TSC, 0, mul, add, 0),
            PageSource::Tsc { mul, shift, add } => (MODE_TSC_SHIFTED, shift, mul, add, 0),
            PageSource::Pvclock { area, offset_ns } => (MODE_PVCLOCK, area, 0, 0, offset_ns),
            PageSource::HypervPage { offset_ns } => (MODE_HYPERV, 0, 0, 0, offset_ns),
            PageSource::AskKernel(r) => (MODE_ASK_KERNEL, r.code(), 0, 0, 0),
        };
        Fields {
            mode,
            arg,
            mul,
            add,
            offset,
            wall,
        }
    }
}

/// Stores a state and its floor (the sequence is odd: the caller's).
fn write_state(page: &ClockPage, f: &Fields, floor: u64) {
    use Ordering::Relaxed;
    page.mode.store(f.mode, Relaxed);
    page.arg.store(f.arg, Relaxed);
    page.tsc_mul.store(f.mul, Relaxed);
    page.tsc_add_lo.store(f.add as u64, Relaxed);
    page.tsc_add_hi.store((f.add >> 64) as u64, Relaxed);
    page.pv_offset_ns.store(f.offset, Relaxed);
    page.boot_wall_ns.store(f.wall.unwrap_or(0), Relaxed);
    page.flags
        .store(if f.wall.is_some() { FLAG_WALL_VALID } else { 0 }, Relaxed);
    page.floor_ns.store(floor, Relaxed);
}
