//! One-shot timer events on the clock's timeline.
//!
//! A [`Timer`] arms a deadline given as a clock [`Instant`] on one timer
//! device (anything implementing [`TimerDevice`]: the LAPIC timers of
//! `clockhal-lapic-timer`, the HPET comparator of `clockhal-hpet`, Hyper-V's
//! STIMER0 of `clockhal-hyperv`, or the OS's own). The OS owns the IDT, the
//! vector, EOI and masking; from its vector it calls
//! [`Timer::on_interrupt`], which reads [`Clock::now`] and says
//! [`TimerEvent::Fired`] only once `now` has reached the deadline (never
//! early). A device that fired early, or a long deadline split into
//! device-sized pieces, is re-armed for the rest there and then.
//!
//! [`Clock::select_timer`] ranks candidate devices by their own
//! descriptors, with reasons, as the probe ranks clock sources.
//!
//! Per-CPU devices (the LAPIC, STIMER0) fire on the CPU that armed them:
//! make one `Timer` per CPU over the shared device object, and call that
//! CPU's `Timer` there. TSC-deadline converts the deadline through the
//! calling CPU's current map of the clock (what [`Clock::stamp_converter`]
//! validates), so timer and `now()` agree; call [`Timer::rearm`] when that
//! map may have changed (resume, a host update the OS was told about, a
//! source switch) and on each CPU after bring-up.
//!
//! Lifecycle:
//!
//! | event | what to call |
//! |---|---|
//! | AP bring-up | the device's per-CPU init (e.g. `LapicOneShot::init_this_cpu`), then a `Timer` for the CPU |
//! | resume | the device's per-CPU init on each CPU, then [`Timer::rearm`] |
//! | CPU offline | [`Timer::cancel`], then the device's per-CPU shutdown |
//! | map change (TSC-deadline) | [`Timer::rearm`] on each CPU |
//! | watchdog tick | [`Timer::check_overdue`] |
//!
//! Every entry point here is atomics only: arm, cancel, the interrupt
//! entry and the overdue check never wait for a lock the interrupted code
//! can hold.

mod select;
mod tsc;

pub use clockhal_core::timer::{
    Expiry, TimerDescriptor, TimerDevice, TimerError, TimerMode, TimerScope,
};
pub use select::{TimerChoice, TimerRejection, TimerVerdict, MAX_TIMER_CANDIDATES};

use crate::Clock;
use clockhal_core::timer::{plan_piece, ticks_to_ns_floor, OneShot};
use clockhal_core::{Duration, Frequency, Instant};
use clockhal_x86::Hardware;
use core::fmt;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};

/// Attempts to program one piece when the device reports the expiry was
/// already in the past ([`TimerError::InPast`]); each doubles the count, as
/// Linux's clockevents core raises its minimum delta.
pub const IN_PAST_RETRIES: u32 = 4;

/// Attempts to program the deadline when a concurrent arm or cancel
/// replaced it meanwhile (a global device armed from two CPUs).
pub const PROGRAM_ATTEMPTS: u32 = 4;

/// Default bound past the expected fire after which an armed deadline is
/// overdue ([`Timer::check_overdue`]).
pub const DEFAULT_OVERDUE: Duration = Duration::from_millis(10);

/// Devices one [`Timer`] can fail over between ([`Clock::timer_from`]).
pub const MAX_FALLBACKS: usize = 4;

/// Consecutive overdue findings after which a [`Timer`] with fallbacks
/// moves to its next device.
pub const FAILOVER_AFTER: u32 = 2;

/// How late a programmed TSC-deadline may become through a change of the
/// clock's map before [`Timer::check_overdue`] converts it again.
pub const REMAP_SLACK: Duration = Duration::from_micros(1);

/// No expected fire.
const NONE: u64 = u64::MAX;

/// What a timer interrupt meant (from [`Timer::on_interrupt`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TimerEvent {
    /// `now()` reached the deadline: it is delivered (once) and disarmed.
    Fired {
        /// The deadline.
        deadline: Instant,
        /// `now() - deadline` when the interrupt entry read the clock.
        late_by: Duration,
    },
    /// The device fired before the deadline (early, or one piece of a
    /// long deadline): the rest is programmed. Nothing to deliver.
    Rearmed {
        /// The deadline still pending.
        deadline: Instant,
        /// What was left.
        remaining: Duration,
        /// Whether the re-arm was accepted (an error here leaves the
        /// deadline armed but nothing programmed: [`Timer::check_overdue`]
        /// or a later [`Timer::rearm`] retries).
        programmed: Result<(), TimerError>,
    },
    /// Nothing is armed (cancelled, or already delivered).
    Spurious,
}

/// A deadline the device did not deliver in time (see
/// [`Timer::check_overdue`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Overdue {
    /// The armed deadline.
    pub deadline: Instant,
    /// When the device should have fired (clock time, from its count).
    pub expected_by: Instant,
    /// When the check ran.
    pub now: Instant,
    /// The re-programming the check did (on the new device after a
    /// failover).
    pub reprogrammed: Result<(), TimerError>,
    /// The device the timer moved to ([`FAILOVER_AFTER`] findings in a
    /// row, and a fallback left), by name.
    pub switched_to: Option<&'static str>,
}

impl fmt::Display for Overdue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "timer expected by {} ns, not fired at {} ns (deadline {} ns)",
            self.expected_by.as_nanos(),
            self.now.as_nanos(),
            self.deadline.as_nanos()
        )
    }
}

/// Counts of what a [`Timer`] saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct TimerStats {
    /// Deadlines delivered.
    pub fired: u32,
    /// Interrupts before the deadline, re-armed (early fires and pieces).
    pub rearmed: u32,
    /// Interrupts with nothing armed.
    pub spurious: u32,
    /// Programming attempts the device refused as already in the past.
    pub in_past: u32,
    /// Overdue deadlines found by [`Timer::check_overdue`].
    pub overdue: u32,
    /// TSC-deadlines converted again because the clock's map moved
    /// ([`Timer::check_overdue`], [`REMAP_SLACK`]).
    pub remapped: u32,
    /// Failovers to the next device.
    pub failovers: u32,
}

/// Why [`Clock::timer`] refused a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TimerSetupError {
    /// Its descriptor (or rate) rules it out.
    Rejected(TimerRejection),
    /// [`Clock::timer_from`]: no candidate is usable.
    NoUsableDevice,
}

impl fmt::Display for TimerSetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimerSetupError::Rejected(r) => write!(f, "timer device rejected: {r}"),
            TimerSetupError::NoUsableDevice => f.write_str("no usable timer device"),
        }
    }
}

impl core::error::Error for TimerSetupError {}

/// One-shot deadlines on the clock's timeline over one timer device.
///
/// ```
/// # #[cfg(feature = "tsc")] {
/// use clockhal::timer::{TimerDescriptor, TimerDevice, TimerError, TimerEvent, TimerMode, TimerScope};
/// use clockhal::{Duration, Frequency, Platform};
/// use clockhal_sim::SimMachine;
/// use core::sync::atomic::{AtomicU64, Ordering};
///
/// /// A device that only records the count it was given.
/// struct Fake(AtomicU64);
/// impl TimerDevice for Fake {
///     fn descriptor(&self) -> TimerDescriptor {
///         TimerDescriptor {
///             name: "fake", scope: TimerScope::Global, mode: TimerMode::Delta,
///             max_delta_ticks: u32::MAX as u64, min_delta_ticks: 1, resolution_ns: 1,
///             traps_per_arm: 0, needs_calibrated_rate: false, stops_in_deep_idle: false,
///             rating: 10, rating_reason: "test",
///         }
///     }
///     fn rate(&self) -> Option<Frequency> { Frequency::from_hz(1_000_000_000).ok() }
///     fn program(&self, ticks: u64) -> Result<(), TimerError> { self.0.store(ticks, Ordering::Relaxed); Ok(()) }
///     fn cancel(&self) {}
/// }
///
/// let m = SimMachine::bare_metal();
/// let clock = clockhal::probe(&m, Platform::new()).into_clock().unwrap();
/// let dev = Fake(AtomicU64::new(0));
/// let timer = clock.timer(&dev).unwrap();
/// let deadline = clock.now() + Duration::from_micros(100);
/// timer.arm(deadline).unwrap();
/// assert!(dev.0.load(Ordering::Relaxed) > 0);
/// // The device "fires" at once: too early, so it is re-armed.
/// assert!(matches!(timer.on_interrupt(), TimerEvent::Rearmed { .. }));
/// m.advance(200_000);
/// assert!(matches!(timer.on_interrupt(), TimerEvent::Fired { .. }));
/// # }
/// ```
pub struct Timer<'a, H: Hardware + Clone> {
    clock: &'a Clock<H>,
    /// The device in use and its fallbacks, in rank order; `active`
    /// indexes a `Some`.
    slots: [Option<Slot<'a>>; MAX_FALLBACKS],
    /// `slots[0]`, unwrapped.
    first: Slot<'a>,
    active: AtomicUsize,
    strikes: AtomicU32,
    failovers: AtomicU32,
    state: OneShot,
    /// Clock ns by which the programmed piece should have fired.
    expect_by: AtomicU64,
    /// The counter value last given to `program_at` (absolute devices).
    target: AtomicU64,
    overdue_ns: u64,
    fired: AtomicU32,
    rearmed: AtomicU32,
    spurious: AtomicU32,
    in_past: AtomicU32,
    overdue: AtomicU32,
    remapped: AtomicU32,
}

/// One device of a [`Timer`].
#[derive(Clone, Copy)]
struct Slot<'a> {
    device: &'a dyn TimerDevice,
    desc: TimerDescriptor,
    rate: Option<Frequency>,
}

impl<H: Hardware + Clone> Clock<H> {
    /// A [`Timer`] over `device`, if its descriptor allows one on this
    /// clock ([`TimerRejection`] says why not).
    /// Interrupt-safe: yes.
    pub fn timer<'a>(
        &'a self,
        device: &'a dyn TimerDevice,
    ) -> Result<Timer<'a, H>, TimerSetupError> {
        let desc = device.descriptor();
        let rate = device.rate();
        if let Some(r) = select::rejection(self, &desc, rate) {
            return Err(TimerSetupError::Rejected(r));
        }
        let first = Slot { device, desc, rate };
        let mut slots = [None; MAX_FALLBACKS];
        slots[0] = Some(first);
        Ok(self.timer_over(first, slots))
    }

    /// A [`Timer`] over the usable devices of `choice`, best first (up to
    /// [`MAX_FALLBACKS`]): it starts on the selected one and moves to the
    /// next after [`FAILOVER_AFTER`] overdue findings in a row
    /// ([`Timer::check_overdue`]). The OS routes every one of their
    /// interrupts to [`Timer::on_interrupt`].
    /// Interrupt-safe: yes.
    pub fn timer_from<'a>(
        &'a self,
        choice: &TimerChoice<'a>,
    ) -> Result<Timer<'a, H>, TimerSetupError> {
        let mut slots = [None; MAX_FALLBACKS];
        let usable = choice
            .iter()
            .filter(|e| !matches!(e.2, TimerVerdict::Rejected(_)));
        for (slot, (device, desc, _)) in slots.iter_mut().zip(usable) {
            *slot = Some(Slot {
                device,
                desc,
                rate: device.rate(),
            });
        }
        let first = slots[0].ok_or(TimerSetupError::NoUsableDevice)?;
        Ok(self.timer_over(first, slots))
    }

    fn timer_over<'a>(
        &'a self,
        first: Slot<'a>,
        slots: [Option<Slot<'a>>; MAX_FALLBACKS],
    ) -> Timer<'a, H> {
        Timer {
            clock: self,
            slots,
            first,
            active: AtomicUsize::new(0),
            strikes: AtomicU32::new(0),
            failovers: AtomicU32::new(0),
            state: OneShot::new(),
            expect_by: AtomicU64::new(NONE),
            target: AtomicU64::new(NONE),
            overdue_ns: DEFAULT_OVERDUE.as_nanos(),
            fired: AtomicU32::new(0),
            rearmed: AtomicU32::new(0),
            spurious: AtomicU32::new(0),
            in_past: AtomicU32::new(0),
            overdue: AtomicU32::new(0),
            remapped: AtomicU32::new(0),
        }
    }
}

impl<'a, H: Hardware + Clone> Timer<'a, H> {
    /// The same timer with another overdue bound (how long past its
    /// expected fire an armed piece may stay silent).
    /// Interrupt-safe: yes.
    pub fn with_overdue_bound(mut self, bound: Duration) -> Self {
        self.overdue_ns = bound.as_nanos();
        self
    }

    /// The device in use.
    fn cur(&self) -> Slot<'a> {
        // `active` only ever names a filled slot (construction fills slot
        // 0; a failover moves only onto a filled one).
        let i = self.active.load(Relaxed);
        self.slots.get(i).copied().flatten().unwrap_or(self.first)
    }

    /// The descriptor of the device in use (as read when the timer was
    /// made).
    /// Interrupt-safe: yes.
    pub fn descriptor(&self) -> TimerDescriptor {
        self.cur().desc
    }

    /// The clock whose timeline the deadlines are on.
    /// Interrupt-safe: yes.
    pub fn clock(&self) -> &'a Clock<H> {
        self.clock
    }

    /// The device in use.
    /// Interrupt-safe: yes.
    pub fn device(&self) -> &'a dyn TimerDevice {
        self.cur().device
    }

    /// The armed deadline, if any.
    /// Interrupt-safe: yes.
    pub fn deadline(&self) -> Option<Instant> {
        self.state.deadline().map(Instant::from_nanos)
    }

    /// What this timer saw so far.
    /// Interrupt-safe: yes.
    pub fn stats(&self) -> TimerStats {
        TimerStats {
            fired: self.fired.load(Relaxed),
            rearmed: self.rearmed.load(Relaxed),
            spurious: self.spurious.load(Relaxed),
            in_past: self.in_past.load(Relaxed),
            overdue: self.overdue.load(Relaxed),
            remapped: self.remapped.load(Relaxed),
            failovers: self.failovers.load(Relaxed),
        }
    }

    /// Arms `deadline` (replacing any armed one) and programs the device:
    /// a deadline longer than the device's reach is programmed as its
    /// longest piece and re-armed at each interrupt; one at or before
    /// `now()` is programmed as the device's shortest count, so its
    /// interrupt comes at once.
    ///
    /// Errors leave the deadline armed (so the next interrupt or
    /// [`check_overdue`](Self::check_overdue) still sees it). In
    /// particular [`TimerError::InPast`] after [`IN_PAST_RETRIES`] means
    /// the device could not be given an expiry in the future: treat the
    /// deadline as due and call [`on_interrupt`](Self::on_interrupt).
    /// Interrupt-safe: yes.
    pub fn arm(&self, deadline: Instant) -> Result<(), TimerError> {
        self.state.arm(deadline.as_nanos());
        self.program_current()
    }

    /// Disarms: `true` if a deadline was pending (then it will not be
    /// reported), `false` if none was or the interrupt already took it.
    /// Interrupt-safe: yes.
    pub fn cancel(&self) -> bool {
        let was = self.state.cancel().is_some();
        self.cur().device.cancel();
        self.expect_by.store(NONE, Relaxed);
        // An arm that landed after the disarm (an interrupt inside this
        // call, another CPU) may have programmed the device before the
        // cancel above wiped it: its deadline is programmed again.
        if self.state.deadline().is_some() {
            let _ = self.program_current();
        }
        was
    }

    /// Programs the armed deadline again from the current clock and map:
    /// after resume, on a new CPU, or when the clock's map changed
    /// (TSC-deadline). Nothing when nothing is armed.
    /// Interrupt-safe: yes.
    pub fn rearm(&self) -> Result<(), TimerError> {
        self.program_current()
    }

    /// The interrupt entry: call it from the timer's vector (before or
    /// after EOI, as the OS does). Reads `now()` once and compares.
    /// Interrupt-safe: yes.
    pub fn on_interrupt(&self) -> TimerEvent {
        for _ in 0..IN_PAST_RETRIES {
            let now = self.clock.now().as_nanos();
            match self.state.on_interrupt(now) {
                Expiry::Fired { deadline_ns } => {
                    self.expect_by.store(NONE, Relaxed);
                    self.strikes.store(0, Relaxed);
                    self.fired.fetch_add(1, Relaxed);
                    return TimerEvent::Fired {
                        deadline: Instant::from_nanos(deadline_ns),
                        late_by: Duration::from_nanos(now - deadline_ns),
                    };
                }
                Expiry::Rearm {
                    deadline_ns,
                    remaining_ns,
                } => {
                    self.rearmed.fetch_add(1, Relaxed);
                    let programmed = self.program_current();
                    // The device could not take an expiry in the future:
                    // the deadline is (nearly) due, look again.
                    if programmed == Err(TimerError::InPast) {
                        continue;
                    }
                    return TimerEvent::Rearmed {
                        deadline: Instant::from_nanos(deadline_ns),
                        remaining: Duration::from_nanos(remaining_ns),
                        programmed,
                    };
                }
                Expiry::Spurious => {
                    self.spurious.fetch_add(1, Relaxed);
                    return TimerEvent::Spurious;
                }
            }
        }
        // Still not due and still refused: leave it to the overdue check.
        match self.state.deadline() {
            Some(d) => TimerEvent::Rearmed {
                deadline: Instant::from_nanos(d),
                remaining: Duration::from_nanos(d.saturating_sub(self.clock.now().as_nanos())),
                programmed: Err(TimerError::InPast),
            },
            None => TimerEvent::Spurious,
        }
    }

    /// The distrust check, for a watchdog tick or another interrupt (never
    /// on `now()`'s path): an armed deadline whose programmed piece should
    /// have fired more than the overdue bound ago (a dropped arm, a device
    /// that stopped in a deep C-state) is reported, counted and programmed
    /// again. `None`: nothing overdue.
    ///
    /// For a TSC-deadline it also converts the deadline again when the
    /// clock's map moved so far that the programmed TSC value would now
    /// fire more than [`REMAP_SLACK`] late (an earlier fire needs nothing:
    /// the interrupt re-arms it), counted in [`TimerStats::remapped`].
    /// Interrupt-safe: yes.
    pub fn check_overdue(&self) -> Option<Overdue> {
        let deadline = self.state.deadline()?;
        let by = self.expect_by.load(Relaxed);
        let now = self.clock.now().as_nanos();
        if self.cur().desc.mode == TimerMode::AbsoluteCounter
            && by != NONE
            && self.map_moved(deadline)
        {
            self.remapped.fetch_add(1, Relaxed);
            let _ = self.program_current();
        }
        let expected_by = if by == NONE {
            // Armed but nothing programmed (an earlier error): retry, and
            // report only once the deadline itself is overdue.
            let r = self.program_current();
            if r.is_ok() || now <= deadline.saturating_add(self.overdue_ns) {
                return None;
            }
            deadline
        } else {
            if now <= by.saturating_add(self.overdue_ns) {
                return None;
            }
            by
        };
        self.overdue.fetch_add(1, Relaxed);
        let switched_to = self.maybe_fail_over();
        Some(Overdue {
            deadline: Instant::from_nanos(deadline),
            expected_by: Instant::from_nanos(expected_by),
            now: Instant::from_nanos(now),
            reprogrammed: self.program_current(),
            switched_to,
        })
    }

    /// One more strike against the device in use; at [`FAILOVER_AFTER`]
    /// the next device (if any) takes over: the old one is cancelled.
    fn maybe_fail_over(&self) -> Option<&'static str> {
        let strikes = self.strikes.fetch_add(1, Relaxed) + 1;
        if strikes < FAILOVER_AFTER {
            return None;
        }
        let i = self.active.load(Relaxed);
        let next = self.slots.get(i + 1).copied().flatten()?;
        // One CPU wins the move; a racing check sees the new index.
        if self
            .active
            .compare_exchange(i, i + 1, Relaxed, Relaxed)
            .is_err()
        {
            return None;
        }
        if let Some(old) = self.slots[i] {
            old.device.cancel();
        }
        self.strikes.store(0, Relaxed);
        self.failovers.fetch_add(1, Relaxed);
        Some(next.desc.name)
    }

    /// Whether the programmed TSC target now maps past `deadline` plus
    /// [`REMAP_SLACK`] (no map now: `false`, nothing better to program).
    fn map_moved(&self, deadline: u64) -> bool {
        let target = self.target.load(Relaxed);
        if target == NONE {
            return false;
        }
        let Some(conv) = self.clock.converter(false) else {
            return false;
        };
        conv.instant(crate::Stamp::from_tsc(target))
            .is_some_and(|at| at.as_nanos() > deadline.saturating_add(REMAP_SLACK.as_nanos()))
    }

    /// Programs the armed deadline; retried when a concurrent arm replaced
    /// it meanwhile (bounded: after [`PROGRAM_ATTEMPTS`] the racing arm
    /// programs its own).
    fn program_current(&self) -> Result<(), TimerError> {
        let mut result = Ok(());
        for _ in 0..PROGRAM_ATTEMPTS {
            let Some(d) = self.state.deadline() else {
                return Ok(());
            };
            result = self.program_once(d);
            if self.state.deadline() == Some(d) {
                return result;
            }
        }
        result
    }

    fn program_once(&self, deadline: u64) -> Result<(), TimerError> {
        let now = self.clock.now().as_nanos();
        let slot = self.cur();
        match slot.desc.mode {
            TimerMode::Delta => {
                let rate = slot.rate.ok_or(TimerError::NoRate)?;
                let (min, max) = (slot.desc.min_delta_ticks, slot.desc.max_delta_ticks);
                let mut ticks = plan_piece(deadline.saturating_sub(now), rate, min, max)?;
                for _ in 0..IN_PAST_RETRIES {
                    match slot.device.program(ticks) {
                        Ok(()) => {
                            // The piece's time at the device's rate, rounded
                            // up by one ns (the conversion floors).
                            let piece = ticks_to_ns_floor(rate, ticks).saturating_add(1);
                            self.expect_by.store(now.saturating_add(piece), Relaxed);
                            return Ok(());
                        }
                        Err(TimerError::InPast) => {
                            self.in_past.fetch_add(1, Relaxed);
                            ticks = ticks.saturating_mul(2).min(max);
                        }
                        Err(e) => {
                            self.expect_by.store(NONE, Relaxed);
                            return Err(e);
                        }
                    }
                }
                self.expect_by.store(NONE, Relaxed);
                Err(TimerError::InPast)
            }
            TimerMode::AbsoluteCounter => {
                let target = tsc::tsc_for(self.clock, deadline).ok_or(TimerError::NoMap)?;
                let (mut min, max) = (slot.desc.min_delta_ticks, slot.desc.max_delta_ticks);
                for _ in 0..IN_PAST_RETRIES {
                    // Within the device's reach of the counter now (a piece
                    // beyond it: the interrupt re-arms), and at least its
                    // shortest distance ahead (a due deadline fires at once).
                    let counter = self.clock.stamp().tsc();
                    let hi = counter.saturating_add(max);
                    let at = target.max(counter.saturating_add(min)).min(hi);
                    match slot.device.program_at(at) {
                        Ok(()) => {
                            self.target.store(at, Relaxed);
                            let fires = if at < target {
                                tsc::instant_of(self.clock, at).unwrap_or(deadline)
                            } else {
                                deadline
                            };
                            self.expect_by.store(fires.max(now), Relaxed);
                            return Ok(());
                        }
                        Err(TimerError::InPast) => {
                            self.in_past.fetch_add(1, Relaxed);
                            min = min.max(1).saturating_mul(2).min(max);
                        }
                        Err(e) => {
                            self.expect_by.store(NONE, Relaxed);
                            return Err(e);
                        }
                    }
                }
                self.expect_by.store(NONE, Relaxed);
                Err(TimerError::InPast)
            }
        }
    }
}

impl<H: Hardware + Clone> fmt::Debug for Timer<'_, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timer")
            .field("device", &self.cur().desc.name)
            .field("deadline", &self.state.deadline())
            .field("stats", &self.stats())
            .finish()
    }
}
