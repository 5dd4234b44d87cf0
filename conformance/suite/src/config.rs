//! Tolerances and durations, as documented constants.
//!
//! The defaults are chosen for emulated devices under QEMU TCG and KVM, where
//! one HPET or PM-timer read can take 10-30 us and a vCPU can be descheduled
//! in the middle of an interval: every timing verdict uses a tolerance and a
//! majority of several intervals, never one sample.

use clockhal_core::Duration;

/// Most sources one [`Suite`](crate::Suite) run checks (the six clockhal
/// backends plus room for an OS's own).
pub const MAX_SOURCES: usize = 16;
/// Most rate intervals one run measures.
pub const MAX_INTERVALS: usize = 15;
/// Most read-cost samples per source.
pub const MAX_COST_SAMPLES: usize = 255;

/// Consecutive reads in the monotonic/resolution check (upper bound).
pub const MONOTONIC_READS: u32 = 20_000;
/// ...stopping early once this much time has passed by the source itself.
pub const MONOTONIC_BUDGET: Duration = Duration::from_millis(50);
/// Samples for the read-cost median.
pub const COST_SAMPLES: usize = 101;
/// A read costing more than this many cycles (median) fails: ~0.4 ms at
/// 2.6 GHz, 40x the slowest trapping read measured under KVM (~25,000).
pub const READ_COST_LIMIT_CYCLES: u64 = 1_000_000;
/// A smallest observed step above this fails (a tick-based clock, or one
/// that barely advances). Trapping reads under KVM take ~10-30 us, which
/// bounds the observable step from below, hence the generous limit.
pub const RESOLUTION_LIMIT_NS: u64 = 1_000_000;
/// Rate intervals measured (all sources over the same intervals).
pub const RATE_INTERVALS: usize = 5;
/// Intervals that must be within tolerance ("best 3 of 5").
pub const RATE_MAJORITY: usize = 3;
/// Length of each rate interval. Long enough that a 10-30 us bracketing
/// error at either end stays well below the tolerance.
pub const RATE_INTERVAL: Duration = Duration::from_millis(100);
/// Largest accepted rate error against the reference, in ppm. Emulated
/// devices follow the host clock closely; 1000 ppm leaves room for the
/// bracketing noise of slow reads and catches a wrong frequency (a 2% error
/// is 20,000 ppm; storing a rate in MHz can cost ~500 ppm, which passes).
pub const RATE_TOLERANCE_PPM: u64 = 1_000;
/// Largest accepted deviation from the consensus of all sources, in ppm.
pub const AGREEMENT_TOLERANCE_PPM: u64 = 1_000;
/// Most the `rate` and `agreement` tolerances widen for a source's
/// quantization (two of its smallest steps per interval), in ppm: 10%.
/// Beyond it the interval is too short to tell a wrong frequency from the
/// source's own steps (a 1 ms step over 20 ms intervals), so both checks
/// are skipped with the reason and the source counts as unverified for
/// `selected`, never as passed.
pub const RATE_QUANTIZATION_LIMIT_PPM: u64 = 100_000;
/// Longest time the wrap check may spend on one source. A 24-bit ACPI PM
/// timer wraps every 4.69 s and fits; a 32-bit HPET at 100 MHz (42.9 s) is
/// skipped with the reason.
pub const WRAP_BUDGET: Duration = Duration::from_secs(8);
/// Time each CPU pair spends in the warp test per source, at least...
pub const WARP_DURATION: Duration = Duration::from_millis(20);
/// ...and until the CPUs alternated this often...
pub const WARP_TARGET_HANDOFFS: u64 = 200;
/// ...but no longer than this (a descheduled or emulated partner vCPU may
/// alternate rarely).
pub const WARP_MAX_DURATION: Duration = Duration::from_secs(1);
/// Upper bound on reads per CPU in the warp test.
pub const WARP_MAX_READS: u32 = 50_000;
/// Lock handoffs between the two CPUs needed for a warp verdict.
pub const WARP_MIN_HANDOFFS: u64 = 10;
/// CPUs (besides the caller's) paired with the caller in the warp test.
pub const WARP_PARTNERS: usize = 3;
/// Read costs within this percentage of the fastest count as equally fast
/// in the selection check (medians of emulated reads jitter).
pub const SELECTION_COST_MARGIN_PERCENT: u64 = 25;

/// Deadlines the `timer-deadlines` check arms per device (upper bound of
/// [`Config::timer_deadlines`]).
pub const TIMER_DEADLINES: usize = 1_000;
/// Shortest of them...
pub const TIMER_SHORTEST: Duration = Duration::from_micros(50);
/// ...and longest. Drawn log-uniformly in between (a fixed pseudo-random
/// sequence): the mean is (max - min) / ln(max / min) = 1.88 ms, so 1,000
/// of them add up to about 1.9 s per device (the boot-time budget), not the
/// 10 s that 1,000 deadlines of up to 10 ms could take.
pub const TIMER_LONGEST: Duration = Duration::from_millis(10);
/// A deadline not delivered this long after it (clock time) fails its
/// check: the device lost it. Lateness itself is measured, not bounded.
pub const TIMER_LOST_AFTER: Duration = Duration::from_millis(500);
/// ...but the check stops arming new ones once this much clock time has
/// passed (a device whose every interrupt the host delays by tens of ms,
/// measured for QEMU's HPET under this machine's KVM, would otherwise take
/// a minute): the detail says how many were measured.
pub const TIMER_DEADLINES_BUDGET: Duration = Duration::from_secs(12);
/// The `timer-cancel` check waits this long past a cancelled deadline for
/// an interrupt that must not come (longer than the interrupt latencies
/// measured under KVM here, up to ~150 ms), after the device was quiet
/// for as long.
pub const TIMER_CANCEL_WAIT: Duration = Duration::from_millis(200);
/// ...which was armed this far ahead, and cancelled within half of it (a
/// cancel that returns later is tried again: a vCPU descheduled between
/// arm and cancel may legitimately see the interrupt raised).
pub const TIMER_CANCEL_AHEAD: Duration = Duration::from_millis(50);
/// The `timer-long` check caps the device's reach at this (a test setting:
/// real reaches are seconds to minutes)...
pub const TIMER_LONG_CAP: Duration = Duration::from_millis(1);
/// ...and arms a deadline this far ahead: at least five pieces.
pub const TIMER_LONG_DEADLINE: Duration = Duration::from_millis(5);

/// Every tunable of a run. [`Config::default`] uses the constants of this
/// module; [`Config::quick`] shortens the timing checks for host tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// See [`MONOTONIC_READS`].
    pub monotonic_reads: u32,
    /// See [`MONOTONIC_BUDGET`].
    pub monotonic_budget: Duration,
    /// See [`COST_SAMPLES`] (clamped to 1..=[`MAX_COST_SAMPLES`]).
    pub cost_samples: usize,
    /// See [`READ_COST_LIMIT_CYCLES`].
    pub read_cost_limit_cycles: u64,
    /// See [`RESOLUTION_LIMIT_NS`].
    pub resolution_limit_ns: u64,
    /// See [`RATE_INTERVALS`] (clamped to 1..=[`MAX_INTERVALS`]).
    pub rate_intervals: usize,
    /// See [`RATE_MAJORITY`] (clamped to 1..=`rate_intervals`).
    pub rate_majority: usize,
    /// See [`RATE_INTERVAL`].
    pub rate_interval: Duration,
    /// See [`RATE_TOLERANCE_PPM`].
    pub rate_tolerance_ppm: u64,
    /// See [`AGREEMENT_TOLERANCE_PPM`].
    pub agreement_tolerance_ppm: u64,
    /// See [`WRAP_BUDGET`].
    pub wrap_budget: Duration,
    /// See [`WARP_DURATION`].
    pub warp_duration: Duration,
    /// See [`WARP_TARGET_HANDOFFS`].
    pub warp_target_handoffs: u64,
    /// See [`WARP_MAX_DURATION`].
    pub warp_max_duration: Duration,
    /// See [`WARP_MAX_READS`].
    pub warp_max_reads: u32,
    /// See [`WARP_MIN_HANDOFFS`].
    pub warp_min_handoffs: u64,
    /// See [`WARP_PARTNERS`].
    pub warp_partners: usize,
    /// See [`SELECTION_COST_MARGIN_PERCENT`].
    pub selection_cost_margin_percent: u64,
    /// See [`TIMER_DEADLINES`] (clamped to 1..=[`TIMER_DEADLINES`]).
    pub timer_deadlines: usize,
    /// See [`TIMER_SHORTEST`].
    pub timer_shortest: Duration,
    /// See [`TIMER_LONGEST`].
    pub timer_longest: Duration,
    /// See [`TIMER_LONG_CAP`].
    pub timer_long_cap: Duration,
    /// See [`TIMER_LONG_DEADLINE`].
    pub timer_long_deadline: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            monotonic_reads: MONOTONIC_READS,
            monotonic_budget: MONOTONIC_BUDGET,
            cost_samples: COST_SAMPLES,
            read_cost_limit_cycles: READ_COST_LIMIT_CYCLES,
            resolution_limit_ns: RESOLUTION_LIMIT_NS,
            rate_intervals: RATE_INTERVALS,
            rate_majority: RATE_MAJORITY,
            rate_interval: RATE_INTERVAL,
            rate_tolerance_ppm: RATE_TOLERANCE_PPM,
            agreement_tolerance_ppm: AGREEMENT_TOLERANCE_PPM,
            wrap_budget: WRAP_BUDGET,
            warp_duration: WARP_DURATION,
            warp_target_handoffs: WARP_TARGET_HANDOFFS,
            warp_max_duration: WARP_MAX_DURATION,
            warp_max_reads: WARP_MAX_READS,
            warp_min_handoffs: WARP_MIN_HANDOFFS,
            warp_partners: WARP_PARTNERS,
            selection_cost_margin_percent: SELECTION_COST_MARGIN_PERCENT,
            timer_deadlines: TIMER_DEADLINES,
            timer_shortest: TIMER_SHORTEST,
            timer_longest: TIMER_LONGEST,
            timer_long_cap: TIMER_LONG_CAP,
            timer_long_deadline: TIMER_LONG_DEADLINE,
        }
    }
}

impl Config {
    /// The documented defaults.
    pub fn new() -> Config {
        Config::default()
    }

    /// Shorter timing checks (10 ms intervals, 2,000 monotonic reads, 5 ms
    /// warp test) for host tests and hosted examples. Tolerances unchanged.
    pub fn quick() -> Config {
        Config {
            monotonic_reads: 2_000,
            monotonic_budget: Duration::from_millis(5),
            rate_interval: Duration::from_millis(10),
            warp_duration: Duration::from_millis(5),
            warp_max_duration: Duration::from_millis(100),
            warp_max_reads: 5_000,
            timer_deadlines: 50,
            ..Config::default()
        }
    }

    /// Sets the wrap-check budget (e.g. zero to skip wrap checks).
    pub fn wrap_budget(mut self, d: Duration) -> Config {
        self.wrap_budget = d;
        self
    }

    /// Sets the rate interval length.
    pub fn rate_interval(mut self, d: Duration) -> Config {
        self.rate_interval = d;
        self
    }

    pub(crate) fn intervals(&self) -> usize {
        self.rate_intervals.clamp(1, MAX_INTERVALS)
    }

    pub(crate) fn majority(&self) -> usize {
        self.rate_majority.clamp(1, self.intervals())
    }

    pub(crate) fn samples(&self) -> usize {
        self.cost_samples.clamp(1, MAX_COST_SAMPLES)
    }
}
