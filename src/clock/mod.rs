//! The selected clock as an OS uses it: `now()`, conversions, run-time
//! cross-checking with a switch that never steps backwards, and the
//! lifecycle (application processors, TSC sync results, resume).

mod gap_witness;
mod lock;
mod read;
mod readmit;
#[cfg(feature = "tsc")]
mod refine;
mod stamp;
mod steal;
mod switch;
mod user_page;
mod watchdog;

pub use readmit::{MAX_READMISSIONS, READMIT_ROUNDS};
pub use stamp::{Stamp, StampConverter, STAMP_AGREEMENT_NS};
pub use watchdog::WatchdogEvent;

pub use crate::cpu_error::CpuError;
use crate::probe::Backends;
pub(crate) use crate::settings::Settings;
use crate::{Probed, Report, SourceId, Verdict, MAX_CANDIDATES};
use clockhal_core::TscSource;
use clockhal_core::{
    ClockSource, Duration, Frequency, Instant, MonotonicClamp, PerCpuSlots, Scale, SlotSet,
    Stability,
};
use clockhal_x86::Hardware;
use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

pub(crate) use clockhal_core::REVALIDATE_NS;

/// Consecutive reads without a fresh value after which the clock switches
/// away from its source by itself (no watchdog needed): a source that
/// never settles cannot freeze the clock for good.
///
/// Not counted: reads of a TSC-based source that lie before the clock's
/// timeline started for it by less than 2^60 ns (an AP behind the boot
/// CPU is no fault). So without a watchdog, a TSC that restarts without
/// [`Clock::resume`] (an S3 the OS did not announce) holds the clock until
/// it passes its old start again, at most its age when the clock began;
/// with a watchdog the source is demoted at its next rounds.
pub const STUCK_READS: u32 = 10_000;

/// Added to the new source's starting point at a switch: covers a reader
/// whose re-check of the state raced the switch by a few instructions.
pub const SWITCH_MARGIN_NS: u64 = 1_000;

/// Reads of kvmclock's wall clock at probe, for one bracketed by the
/// clock's own readings within [`WALL_CLOCK_BRACKET_NS`].
const WALL_CLOCK_TRIES: u32 = 4;
/// A bracket this tight (a read with no preemption inside) is taken at once.
const WALL_CLOCK_BRACKET_NS: u64 = 20_000;

/// No [`Clock`] could be built. Carries the probe's [`Report`], which
/// says why each candidate was rejected or demoted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NoClock {
    /// The probe's report.
    pub report: Report,
    /// Why.
    pub reason: NoClockReason,
}

/// Why [`Probed::into_clock`] gave no clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NoClockReason {
    /// No candidate is usable (see the report).
    NothingUsable,
    /// Every per-CPU state set of the machine's pool is in use
    /// (`Hardware::slot_pool`; [`SLOT_SETS`](clockhal_core::SLOT_SETS)
    /// clock objects at a time).
    NoPerCpuMemory,
}

impl fmt::Display for NoClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.reason {
            NoClockReason::NoPerCpuMemory => write!(
                f,
                "no free per-CPU state set in the machine's pool: {:#}",
                self.report
            ),
            _ => write!(f, "no usable clock source: {:#}", self.report),
        }
    }
}

impl core::error::Error for NoClock {}

/// A ready clock: the selected source on a nanosecond timeline that never
/// goes backwards on a CPU, with run-time cross-checking; it owns the
/// machine's clock hardware (from [`Probed::into_clock`]).
///
/// All methods take `&self`: keep one `Clock` in a `static` and share it
/// between CPUs (it is `Sync`).
///
/// # Monotonicity: what is guaranteed
/// - **On one CPU**, [`now`](Self::now) never returns less than it
///   returned before on that CPU, whatever the host does (a parameter
///   update that steps back, a TSC that steps back, a source switch): each
///   CPU keeps its own floor in its own cache line, raised by every read
///   with an interrupt-safe CPU-local maximum
///   ([`Hardware::fetch_max_local`]), so a read in an interrupt or NMI
///   handler that preempted another read cannot lower it. "One CPU" is the
///   OS's [`Hardware::cpu_index`]; with `Native::new()` (no index) every CPU
///   shares one floor, updated with locked instructions.
/// - **Across CPUs** it depends on the source, as the report's
///   `MONOTONIC_ACROSS_CPUS` flag says: a reading on one CPU is never
///   earlier than one returned before on another. Device counters (HPET,
///   PM timer, PIT, Hyper-V MSR) are one counter for every CPU, which
///   orders them (their backends keep a read that found the counter behind
///   at the last value); sources without a host ordering promise (kvmclock
///   without a trusted stable bit) go through a global clamp. kvmclock
///   with a trusted stable bit, the Hyper-V page and a
///   warp-tested TSC are ordered by the host's (or the hardware's) promise,
///   not checked per read; the promise is checked where it can be (kvmclock
///   areas must agree, `kvmclock::STABLE_AGREEMENT_NS`;
///   the OS's warp test; `IA32_TSC_ADJUST`), and once broken, reads go
///   through the clamp. (A read in flight on another CPU at that moment
///   may still finish on the old promise, ahead by up to the disagreement
///   found; the next watchdog tick raises the clamp above it.) A switch
///   between sources continues above every floor: at most
///   [`SWITCH_MARGIN_NS`] forward, never back, and on every CPU: while it
///   is set up, reads hold at the largest value any CPU returned.
///
/// # What the read path checks
/// No value from a hypervisor page is used unchecked: the backends judge
/// every parameter update once (plausible rate, continuity with the
/// previous parameters: `clockhal_core::judge_update`), and a reading that
/// jumps further than an independent reference explains
/// ([`Platform::max_jump`](crate::Platform::max_jump)) is not returned
/// ([`Demotion::Jumped`](crate::Demotion::Jumped)); the Hyper-V page's
/// MSR fallback is checked against a reference other than the MSR. A read
/// that finds no fresh value holds; [`STUCK_READS`] of them in a row switch
/// the source (holds on a CPU the source does not serve do not count).
///
/// # The fast path
/// For the TSC, kvmclock and the Hyper-V page, a read touches the calling
/// CPU's slot (one cache line: the validated map shifted onto the clock's
/// timeline and the floor), the source's version word, `rdtsc`, one
/// multiply and the CPU-local maximum: no shared write, no lock.
///
/// # In interrupt and NMI handlers
/// Each method's docs say whether it may run in one (`Interrupt-safe:`).
/// Those that may never wait for a lock the interrupted code can hold:
/// reads never lock, [`watchdog_tick`](Self::watchdog_tick) returns
/// [`WatchdogEvent::Busy`] while another tick or a lifecycle call holds
/// the watchdog lock, and [`set_unix_time`](Self::set_unix_time) applies
/// the wall time at once and leaves the user page's copy to the lock's
/// holder, which publishes it when it lets go. The lifecycle calls
/// ([`force`](Self::force), [`resume`](Self::resume),
/// [`register_this_cpu`](Self::register_this_cpu), [`report`](Self::report),
/// ...) wait for that lock: not from a handler.
pub struct Clock<H: Hardware + Clone> {
    /// KVM steal time (first: dropped, so unregistered, first).
    pub(crate) steal: steal::Steal<H>,
    pub(crate) backends: Backends<H>,
    pub(crate) hw: H,
    pub(crate) settings: Settings,
    /// The live report (run-time demotions, the current selection).
    pub(crate) report: spin::Mutex<Report>,
    pub(crate) forced: AtomicBool,
    /// `generation << 8 | current source index`.
    pub(crate) state: AtomicU32,
    /// Per source: clock ns = source ns + offset (wrapping), for TSC-based
    /// sources.
    pub(crate) offsets: [AtomicU64; MAX_CANDIDATES],
    /// Per source: device ticks and clock ns at its base.
    pub(crate) base_ticks: [AtomicU64; MAX_CANDIDATES],
    pub(crate) base_ns: [AtomicU64; MAX_CANDIDATES],
    pub(crate) scales: [Option<Scale>; MAX_CANDIDATES],
    /// The TSC's scale after a run-time refinement of its rate (then it
    /// replaces `scales[Tsc]`).
    pub(crate) tsc_scale: spin::Once<Scale>,
    /// Per source: orders its readings across CPUs itself.
    pub(crate) ordered: [bool; MAX_CANDIDATES],
    /// Per source: read through a TSC map (`Backends::tsc_source`), fixed
    /// at build so a read does not look it up.
    pub(crate) mapped: [bool; MAX_CANDIDATES],
    /// The clock's per-CPU slots in the machine's pool.
    pub(crate) slot_set: SlotSet,
    pub(crate) clamp: MonotonicClamp,
    /// Readings above this are checked against a reference first.
    pub(crate) ceiling: AtomicU64,
    /// A supervised TSC's deadline (no watchdog tick since): `u64::MAX`
    /// when the current source needs no supervision.
    pub(crate) deadline: AtomicU64,
    pub(crate) held: AtomicU32,
    pub(crate) watchdog: spin::Mutex<watchdog::State>,
    pub(crate) restart: AtomicBool,
    pub(crate) switches: AtomicU32,
    /// Unix ns at clock ns 0 (wrapping), if known.
    pub(crate) unix_offset: AtomicU64,
    pub(crate) unix_known: AtomicBool,
    /// The wall time came from kvmclock's wall clock (re-read at resume).
    pub(crate) wall_from_kvmclock: AtomicBool,
    /// The backends' combined epochs last seen ([`Clock::follow_backend_epochs`]).
    pub(crate) backend_epochs: AtomicU32,
    /// The clamp takes the floors' maximum again at the next tick.
    pub(crate) reclamp: AtomicBool,
    /// The user clock page to republish at every source change.
    pub(crate) clock_page: Option<clockhal_user::ClockPageWriter<'static>>,
    /// The next page publication follows a restore.
    pub(crate) page_restored: AtomicBool,
    /// A restore is under way (`resume`, `resume_this_cpu` since): the next
    /// watchdog tick forgives the host faults counted up to it.
    pub(crate) restoring: AtomicBool,
    /// A backend withdrew a promise since the last page publication.
    pub(crate) page_stale: AtomicBool,
    /// A publication was asked for while the watchdog lock was held
    /// (`lock`: its holder makes it when it lets go).
    pub(crate) publish_requested: AtomicBool,
    /// Per CPU, the TSC and the current device's count at the clock's last
    /// reading of it ([`Clock::read_current_device`]).
    pub(crate) gap_witness: gap_witness::GapWitness,
    /// [`Clock::unmeasured_gaps`], and whether the current device is held
    /// across one now (one gap counts once).
    pub(crate) unmeasured_gaps: AtomicU32,
    pub(crate) in_unmeasured_gap: AtomicBool,
    /// The TSC is demoted and not re-admitted since: it measures no
    /// gaps.
    pub(crate) tsc_faulted: AtomicBool,
}

impl<H: Hardware + Clone> fmt::Debug for Clock<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Clock")
            .field("source", &self.source_id())
            .field("switches", &self.switches())
            .finish_non_exhaustive()
    }
}

impl<H: Hardware + Clone> Drop for Clock<H> {
    fn drop(&mut self) {
        self.hw.slot_pool().release(&mut self.slot_set);
    }
}

impl<H: Hardware + Clone> Clock<H> {
    /// The machine's TSC rate as a scale (ticks to ns): what measures
    /// gaps and windows between other counters' reads.
    pub(crate) fn tsc_scale(&self) -> Option<Scale> {
        self.scale_of(SourceId::Tsc.index())
    }

    /// [`tsc_scale`](Self::tsc_scale) where the TSC may measure other
    /// counters' gaps: not while it is demoted (a wrong rate, a step, or
    /// unverified since its ticks stopped), which would place wraps that
    /// never happened.
    /// Interrupt-safe: yes.
    pub(crate) fn gap_tsc_scale(&self) -> Option<Scale> {
        self.tsc_scale()
            .filter(|_| !self.tsc_faulted.load(Ordering::Acquire))
    }

    /// Source `i`'s scale (ticks to ns) now.
    pub(crate) fn scale_of(&self, i: usize) -> Option<Scale> {
        match self.tsc_scale.get() {
            Some(s) if i == SourceId::Tsc.index() => Some(*s),
            _ => self.scales.get(i).copied().flatten(),
        }
    }

    /// The clock's per-CPU slots.
    #[inline(always)]
    pub(crate) fn slots(&self) -> &PerCpuSlots {
        self.hw.slot_pool().get(&self.slot_set)
    }

    // The error carries the whole report (no allocator to box it); this
    // runs once per boot.
    #[allow(clippy::result_large_err)]
    pub(crate) fn build(probed: Probed<H>) -> Result<Clock<H>, crate::NoClock> {
        let Probed {
            backends,
            hw,
            report,
            settings,
            clock_page,
        } = probed;
        let nothing = |report| crate::NoClock {
            report,
            reason: NoClockReason::NothingUsable,
        };
        let selected = report.selected_id().ok_or_else(|| nothing(report))?;
        let sources = backends.sources();
        let mut scales = [None; MAX_CANDIDATES];
        let mut ordered = [false; MAX_CANDIDATES];
        let mut mapped = [false; MAX_CANDIDATES];
        for id in SourceId::ALL {
            mapped[id.index()] = backends.tsc_source(id).is_some();
        }
        for c in report.candidates() {
            if let (Some(d), Some(_)) = (c.descriptor(), sources[c.id.index()]) {
                scales[c.id.index()] = Some(Scale::new(d.frequency));
                ordered[c.id.index()] = d.stability.contains(Stability::MONOTONIC_ACROSS_CPUS);
            }
        }
        if scales[selected.index()].is_none() {
            return Err(nothing(report));
        }
        let Some(slot_set) = hw.slot_pool().claim() else {
            return Err(crate::NoClock {
                report,
                reason: NoClockReason::NoPerCpuMemory,
            });
        };
        // The timeline starts at 0 below: steal time is judged on it.
        let steal = steal::Steal::probe(&hw, settings.steal);
        // A TSC the probe demoted measures no gaps.
        let tsc_faulted = report
            .get(SourceId::Tsc)
            .is_some_and(|c| matches!(c.verdict, crate::Verdict::Demoted { .. }));
        let clock = Clock {
            steal,
            backends,
            hw,
            settings,
            forced: AtomicBool::new(report.is_forced()),
            report: spin::Mutex::new(report),
            state: AtomicU32::new(selected.index() as u32),
            offsets: [const { AtomicU64::new(0) }; MAX_CANDIDATES],
            base_ticks: [const { AtomicU64::new(0) }; MAX_CANDIDATES],
            base_ns: [const { AtomicU64::new(0) }; MAX_CANDIDATES],
            scales,
            tsc_scale: spin::Once::new(),
            ordered,
            mapped,
            slot_set,
            clamp: MonotonicClamp::with_granule(settings.clamp_granule),
            ceiling: AtomicU64::new(settings.max_jump.as_nanos()),
            deadline: AtomicU64::new(u64::MAX),
            held: AtomicU32::new(0),
            watchdog: spin::Mutex::new(watchdog::State::new()),
            restart: AtomicBool::new(false),
            switches: AtomicU32::new(0),
            unix_offset: AtomicU64::new(0),
            unix_known: AtomicBool::new(false),
            wall_from_kvmclock: AtomicBool::new(false),
            backend_epochs: AtomicU32::new(0),
            reclamp: AtomicBool::new(false),
            clock_page,
            page_restored: AtomicBool::new(false),
            restoring: AtomicBool::new(false),
            page_stale: AtomicBool::new(false),
            publish_requested: AtomicBool::new(false),
            gap_witness: gap_witness::GapWitness::new(),
            unmeasured_gaps: AtomicU32::new(0),
            tsc_faulted: AtomicBool::new(tsc_faulted),
            in_unmeasured_gap: AtomicBool::new(false),
        };
        // The timeline starts at 0 on the selected source (whatever a
        // reused user page carried before: no reader holds yet).
        clock.start_source_with(selected, 0, false);
        clock.anchor_at_start(0);
        clock.init_wall_clock();
        #[cfg(feature = "tsc")]
        if let Some(t) = &clock.backends.tsc {
            let note = clock.tsc_note(t);
            if let Some(c) = clock.report.lock().get_mut(SourceId::Tsc) {
                c.note = note;
            }
        }
        // A TSC the OS already found out of step (Platform::tsc_sync)
        // withdraws the hosts' cross-CPU promises as a later
        // `set_tsc_sync` would.
        if clock.backends.tsc_out_of_step() {
            clock.backends.each(|b| b.tsc_unsynchronized());
        }
        clock.follow_backend_epochs();
        Ok(clock)
    }

    /// The current instant: nanoseconds on the clock's timeline (0 when it
    /// was built). See the type docs for the exact monotonicity guarantee.
    /// Interrupt-safe: yes (NMI too).
    #[inline]
    pub fn now(&self) -> Instant {
        Instant::from_nanos(self.now_ns())
    }

    /// Time since `earlier` (zero if `earlier` is later).
    /// Interrupt-safe: yes (NMI too).
    #[inline]
    pub fn elapsed(&self, earlier: Instant) -> Duration {
        self.now().duration_since(earlier)
    }

    /// Spins until `d` has passed on this clock. Bounded even if the clock
    /// stops: `Err` after [`STALL_READS`](crate::STALL_READS) identical
    /// readings in a row (see [`Stalled`](crate::Stalled)).
    /// Lasts at least `d` of true time whatever the source's resolution
    /// (the end is padded by one tick or clamp granule) and however often
    /// the source switches meanwhile (by [`SWITCH_MARGIN_NS`] for each).
    ///
    /// Interrupt-safe: yes (busy-waits for `d`).
    pub fn spin_for(&self, d: Duration) -> Result<(), crate::Stalled> {
        let resolution = Duration::from_nanos(self.resolution_ns());
        crate::wait::spin_for(|| self.now(), d, resolution, || self.stepped_ns())
    }

    /// The most the timeline has stepped forward without time passing: a
    /// margin for each switch or rebase ([`SWITCH_MARGIN_NS`]); a wait
    /// adds its growth ([`ClockNow::stepped_ns`](crate::ClockNow)).
    /// Interrupt-safe: yes.
    pub(crate) fn stepped_ns(&self) -> u64 {
        u64::from(self.switches()).saturating_mul(SWITCH_MARGIN_NS)
    }

    fn current_index(&self) -> usize {
        (self.state.load(Ordering::Acquire) & read::ID_MASK) as usize
    }

    /// The current source's id.
    /// Interrupt-safe: yes.
    pub fn source_id(&self) -> SourceId {
        SourceId::from_index(self.current_index()).unwrap_or(SourceId::Extra)
    }

    /// The current source.
    /// Interrupt-safe: yes.
    pub fn source(&self) -> Option<&dyn ClockSource> {
        self.backends.source(self.source_id())
    }

    /// The backend of `id`, if the probe constructed it (to read or compare
    /// sources directly; `now()` is the clock).
    /// Interrupt-safe: yes.
    pub fn source_of(&self, id: SourceId) -> Option<&dyn ClockSource> {
        self.backends.source(id)
    }

    /// The current source's name (`"kvmclock"`, ...).
    /// Interrupt-safe: yes.
    pub fn source_name(&self) -> &'static str {
        self.source().map_or("none", |s| s.name())
    }

    /// How coarse the clock's readings may be, in ns: the current source's
    /// tick, or the clamp's granule if larger (readings that go through the
    /// clamp land on its grid). A measurement bracketed with the clock is
    /// known only to this.
    pub(crate) fn resolution_ns(&self) -> u64 {
        let tick = self
            .scale_of(self.current_index())
            .map_or(1, |s| s.ticks_to_ns_exact(1).max(1));
        tick.max(self.clamp.granule().units())
    }

    /// The current source's exact rate.
    /// Interrupt-safe: yes.
    pub fn frequency(&self) -> Option<Frequency> {
        self.scale_of(self.current_index()).map(|s| s.frequency())
    }

    /// `ticks` of the current source as a [`Duration`] (exact floor,
    /// saturating).
    /// Interrupt-safe: yes.
    pub fn ticks_to_duration(&self, ticks: u64) -> Duration {
        Duration::from_nanos(
            self.scale_of(self.current_index())
                .map_or(0, |s| s.ticks_to_ns_exact(ticks)),
        )
    }

    /// `d` in ticks of the current source (exact floor, saturating).
    /// Interrupt-safe: yes.
    pub fn duration_to_ticks(&self, d: Duration) -> u64 {
        self.scale_of(self.current_index())
            .map_or(0, |s| s.ns_to_ticks_exact(d.as_nanos()))
    }

    /// How many gaps in the reads of the current software-extended device
    /// (a 32-bit HPET, the PM timer) longer than half its wrap the clock
    /// found and nothing measured (no TSC rate, no reading of it on this
    /// CPU before the gap, or a TSC measure the count disagreed with by
    /// more than its error: a TSC its hypervisor stepped): each may have
    /// lost whole wraps, time the clock did not count. A gap of whole
    /// wraps plus less than half of one looks like a short interval to the
    /// counter alone and is not found;
    /// read the clock (or tick the watchdog) within
    /// [`ClockSource::max_read_interval`] to lose none.
    /// Interrupt-safe: yes.
    pub fn unmeasured_gaps(&self) -> u32 {
        self.unmeasured_gaps.load(Ordering::Relaxed)
    }

    /// How many times the clock switched source (or rebased) at run time.
    /// Interrupt-safe: yes.
    pub fn switches(&self) -> u32 {
        // Acquire: a caller that sees the count unchanged around a
        // measurement saw no switch's timeline in it.
        self.switches.load(Ordering::Acquire)
    }

    /// The candidate list as of now: the probe's verdicts plus run-time
    /// demotions, with the current source marked selected. Takes a short
    /// lock: not for interrupt handlers (the read path never locks).
    /// Interrupt-safe: no (waits for the watchdog lock).
    pub fn report(&self) -> Report {
        let mut r = self.locked(|_| *self.report.lock());
        r.set_selected(Some(self.source_id()), self.forced.load(Ordering::Relaxed));
        r
    }

    /// The largest value any CPU's floor holds: an upper bound of every
    /// instant returned so far.
    pub(crate) fn high_water(&self) -> u64 {
        self.read_state().high_water()
    }

    /// Makes `id` current with its timeline starting at `start` ns: its
    /// offset (TSC-based) or base (devices) is set so that a reading now
    /// gives `start`. A new generation: every CPU's cached map is stale.
    pub(crate) fn start_source(&self, id: SourceId, start: u64) {
        self.start_source_with(id, start, true);
    }

    /// [`start_source`](Self::start_source); `shared`: readers may be
    /// running (not at the clock's creation).
    ///
    /// The user page is opened (user reads ask the kernel) *before* the
    /// kernel's readers start holding, and closed by the publication at the
    /// end, even when the switch finds nothing to publish: user programs
    /// never read the old state while the kernel holds. Opening reads the
    /// page's replaced state; the kernel's own reading of the old source
    /// right after (before the hold) raises this CPU's floor to it, so
    /// what the kernel holds at, and the new timeline, are not below any
    /// user reading of the old state (to the anchoring error; see the
    /// `user_page` module). Not after a restore: the restored host's
    /// pages no longer continue the old state, and the page's floor stays
    /// as the restore left it.
    pub(crate) fn start_source_with(&self, id: SourceId, start: u64, shared: bool) {
        let i = id.index();
        let restored = self.page_restored.load(Ordering::Acquire);
        let page = self.open_page();
        if shared && !restored && page.is_some() {
            // A kernel reading taken after every successful user reading
            // of the old state (their re-checks saw the even sequence,
            // before the opening); it raises this CPU's floor.
            let _ = self.now_ns();
        }
        // Readers hold from here until the new timeline is set
        // (read::SWITCHING); the start then covers what they held at.
        let st = self.state.load(Ordering::Acquire);
        self.state.store(
            ((st >> 8).wrapping_add(1) << 8) | (st & read::ID_MASK) | read::SWITCHING,
            Ordering::SeqCst,
        );
        let start = start.max(self.high_water());
        let mut device_base = None;
        if self.mapped[i] {
            let source_ns = self.mapped_now_ns(id).unwrap_or(0);
            self.offsets[i].store(start.wrapping_sub(source_ns), Ordering::Release);
        } else if let Some(src) = self.backends.source(id) {
            let tsc = self.hw.rdtsc();
            let base = src.read();
            self.base_ticks[i].store(base, Ordering::Release);
            self.base_ns[i].store(start, Ordering::Release);
            device_base = Some((tsc, base));
        }
        // Supervision needs something to supervise with: a TSC that is the
        // machine's only usable counter (QEMU microvm) stays without it.
        let supervised = self.is_supervised(id) && self.has_watchdog_reference(id);
        let deadline = if supervised {
            start.saturating_add(self.settings.supervision_timeout.as_nanos())
        } else {
            u64::MAX
        };
        self.deadline.store(deadline, Ordering::Release);
        self.raise_ceiling(start.saturating_add(self.settings.max_jump.as_nanos()));
        let st = self.state.load(Ordering::Acquire);
        let next = ((st >> 8).wrapping_add(1) << 8) | i as u32;
        if let Some((tsc, base)) = device_base {
            // The base is the device's first pair on the new timeline.
            let (cpu, shared) = (self.hw.cpu_index(), self.tscs_agree());
            let w = gap_witness::Witnessed {
                tsc,
                ticks: base,
                skew_ns: 0,
            };
            self.gap_witness.record(cpu, shared, next, w);
        }
        self.state.store(next, Ordering::SeqCst);
        self.publish_opened(page);
    }

    /// The current source's reading on the clock's timeline, without the
    /// read path's checks (for a watchdog round that has just verified the
    /// source against its reference). `None` if it gives no reading now.
    pub(crate) fn verified_now_ns(&self) -> Option<u64> {
        let id = self.source_id();
        let i = id.index();
        if self.mapped[i] {
            self.mapped_now_ns(id)
                .map(|ns| ns.wrapping_add(self.offsets[i].load(Ordering::Acquire)))
                .filter(|v| *v <= read::BEFORE_ZERO)
        } else {
            let (src, scale) = (self.backends.source(id)?, self.scale_of(i)?);
            Some(self.device_ns(i, scale, self.read_current_device(i, src).ok()?))
        }
    }

    /// A TSC-based source's own nanoseconds now (for setting its offset).
    /// While it is current, what the clock returned from it is known to
    /// the judge of its parameters.
    fn mapped_now_ns(&self, id: SourceId) -> Option<u64> {
        let cpu = self.hw.cpu_index();
        let b = &self.backends;
        let returned = (id == self.source_id())
            .then(|| self.returned_by(self.offsets[id.index()].load(Ordering::Acquire)))
            .flatten();
        let m = b.tsc_source(id)?;
        self.map_now_of(m, id, cpu, returned)
            .ok()
            .map(|n| n.map.apply(n.tsc))
            .or_else(|| m.fallback_ns(cpu))
    }

    /// Whether some usable, auto-selectable source outside `id`'s counter
    /// domain exists for the watchdog to compare `id` with while `id` is
    /// current (not a PIT then: it is never a member while another source
    /// is current, `watchdog::can_be_member`).
    fn has_watchdog_reference(&self, id: SourceId) -> bool {
        watchdog_reference_in(&self.report.lock(), &self.backends, id)
    }

    /// The TSC's report note as it stands now: a TSC that needs
    /// supervision with no counter to supervise it with says so. Takes the
    /// report's lock: not with it held.
    #[cfg(feature = "tsc")]
    pub(crate) fn tsc_note(&self, t: &clockhal_tsc::Tsc<H>) -> crate::Note {
        tsc_note_in(&self.report.lock(), &self.backends, t)
    }

    /// Whether `id` is a TSC that is correct only under supervision.
    fn is_supervised(&self, id: SourceId) -> bool {
        self.backends.supervised(id)
    }

    /// Whether the current source is kept only while the watchdog runs: a
    /// TSC that needs supervision, with a counter to supervise it with,
    /// and not forced ([`force`](Self::force)).
    /// Interrupt-safe: yes.
    pub fn supervised(&self) -> bool {
        // Finite exactly while supervision is on (`start_source_with`).
        self.deadline.load(Ordering::Acquire) != u64::MAX
    }

    // ---- lifecycle -------------------------------------------------------

    /// Per-CPU setup: call once on every application processor before it
    /// reads the clock. Registers the CPU's kvmclock area (a second CPU
    /// claiming an index another CPU holds is refused) and compares its
    /// `IA32_TSC_ADJUST` with the boot CPU's (a mismatch marks the TSC out
    /// of step, and the clock switches away from it if it was current).
    /// Every step runs; the first error is returned.
    ///
    /// A CPU other than the boot CPU registering while the TSC counts as
    /// single-CPU (no [`Platform::cpus`](crate::Platform::cpus), no MADT)
    /// makes its synchronisation unknown: nobody tested the TSCs of the
    /// CPUs the OS did not mention (see `Clock::set_tsc_sync`).
    ///
    /// Interrupt-safe: no (waits for the watchdog lock).
    pub fn register_this_cpu(&self) -> Result<(), CpuError> {
        let mut first = Ok(());
        let mut tsc_bad = self.more_cpus_than_said();
        let cur = self.source_id();
        let mut current_refused = false;
        self.backends.each(|b| {
            if let Err(e) = b.register_this_cpu() {
                if matches!(e, CpuError::TscAdjust { .. }) {
                    tsc_bad = true;
                } else {
                    current_refused |= provides(b, cur);
                }
                if first.is_ok() {
                    first = Err(e);
                }
            }
        });
        if tsc_bad {
            self.tsc_sync_changed();
        }
        if current_refused {
            self.locked(|st| self.demote_refused(st, cur));
        }
        self.follow_backend_epochs();
        self.republish_if_stale();
        // A device's first reading on this CPU: a software-extended
        // current device's gap measure here starts now, so a gap this CPU
        // is the first to read across is measured, not lost.
        if !self.mapped[self.current_index()] {
            let _ = self.now_ns();
        }
        match (first, self.steal.register_this_cpu(|| self.now_ns())) {
            (Ok(()), Err(e)) => Err(e),
            (first, _) => first,
        }
    }

    /// The current source `cur`'s backend refused this CPU (a host's
    /// unusable first area, no area for its index): the source serves no
    /// reads here, which would hold for good, so the next best takes over.
    fn demote_refused(&self, st: &mut watchdog::State, cur: SourceId) {
        if self.source_id() == cur && self.usable_now(cur) {
            let reason = crate::Demotion::HostFaults { count: 1 };
            // Its reading here would be a held one: the time since the
            // last one returned anywhere comes from the anchor's counter.
            if self.demote_and_switch_from(st, cur, reason, true).is_some() {
                st.core = None;
            }
        }
    }

    /// Whether the calling CPU shows the machine has more CPUs than the
    /// TSC's single-CPU status assumed (then that status becomes unknown).
    fn more_cpus_than_said(&self) -> bool {
        #[cfg(feature = "tsc")]
        if let Some(t) = &self.backends.tsc {
            return t.saw_cpu(self.hw.cpu_index());
        }
        false
    }

    /// When a backend's cached maps all went stale (a revoked cross-CPU
    /// promise, a resume), starts a new generation of the clock's own
    /// per-CPU maps: readers take the slow path once and pick up what the
    /// backend says now (e.g. "no longer ordered: clamp").
    pub(crate) fn follow_backend_epochs(&self) {
        let now = self.backends.epochs();
        if self.backend_epochs.swap(now, Ordering::AcqRel) != now {
            self.state.fetch_add(1 << 8, Ordering::AcqRel);
            // A withdrawn promise may change what user programs may read.
            self.page_stale.store(true, Ordering::Release);
            // A read in flight on another CPU may still finish on the old
            // promise and raise its floor after the clamp took the floors'
            // maximum: the next watchdog tick takes it again.
            self.reclamp.store(true, Ordering::Release);
        } else if self.reclamp.swap(false, Ordering::AcqRel) {
            self.clamp.absorb(self.slots().max_floor());
        }
    }

    /// Republishes the user page if a backend changed its promises since
    /// the last publication. Waits for the watchdog lock: not with it held.
    pub(crate) fn republish_if_stale(&self) {
        if self.page_stale.load(Ordering::Acquire) {
            self.locked(|_| {
                if self.page_stale.swap(false, Ordering::AcqRel) {
                    self.publish_page();
                }
            });
        }
    }

    /// Per-CPU teardown: call on every application processor before the
    /// clock's shared memory is reused (kexec, shutdown); the last CPU then
    /// drops the clock. Reads on this CPU afterwards hold their value (they
    /// do not count towards [`STUCK_READS`]: the source still serves the
    /// other CPUs). The CPU's steal-time area is turned off too (its steal
    /// so far is kept: `steal_ns` continues above it after
    /// a new registration).
    ///
    /// Interrupt-safe: no (writes MSRs).
    pub fn unregister_this_cpu(&self) {
        self.steal.unregister_this_cpu();
        self.backends.each(|b| b.unregister_this_cpu());
        // This CPU's cached maps go too.
        if let Some(slot) = self.slots().cache(self.hw.cpu_index()) {
            slot.invalidate();
        }
    }

    /// The OS's TSC synchronisation result (its warp test, run on every CPU
    /// pair after SMP bring-up: `clockhal::tsc::warp_participant`). Can be
    /// given at any time, from any CPU; the TSC's rating follows, the
    /// selection is redone (switching if the best source changed), and an
    /// out-of-step result also withdraws the trust in host promises that
    /// rest on synchronised TSCs (kvmclock's stable bit, the Hyper-V page's
    /// cross-CPU order).
    /// Interrupt-safe: no (waits for the watchdog lock).
    #[cfg(feature = "tsc")]
    pub fn set_tsc_sync(&self, sync: clockhal_tsc::SyncStatus) {
        if let Some(t) = &self.backends.tsc {
            t.set_sync(sync);
        }
        self.tsc_sync_changed();
    }

    /// The TSC's rating may have changed: refresh its descriptor, withdraw
    /// trust if it is out of step, reselect.
    fn tsc_sync_changed(&self) {
        let unsynchronized = self
            .backends
            .source(SourceId::Tsc)
            .is_some_and(|t| !t.stability().contains(Stability::MONOTONIC_ACROSS_CPUS));
        if unsynchronized && self.backends.tsc_out_of_step() {
            self.backends.each(|b| b.tsc_unsynchronized());
        }
        self.follow_backend_epochs();
        #[cfg(feature = "tsc")]
        if let Some(t) = &self.backends.tsc {
            // The report's lock only under the watchdog's (see `lock`).
            self.locked(|_| {
                // The note says why, as it stands now.
                let note = self.tsc_note(t);
                let mut r = self.report.lock();
                if let Some(c) = r.get_mut(SourceId::Tsc) {
                    c.set_descriptor(t.descriptor());
                    c.note = note;
                }
            });
        }
        self.reselect();
        self.republish_if_stale();
    }

    /// After the guest was restored (resume from a snapshot or S3), on the
    /// boot CPU: re-registers kvmclock, re-enables the HPET and the Hyper-V
    /// page, forgets the continuity of the sources' parameters (the
    /// restored host's timeline may lie before the old one), rebases the
    /// clock so `now()` keeps advancing from the last instant returned,
    /// and restarts the watchdog with every baseline taken again against
    /// the references as the resume left them (the jump check's anchor,
    /// the TSC rate refinement's baseline: S3 resets the HPET). Each
    /// application processor then calls
    /// [`resume_this_cpu`](Self::resume_this_cpu).
    ///
    /// `now()` does not count the time the machine was off (it continues
    /// from the last instant returned), but the wall time must: where it
    /// came from kvmclock's wall clock, it is read again from the restored
    /// host here (an implausible answer leaves it as it was). Where the OS
    /// set it ([`set_unix_time`](Self::set_unix_time), or the RTC through
    /// `set_wall_clock_from_rtc`, feature `rtc`), it is behind by the time
    /// off until the OS sets it again: call `set_wall_clock_from_rtc`
    /// (up to a second, so not done here) or `set_unix_time` after
    /// `resume`.
    ///
    /// Interrupt-safe: no (waits for the watchdog lock; reprograms devices).
    pub fn resume(&self) -> Result<(), CpuError> {
        self.backends.each(|b| b.resume_machine());
        let r = self.resume_this_cpu();
        self.locked(|st| {
            let start = self.high_water().saturating_add(SWITCH_MARGIN_NS);
            self.page_restored.store(true, Ordering::Release);
            self.start_source(self.source_id(), start);
            // Every baseline against a reference's count from before the
            // suspend (the jump check's anchor on an HPET that S3 reset) is
            // taken again.
            self.rebaseline(st, start);
            // A rebase, counted like a switch (a measurement spanning it, like
            // `calibrate_lapic`'s, sees the count change).
            self.switches.fetch_add(1, Ordering::Release);
            self.forgive_host_faults(st);
            self.restart.store(true, Ordering::Release);
        });
        if self.wall_from_kvmclock.load(Ordering::Acquire) {
            self.init_wall_clock();
        }
        r
    }

    /// After a restore, on each application processor: re-registers its
    /// kvmclock area with the restored host.
    ///
    /// Until the last CPU has resumed, reads on CPUs that have not may find
    /// their area discontinuous with the restored host's timeline (and are
    /// not used): such findings up to this call, and up to the next
    /// [`watchdog_tick`](Self::watchdog_tick) after it, are the restore's,
    /// not a faulty host's, and do not demote the source.
    ///
    /// The CPU's steal-time area is registered with the restored host again
    /// (its steal continues from the value before the restore).
    ///
    /// Interrupt-safe: no (writes MSRs, takes the watchdog lock).
    pub fn resume_this_cpu(&self) -> Result<(), CpuError> {
        let mut first = Ok(());
        let cur = self.source_id();
        let mut current_refused = false;
        self.backends.each(|b| {
            if let Err(e) = b.resume_this_cpu() {
                current_refused |= provides(b, cur);
                if first.is_ok() {
                    first = Err(e);
                }
            }
        });
        self.follow_backend_epochs();
        self.locked(|st| {
            self.forgive_host_faults(st);
            if current_refused {
                self.demote_refused(st, cur);
            }
        });
        // A read on another CPU that began before this one re-registered
        // may still judge the restore as the host's fault after it (a
        // first map against a baseline from before): the next tick
        // forgives what was counted up to it.
        self.restoring.store(true, Ordering::Release);
        match (first, self.steal.resume_this_cpu(|| self.now_ns())) {
            (Ok(()), Err(e)) => Err(e),
            (first, _) => first,
        }
    }

    /// Asks the next [`watchdog_tick`](Self::watchdog_tick) to restart its
    /// baseline (after a legitimate time jump the clock cannot see).
    /// Interrupt-safe: yes (NMI too).
    pub fn restart_watchdog(&self) {
        self.restart.store(true, Ordering::Release);
    }

    /// The hardware access the clock reads with.
    /// Interrupt-safe: yes.
    pub fn hardware(&self) -> &H {
        &self.hw
    }

    // ---- wall-clock time ------------------------------------------------

    /// Unix time now, in ns since 1970-01-01 UTC: the boot wall time (from
    /// kvmclock's wall clock at probe, or what the OS set with
    /// [`set_unix_time`](Self::set_unix_time)) plus [`now`](Self::now).
    /// `None` until some wall time is known. Saturates at `u64::MAX` (the
    /// year 2554) instead of wrapping.
    /// Interrupt-safe: yes (NMI too).
    pub fn unix_time_ns(&self) -> Option<u64> {
        self.unix_known.load(Ordering::Acquire).then(|| {
            self.unix_offset
                .load(Ordering::Acquire)
                .saturating_add(self.now_ns())
        })
    }

    /// Sets the wall time: `unix_ns` is Unix time now (from an RTC, NTP, the
    /// loader). Later [`unix_time_ns`](Self::unix_time_ns) calls follow the
    /// clock from there. A time outside
    /// [`PLAUSIBLE_UNIX_SECONDS`](crate::PLAUSIBLE_UNIX_SECONDS) (before 2000,
    /// from 2200 on: a reset or corrupt source) is refused with
    /// [`ImplausibleWallTime`](crate::ImplausibleWallTime) and the wall
    /// time is left as it was. After [`resume`](Self::resume) the OS sets
    /// it again (see there).
    ///
    /// Interrupt-safe: yes (never waits: the lock's holder publishes the page).
    pub fn set_unix_time(&self, unix_ns: u64) -> Result<(), crate::ImplausibleWallTime> {
        self.set_unix_time_at(unix_ns, self.now_ns())
    }

    /// [`set_unix_time`](Self::set_unix_time) with the instant it was
    /// true: Unix time was `unix_ns` when the clock read `at_ns`. One
    /// reading fixes the offset, so time that passes before the call (a
    /// vCPU preempted after the RTC's edge) is not lost from it.
    /// Interrupt-safe: yes (as `set_unix_time`).
    pub(crate) fn set_unix_time_at(
        &self,
        unix_ns: u64,
        at_ns: u64,
    ) -> Result<(), crate::ImplausibleWallTime> {
        let unix_ns = crate::wall_time::check(unix_ns)?;
        self.wall_from_kvmclock.store(false, Ordering::Release);
        self.unix_offset
            .store(unix_ns.saturating_sub(at_ns), Ordering::Release);
        self.unix_known.store(true, Ordering::Release);
        // The user clock page carries the wall time too: published now, or
        // by the watchdog lock's holder (this may be an interrupt inside
        // it) when it lets go.
        self.request_publication();
        Ok(())
    }

    /// Wall time from kvmclock's wall clock, if it has a plausible one
    /// (at build, and again at [`resume`](Self::resume) when it was the
    /// source). An implausible one is ignored: the wall time stays as it
    /// was (unknown at build).
    fn init_wall_clock(&self) {
        // The wall clock and the clock's reading that fixes the offset are
        // two reads: a vCPU preempted between them would put the pause into
        // the offset. Bracketed by two of the clock's readings, the offset
        // is off by at most half the bracket; the tightest of a few tries.
        let mut best: Option<(u64, u64, u64)> = None; // (width, unix, at)
        for _ in 0..WALL_CLOCK_TRIES {
            let before = self.now_ns();
            let Some(unix) = self.backends.wall_clock_unix_ns() else {
                return;
            };
            let width = self.now_ns().saturating_sub(before);
            if best.is_none_or(|(w, ..)| width < w) {
                best = Some((width, unix, before + width / 2));
            }
            if width <= WALL_CLOCK_BRACKET_NS {
                break;
            }
        }
        if let Some((_, unix, at)) = best {
            if self.set_unix_time_at(unix, at).is_ok() {
                self.wall_from_kvmclock.store(true, Ordering::Release);
            }
        }
    }

    /// The report entry of `id`, if constructed and not demoted.
    pub(crate) fn usable_now(&self, id: SourceId) -> bool {
        self.report
            .lock()
            .get(id)
            .is_some_and(|c| matches!(c.verdict, Verdict::Usable(_)))
    }
}

impl<H: Hardware + Clone> Clock<H> {
    /// The kvmclock backend (e.g. its stats).
    /// Interrupt-safe: yes.
    #[cfg(feature = "kvmclock")]
    pub fn kvmclock(&self) -> Option<&clockhal_kvmclock::Kvmclock<H>> {
        self.backends.kvmclock.as_ref()
    }

    /// The Hyper-V backend.
    /// Interrupt-safe: yes.
    #[cfg(feature = "hyperv")]
    pub fn hyperv(&self) -> Option<&clockhal_hyperv::Hyperv<H>> {
        self.backends.hyperv.as_ref()
    }

    /// The TSC backend.
    /// Interrupt-safe: yes.
    #[cfg(feature = "tsc")]
    pub fn tsc(&self) -> Option<&clockhal_tsc::Tsc<H>> {
        self.backends.tsc.as_ref()
    }

    /// The PIT backend (constructed only when needed or committed to, see
    /// [`Platform::pit`](crate::Platform::pit)).
    /// Interrupt-safe: yes.
    #[cfg(feature = "pit")]
    pub fn pit(&self) -> Option<&clockhal_pit::Pit<H>> {
        self.backends.pit.as_ref()
    }

    /// The HPET backend.
    /// Interrupt-safe: yes.
    #[cfg(feature = "hpet")]
    pub fn hpet(&self) -> Option<&clockhal_hpet::Hpet<H>> {
        self.backends.hpet.as_ref()
    }

    /// The ACPI PM timer backend.
    /// Interrupt-safe: yes.
    #[cfg(feature = "acpi-pm")]
    pub fn acpi_pm(&self) -> Option<&clockhal_acpi_pm::AcpiPm<H>> {
        self.backends.acpi_pm.as_ref()
    }
}

#[cfg(feature = "defmt")]
impl<H: Hardware + Clone> defmt::Format for Clock<H> {
    fn format(&self, f: defmt::Formatter) {
        defmt::write!(
            f,
            "Clock({=str}, {} switches)",
            self.source_name(),
            self.switches()
        )
    }
}

/// Whether backend `b` provides source `id`.
fn provides(b: &dyn crate::probe::Backend, id: SourceId) -> bool {
    let mut s: crate::candidate::Sources<'_> = [None; crate::MAX_CANDIDATES];
    b.sources(&mut s);
    s[id.index()].is_some()
}

/// Whether `report` has an independent counter the watchdog can supervise
/// `id` with while it is current ([`Clock::has_watchdog_reference`]).
fn watchdog_reference_in<H: Hardware + Clone>(
    report: &Report,
    backends: &crate::probe::Backends<H>,
    id: SourceId,
) -> bool {
    let own = backends.domain(id);
    report.candidates().any(|c| {
        c.id != id
            && watchdog::can_be_member(c.id, id)
            && backends.domain(c.id) != own
            && matches!(c.verdict, Verdict::Usable(d) if d.rating.auto_selectable())
            && backends.source(c.id).is_some()
    })
}

/// The TSC's report note as `report` stands: a TSC that needs supervision
/// with no counter to supervise it with says so (the probe's report and
/// the clock's alike).
#[cfg(feature = "tsc")]
pub(crate) fn tsc_note_in<H: Hardware + Clone>(
    report: &Report,
    backends: &crate::probe::Backends<H>,
    t: &clockhal_tsc::Tsc<H>,
) -> crate::Note {
    let mut note = crate::Note::of_tsc(t);
    if let crate::Note::Tsc {
        supervised,
        unwatched,
        ..
    } = &mut note
    {
        if *supervised && !watchdog_reference_in(report, backends, SourceId::Tsc) {
            (*supervised, *unwatched) = (false, true);
        }
    }
    note
}
