//! The selected clock as an OS uses it: `now()`, conversions, and run-time
//! cross-checking with a switch that never steps backwards.

use crate::check::Sources;
use crate::{Demotion, Report, SourceId, Verdict, MAX_CANDIDATES};
use clockhal_core::MonotonicGuard;
use clockhal_core::{
    ClockSource, Duration, Frequency, Instant, Scale, Stability, Watchdog, WatchdogConfig,
    WatchdogSample, WatchdogVerdict,
};
use core::fmt;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Something that can report "the guest was paused" (kvmclock's
/// GUEST_STOPPED flag): the watchdog restarts its baseline when it fires.
pub(crate) trait PauseEvents: Sync {
    /// Whether the hypervisor paused the guest since the last call (clears
    /// the flag).
    fn take_guest_stopped(&self) -> bool;
}

/// One candidate as the clock reads it: the backend, its exact scale, and
/// where its readings sit on the clock's timeline.
struct Slot<'a> {
    source: &'a dyn ClockSource,
    scale: Scale,
    /// The source orders its readings across CPUs itself
    /// (`MONOTONIC_ACROSS_CPUS`): reads take the guard's fast path.
    ordered: bool,
    /// Source ticks at `base_ns`. Written once, before the slot becomes
    /// current (a demoted slot never becomes current again).
    base_ticks: AtomicU64,
    base_ns: AtomicU64,
}

impl Slot<'_> {
    #[inline(always)]
    fn ns(&self, ticks: u64) -> u64 {
        let delta = ticks.saturating_sub(self.base_ticks.load(Ordering::Relaxed));
        self.base_ns
            .load(Ordering::Relaxed)
            .saturating_add(self.scale.ticks_to_ns(delta))
    }
}

/// The guard's fast path records its high-water mark at most once per this
/// many ns; a switch may step time forward by up to this much.
pub const GUARD_SLACK_NS: u64 = 16_384;

/// Added to the new source's starting point at a switch: covers a reader
/// whose re-check of the state raced the switch by a few instructions.
const SWITCH_MARGIN_NS: u64 = 1_000;

/// `state` bit: a switch is in progress (readers take the guard's slow path).
const SWITCHING: usize = 1 << 16;

/// The watchdog pairing the current source with a reference.
struct Pair {
    current: usize,
    reference: usize,
    watchdog: Watchdog,
    /// Current-source ticks at the previous sample, if any.
    last_source: Option<u64>,
}

/// No candidate is usable: nothing to build a [`Clock`] from. The probe's
/// [`Report`] says why each was rejected or demoted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct NoClock;

impl fmt::Display for NoClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("no usable clock source (see the probe report)")
    }
}

/// What one [`Clock::watchdog_tick`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum WatchdogEvent {
    /// Another `watchdog_tick` is running (on another CPU): nothing done.
    Busy,
    /// No second eligible source to compare with: nothing to check.
    Inactive,
    /// kvmclock reported that the guest was paused: the baseline was
    /// restarted (the jump is legitimate).
    GuestStopped,
    /// The baseline was restarted: on request
    /// ([`Clock::restart_watchdog`]), or because the ticks were further apart
    /// than the reference's wrap-safe read interval.
    Restarted,
    /// A sample was judged (see [`WatchdogVerdict`]). A `Demote` verdict
    /// appears here only for a forced source, which is never switched away
    /// from.
    Judged {
        /// The source being checked (the current one).
        source: SourceId,
        /// The reference it was checked against.
        reference: SourceId,
        /// The verdict.
        verdict: WatchdogVerdict,
    },
    /// The current source was demoted and the clock switched to another,
    /// continuing from the last returned instant.
    Switched {
        /// The demoted source.
        from: SourceId,
        /// The new current source.
        to: SourceId,
        /// Why `from` was demoted.
        reason: Demotion,
    },
}

/// A ready clock: the selected source on a nanosecond timeline that never
/// goes backwards, with run-time cross-checking.
///
/// Borrows the backends from the probe result ([`Probed::clock`](crate::Probed::clock)).
/// All methods take `&self`: share one `Clock` between CPUs (it is `Sync`).
///
/// - [`now`](Self::now) reads the current source and places the reading on
///   the timeline (nanoseconds since the clock was built). A source that
///   orders its readings across CPUs (`MONOTONIC_ACROSS_CPUS`: kvmclock,
///   the Hyper-V page, a synchronised TSC) is read without any shared write
///   (the [`MonotonicGuard`] fast path: one load of a read-mostly line and
///   a high-water mark written at most once per [`GUARD_SLACK_NS`]); any
///   other source, and every read that races a source switch, goes through
///   the guard's global clamp. Instants therefore never go backwards, on
///   one CPU or across CPUs, including across a switch (which may step time
///   forward by up to [`GUARD_SLACK_NS`] plus 1 us, never backwards).
/// - [`watchdog_tick`](Self::watchdog_tick) (call it periodically, e.g.
///   every 0.1–0.5 s from a timer) compares the current source with the
///   next-best one and switches away from a drifting source.
pub struct Clock<'a> {
    slots: [Option<Slot<'a>>; MAX_CANDIDATES],
    /// The probe's report (selection and demotions as of the probe).
    report: Report,
    /// Index of the current slot, plus [`SWITCHING`] during a switch.
    state: AtomicUsize,
    guard: MonotonicGuard,
    /// Run-time demotions, encoded (see `encode`); 0 = none.
    demotions: [AtomicU64; MAX_CANDIDATES],
    forced: bool,
    watchdog_config: WatchdogConfig,
    pair: spin::Mutex<Option<Pair>>,
    restart: AtomicBool,
    pause: Option<&'a dyn PauseEvents>,
    switches: AtomicU32,
}

impl fmt::Debug for Clock<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Clock")
            .field("source", &self.source_name())
            .field("switches", &self.switches())
            .finish_non_exhaustive()
    }
}

impl<'a> Clock<'a> {
    /// Builds the clock on `report`'s selected source.
    pub(crate) fn build(
        report: Report,
        sources: Sources<'a>,
        pause: Option<&'a dyn PauseEvents>,
        watchdog_config: WatchdogConfig,
    ) -> Result<Clock<'a>, NoClock> {
        let selected = report.selected_id().ok_or(NoClock)?;
        let slots: [Option<Slot<'a>>; MAX_CANDIDATES] = core::array::from_fn(|i| {
            let source = sources[i]?;
            let c = report.slots()[i].as_ref()?;
            Some(Slot {
                source,
                scale: Scale::new(c.frequency?),
                ordered: c.stability.contains(Stability::MONOTONIC_ACROSS_CPUS),
                base_ticks: AtomicU64::new(0),
                base_ns: AtomicU64::new(0),
            })
        });
        let first = slots[selected.index()].as_ref().ok_or(NoClock)?;
        first
            .base_ticks
            .store(first.source.read(), Ordering::Relaxed);
        Ok(Clock {
            slots,
            forced: report.is_forced(),
            report,
            state: AtomicUsize::new(selected.index()),
            guard: MonotonicGuard::new(GUARD_SLACK_NS),
            demotions: [const { AtomicU64::new(0) }; MAX_CANDIDATES],
            watchdog_config,
            pair: spin::Mutex::new(None),
            restart: AtomicBool::new(false),
            pause,
            switches: AtomicU32::new(0),
        })
    }

    /// The current instant: nanoseconds since this clock was built. Never
    /// smaller than any instant returned before, on any CPU.
    #[inline]
    pub fn now(&self) -> Instant {
        let state = self.state.load(Ordering::Acquire);
        let Some(slot) = self.slots.get(state & !SWITCHING).and_then(Option::as_ref) else {
            return Instant::from_nanos(self.guard.hold());
        };
        let ns = slot.ns(slot.source.read());
        // Fast path only if no switch began before or during this read.
        if slot.ordered && state & SWITCHING == 0 && self.state.load(Ordering::Acquire) == state {
            if let Some(ns) = self.guard.try_fast(ns) {
                return Instant::from_nanos(ns);
            }
        }
        Instant::from_nanos(self.guard.slow(ns))
    }

    /// Time since `earlier` (zero if `earlier` is later).
    #[inline]
    pub fn elapsed(&self, earlier: Instant) -> Duration {
        self.now().duration_since(earlier)
    }

    fn current_index(&self) -> usize {
        self.state.load(Ordering::Acquire) & !SWITCHING
    }

    fn current_slot(&self) -> Option<&Slot<'a>> {
        self.slots
            .get(self.current_index())
            .and_then(Option::as_ref)
    }

    /// The current source.
    pub fn source(&self) -> Option<&'a dyn ClockSource> {
        self.current_slot().map(|s| s.source)
    }

    /// The current source's id.
    pub fn source_id(&self) -> SourceId {
        SourceId::from_index(self.current_index()).unwrap_or(SourceId::Extra)
    }

    /// The current source's name (`"kvmclock"`, ...).
    pub fn source_name(&self) -> &'static str {
        self.source().map_or("none", |s| s.name())
    }

    /// The current source's exact rate.
    pub fn frequency(&self) -> Option<Frequency> {
        self.current_slot().map(|s| s.scale.frequency())
    }

    /// A raw reading of the current source, in its ticks (for code that
    /// timestamps in ticks and converts later with
    /// [`ticks_to_duration`](Self::ticks_to_duration)). Not clamped; after
    /// a source switch the tick unit changes: prefer [`now`](Self::now).
    #[inline]
    pub fn read_ticks(&self) -> u64 {
        self.current_slot().map_or(0, |s| s.source.read())
    }

    /// `ticks` of the current source as a [`Duration`] (exact floor,
    /// saturating).
    pub fn ticks_to_duration(&self, ticks: u64) -> Duration {
        Duration::from_nanos(
            self.current_slot()
                .map_or(0, |s| s.scale.ticks_to_ns_exact(ticks)),
        )
    }

    /// `d` in ticks of the current source (exact floor, saturating).
    pub fn duration_to_ticks(&self, d: Duration) -> u64 {
        self.current_slot()
            .map_or(0, |s| s.scale.ns_to_ticks_exact(d.as_nanos()))
    }

    /// How many times the clock switched source at run time.
    pub fn switches(&self) -> u32 {
        self.switches.load(Ordering::Relaxed)
    }

    /// How many readings the guard raised to an earlier value so far
    /// (frequent raising means CPUs disagree or a source stepped back).
    pub fn clamped_count(&self) -> u64 {
        self.guard.raised_count()
    }

    /// The candidate list as of now: the probe's verdicts plus run-time
    /// demotions, with the current source marked selected.
    pub fn report(&self) -> Report {
        let mut r = self.report;
        for (i, cell) in self.demotions.iter().enumerate() {
            let (Some(d), Some(id)) = (
                decode(cell.load(Ordering::Relaxed)),
                SourceId::from_index(i),
            ) else {
                continue;
            };
            if let Some(c) = r.get_mut(id) {
                c.verdict = Verdict::Demoted(d);
            }
        }
        r.set_selected(Some(self.source_id()), self.forced);
        r
    }

    /// Asks the next [`watchdog_tick`](Self::watchdog_tick) to restart its
    /// baseline (call after a legitimate time jump the clock cannot see,
    /// e.g. resume from suspend).
    pub fn restart_watchdog(&self) {
        self.restart.store(true, Ordering::Relaxed);
    }

    /// Cross-checks the current source against the next-best eligible one
    /// ([`Watchdog`] with the probe's [`WatchdogConfig`]).
    ///
    /// Call it periodically from one place (a timer), at least every
    /// [`WatchdogConfig::min_interval`] for the checks to judge anything, and
    /// more often than the reference's wrap-safe interval (a 24-bit PM timer:
    /// 2.3 s) or the sample is only used as a new baseline. Concurrent calls
    /// return [`WatchdogEvent::Busy`] rather than wait. Bounded: four source
    /// reads and, on a switch, two more.
    ///
    /// On a `Demote` verdict the current source is demoted and the clock
    /// switches to the best remaining eligible source, continuing from the
    /// last returned instant (no backward step; at most the duration of one
    /// read is lost). A forced source is never switched away from.
    pub fn watchdog_tick(&self) -> WatchdogEvent {
        let Some(mut guard) = self.pair.try_lock() else {
            return WatchdogEvent::Busy;
        };
        if self.pause.is_some_and(|p| p.take_guest_stopped()) {
            *guard = None;
            self.restart.store(false, Ordering::Relaxed);
            return WatchdogEvent::GuestStopped;
        }
        if self.restart.swap(false, Ordering::Relaxed) {
            *guard = None;
            return WatchdogEvent::Restarted;
        }
        let cur = self.current_index();
        let pair = match guard.as_mut() {
            Some(p) if p.current == cur => p,
            _ => {
                let report = self.report();
                let reference = crate::select::best(&report, |c| c.id.index() != cur);
                let (Some(reference), Some(src), Some(c_ref)) = (
                    reference,
                    self.slots[cur].as_ref(),
                    reference.and_then(|r| self.slots[r.index()].as_ref()),
                ) else {
                    *guard = None;
                    return WatchdogEvent::Inactive;
                };
                guard.insert(Pair {
                    current: cur,
                    reference: reference.index(),
                    watchdog: Watchdog::new(
                        src.scale.frequency(),
                        c_ref.scale.frequency(),
                        self.watchdog_config,
                    ),
                    last_source: None,
                })
            }
        };
        let (Some(src), Some(reference)) = (
            self.slots[pair.current].as_ref(),
            self.slots[pair.reference].as_ref(),
        ) else {
            return WatchdogEvent::Inactive;
        };
        let sample = WatchdogSample::take(src.source, reference.source);
        // A gap longer than the reference's wrap-safe interval may have
        // lost a wrap of its software extension: use as a fresh baseline.
        let gap_ns = pair
            .last_source
            .map(|t| src.scale.ticks_to_ns(sample.source.saturating_sub(t)));
        let limit_ns = reference
            .source
            .max_read_interval()
            .map(|t| reference.scale.ticks_to_ns(t));
        pair.last_source = Some(sample.source);
        if let (Some(gap), Some(limit)) = (gap_ns, limit_ns) {
            if gap >= limit {
                pair.watchdog.restart();
                let _ = pair.watchdog.check(sample);
                return WatchdogEvent::Restarted;
            }
        }
        let (source_id, reference_id) = (id_of(pair.current), id_of(pair.reference));
        let verdict = pair.watchdog.check(sample);
        let WatchdogVerdict::Demote { skew_ppm } = verdict else {
            return WatchdogEvent::Judged {
                source: source_id,
                reference: reference_id,
                verdict,
            };
        };
        let reason = if skew_ppm == i64::MIN {
            Demotion::SteppedBack {
                against: reference_id,
            }
        } else {
            Demotion::Drift {
                skew_ppm: skew_ppm.clamp(i32::MIN as i64, i32::MAX as i64),
                against: reference_id,
            }
        };
        self.demotions[pair.current].store(encode(reason), Ordering::Relaxed);
        if self.forced {
            return WatchdogEvent::Judged {
                source: source_id,
                reference: reference_id,
                verdict,
            };
        }
        let report = self.report();
        let Some(to) = crate::select::best(&report, |c| c.id.index() != cur) else {
            return WatchdogEvent::Judged {
                source: source_id,
                reference: reference_id,
                verdict,
            };
        };
        self.switch_to(to.index());
        *guard = None;
        WatchdogEvent::Switched {
            from: source_id,
            to,
            reason,
        }
    }

    /// Makes slot `to` current, continuing the timeline just after every
    /// instant returned so far. Only called with the watchdog lock held.
    fn switch_to(&self, to: usize) {
        let (Some(new), from) = (self.slots[to].as_ref(), self.current_index()) else {
            return;
        };
        // Readers that see the mark (or see it appear after their read)
        // take the clamping path; SeqCst orders the mark before the final
        // reading of the old source below.
        self.state.store(from | SWITCHING, Ordering::SeqCst);
        let old = self.slots[from]
            .as_ref()
            .map_or(0, |s| s.ns(s.source.read()));
        // `slow` is at least every value returned so far, on any path.
        let start = self.guard.slow(old).saturating_add(SWITCH_MARGIN_NS);
        new.base_ticks.store(new.source.read(), Ordering::Relaxed);
        new.base_ns.store(start, Ordering::Relaxed);
        self.state.store(to, Ordering::Release);
        self.switches.fetch_add(1, Ordering::Relaxed);
    }
}

impl Clock<'static> {
    /// Moves the clock into a caller-provided `'static` slot (e.g. from a
    /// `static_cell::StaticCell`) and returns the shared reference the OS
    /// keeps for the life of the system.
    pub fn into_static(
        self,
        slot: &'static mut MaybeUninit<Clock<'static>>,
    ) -> &'static Clock<'static> {
        slot.write(self)
    }
}

fn id_of(i: usize) -> SourceId {
    SourceId::from_index(i).unwrap_or(SourceId::Extra)
}

const KIND_DRIFT: u64 = 1;
const KIND_STEPPED_BACK: u64 = 2;

/// Packs a run-time demotion into a `u64`: kind (bits 56..64), reference
/// (48..56), skew as `i32` (0..32). Zero means none.
fn encode(d: Demotion) -> u64 {
    match d {
        Demotion::Drift { skew_ppm, against } => {
            let skew = skew_ppm.clamp(i32::MIN as i64, i32::MAX as i64) as i32 as u32 as u64;
            KIND_DRIFT << 56 | (against.index() as u64) << 48 | skew
        }
        Demotion::SteppedBack { against } => {
            KIND_STEPPED_BACK << 56 | (against.index() as u64) << 48
        }
        // Self-check demotions live in the probe report, not here.
        _ => 0,
    }
}

fn decode(v: u64) -> Option<Demotion> {
    let against = SourceId::from_index(((v >> 48) & 0xFF) as usize)?;
    match v >> 56 {
        KIND_DRIFT => Some(Demotion::Drift {
            skew_ppm: v as u32 as i32 as i64,
            against,
        }),
        KIND_STEPPED_BACK => Some(Demotion::SteppedBack { against }),
        _ => None,
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for Clock<'_> {
    fn format(&self, f: defmt::Formatter) {
        defmt::write!(
            f,
            "Clock({=str}, {} switches)",
            self.source_name(),
            self.switches()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demotion_encoding_round_trips() {
        for d in [
            Demotion::Drift {
                skew_ppm: -1234,
                against: SourceId::Hpet,
            },
            Demotion::Drift {
                skew_ppm: i32::MAX as i64,
                against: SourceId::Extra,
            },
            Demotion::SteppedBack {
                against: SourceId::AcpiPm,
            },
        ] {
            assert_eq!(decode(encode(d)), Some(d));
        }
        assert_eq!(decode(0), None);
        assert_eq!(encode(Demotion::WentBackwards), 0);
    }
}
