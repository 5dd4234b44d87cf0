//! One-shot timer events on the clock's timeline: what a timer device is
//! ([`TimerDevice`], [`TimerDescriptor`]), exact ns -> tick conversion that
//! rounds **up** ([`ns_to_ticks_ceil`]), the plan for one programmed piece
//! ([`plan_piece`]) and the lock-free deadline state ([`OneShot`]).
//!
//! The rule every part keeps: **nothing fires early**. A deadline is a
//! point on the clock's nanosecond timeline. A device counts its own ticks at
//! a rate that may be a little off (a calibrated LAPIC), may be shorter than
//! the deadline (a 32-bit count), or may simply fire early (a hypervisor
//! that rounds). So a device interrupt is only a hint: [`OneShot::on_interrupt`]
//! compares the clock's `now` with the deadline and says [`Expiry::Fired`]
//! only when `now >= deadline`; otherwise it says how much is left
//! ([`Expiry::Rearm`]) and the caller programs the next piece.
//!
//! ```
//! use clockhal_core::timer::{plan_piece, Expiry, OneShot};
//! use clockhal_core::Frequency;
//!
//! let rate = Frequency::from_hz(1_000_000).unwrap(); // 1 count per µs
//! let t = OneShot::new();
//! t.arm(10_000);                                     // fire at 10 µs
//! // A device with a 16-bit count: the 10 µs deadline fits in one piece.
//! assert_eq!(plan_piece(10_000, rate, 1, 0xffff), Ok(10));
//! // The device fired 1 µs early (its rate is off): not reported as fired.
//! assert_eq!(t.on_interrupt(9_000), Expiry::Rearm { deadline_ns: 10_000, remaining_ns: 1_000 });
//! assert_eq!(t.on_interrupt(10_000), Expiry::Fired { deadline_ns: 10_000 });
//! assert_eq!(t.on_interrupt(10_500), Expiry::Spurious); // fired once only
//! ```

use crate::Frequency;
use core::fmt;

/// Whether a timer device interrupts one CPU or can serve any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TimerScope {
    /// One instance per CPU, firing on that CPU (the LAPIC timer, Hyper-V's
    /// synthetic timers): each CPU arms its own, and a deadline converted
    /// through a per-CPU counter (TSC-deadline) is re-armed on each CPU when
    /// the clock's map changes.
    PerCpu,
    /// One device for the machine (an HPET comparator): it fires on the CPU
    /// its interrupt is routed to.
    Global,
}

impl fmt::Display for TimerScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimerScope::PerCpu => "per-CPU",
            TimerScope::Global => "global",
        })
    }
}

/// How a device is programmed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TimerMode {
    /// A count of ticks from now ([`TimerDevice::program`]): LAPIC one-shot,
    /// HPET comparator (the device adds its counter), Hyper-V STIMER.
    Delta,
    /// An absolute value of a counter the clock also reads
    /// ([`TimerDevice::program_at`]): LAPIC TSC-deadline. The caller converts
    /// the deadline through the clock's own map, so timer and `now()` agree.
    AbsoluteCounter,
}

/// A timer device's honest description, like a clock source's flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct TimerDescriptor {
    /// Short stable identifier (`"lapic-tsc-deadline"`, `"hpet-comparator"`).
    pub name: &'static str,
    /// Per-CPU or global.
    pub scope: TimerScope,
    /// Delta or absolute programming.
    pub mode: TimerMode,
    /// Largest count one [`TimerDevice::program`] accepts (for
    /// [`TimerMode::AbsoluteCounter`]: the largest distance from the
    /// counter's current value; `u64::MAX` for a 64-bit deadline). `0` means
    /// the device cannot be programmed at all.
    pub max_delta_ticks: u64,
    /// Smallest count the device accepts and still fires (>= 1).
    pub min_delta_ticks: u64,
    /// Granularity of one tick in ns, rounded up (0 when the rate is not
    /// known yet).
    pub resolution_ns: u64,
    /// Hypervisor exits one arm costs (0 on bare metal and for an emulated
    /// register the hypervisor lets through; 1 for a trapped MSR or MMIO write).
    pub traps_per_arm: u8,
    /// Whether the device's rate must be measured against the clock first
    /// (a LAPIC whose rate no CPUID leaf or MSR states).
    pub needs_calibrated_rate: bool,
    /// Whether the device stops counting in deep C-states (a LAPIC without
    /// ARAT, CPUID.6:EAX bit 2): an idle CPU then needs another timer.
    pub stops_in_deep_idle: bool,
    /// Rank among timer devices, higher is better (Linux's clockevent
    /// ratings, roughly: TSC-deadline 150, Hyper-V STIMER 1000 under
    /// Hyper-V, LAPIC 100, HPET 50).
    pub rating: u16,
    /// Why this rating on this machine, for the selection report.
    pub rating_reason: &'static str,
}

/// Why a device could not be programmed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum TimerError {
    /// The device's rate is unknown (not stated, not calibrated) or zero.
    NoRate,
    /// The device accepts no count at all (`max_delta_ticks == 0`, or a
    /// minimum above the maximum).
    Unprogrammable,
    /// The count is outside `min_delta_ticks ..= max_delta_ticks`.
    OutOfRange {
        /// The count asked for.
        ticks: u64,
    },
    /// The expiry was already in the past when the device was written (an
    /// HPET comparator written behind its counter, Linux's `-ETIME`): the
    /// device will not fire for it. The caller treats the deadline as due
    /// now (or programs again with a larger count).
    InPast,
    /// The device does not support this kind of programming (an absolute
    /// deadline on a delta device).
    Unsupported,
    /// The device refused or dropped the arm (found by a read-back).
    Dropped,
    /// An absolute deadline needs the clock's map of the device's counter
    /// (TSC-deadline: a TSC-based clock source), and there is none now.
    NoMap,
}

impl fmt::Display for TimerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimerError::NoRate => f.write_str("timer rate unknown or zero"),
            TimerError::Unprogrammable => f.write_str("timer accepts no count"),
            TimerError::OutOfRange { ticks } => {
                write!(f, "count {ticks} outside the timer's range")
            }
            TimerError::InPast => f.write_str("expiry was in the past when written"),
            TimerError::Unsupported => f.write_str("programming mode not supported"),
            TimerError::Dropped => f.write_str("the device dropped the arm"),
            TimerError::NoMap => f.write_str("no clock map of the device's counter"),
        }
    }
}

impl core::error::Error for TimerError {}

/// A one-shot timer device.
///
/// Contract for implementors: every method is interrupt-safe (called from
/// the OS's timer vector) and never waits for a lock. A device may fire
/// late or early; clockhal checks the clock at every interrupt, so a device
/// never has to be exact, only honest in its [`descriptor`](Self::descriptor).
pub trait TimerDevice: Sync {
    /// What the device is on this machine.
    /// Interrupt-safe: yes.
    fn descriptor(&self) -> TimerDescriptor;

    /// The rate of the device's ticks, `None` while unknown (not calibrated).
    /// Interrupt-safe: yes.
    fn rate(&self) -> Option<Frequency>;

    /// Fire once, `ticks` device ticks from now (replacing any pending
    /// expiry). `ticks` is in `min_delta_ticks ..= max_delta_ticks`.
    /// Interrupt-safe: yes.
    fn program(&self, ticks: u64) -> Result<(), TimerError>;

    /// Fire once when the device's counter reaches `counter` (only for
    /// [`TimerMode::AbsoluteCounter`]). The default is
    /// [`TimerError::Unsupported`].
    /// Interrupt-safe: yes.
    fn program_at(&self, counter: u64) -> Result<(), TimerError> {
        let _ = counter;
        Err(TimerError::Unsupported)
    }

    /// Stop a pending expiry (an interrupt already raised may still arrive:
    /// [`OneShot::on_interrupt`] then says [`Expiry::Spurious`]).
    /// Interrupt-safe: yes.
    fn cancel(&self);

    /// The device's counter, where it has one the caller may read (the
    /// LAPIC current count, the HPET main counter).
    /// Interrupt-safe: yes.
    fn counter(&self) -> Option<u64> {
        None
    }
}

/// `ceil(ns * rate / 10^9)` ticks, exact, saturating at `u64::MAX`: a count
/// that never expires before `ns` have passed at `rate`.
///
/// Exact for every [`Frequency`]: `ns * numerator` fits in 128 bits, and so
/// does `10^9 * denominator`.
/// Interrupt-safe: yes.
///
/// ```
/// use clockhal_core::{timer::ns_to_ticks_ceil, Frequency};
/// let hpet = Frequency::from_period_fs(69_841_279).unwrap(); // 14.318 MHz
/// assert_eq!(ns_to_ticks_ceil(hpet, 1_000), 15); // 14.3 ticks: 15, not 14
/// assert_eq!(ns_to_ticks_ceil(hpet, 0), 0);
/// ```
pub const fn ns_to_ticks_ceil(rate: Frequency, ns: u64) -> u64 {
    let num = ns as u128 * rate.numerator() as u128;
    let den = 1_000_000_000u128 * rate.denominator() as u128;
    let q = num.div_ceil(den);
    if q > u64::MAX as u128 {
        u64::MAX
    } else {
        q as u64
    }
}

/// `floor(ticks * 10^9 / rate)` ns, exact, saturating at `u64::MAX`: the
/// time `ticks` take at least (for a device's maximum delta in ns, so that a
/// piece of that length never needs more ticks than the device has).
/// Interrupt-safe: yes.
///
/// ```
/// use clockhal_core::{timer::ticks_to_ns_floor, Frequency};
/// let lapic = Frequency::from_hz(1_000_000_000).unwrap();
/// assert_eq!(ticks_to_ns_floor(lapic, u32::MAX as u64), 4_294_967_295);
/// ```
pub const fn ticks_to_ns_floor(rate: Frequency, ticks: u64) -> u64 {
    let num = ticks as u128 * 1_000_000_000u128;
    // ticks * 1e9 * den is exact when it fits in 128 bits (every whole-Hz
    // rate and real HPET period).
    let den = rate.numerator() as u128;
    let q = match num.checked_mul(rate.denominator() as u128) {
        Some(n) => n / den,
        // Only for denominators above ~2^34 with huge counts: floor of the
        // product of two floors is a lower bound, which is what callers need.
        None => (num / den).saturating_mul(rate.denominator() as u128),
    };
    if q > u64::MAX as u128 {
        u64::MAX
    } else {
        q as u64
    }
}

/// One tick of `rate` in ns, rounded up (a descriptor's resolution).
/// Interrupt-safe: yes.
///
/// ```
/// use clockhal_core::{timer::ns_per_tick_ceil, Frequency};
/// assert_eq!(ns_per_tick_ceil(Frequency::from_hz(3_579_545).unwrap()), 280);
/// assert_eq!(ns_per_tick_ceil(Frequency::from_hz(1 << 40).unwrap()), 1);
/// ```
pub const fn ns_per_tick_ceil(rate: Frequency) -> u64 {
    let num = 1_000_000_000u128 * rate.denominator() as u128;
    let q = num.div_ceil(rate.numerator() as u128);
    if q > u64::MAX as u128 {
        u64::MAX
    } else {
        q as u64
    }
}

/// The count to program for `remaining_ns` on a device of `rate` accepting
/// `min_ticks ..= max_ticks`: rounded up, at least `min_ticks` (a deadline
/// due now, or in the past, fires at the device's earliest), at most
/// `max_ticks` (a long deadline goes in device-sized pieces: the device then
/// fires before the deadline and [`OneShot::on_interrupt`] asks for the
/// next piece).
///
/// Errors: [`TimerError::Unprogrammable`] when `max_ticks == 0` or
/// `min_ticks > max_ticks`. A `min_ticks` of 0 is treated as 1 (a count of
/// zero stops a LAPIC instead of firing it).
/// Interrupt-safe: yes.
///
/// ```
/// use clockhal_core::timer::{plan_piece, TimerError};
/// use clockhal_core::Frequency;
/// let f = Frequency::from_hz(1_000).unwrap(); // 1 tick per ms
/// assert_eq!(plan_piece(2_500_000, f, 1, 100), Ok(3));     // 2.5 ms: 3 ticks
/// assert_eq!(plan_piece(0, f, 1, 100), Ok(1));             // due: at once
/// assert_eq!(plan_piece(u64::MAX, f, 1, 100), Ok(100));    // a piece
/// assert_eq!(plan_piece(1, f, 1, 0), Err(TimerError::Unprogrammable));
/// ```
pub const fn plan_piece(
    remaining_ns: u64,
    rate: Frequency,
    min_ticks: u64,
    max_ticks: u64,
) -> Result<u64, TimerError> {
    let min = if min_ticks == 0 { 1 } else { min_ticks };
    if max_ticks == 0 || min > max_ticks {
        return Err(TimerError::Unprogrammable);
    }
    let t = ns_to_ticks_ceil(rate, remaining_ns);
    Ok(if t < min {
        min
    } else if t > max_ticks {
        max_ticks
    } else {
        t
    })
}

/// What a timer interrupt meant, decided against the clock's `now`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Expiry {
    /// `now >= deadline`: the deadline is reached and is now disarmed
    /// (reported exactly once per arm).
    Fired {
        /// The deadline that fired, clock ns.
        deadline_ns: u64,
    },
    /// The device fired before the deadline (early, or it was programmed
    /// with a piece of a long deadline): program `remaining_ns` more
    /// (through [`plan_piece`]). Still armed.
    Rearm {
        /// The deadline still pending, clock ns.
        deadline_ns: u64,
        /// `deadline - now`, > 0.
        remaining_ns: u64,
    },
    /// Nothing is armed (cancelled, or already fired): ignore the interrupt.
    Spurious,
}

#[cfg(target_has_atomic = "64")]
pub use one_shot::OneShot;

#[cfg(target_has_atomic = "64")]
mod one_shot {
    use super::Expiry;
    use crate::sync::{AtomicU64, Ordering};

    /// No deadline armed. `arm(u64::MAX)` is stored as `u64::MAX - 1`
    /// (584 years: it never fires in practice either way).
    const DISARMED: u64 = u64::MAX;

    /// One armed deadline (or none), shared by the arming code and the
    /// timer interrupt: one atomic word, so arm, cancel and the interrupt
    /// entry never wait for anything, on one CPU or across CPUs.
    ///
    /// Races decide by one atomic operation: a cancel and an interrupt that
    /// meet over the same deadline either see the cancel first (the
    /// interrupt is [`Expiry::Spurious`], `cancel` returns `true`) or the
    /// fire first (the interrupt says [`Expiry::Fired`], `cancel` returns
    /// `false`), never both and never neither. A re-arm with the same
    /// deadline between an interrupt's load and its claim is claimed as
    /// fired, which is right: its deadline is reached too.
    #[derive(Debug)]
    pub struct OneShot {
        deadline: AtomicU64,
    }

    impl Default for OneShot {
        fn default() -> Self {
            Self::new()
        }
    }

    impl OneShot {
        /// Nothing armed.
        /// Interrupt-safe: yes.
        #[cfg(not(loom))]
        pub const fn new() -> OneShot {
            OneShot {
                deadline: AtomicU64::new(DISARMED),
            }
        }

        /// Nothing armed (loom's atomics are not const).
        /// Interrupt-safe: yes.
        #[cfg(loom)]
        pub fn new() -> OneShot {
            OneShot {
                deadline: AtomicU64::new(DISARMED),
            }
        }

        /// Arm `deadline_ns` (clock ns), replacing any armed deadline, which
        /// is returned. A deadline at or before `now` is allowed: the next
        /// interrupt reports it as fired (program the device's minimum).
        /// Interrupt-safe: yes.
        pub fn arm(&self, deadline_ns: u64) -> Option<u64> {
            let d = deadline_ns.min(DISARMED - 1);
            let old = self.deadline.swap(d, Ordering::AcqRel);
            (old != DISARMED).then_some(old)
        }

        /// Disarm; the armed deadline, if one was pending (`None`: nothing
        /// was armed or an interrupt already reported it fired).
        /// Interrupt-safe: yes.
        pub fn cancel(&self) -> Option<u64> {
            let old = self.deadline.swap(DISARMED, Ordering::AcqRel);
            (old != DISARMED).then_some(old)
        }

        /// The armed deadline, if any.
        /// Interrupt-safe: yes.
        pub fn deadline(&self) -> Option<u64> {
            let d = self.deadline.load(Ordering::Acquire);
            (d != DISARMED).then_some(d)
        }

        /// The timer interrupt, at clock time `now_ns` (read after the
        /// interrupt arrived): [`Expiry::Fired`] only when `now_ns >=
        /// deadline`, exactly once per arm; [`Expiry::Rearm`] with what is
        /// left when the device fired early; [`Expiry::Spurious`] when
        /// nothing is armed.
        ///
        /// Bounded: the claim is one compare-exchange, retried only when the
        /// deadline changed meanwhile (a concurrent arm/cancel), at most
        /// [`CLAIM_ATTEMPTS`](Self::CLAIM_ATTEMPTS) times, after which the
        /// interrupt is reported as a re-arm of the newest deadline or
        /// spurious (the concurrent arm programs its own device count).
        /// Interrupt-safe: yes.
        pub fn on_interrupt(&self, now_ns: u64) -> Expiry {
            let mut d = self.deadline.load(Ordering::Acquire);
            for _ in 0..Self::CLAIM_ATTEMPTS {
                if d == DISARMED {
                    return Expiry::Spurious;
                }
                if now_ns < d {
                    return Expiry::Rearm {
                        deadline_ns: d,
                        remaining_ns: d - now_ns,
                    };
                }
                match self.deadline.compare_exchange(
                    d,
                    DISARMED,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return Expiry::Fired { deadline_ns: d },
                    Err(newer) => d = newer,
                }
            }
            // Still contended: never claim a fire we did not win.
            match d {
                DISARMED => Expiry::Spurious,
                d if now_ns < d => Expiry::Rearm {
                    deadline_ns: d,
                    remaining_ns: d - now_ns,
                },
                _ => Expiry::Spurious,
            }
        }

        /// Compare-exchange attempts of one [`on_interrupt`](Self::on_interrupt).
        pub const CLAIM_ATTEMPTS: usize = 8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use num_bigint::BigUint;
    use proptest::prelude::*;

    fn hz(h: u64) -> Frequency {
        Frequency::from_hz(h).unwrap()
    }

    #[test]
    fn zero_rate_is_no_frequency() {
        // A zero rate cannot reach the conversions: Frequency refuses it,
        // and a device without a rate says None (the facade's NoRate).
        assert!(Frequency::from_hz(0).is_err());
        assert!(Frequency::from_period_fs(0).is_err());
    }

    #[test]
    fn ceil_rounds_up_never_down() {
        let f = hz(3); // one tick per 333,333,333.3 ns
        assert_eq!(ns_to_ticks_ceil(f, 1), 1);
        assert_eq!(ns_to_ticks_ceil(f, 333_333_333), 1);
        assert_eq!(ns_to_ticks_ceil(f, 333_333_334), 2);
        assert_eq!(ns_to_ticks_ceil(f, 1_000_000_000), 3);
        assert_eq!(ns_to_ticks_ceil(hz(1 << 40), u64::MAX), u64::MAX);
        assert_eq!(
            ns_to_ticks_ceil(hz(1), u64::MAX),
            u64::MAX.div_ceil(1_000_000_000)
        );
    }

    fn any_freq() -> impl Strategy<Value = Frequency> {
        prop_oneof![
            (1u64..=(1 << 40)).prop_map(hz),
            (100_000u64..=100_000_000).prop_map(|fs| Frequency::from_period_fs(fs).unwrap()),
            (1u128..=u64::MAX as u128, 1u128..=u64::MAX as u128)
                .prop_filter_map("in range", |(n, d)| Frequency::from_ratio(n, d).ok()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 16 } else { 5_000 }))]
        /// The count never expires early: ticks / rate >= ns, and one tick
        /// fewer would (exact rationals).
        #[test]
        fn ceil_is_exact(f in any_freq(), ns in any::<u64>()) {
            let t = ns_to_ticks_ceil(f, ns);
            let (n, d) = (BigUint::from(f.numerator()), BigUint::from(f.denominator()));
            let lhs = |t: u64| BigUint::from(t) * BigUint::from(1_000_000_000u64) * &d;
            let rhs = BigUint::from(ns) * &n;
            if t < u64::MAX {
                prop_assert!(lhs(t) >= rhs, "t={t} too short");
                if t > 0 {
                    prop_assert!(lhs(t - 1) < rhs, "t={t} not the least");
                }
            }
        }

        /// ticks_to_ns_floor is a lower bound within one ns of exact.
        #[test]
        fn floor_is_lower_bound(f in any_freq(), t in any::<u64>()) {
            let got = ticks_to_ns_floor(f, t);
            let exact = BigUint::from(t) * BigUint::from(1_000_000_000u64)
                * BigUint::from(f.denominator()) / BigUint::from(f.numerator());
            if exact < BigUint::from(u64::MAX) {
                prop_assert!(BigUint::from(got) <= exact);
            }
        }

        /// A piece never exceeds the device's range and is at least 1.
        #[test]
        fn piece_in_range(rem in any::<u64>(), f in any_freq(), min in 0u64..4, max in 1u64..1000) {
            match plan_piece(rem, f, min, max) {
                Ok(t) => prop_assert!(t >= min.max(1) && t <= max),
                Err(e) => {
                    prop_assert_eq!(e, TimerError::Unprogrammable);
                    prop_assert!(min > max);
                }
            }
        }
    }

    #[test]
    fn floor_exact_for_named_rates() {
        let hpet = Frequency::from_period_fs(69_841_279).unwrap();
        // 2^32 ticks of 69.841279 ns = 299,966,445,... ns (floor).
        let exact = (1u128 << 32) * 69_841_279 / 1_000_000;
        assert_eq!(ticks_to_ns_floor(hpet, 1 << 32) as u128, exact);
        assert_eq!(ticks_to_ns_floor(hz(1), u64::MAX), u64::MAX);
    }

    #[test]
    fn hostile_device_ranges() {
        let f = hz(1_000_000_000);
        // max delta 0: nothing can be programmed.
        assert_eq!(plan_piece(5, f, 1, 0), Err(TimerError::Unprogrammable));
        assert_eq!(plan_piece(0, f, 0, 0), Err(TimerError::Unprogrammable));
        // min above max.
        assert_eq!(plan_piece(5, f, 10, 9), Err(TimerError::Unprogrammable));
        // max delta 1: every deadline goes one tick at a time.
        assert_eq!(plan_piece(u64::MAX, f, 1, 1), Ok(1));
        assert_eq!(plan_piece(0, f, 0, 1), Ok(1));
    }

    /// Drives a long deadline through a device of `max` ticks: each piece
    /// fires at the programmed count exactly; the deadline arrives, never
    /// early, after ceil(deadline / piece) interrupts.
    #[test]
    fn long_deadline_in_pieces() {
        let f = hz(1_000); // 1 ms per tick
        let t = OneShot::new();
        let deadline = 10_500_000; // 10.5 ms
        t.arm(deadline);
        let mut now = 0u64;
        let mut pieces = 0;
        loop {
            let rem = deadline.saturating_sub(now);
            let ticks = plan_piece(rem, f, 1, 3).unwrap();
            now += ticks * 1_000_000; // the device fires exactly on its count
            pieces += 1;
            match t.on_interrupt(now) {
                Expiry::Fired { deadline_ns } => {
                    assert_eq!(deadline_ns, deadline);
                    assert!(now >= deadline);
                    break;
                }
                Expiry::Rearm { remaining_ns, .. } => {
                    assert!(now < deadline);
                    assert_eq!(remaining_ns, deadline - now);
                }
                Expiry::Spurious => panic!("lost the deadline"),
            }
            assert!(pieces < 100);
        }
        // 3 + 3 + 3 + 2 ticks (ceil(1.5 ms) = 2).
        assert_eq!(pieces, 4);
        assert_eq!(now, 11_000_000);
    }

    #[test]
    fn past_deadline_fires_at_once() {
        let t = OneShot::new();
        t.arm(100);
        // The device's minimum count: the first interrupt fires it.
        assert_eq!(plan_piece(0, hz(1_000), 1, 10), Ok(1));
        assert_eq!(t.on_interrupt(5_000), Expiry::Fired { deadline_ns: 100 });
        assert_eq!(t.deadline(), None);
    }

    #[test]
    fn early_fire_is_rearmed_never_fired() {
        let t = OneShot::new();
        t.arm(1_000_000);
        for now in [0, 1, 999_999] {
            assert_eq!(
                t.on_interrupt(now),
                Expiry::Rearm {
                    deadline_ns: 1_000_000,
                    remaining_ns: 1_000_000 - now
                }
            );
        }
        assert_eq!(t.deadline(), Some(1_000_000));
        assert_eq!(
            t.on_interrupt(1_000_000),
            Expiry::Fired {
                deadline_ns: 1_000_000
            }
        );
    }

    #[test]
    fn cancel_and_rearm() {
        let t = OneShot::new();
        assert_eq!(t.on_interrupt(0), Expiry::Spurious);
        assert_eq!(t.cancel(), None);
        assert_eq!(t.arm(10), None);
        assert_eq!(t.arm(20), Some(10));
        assert_eq!(t.cancel(), Some(20));
        assert_eq!(t.on_interrupt(100), Expiry::Spurious);
        // u64::MAX is kept armed (stored one below), never fires early.
        t.arm(u64::MAX);
        assert_eq!(t.deadline(), Some(u64::MAX - 1));
        assert!(matches!(t.on_interrupt(u64::MAX - 2), Expiry::Rearm { .. }));
        assert_eq!(
            t.on_interrupt(u64::MAX),
            Expiry::Fired {
                deadline_ns: u64::MAX - 1
            }
        );
    }

    /// A cancel racing interrupts on other threads: exactly one side wins
    /// each round, and a fire is never reported after a cancel that
    /// returned the deadline.
    #[test]
    fn cancel_races_interrupt() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Barrier;
        let rounds = if cfg!(miri) { 20 } else { 2_000 };
        let t = OneShot::new();
        let barrier = Barrier::new(3);
        let fired = AtomicUsize::new(0);
        let cancelled = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..rounds {
                        barrier.wait();
                        if let Expiry::Fired { .. } = t.on_interrupt(50) {
                            fired.fetch_add(1, Ordering::Relaxed);
                        }
                        barrier.wait();
                    }
                });
            }
            for r in 0..rounds {
                t.arm(r as u64 % 40); // always due at now = 50
                barrier.wait();
                if t.cancel().is_some() {
                    cancelled.fetch_add(1, Ordering::Relaxed);
                }
                barrier.wait();
            }
        });
        let (f, c) = (fired.into_inner(), cancelled.into_inner());
        assert_eq!(f + c, rounds, "fired {f} + cancelled {c}");
    }

    /// Two interrupt handlers (a global timer's vector on two CPUs) never
    /// both report the same arm.
    #[test]
    fn one_fire_per_arm() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let t = OneShot::new();
        t.arm(10);
        let fired = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..100 {
                        if let Expiry::Fired { .. } = t.on_interrupt(10) {
                            fired.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(fired.into_inner(), 1);
    }
}
