//! Measuring the TSC rate against a reference clock.
//!
//! Method: take a group of samples at the start and at the end of a spin of
//! `budget` reference time. A sample is `(a, r, b)`: an ordered TSC read, a
//! reference read, an ordered TSC read; the reference was read somewhere
//! in the window `a..=b`, so its TSC time is the midpoint ± half the window.
//! Samples with an outsized window (an interrupt, an SMI, a descheduled
//! vCPU) are dropped, the rest averaged per group, and the rate is
//! `ΔTSC / Δreference × reference rate`.
//!
//! The reported uncertainty is a bound, in ppm, on the relative error that
//! adds up:
//! - the mean read-back windows: `(w̄_start + w̄_end) / 2` TSC ticks of
//!   ΔTSC;
//! - the reference's resolution (1 tick of Δreference) plus twice the
//!   largest scatter of a reference reading around the fitted line (the
//!   group means can be off by at most that much each), in reference ticks.
//!
//! - half the difference between the rates of the interval's two halves
//!   (a middle group splits it): a reference that stood still or jumped
//!   in one half (a guest paused with its devices while the TSC ran on, a
//!   counter that skipped) moves the whole interval's rate by half of what
//!   it moves that half's. A difference larger than both halves'
//!   uncertainty is refused, and the measure taken again (three times in
//!   all).
//!
//! The reference's own rate error is not included: it is taken as exact
//! (HPET and PM timer rates are fixed by their spec, an OS-supplied clock
//! is the OS's word); the probe's self-check compares it with the other
//! counters it has.

use clockhal_core::{ClockSource, Duration, Frequency, FrequencyError, Scale};
use clockhal_x86::Hardware;
use core::fmt;

/// Samples per group (start and end).
const SAMPLES: usize = 16;
/// A sample whose window exceeds this multiple of the group's smallest
/// window (plus a small allowance) is dropped.
const WINDOW_OUTLIER_FACTOR: u64 = 2;
/// Spin reads of the reference at most: bounds a reference that never
/// advances (or advances far slower than it claims). Raised to one read
/// per 8 ns of budget for long budgets with cheap references.
const MIN_SPIN_READS: u64 = 1 << 22;
/// While spinning, give up once the TSC has advanced this many ticks per
/// nanosecond of budget (20 GHz: faster than any TSC), so a stuck but
/// slow-to-read reference cannot hold us for long either.
const MAX_TSC_TICKS_PER_NS: u64 = 20;
/// Check the TSC guard every this many spin reads.
const GUARD_EVERY: u64 = 256;

/// A measured TSC rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Calibration {
    /// The measured rate.
    pub rate: Frequency,
    /// Bound on the relative error in ppm (rounded up).
    pub uncertainty_ppm: u32,
    /// Name of the reference clock.
    pub reference: &'static str,
    /// Reference ticks between the group means.
    pub reference_ticks: u64,
    /// TSC ticks between the group means.
    pub tsc_ticks: u64,
}

/// Why a calibration produced no rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum CalibrationError {
    /// The budget is shorter than two reference ticks.
    BudgetTooShort,
    /// The reference did not advance through the budget within the read and
    /// TSC bounds.
    ReferenceStuck,
    /// The reference went backwards.
    ReferenceBackwards,
    /// The TSC went backwards inside a sample (the thread moved to another
    /// CPU: calibrate pinned to one CPU).
    TscBackwards,
    /// The measured rate is outside what `Frequency` or a TSC can be.
    Implausible,
    /// Arithmetic overflow (absurd reference rate or budget).
    Overflow,
    /// The reference's readings did not lie on one line: the two halves
    /// of a [`calibrate`] interval gave different rates every time (the
    /// reference stood still or jumped while the TSC ran on), or a
    /// whole-second reference's edges did not agree with each other
    /// ([`calibrate_against_seconds`]: a second misread, an edge delayed).
    ReferenceInconsistent,
}

impl fmt::Display for CalibrationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CalibrationError::BudgetTooShort => {
                "calibration budget shorter than two reference ticks"
            }
            CalibrationError::ReferenceStuck => "calibration reference did not advance",
            CalibrationError::ReferenceBackwards => "calibration reference went backwards",
            CalibrationError::TscBackwards => {
                "TSC went backwards during calibration (CPU migration?)"
            }
            CalibrationError::Implausible => "calibrated TSC rate is implausible",
            CalibrationError::Overflow => "calibration arithmetic overflowed",
            CalibrationError::ReferenceInconsistent => {
                "calibration reference's readings disagreed with each other"
            }
        })
    }
}

impl From<FrequencyError> for CalibrationError {
    fn from(_: FrequencyError) -> Self {
        CalibrationError::Implausible
    }
}

#[derive(Clone, Copy, Default)]
struct Sample {
    /// TSC before and after, relative to the calibration's first TSC read.
    a: u64,
    b: u64,
    /// Reference reading, relative to the first reference reading.
    r: u64,
}

impl Sample {
    fn window(&self) -> u64 {
        self.b - self.a
    }
    /// Twice the midpoint (keeps the half tick).
    fn mid2(&self) -> u128 {
        self.a as u128 + self.b as u128
    }
}

/// One group's filtered means, scaled to keep fractions: `mid2_sum` and
/// `r_sum` over `n` samples.
struct Group {
    samples: [Sample; SAMPLES],
    keep: [bool; SAMPLES],
    n: u128,
    mid2_sum: u128,
    r_sum: u128,
    window_sum: u128,
}

impl Group {
    /// The samples the window filter kept.
    fn kept(&self) -> impl Iterator<Item = &Sample> {
        self.samples
            .iter()
            .zip(self.keep)
            .filter_map(|(s, k)| k.then_some(s))
    }
}

/// `b`'s mean of `f` minus `a`'s, scaled by both groups' counts (exact in
/// integers); `None` when it went down.
fn scaled_diff(a: &Group, b: &Group, f: fn(&Group) -> u128) -> Option<u128> {
    (f(b) * a.n).checked_sub(f(a) * b.n)
}

struct Origin {
    tsc: u64,
    reference: u64,
}

fn sample<H: Hardware>(
    hw: &H,
    reference: &dyn ClockSource,
    o: &Origin,
) -> Result<Sample, CalibrationError> {
    let a = hw.rdtsc_ordered();
    let r = reference.read();
    let b = hw.rdtsc_ordered();
    if b < a || a < o.tsc {
        return Err(CalibrationError::TscBackwards);
    }
    let r = r
        .checked_sub(o.reference)
        .ok_or(CalibrationError::ReferenceBackwards)?;
    Ok(Sample {
        a: a - o.tsc,
        b: b - o.tsc,
        r,
    })
}

fn group<H: Hardware>(
    hw: &H,
    reference: &dyn ClockSource,
    o: &Origin,
) -> Result<Group, CalibrationError> {
    let mut samples = [Sample::default(); SAMPLES];
    for s in samples.iter_mut() {
        *s = sample(hw, reference, o)?;
    }
    if samples.windows(2).any(|w| w[1].r < w[0].r) {
        return Err(CalibrationError::ReferenceBackwards);
    }
    let min = samples.iter().map(Sample::window).min().unwrap_or(0);
    // Allowance of 64 ticks so a zero or tiny minimum window does not drop
    // ordinary samples.
    let limit = min.saturating_mul(WINDOW_OUTLIER_FACTOR).saturating_add(64);
    let mut g = Group {
        samples,
        keep: [false; SAMPLES],
        n: 0,
        mid2_sum: 0,
        r_sum: 0,
        window_sum: 0,
    };
    for (s, k) in g.samples.iter().zip(g.keep.iter_mut()) {
        if s.window() <= limit {
            *k = true;
            g.n += 1;
            g.mid2_sum += s.mid2();
            g.r_sum += s.r as u128;
            g.window_sum += s.window() as u128;
        }
    }
    Ok(g)
}

/// Largest |residual| of a group's reference readings around the line of
/// slope `dr / dt2` (reference ticks per half TSC tick) through the group's
/// means, in reference ticks, rounded up.
fn max_residual(g: &Group, dr: i128, dt2: i128) -> Result<u128, CalibrationError> {
    let n = g.n as i128;
    let mut worst: u128 = 0;
    for s in g.kept() {
        // residual * n * dt2 = (r*n - r_sum) * dt2 - dr * (mid2*n - mid2_sum)
        let dr_i = (s.r as i128) * n - g.r_sum as i128;
        let dm_i = (s.mid2() as i128) * n - g.mid2_sum as i128;
        let e = dr_i
            .checked_mul(dt2)
            .and_then(|x| dr.checked_mul(dm_i).and_then(|y| x.checked_sub(y)))
            .ok_or(CalibrationError::Overflow)?;
        let scale = (n * dt2) as u128;
        worst = worst.max(e.unsigned_abs().div_ceil(scale));
    }
    Ok(worst)
}

/// The spin's bounds, shared by its two halves.
struct Spin {
    guard: u64,
    start: u64,
    max_reads: u64,
    reads: u64,
}

impl Spin {
    /// Reads `reference` until it shows `r` ticks past the origin.
    fn until<H: Hardware>(
        &mut self,
        hw: &H,
        reference: &dyn ClockSource,
        o: &Origin,
        r: u64,
    ) -> Result<(), CalibrationError> {
        loop {
            let now = reference
                .read()
                .checked_sub(o.reference)
                .ok_or(CalibrationError::ReferenceBackwards)?;
            if now >= r {
                return Ok(());
            }
            self.reads += 1;
            if self.reads >= self.max_reads
                || (self.reads % GUARD_EVERY == 0
                    && hw.rdtsc_ordered().wrapping_sub(self.start) > self.guard)
            {
                return Err(CalibrationError::ReferenceStuck);
            }
        }
    }
}

/// How much the second half's rate (TSC ticks per reference tick, middle
/// to end) differs from the first's (start to middle), ppm of the first.
fn halves_ppm(s: &Group, m: &Group, e: &Group) -> Result<i128, CalibrationError> {
    let diff = |a: &Group, b: &Group, f: fn(&Group) -> u128| {
        scaled_diff(a, b, f).ok_or(CalibrationError::ReferenceBackwards)
    };
    let (t1, r1) = (diff(s, m, |g| g.mid2_sum)?, diff(s, m, |g| g.r_sum)?);
    let (t2, r2) = (diff(m, e, |g| g.mid2_sum)?, diff(m, e, |g| g.r_sum)?);
    if r1 == 0 || r2 == 0 || t1 == 0 {
        return Err(CalibrationError::ReferenceStuck);
    }
    // rate2 / rate1 - 1 = (t2 r1 - t1 r2) / (t1 r2); the scale factors
    // (n_s n_m for half 1, n_m n_e for half 2) cancel in each ratio.
    let a = t2.checked_mul(r1).ok_or(CalibrationError::Overflow)?;
    let b = t1.checked_mul(r2).ok_or(CalibrationError::Overflow)?;
    let num = i128::try_from(a).map_err(|_| CalibrationError::Overflow)?
        - i128::try_from(b).map_err(|_| CalibrationError::Overflow)?;
    let den = i128::try_from(b).map_err(|_| CalibrationError::Overflow)?;
    num.checked_mul(1_000_000)
        .map(|x| x / den)
        .ok_or(CalibrationError::Overflow)
}

fn ppm_ceil(error: u128, of: u128) -> u128 {
    (error * 1_000_000).div_ceil(of.max(1))
}

/// Measures the TSC rate against `reference` over `budget` of reference
/// time (plus 3×16 samples; up to three times when the interval's halves
/// disagree, see the module docs).
///
/// Run it on one CPU with preemption off where possible; the TSC is read
/// with [`Hardware::rdtsc_ordered`]. Bounded: at most 2^22 spin reads of the
/// reference (or one per 8 ns of budget if more), and at most
/// `budget × 20 GHz` TSC ticks of spinning.
/// Interrupt-safe: no (busy-waits for the calibration window).
///
/// ```
/// use clockhal_core::{Duration, Policy};
/// use clockhal_hpet::Hpet;
/// use clockhal_tsc::calibrate;
/// use clockhal_sim::SimMachine;
/// let m = SimMachine::kvm();
/// let hpet = Hpet::probe(&m, m.hpet_region().unwrap(), &Policy::new()).unwrap();
/// let c = calibrate(&m, &hpet, Duration::from_millis(10)).unwrap();
/// let err_ppb = c.rate.ppb_from(&clockhal_core::Frequency::from_hz(2_600_000_000).unwrap());
/// assert!(err_ppb.unsigned_abs() <= c.uncertainty_ppm as u64 * 1_000);
/// ```
pub fn calibrate<H: Hardware>(
    hw: &H,
    reference: &dyn ClockSource,
    budget: Duration,
) -> Result<Calibration, CalibrationError> {
    let mut result = calibrate_once(hw, reference, budget);
    for _ in 1..CALIBRATION_TRIES {
        if result != Err(CalibrationError::ReferenceInconsistent) {
            break;
        }
        result = calibrate_once(hw, reference, budget);
    }
    result
}

/// Measures taken at most when their halves disagree.
const CALIBRATION_TRIES: u32 = 3;

fn calibrate_once<H: Hardware>(
    hw: &H,
    reference: &dyn ClockSource,
    budget: Duration,
) -> Result<Calibration, CalibrationError> {
    let ref_rate = reference.frequency();
    let target = Scale::new(ref_rate).ns_to_ticks(budget.as_nanos());
    if target < 2 {
        return Err(CalibrationError::BudgetTooShort);
    }
    let origin = Origin {
        tsc: hw.rdtsc_ordered(),
        reference: reference.read(),
    };
    let start = group(hw, reference, &origin)?;
    let r_first = start.samples[0].r;

    // Spin until `target` reference ticks have passed, within bounds, with
    // a middle group half way.
    let mut spin = Spin {
        guard: budget.as_nanos().saturating_mul(MAX_TSC_TICKS_PER_NS),
        start: hw.rdtsc_ordered(),
        max_reads: MIN_SPIN_READS.max(budget.as_nanos() / 8),
        reads: 0,
    };
    spin.until(hw, reference, &origin, r_first.saturating_add(target / 2))?;
    let middle = group(hw, reference, &origin)?;
    spin.until(hw, reference, &origin, r_first.saturating_add(target))?;
    let end = group(hw, reference, &origin)?;

    // Differences of the group means, scaled by n_start * n_end (and x2 for
    // the TSC midpoints) to stay in integers.
    let (n0, n1) = (start.n, end.n);
    let dt2 = scaled_diff(&start, &end, |g| g.mid2_sum).ok_or(CalibrationError::TscBackwards)?;
    let dr = scaled_diff(&start, &end, |g| g.r_sum).ok_or(CalibrationError::ReferenceBackwards)?;
    if dr == 0 {
        return Err(CalibrationError::ReferenceStuck);
    }
    if dt2 == 0 {
        return Err(CalibrationError::Implausible); // a TSC that stood still
    }
    // rate = (dt2 / 2) / dr * num / den.
    let num = dt2
        .checked_mul(ref_rate.numerator() as u128)
        .ok_or(CalibrationError::Overflow)?;
    let den = (2 * dr)
        .checked_mul(ref_rate.denominator() as u128)
        .ok_or(CalibrationError::Overflow)?;
    let rate = Frequency::from_ratio(num, den)?;
    if !crate::provenance::plausible(&rate) {
        return Err(CalibrationError::Implausible);
    }

    // Uncertainty, in unscaled ticks.
    let nn = n0 * n1;
    let tsc_ticks = dt2 / (2 * nn);
    let ref_ticks = dr / nn;
    let window_err = (start.window_sum * n1 + end.window_sum * n0).div_ceil(2 * nn);
    // Residual slope: reference ticks per half TSC tick, as dr / dt2 (the
    // common scale cancels).
    let (dr_i, dt2_i) = (
        i128::try_from(dr).map_err(|_| CalibrationError::Overflow)?,
        i128::try_from(dt2).map_err(|_| CalibrationError::Overflow)?,
    );
    let scatter = max_residual(&start, dr_i, dt2_i)?
        .max(max_residual(&middle, dr_i, dt2_i)?)
        .max(max_residual(&end, dr_i, dt2_i)?);
    // A reading lies off the line by at most its window (the reference was
    // read somewhere in it; the group's mean too) and a tick of resolution
    // each: more is a reference that stood still or jumped inside a group.
    let widest = [&start, &middle, &end]
        .iter()
        .flat_map(|g| g.kept())
        .map(|s| s.window() as u128)
        .max()
        .unwrap_or(0);
    if scatter > (widest * ref_ticks).div_ceil(tsc_ticks.max(1)) + 2 {
        return Err(CalibrationError::ReferenceInconsistent);
    }
    let ref_err = 1 + 2 * scatter;
    let ppm = ppm_ceil(window_err, tsc_ticks) + ppm_ceil(ref_err, ref_ticks);
    // The halves' rates must agree within both halves' uncertainty: a
    // reference that stood still or jumped in one half (a guest paused
    // with its devices while the TSC ran on) fails that. A step too small
    // to fail it still shows in their difference, half of which it moved
    // the whole interval's rate by: that much is stated too.
    let halves = halves_ppm(&start, &middle, &end)?;
    let mean_window = |g: &Group| g.window_sum.div_ceil(g.n.max(1));
    let half = |a: &Group, b: &Group| {
        ppm_ceil((mean_window(a) + mean_window(b)).div_ceil(2), tsc_ticks / 2)
            + ppm_ceil(ref_err, ref_ticks / 2)
    };
    if halves.unsigned_abs() > half(&start, &middle) + half(&middle, &end) {
        return Err(CalibrationError::ReferenceInconsistent);
    }
    let ppm = ppm + halves.unsigned_abs().div_ceil(2);
    Ok(Calibration {
        rate,
        uncertainty_ppm: u32::try_from(ppm).unwrap_or(u32::MAX),
        reference: reference.name(),
        reference_ticks: u64::try_from(ref_ticks).unwrap_or(u64::MAX),
        tsc_ticks: u64::try_from(tsc_ticks).unwrap_or(u64::MAX),
    })
}

/// One edge of a whole-second reference (the CMOS RTC's update), timed on
/// the TSC: the edge's marker (the RTC's update-in-progress flag, a fixed
/// lead before the edge, which cancels) rose between two TSC reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SecondEdge {
    /// The reference's count of the second that began there (e.g. Unix
    /// seconds).
    pub second: u64,
    /// TSC before the poll that last saw the marker down.
    pub tsc_from: u64,
    /// TSC after the poll that first saw it up.
    pub tsc_by: u64,
}

impl SecondEdge {
    /// Twice the midpoint, and the window's width.
    fn mid2_width(&self) -> Option<(u128, u64)> {
        let w = self.tsc_by.checked_sub(self.tsc_from)?;
        Some((self.tsc_from as u128 + self.tsc_by as u128, w))
    }
}

/// Edges taken at most: a loaded host's preemptions widen the edges'
/// windows, and more edges give narrower ones and longer spans.
const MAX_SECOND_EDGES: usize = 6;
/// Edges `next_edge` may fail to give before the calibration gives up
/// (each costs the caller's edge wait, about a second).
const MAX_MISSED_EDGES: usize = 2;
/// A span this good ends the search early.
const GOOD_ENOUGH_PPM: u32 = 50;
/// Most seconds one interval may cover (edges missed in between are fine:
/// seconds are counted, not assumed).
const MAX_INTERVAL_SECONDS: u64 = 3;
/// How far two intervals' per-second rates may differ, in ppm, on top of
/// their windows: far below the 50 % of a second misread.
const INTERVAL_AGREEMENT_PPM: u64 = 1_000;

/// Measures the TSC rate against a reference that marks whole seconds
/// (the CMOS RTC's second edges, the reference of last resort where no
/// counter exists: QEMU `microvm,pit=off`). `next_edge` waits for the next
/// edge and returns it timed on the TSC (`None`: no edge this time; after
/// three such misses the calibration gives up, and after the second one
/// when no edge came at all: a reference that never ticks costs two
/// waits, while one pause of the host across the first edge is survived).
///
/// Takes three edges (two to three seconds), and more, up to six, until
/// some span is within 50 ppm (a loaded host's preemptions widen the
/// windows): a span is three successive edges whose two intervals give the same rate
/// per second of the reference (a second misread after a long preemption,
/// or an edge timed late, breaks that), and the best span wins. The rate
/// is the span's TSC ticks over its seconds; its uncertainty is the two
/// end windows' half widths over the span (a 40 µs window on a 2 s span:
/// 20 ppm), not counting the reference's own rate error (an emulated
/// RTC follows the host's clock; a PC's 32.768 kHz crystal is typically
/// within ±20-100 ppm).
///
/// ```
/// use clockhal_tsc::{calibrate_against_seconds, SecondEdge};
/// // A 3 GHz TSC, edges timed to ±1 µs.
/// let mut s = 100;
/// let c = calibrate_against_seconds(
///     || {
///         s += 1;
///         let at = s * 3_000_000_000;
///         Some(SecondEdge { second: s, tsc_from: at - 3_000, tsc_by: at + 3_000 })
///     },
///     "rtc",
/// )
/// .unwrap();
/// assert_eq!(c.rate.hz_rounded(), 3_000_000_000);
/// assert!(c.uncertainty_ppm <= 2);
/// ```
///
/// Interrupt-safe: no (waits seconds for the edges).
pub fn calibrate_against_seconds(
    mut next_edge: impl FnMut() -> Option<SecondEdge>,
    reference: &'static str,
) -> Result<Calibration, CalibrationError> {
    let mut edges = [None::<SecondEdge>; MAX_SECOND_EDGES];
    let mut best: Option<Calibration> = None;
    let mut error = CalibrationError::ReferenceStuck;
    let (mut n, mut missed) = (0, 0);
    while n < MAX_SECOND_EDGES {
        let Some(e) = next_edge() else {
            // A missed edge (host preemption hid the update, a read during
            // the update) is bad luck: the next edge's interval just
            // covers two seconds. A reference that keeps missing ends it.
            missed += 1;
            if missed > MAX_MISSED_EDGES || (n == 0 && missed > 1) {
                break;
            }
            continue;
        };
        edges[n] = Some(e);
        // The span of the last three edges.
        if let (Some(a), Some(b)) = (
            n.checked_sub(2).and_then(|i| edges[i]),
            n.checked_sub(1).and_then(|i| edges[i]),
        ) {
            match second_span(&a, &b, &e) {
                Ok(c) if best.is_none_or(|b| c.uncertainty_ppm < b.uncertainty_ppm) => {
                    best = Some(c)
                }
                Ok(_) => {}
                Err(e) => error = e,
            }
        }
        if best.is_some_and(|b| b.uncertainty_ppm <= GOOD_ENOUGH_PPM) {
            break;
        }
        n += 1;
    }
    best.map(|c| Calibration { reference, ..c }).ok_or(error)
}

/// The rate over edges `a`..`c`, if the intervals `a`..`b` and `b`..`c`
/// agree per second.
fn second_span(
    a: &SecondEdge,
    b: &SecondEdge,
    c: &SecondEdge,
) -> Result<Calibration, CalibrationError> {
    let inconsistent = CalibrationError::ReferenceInconsistent;
    let (Some((ma, wa)), Some((mb, wb)), Some((mc, wc))) =
        (a.mid2_width(), b.mid2_width(), c.mid2_width())
    else {
        return Err(CalibrationError::TscBackwards);
    };
    let seconds = |x: &SecondEdge, y: &SecondEdge| {
        y.second
            .checked_sub(x.second)
            .filter(|d| (1..=MAX_INTERVAL_SECONDS).contains(d))
    };
    let (Some(d1), Some(d2)) = (seconds(a, b), seconds(b, c)) else {
        return Err(inconsistent);
    };
    if mb < ma || mc < mb {
        return Err(CalibrationError::TscBackwards);
    }
    // Per-second TSC ticks of each interval, doubled (mid2 units).
    let (i1, i2) = ((mb - ma) / d1 as u128, (mc - mb) / d2 as u128);
    if i1 == 0 || i2 == 0 {
        return Err(CalibrationError::Implausible);
    }
    // Each interval's per-second rate is known to its two windows
    // (doubled: half widths on mid2 units).
    let slack = (wa as u128 + wb as u128) / d1 as u128 + (wb as u128 + wc as u128) / d2 as u128;
    let allowed = i1.max(i2) * INTERVAL_AGREEMENT_PPM as u128 / 1_000_000 + slack;
    if i1.abs_diff(i2) > allowed {
        return Err(inconsistent);
    }
    let span_seconds = (d1 + d2) as u128;
    let ticks2 = mc - ma;
    let rate = Frequency::from_ratio(ticks2, 2 * span_seconds)?;
    if !crate::provenance::plausible(&rate) {
        return Err(CalibrationError::Implausible);
    }
    // Half of each end window, over the span (both in mid2 units: x2).
    let ppm = ppm_ceil(wa as u128 + wc as u128, ticks2) + 1;
    Ok(Calibration {
        rate,
        uncertainty_ppm: u32::try_from(ppm).unwrap_or(u32::MAX),
        reference: "",
        reference_ticks: u64::try_from(span_seconds).unwrap_or(u64::MAX),
        tsc_ticks: u64::try_from(ticks2 / 2).unwrap_or(u64::MAX),
    })
}

#[cfg(test)]
mod second_tests {
    use super::*;

    /// Edges of a `hz` TSC for the listed (true second, reported second).
    fn edges(hz: u64, list: &[(u64, u64)]) -> impl FnMut() -> Option<SecondEdge> + '_ {
        let mut i = 0;
        move || {
            let &(at, shown) = list.get(i)?;
            i += 1;
            let t = at * hz;
            Some(SecondEdge {
                second: shown,
                tsc_from: t - 20_000,
                tsc_by: t + 20_000,
            })
        }
    }

    #[test]
    fn a_misread_second_slides_to_edges_that_agree() {
        let hz = 2_000_000_000;
        // The second edge's read came a second late (shows 12 for 11).
        let c = calibrate_against_seconds(
            edges(hz, &[(10, 10), (11, 12), (12, 13), (13, 14), (14, 15)]),
            "rtc",
        )
        .unwrap();
        assert_eq!(c.rate.hz_rounded(), hz);
        assert!(c.uncertainty_ppm <= 21, "{}", c.uncertainty_ppm);
        // Missed edges are fine: seconds are counted.
        let c =
            calibrate_against_seconds(edges(hz, &[(10, 10), (12, 12), (13, 13)]), "rtc").unwrap();
        assert_eq!(c.rate.hz_rounded(), hz);
        // Never agreeing: an error, not a rate.
        let bad = [(10, 10), (11, 12), (12, 12), (13, 15), (14, 15), (15, 18)];
        assert_eq!(
            calibrate_against_seconds(edges(hz, &bad), "rtc"),
            Err(CalibrationError::ReferenceInconsistent)
        );
        // No edges: stuck.
        assert_eq!(
            calibrate_against_seconds(edges(hz, &[(10, 10)]), "rtc"),
            Err(CalibrationError::ReferenceStuck)
        );
    }
}
