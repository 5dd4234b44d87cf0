//! The selected clock as an OS uses it: `now()`, conversions, run-time
//! cross-checking with a switch that never steps backwards, and the
//! lifecycle (application processors, TSC sync results, resume).

mod read;
mod watchdog;

pub(crate) use read::{MapNow, Mapped};
pub use watchdog::WatchdogEvent;

use crate::probe::Backends;
use crate::{Probed, Report, SourceId, Verdict, MAX_CANDIDATES};
use clockhal_core::{
    ClockSource, Duration, Frequency, Instant, MonotonicClamp, PerCpuSlots, Scale, Stability,
    WatchdogConfig,
};
use clockhal_x86::Hardware;
use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// A cached map serves readings up to this many ns past its validation.
pub(crate) const REVALIDATE_NS: u64 = 1_000_000_000;

/// Consecutive reads without a fresh value after which the clock switches
/// away from its source by itself (no watchdog needed): a source that
/// never settles cannot freeze the clock for good.
pub const STUCK_READS: u32 = 10_000;

/// Added to the new source's starting point at a switch: covers a reader
/// whose re-check of the state raced the switch by a few instructions.
pub const SWITCH_MARGIN_NS: u64 = 1_000;

/// The run-time tunables of a [`Clock`] (from the [`Platform`](crate::Platform)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Settings {
    pub(crate) watchdog: WatchdogConfig,
    /// A supervised TSC stays current only this long after the last
    /// watchdog tick.
    pub(crate) supervision_timeout: Duration,
    /// Readings beyond the last verified instant plus this are checked
    /// against an independent reference before being returned.
    pub(crate) max_jump: Duration,
}

impl Settings {
    pub(crate) fn from_platform(p: &crate::Platform<'_>) -> Settings {
        Settings {
            watchdog: p.watchdog,
            supervision_timeout: p.supervision_timeout,
            max_jump: p.max_jump,
        }
    }
}

/// No candidate is usable: nothing to build a [`Clock`] from. Carries the
/// probe's [`Report`], which says why each was rejected or demoted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoClock {
    /// The probe's report.
    pub report: Report,
}

impl fmt::Display for NoClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no usable clock source: {:#}", self.report)
    }
}

impl core::error::Error for NoClock {}

/// Why a per-CPU lifecycle step failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CpuError {
    /// kvmclock refused this CPU (its index is taken by another CPU, has no
    /// area, or the host did not fill it).
    #[cfg(feature = "kvmclock")]
    Kvmclock(clockhal_kvmclock::KvmclockError),
    /// This CPU's `IA32_TSC_ADJUST` differs from the boot CPU's: the TSCs
    /// are out of step by `difference` ticks (the TSC is no longer
    /// auto-selected).
    TscAdjust {
        /// |this CPU's TSC_ADJUST - the boot CPU's|.
        difference: u64,
    },
}

impl fmt::Display for CpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            #[cfg(feature = "kvmclock")]
            CpuError::Kvmclock(e) => write!(f, "kvmclock: {e}"),
            CpuError::TscAdjust { difference } => {
                write!(
                    f,
                    "IA32_TSC_ADJUST differs from the boot CPU's by {difference}"
                )
            }
        }
    }
}

impl core::error::Error for CpuError {}

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
///   `MONOTONIC_ACROSS_CPUS` flag says: device counters (HPET, PM timer,
///   Hyper-V MSR) and sources without a host ordering promise (kvmclock
///   without a trusted stable bit) are ordered through a global clamp:
///   a reading on one CPU is never earlier than one returned before on
///   another. kvmclock with a trusted stable bit, the Hyper-V page and a
///   warp-tested TSC are ordered by the host's (or the hardware's) promise,
///   not checked per read; the promise is checked where it can be (kvmclock
///   areas must agree, [`STABLE_AGREEMENT_NS`](crate::kvmclock::STABLE_AGREEMENT_NS);
///   the OS's warp test; `IA32_TSC_ADJUST`), and once broken, reads go
///   through the clamp. A switch between sources continues above every
///   floor: at most [`SWITCH_MARGIN_NS`] forward, never back.
///
/// # What the read path checks
/// No value from a hypervisor page is used unchecked: the backends judge
/// every parameter update once (plausible rate, continuity with the
/// previous parameters: `clockhal_core::judge_update`), and a reading that
/// jumps further than an independent reference explains
/// ([`Platform::max_jump`](crate::Platform::max_jump)) is not returned
/// ([`Demotion::Jumped`](crate::Demotion::Jumped)). A read that finds no
/// fresh value holds; [`STUCK_READS`] of them in a row switch the source.
///
/// # The fast path
/// For the TSC, kvmclock and the Hyper-V page, a read touches the calling
/// CPU's slot (one cache line: the validated map shifted onto the clock's
/// timeline and the floor), the source's version word, `rdtsc`, one
/// multiply and the CPU-local maximum: no shared write, no lock.
pub struct Clock<H: Hardware + Clone> {
    pub(crate) backends: Backends<H>,
    pub(crate) hw: H,
    pub(crate) settings: Settings,
    /// The live report (run-time demotions, the current selection).
    pub(crate) report: spin::Mutex<Report>,
    pub(crate) forced: bool,
    /// `generation << 8 | current source index`.
    pub(crate) state: AtomicU32,
    /// Per source: clock ns = source ns + offset (wrapping), for TSC-based
    /// sources.
    pub(crate) offsets: [AtomicU64; MAX_CANDIDATES],
    /// Per source: device ticks and clock ns at its base.
    pub(crate) base_ticks: [AtomicU64; MAX_CANDIDATES],
    pub(crate) base_ns: [AtomicU64; MAX_CANDIDATES],
    pub(crate) scales: [Option<Scale>; MAX_CANDIDATES],
    /// Per source: orders its readings across CPUs itself.
    pub(crate) ordered: [bool; MAX_CANDIDATES],
    pub(crate) slots: PerCpuSlots,
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
}

impl<H: Hardware + Clone> fmt::Debug for Clock<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Clock")
            .field("source", &self.source_id())
            .field("switches", &self.switches())
            .finish_non_exhaustive()
    }
}

impl<H: Hardware + Clone> Clock<H> {
    pub(crate) fn build(probed: Probed<H>) -> Result<Clock<H>, crate::NoClock> {
        let Probed {
            backends,
            hw,
            report,
            settings,
        } = probed;
        let selected = report.selected_id().ok_or(crate::NoClock { report })?;
        let sources = backends.sources();
        let mut scales = [None; MAX_CANDIDATES];
        let mut ordered = [false; MAX_CANDIDATES];
        for c in report.candidates() {
            if let (Some(d), Some(_)) = (c.descriptor(), sources[c.id.index()]) {
                scales[c.id.index()] = Some(Scale::new(d.frequency));
                ordered[c.id.index()] = d.stability.contains(Stability::MONOTONIC_ACROSS_CPUS);
            }
        }
        if scales[selected.index()].is_none() {
            return Err(crate::NoClock { report });
        }
        let clock = Clock {
            backends,
            hw,
            settings,
            forced: report.is_forced(),
            report: spin::Mutex::new(report),
            state: AtomicU32::new(selected.index() as u32),
            offsets: [const { AtomicU64::new(0) }; MAX_CANDIDATES],
            base_ticks: [const { AtomicU64::new(0) }; MAX_CANDIDATES],
            base_ns: [const { AtomicU64::new(0) }; MAX_CANDIDATES],
            scales,
            ordered,
            slots: PerCpuSlots::new(),
            clamp: MonotonicClamp::new(),
            ceiling: AtomicU64::new(settings.max_jump.as_nanos()),
            deadline: AtomicU64::new(u64::MAX),
            held: AtomicU32::new(0),
            watchdog: spin::Mutex::new(watchdog::State::new()),
            restart: AtomicBool::new(false),
            switches: AtomicU32::new(0),
            unix_offset: AtomicU64::new(0),
            unix_known: AtomicBool::new(false),
        };
        // The timeline starts at 0 on the selected source.
        clock.start_source(selected, 0);
        clock.init_wall_clock();
        Ok(clock)
    }

    /// The current instant: nanoseconds on the clock's timeline (0 when it
    /// was built). See the type docs for the exact monotonicity guarantee.
    #[inline]
    pub fn now(&self) -> Instant {
        Instant::from_nanos(self.now_ns())
    }

    /// Time since `earlier` (zero if `earlier` is later).
    #[inline]
    pub fn elapsed(&self, earlier: Instant) -> Duration {
        self.now().duration_since(earlier)
    }

    /// Spins until `d` has passed on this clock (bounded by `d` plus one
    /// read; reads stay monotonic, so it always ends).
    pub fn spin_for(&self, d: Duration) {
        let end = self.now().saturating_add(d);
        while self.now() < end {
            core::hint::spin_loop();
        }
    }

    fn current_index(&self) -> usize {
        (self.state.load(Ordering::Acquire) & read::ID_MASK) as usize
    }

    /// The current source's id.
    pub fn source_id(&self) -> SourceId {
        SourceId::from_index(self.current_index()).unwrap_or(SourceId::Extra)
    }

    /// The current source.
    pub fn source(&self) -> Option<&dyn ClockSource> {
        self.backends.source(self.source_id())
    }

    /// The current source's name (`"kvmclock"`, ...).
    pub fn source_name(&self) -> &'static str {
        self.source().map_or("none", |s| s.name())
    }

    /// The current source's exact rate.
    pub fn frequency(&self) -> Option<Frequency> {
        self.scales[self.current_index()].map(|s| s.frequency())
    }

    /// How many times the clock switched source (or rebased) at run time.
    pub fn switches(&self) -> u32 {
        self.switches.load(Ordering::Relaxed)
    }

    /// The candidate list as of now: the probe's verdicts plus run-time
    /// demotions, with the current source marked selected. Takes a short
    /// lock: not for interrupt handlers (the read path never locks).
    pub fn report(&self) -> Report {
        let mut r = *self.report.lock();
        r.set_selected(Some(self.source_id()), self.forced);
        r
    }

    /// The largest value any CPU's floor holds: an upper bound of every
    /// instant returned so far.
    pub(crate) fn high_water(&self) -> u64 {
        self.slots.max_floor().max(self.clamp.last())
    }

    /// Makes `id` current with its timeline starting at `start` ns: its
    /// offset (TSC-based) or base (devices) is set so that a reading now
    /// gives `start`. A new generation: every CPU's cached map is stale.
    pub(crate) fn start_source(&self, id: SourceId, start: u64) {
        let i = id.index();
        let mapped = matches!(
            id,
            SourceId::Kvmclock | SourceId::HypervPage | SourceId::Tsc
        );
        if mapped {
            let source_ns = self.mapped_now_ns(id).unwrap_or(0);
            self.offsets[i].store(start.wrapping_sub(source_ns), Ordering::Release);
        } else if let Some(src) = self.backends.source(id) {
            self.base_ticks[i].store(src.read(), Ordering::Release);
            self.base_ns[i].store(start, Ordering::Release);
        }
        let supervised = self.is_supervised(id);
        let deadline = if supervised {
            start.saturating_add(self.settings.supervision_timeout.as_nanos())
        } else {
            u64::MAX
        };
        self.deadline.store(deadline, Ordering::Release);
        self.raise_ceiling(start.saturating_add(self.settings.max_jump.as_nanos()));
        let st = self.state.load(Ordering::Acquire);
        let next = ((st >> 8).wrapping_add(1) << 8) | i as u32;
        self.state.store(next, Ordering::Release);
    }

    /// A TSC-based source's own nanoseconds now (for setting its offset).
    fn mapped_now_ns(&self, id: SourceId) -> Option<u64> {
        fn value<M: Mapped>(m: Option<&M>, cpu: usize) -> Option<u64> {
            let m = m?;
            m.map_now(cpu)
                .map(|n| n.map.apply(n.tsc))
                .or_else(|| Mapped::fallback_ns(m, cpu))
        }
        let cpu = self.hw.cpu_index();
        let b = &self.backends;
        match id {
            SourceId::Kvmclock => value(b.kvmclock_mapped(), cpu),
            SourceId::HypervPage => value(b.hyperv_page_mapped(), cpu),
            SourceId::Tsc => value(b.tsc_mapped(), cpu),
            _ => None,
        }
    }

    /// Whether `id` is a TSC that is correct only under supervision.
    fn is_supervised(&self, id: SourceId) -> bool {
        id == SourceId::Tsc && self.backends.tsc_supervised()
    }

    /// Whether the current source is kept only while the watchdog runs.
    pub fn supervised(&self) -> bool {
        self.is_supervised(self.source_id())
    }

    // ---- lifecycle -------------------------------------------------------

    /// Per-CPU setup: call once on every application processor before it
    /// reads the clock. Registers the CPU's kvmclock area (a second CPU
    /// claiming an index another CPU holds is refused) and compares its
    /// `IA32_TSC_ADJUST` with the boot CPU's (a mismatch marks the TSC out
    /// of step, and the clock switches away from it if it was current).
    /// Every step runs; the first error is returned.
    pub fn register_this_cpu(&self) -> Result<(), CpuError> {
        let mut first = Ok(());
        let mut tsc_bad = false;
        self.backends.each(|b| {
            if let Err(e) = b.register_this_cpu() {
                if matches!(e, CpuError::TscAdjust { .. }) {
                    tsc_bad = true;
                }
                if first.is_ok() {
                    first = Err(e);
                }
            }
        });
        if tsc_bad {
            self.tsc_sync_changed();
        }
        first
    }

    /// Per-CPU teardown: call on every application processor before the
    /// clock's shared memory is reused (kexec, shutdown); the last CPU then
    /// drops the clock. Reads on this CPU afterwards hold their value.
    pub fn unregister_this_cpu(&self) {
        self.backends.each(|b| b.unregister_this_cpu());
    }

    /// The OS's TSC synchronisation result (its warp test, run on every CPU
    /// pair after SMP bring-up: `clockhal::tsc::warp_participant`). Can be
    /// given at any time, from any CPU; the TSC's rating follows, the
    /// selection is redone (switching if the best source changed), and an
    /// out-of-step result also withdraws the trust in host promises that
    /// rest on synchronised TSCs (kvmclock's stable bit, the Hyper-V page's
    /// cross-CPU order).
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
        if let Some(t) = self.backends.source(SourceId::Tsc) {
            let mut r = self.report.lock();
            if let Some(c) = r.get_mut(SourceId::Tsc) {
                c.set_descriptor(t.descriptor());
            }
        }
        self.reselect();
    }

    /// After the guest was restored (resume from a snapshot or S3), on the
    /// boot CPU: re-registers kvmclock, re-enables the HPET and the Hyper-V
    /// page, forgets the continuity of the sources' parameters (the
    /// restored host's timeline may lie before the old one), rebases the
    /// clock so `now()` keeps advancing from the last instant returned,
    /// and restarts the watchdog. Each application processor then calls
    /// [`resume_this_cpu`](Self::resume_this_cpu).
    pub fn resume(&self) -> Result<(), CpuError> {
        self.backends.each(|b| b.resume_machine());
        let r = self.resume_this_cpu();
        let _guard = self.watchdog.lock();
        let start = self.high_water().saturating_add(SWITCH_MARGIN_NS);
        self.start_source(self.source_id(), start);
        self.restart.store(true, Ordering::Release);
        r
    }

    /// After a restore, on each application processor: re-registers its
    /// kvmclock area with the restored host.
    pub fn resume_this_cpu(&self) -> Result<(), CpuError> {
        let mut first = Ok(());
        self.backends.each(|b| {
            if let (Err(e), true) = (b.resume_this_cpu(), first.is_ok()) {
                first = Err(e);
            }
        });
        first
    }

    /// Asks the next [`watchdog_tick`](Self::watchdog_tick) to restart its
    /// baseline (after a legitimate time jump the clock cannot see).
    pub fn restart_watchdog(&self) {
        self.restart.store(true, Ordering::Release);
    }

    /// The hardware access the clock reads with.
    pub fn hardware(&self) -> &H {
        &self.hw
    }

    // ---- wall-clock time ------------------------------------------------

    /// Unix time now, in ns since 1970-01-01 UTC: the boot wall time (from
    /// kvmclock's wall clock at probe, or what the OS set with
    /// [`set_unix_time`](Self::set_unix_time)) plus [`now`](Self::now).
    /// `None` until some wall time is known.
    pub fn unix_time_ns(&self) -> Option<u64> {
        self.unix_known.load(Ordering::Acquire).then(|| {
            self.unix_offset
                .load(Ordering::Acquire)
                .wrapping_add(self.now_ns())
        })
    }

    /// Sets the wall time: `unix_ns` is Unix time now (from an RTC, NTP, the
    /// loader). Later [`unix_time_ns`](Self::unix_time_ns) calls follow the
    /// clock from there.
    pub fn set_unix_time(&self, unix_ns: u64) {
        self.unix_offset
            .store(unix_ns.wrapping_sub(self.now_ns()), Ordering::Release);
        self.unix_known.store(true, Ordering::Release);
    }

    fn init_wall_clock(&self) {
        if let Some(unix) = self.backends.wall_clock_unix_ns() {
            self.set_unix_time(unix);
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
    #[cfg(feature = "kvmclock")]
    pub fn kvmclock(&self) -> Option<&clockhal_kvmclock::Kvmclock<H>> {
        self.backends.kvmclock.as_ref()
    }

    /// The Hyper-V backend.
    #[cfg(feature = "hyperv")]
    pub fn hyperv(&self) -> Option<&clockhal_hyperv::Hyperv<H>> {
        self.backends.hyperv.as_ref()
    }

    /// The TSC backend.
    #[cfg(feature = "tsc")]
    pub fn tsc(&self) -> Option<&clockhal_tsc::Tsc<H>> {
        self.backends.tsc.as_ref()
    }

    /// The HPET backend.
    #[cfg(feature = "hpet")]
    pub fn hpet(&self) -> Option<&clockhal_hpet::Hpet<H>> {
        self.backends.hpet.as_ref()
    }

    /// The ACPI PM timer backend.
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
