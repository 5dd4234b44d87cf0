//! Cross-checking a stated TSC rate against a calibration.
//!
//! Decision (documented in [`RateCheck`]): the stated rate is exact when it
//! is right, so it is kept unless the calibration proves it wrong — the
//! deviation exceeds the tolerance plus the calibration's own uncertainty
//! *and* is more than twice that uncertainty (so the calibrated rate is the
//! closer of the two in the worst case). Then the calibration wins.

use crate::{Calibration, CalibrationError, RateProvenance};
use clockhal_core::Frequency;

/// Deviation beyond which a stated rate is suspect: 490 ppm, Linux's
/// `tsc_khz >> 11` (≈ 488 ppm) rounded.
pub const RATE_TOLERANCE_PPM: u32 = 490;

/// Outcome of comparing the stated rate with a calibration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RateCheck {
    /// No reference clock was given (or the rate is the calibration itself).
    NotChecked,
    /// The stated rate agrees with the calibration within
    /// [`RATE_TOLERANCE_PPM`] plus the calibration's uncertainty; kept.
    Consistent {
        /// Stated minus measured, in ppm of the measured rate.
        deviation_ppm: i64,
        /// The calibration's uncertainty.
        uncertainty_ppm: u32,
    },
    /// The stated rate is provably off by more than the tolerance and the
    /// calibration is the closer one: the calibrated rate is used.
    Overruled {
        /// The rejected rate.
        stated: Frequency,
        /// Where it came from.
        stated_by: RateProvenance,
        /// Stated minus measured, in ppm of the measured rate.
        deviation_ppm: i64,
        /// The calibration's uncertainty.
        uncertainty_ppm: u32,
    },
    /// The rates disagree beyond the tolerance, but the calibration is too
    /// coarse to overrule: the stated rate is kept (and not trusted for
    /// rating).
    Inconclusive {
        /// The calibrated rate.
        measured: Frequency,
        /// Stated minus measured, in ppm of the measured rate.
        deviation_ppm: i64,
        /// The calibration's uncertainty.
        uncertainty_ppm: u32,
    },
    /// The calibration failed; the stated rate is kept unchecked.
    CalibrationFailed(CalibrationError),
}

impl RateCheck {
    /// Whether the check casts doubt on the rate in use.
    /// Interrupt-safe: yes.
    pub fn is_suspect(&self) -> bool {
        matches!(self, RateCheck::Inconclusive { .. })
    }
}

/// Applies the rule above; returns the rate to use, its provenance and the
/// check's outcome.
pub(crate) fn cross_check(
    stated: (Frequency, RateProvenance),
    cal: &Calibration,
) -> (Frequency, RateProvenance, RateCheck) {
    let deviation_ppm = stated.0.ppb_from(&cal.rate) / 1_000;
    let dev = deviation_ppm.unsigned_abs();
    let unc = cal.uncertainty_ppm as u64;
    if dev <= RATE_TOLERANCE_PPM as u64 + unc {
        return (
            stated.0,
            stated.1,
            RateCheck::Consistent {
                deviation_ppm,
                uncertainty_ppm: cal.uncertainty_ppm,
            },
        );
    }
    if dev > 2 * unc {
        let calibrated = RateProvenance::Calibrated {
            reference: cal.reference,
            uncertainty_ppm: cal.uncertainty_ppm,
        };
        return (
            cal.rate,
            calibrated,
            RateCheck::Overruled {
                stated: stated.0,
                stated_by: stated.1,
                deviation_ppm,
                uncertainty_ppm: cal.uncertainty_ppm,
            },
        );
    }
    (
        stated.0,
        stated.1,
        RateCheck::Inconclusive {
            measured: cal.rate,
            deviation_ppm,
            uncertainty_ppm: cal.uncertainty_ppm,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cal(hz: u64, ppm: u32) -> Calibration {
        Calibration {
            rate: Frequency::from_hz(hz).unwrap(),
            uncertainty_ppm: ppm,
            reference: "ref",
            reference_ticks: 1,
            tsc_ticks: 1,
        }
    }

    fn stated(hz: u64) -> (Frequency, RateProvenance) {
        (Frequency::from_hz(hz).unwrap(), RateProvenance::CpuidLeaf15)
    }

    #[test]
    fn agreement_keeps_the_stated_rate() {
        // 300 ppm off, calibration ±20 ppm: within tolerance.
        let (f, p, c) = cross_check(stated(1_000_300_000), &cal(1_000_000_000, 20));
        assert_eq!(
            (f.hz_rounded(), p),
            (1_000_300_000, RateProvenance::CpuidLeaf15)
        );
        assert_eq!(
            c,
            RateCheck::Consistent {
                deviation_ppm: 300,
                uncertainty_ppm: 20
            }
        );
        // Exactly at tolerance + uncertainty.
        let (_, _, c) = cross_check(stated(1_000_510_000), &cal(1_000_000_000, 20));
        assert!(matches!(c, RateCheck::Consistent { .. }));
    }

    #[test]
    fn a_tight_calibration_overrules_a_wrong_stated_rate() {
        let (f, p, c) = cross_check(stated(1_000_600_000), &cal(1_000_000_000, 20));
        assert_eq!(f.hz_rounded(), 1_000_000_000);
        assert_eq!(
            p,
            RateProvenance::Calibrated {
                reference: "ref",
                uncertainty_ppm: 20
            }
        );
        assert!(matches!(
            c,
            RateCheck::Overruled {
                stated_by: RateProvenance::CpuidLeaf15,
                deviation_ppm: 600,
                ..
            }
        ));
        // Slower stated rate: negative deviation.
        let (_, _, c) = cross_check(stated(999_000_000), &cal(1_000_000_000, 20));
        assert!(matches!(
            c,
            RateCheck::Overruled {
                deviation_ppm: -1000,
                ..
            }
        ));
    }

    #[test]
    fn a_coarse_calibration_cannot_overrule() {
        // 1,800 ppm off, calibration ±1,000 ppm: beyond tolerance + 1,000,
        // but the calibration could be 1,000 ppm off itself.
        let (f, p, c) = cross_check(stated(1_001_800_000), &cal(1_000_000_000, 1_000));
        assert_eq!(
            (f.hz_rounded(), p),
            (1_001_800_000, RateProvenance::CpuidLeaf15)
        );
        assert!(matches!(
            c,
            RateCheck::Inconclusive {
                deviation_ppm: 1800,
                ..
            }
        ));
        assert!(c.is_suspect());
    }
}
