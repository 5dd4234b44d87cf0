//! Refining a calibrated TSC rate at run time over a long baseline.
//!
//! A boot calibration is short (the policy's budget, 50 ms by default), so
//! where each reference read is slow — an emulated HPET under KVM costs
//! tens of microseconds — its bound can be hundreds of ppm: too loose to
//! supervise a TSC with. Linux solves this by refining: a second
//! measurement a second later over the whole interval. clockhal does the
//! same from the watchdog's ticks: the first bracketed sample `(TSC,
//! reference, TSC)` is the baseline, each later one extends it, and the
//! error bound falls as `1 / baseline` ([`refined_rate`]).
//! [`Tsc::refine`](crate::Tsc::refine) adopts a result once, only if it is
//! tighter than the calibration and agrees with it within both bounds (a
//! reference that jumped in between gives a rate outside them).

use clockhal_core::{Bracketed, Frequency};
use core::fmt;

/// A refinement whose bound reaches this is adopted (well inside
/// [`SUPERVISED_MAX_UNCERTAINTY_PPM`](crate::SUPERVISED_MAX_UNCERTAINTY_PPM),
/// so the watchdog's drift threshold is not eaten by the rate error).
pub const REFINED_TARGET_PPM: u32 = 50;

/// A rate measured over a baseline, with its bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Refinement {
    /// The measured rate.
    pub rate: Frequency,
    /// Bound on the relative error, ppm (rounded up).
    pub uncertainty_ppm: u32,
    /// Reference ticks between the two samples.
    pub reference_ticks: u64,
}

/// Why a refinement was not adopted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum RefineError {
    /// The rate is not a calibration (a stated rate needs no refining).
    NotCalibrated,
    /// A refinement was adopted already.
    AlreadyRefined,
    /// Not tighter than the rate in use.
    NotTighter,
    /// Outside the rate in use by more than both bounds together: one of
    /// the two measurements is wrong (a reference that jumped, a TSC that
    /// changed rate).
    Disagrees {
        /// The difference, ppm of the rate in use.
        ppm: i64,
    },
    /// The samples give no rate (no progress, backwards, absurd).
    Implausible,
}

impl fmt::Display for RefineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RefineError::NotCalibrated => f.write_str("the TSC rate is not a calibration"),
            RefineError::AlreadyRefined => f.write_str("the TSC rate was refined already"),
            RefineError::NotTighter => f.write_str("no tighter than the rate in use"),
            RefineError::Disagrees { ppm } => {
                write!(
                    f,
                    "refined rate disagrees with the calibration by {ppm} ppm"
                )
            }
            RefineError::Implausible => f.write_str("the samples give no plausible rate"),
        }
    }
}

impl core::error::Error for RefineError {}

/// The TSC rate between two bracketed samples `(TSC, reference, TSC)`
/// (outer: TSC ticks, inner: the reference's 64-bit reading) of a
/// reference counting at `reference`. A rate no TSC has (outside 100 MHz
/// ..= 10 GHz) is [`RefineError::Implausible`].
///
/// The rate is `ΔTSC / Δreference × reference` with ΔTSC between the
/// brackets' midpoints. Each midpoint is off by at most half its bracket's
/// width, and a reference reading by under one tick, so the bound is
/// `((w₀ + w₁) / 2) / ΔTSC + 1 / Δreference`, in ppm, each term rounded
/// up.
/// Interrupt-safe: yes.
///
/// ```
/// use clockhal_core::{Bracketed, Frequency};
/// use clockhal_tsc::refined_rate;
/// let hpet = Frequency::from_hz(100_000_000).unwrap();
/// // A 2.6 GHz TSC, 2 s apart, brackets 50 000 ticks wide (~19 us).
/// let a = Bracketed { before: 1_000_000, inner: 5_000, after: 1_050_000 };
/// let b = Bracketed { before: 5_201_000_000, inner: 200_005_000, after: 5_201_050_000 };
/// let r = refined_rate(&a, &b, hpet).unwrap();
/// assert_eq!(r.rate.hz_rounded(), 2_600_000_000);
/// assert_eq!(r.uncertainty_ppm, 11); // 50 000 / 5.2e9 = 9.6 ppm, + 1 / 2e8
/// assert_eq!(r.reference_ticks, 200_000_000);
/// ```
pub fn refined_rate(
    base: &Bracketed,
    now: &Bracketed,
    reference: Frequency,
) -> Result<Refinement, RefineError> {
    let (Some(w0), Some(w1)) = (base.width(), now.width()) else {
        return Err(RefineError::Implausible);
    };
    let dref = now
        .inner
        .checked_sub(base.inner)
        .filter(|d| *d > 0)
        .ok_or(RefineError::Implausible)?;
    // Midpoints doubled, to keep the half tick.
    let mid2 = |b: &Bracketed| b.before as u128 + b.after as u128;
    let dtsc2 = mid2(now)
        .checked_sub(mid2(base))
        .filter(|d| *d > 0)
        .ok_or(RefineError::Implausible)?;
    // rate = (dtsc2 / 2) / dref × num / den.
    let num = dtsc2
        .checked_mul(reference.numerator() as u128)
        .ok_or(RefineError::Implausible)?;
    let den = (dref as u128)
        .checked_mul(2 * reference.denominator() as u128)
        .ok_or(RefineError::Implausible)?;
    let rate = Frequency::from_ratio(num, den)
        .ok()
        .filter(crate::provenance::plausible)
        .ok_or(RefineError::Implausible)?;
    // ppm = 1e6 × ((w0 + w1) / 2 / (dtsc2 / 2) + 1 / dref), rounded up.
    let tsc_part = ((w0 as u128 + w1 as u128) * 1_000_000).div_ceil(dtsc2);
    let ref_part = 1_000_000u128.div_ceil(dref as u128);
    let uncertainty_ppm = u32::try_from(tsc_part + ref_part).unwrap_or(u32::MAX);
    Ok(Refinement {
        rate,
        uncertainty_ppm,
        reference_ticks: dref,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(before: u64, inner: u64, after: u64) -> Bracketed {
        Bracketed {
            before,
            inner,
            after,
        }
    }

    #[test]
    fn the_bound_falls_with_the_baseline() {
        let hpet = Frequency::from_hz(100_000_000).unwrap();
        let base = b(0, 0, 52_000);
        let one_s = refined_rate(&base, &b(2_600_000_000, 100_000_000, 2_600_052_000), hpet)
            .unwrap()
            .uncertainty_ppm;
        let four_s = refined_rate(&base, &b(10_400_000_000, 400_000_000, 10_400_052_000), hpet)
            .unwrap()
            .uncertainty_ppm;
        assert_eq!(one_s, 21); // 52 000 / 2.6e9 = 20 ppm, + 0.01 ppm, rounded up
        assert_eq!(four_s, 6);
    }

    #[test]
    fn no_progress_or_backwards_is_refused() {
        let hpet = Frequency::from_hz(100_000_000).unwrap();
        let base = b(1_000, 500, 2_000);
        for now in [
            b(5_000, 500, 6_000),     // reference stood still
            b(5_000, 400, 6_000),     // reference went back
            b(1_000, 900, 2_000),     // TSC stood still
            b(7_000, 900, 6_000),     // bracket inverted
            b(2_000, 100_500, 3_000), // 1 MHz: no TSC is that slow
        ] {
            assert!(refined_rate(&base, &now, hpet).is_err(), "{now:?}");
        }
    }

    #[test]
    fn hostile_values_never_panic() {
        let f = Frequency::from_hz(1).unwrap();
        for (x, y) in [
            (0, u64::MAX),
            (u64::MAX, 0),
            (1, 1),
            (u64::MAX / 2, u64::MAX),
        ] {
            let _ = refined_rate(&b(0, 0, x), &b(y, y, y), f);
            let _ = refined_rate(&b(x, x, x), &b(y, 0, y), f);
        }
    }
}
