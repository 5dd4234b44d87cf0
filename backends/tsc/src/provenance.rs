//! Where the TSC rate came from, and the rates firmware and hypervisors
//! state.

use clockhal_core::Frequency;
use clockhal_x86::{cpuid, Hardware};
use core::fmt;

/// The source of a TSC rate, best first in declaration order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RateProvenance {
    /// CPUID leaf 0x15: crystal Hz × numerator / denominator (exact).
    CpuidLeaf15,
    /// Hypervisor CPUID leaf base+0x10 (VMware convention, QEMU with
    /// invtsc): TSC kHz.
    HypervisorLeaf,
    /// Hyper-V `HV_X64_MSR_TSC_FREQUENCY` (Hz), supplied by the caller.
    HypervMsr,
    /// A kvmclock/pvclock area's `mul`/`shift`, supplied by the caller.
    Pvclock,
    /// Measured against another clock.
    Calibrated {
        /// Name of the reference clock (`"hpet"`, `"acpi-pm"`, ...).
        reference: &'static str,
        /// Bound on the relative error, from the reference read-back window,
        /// its resolution and the scatter of its readings.
        uncertainty_ppm: u32,
    },
    /// A calibration refined at run time over a long baseline against a
    /// reference ([`Tsc::refine`](crate::Tsc::refine), fed by the facade's
    /// watchdog ticks, as Linux refines its boot calibration after a
    /// second).
    Refined {
        /// Name of the reference clock.
        reference: &'static str,
        /// Bound on the relative error (the two brackets' widths over the
        /// baseline).
        uncertainty_ppm: u32,
        /// Length of the baseline, milliseconds of reference time.
        baseline_ms: u32,
    },
    /// Given by the OS (its own calibration, a boot parameter, ...).
    OsSupplied,
    /// CPUID leaf 0x16 base frequency: whole MHz and not necessarily the
    /// TSC rate. Last resort only: a TSC rated from it is never selected
    /// automatically.
    BaseFrequencyHint,
}

impl RateProvenance {
    /// The bound on the relative error of a measured rate, ppm (`None` for
    /// a stated or guessed one).
    /// Interrupt-safe: yes.
    pub fn uncertainty_ppm(&self) -> Option<u32> {
        match *self {
            RateProvenance::Calibrated {
                uncertainty_ppm, ..
            }
            | RateProvenance::Refined {
                uncertainty_ppm, ..
            } => Some(uncertainty_ppm),
            _ => None,
        }
    }

    /// Whether the source states the rate exactly (to better than 1 ppm),
    /// as opposed to measuring or guessing it.
    /// Interrupt-safe: yes.
    pub fn is_exact(&self) -> bool {
        matches!(
            self,
            RateProvenance::CpuidLeaf15
                | RateProvenance::HypervisorLeaf
                | RateProvenance::HypervMsr
                | RateProvenance::Pvclock
                | RateProvenance::OsSupplied
        )
    }

    /// Order of preference among stated rates (lower is better).
    pub(crate) fn rank(&self) -> u8 {
        match self {
            RateProvenance::CpuidLeaf15 => 0,
            RateProvenance::HypervisorLeaf => 1,
            RateProvenance::HypervMsr => 2,
            RateProvenance::Pvclock => 3,
            RateProvenance::OsSupplied => 4,
            RateProvenance::Calibrated { .. } | RateProvenance::Refined { .. } => 5,
            RateProvenance::BaseFrequencyHint => 6,
        }
    }
}

impl fmt::Display for RateProvenance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RateProvenance::CpuidLeaf15 => f.write_str("rate from CPUID leaf 0x15"),
            RateProvenance::HypervisorLeaf => f.write_str("rate from the hypervisor timing leaf"),
            RateProvenance::HypervMsr => f.write_str("rate from the Hyper-V frequency MSR"),
            RateProvenance::Pvclock => f.write_str("rate from pvclock"),
            RateProvenance::Calibrated {
                reference,
                uncertainty_ppm,
            } => write!(
                f,
                "rate calibrated against {reference} (±{uncertainty_ppm} ppm)"
            ),
            RateProvenance::Refined {
                reference,
                uncertainty_ppm,
                baseline_ms,
            } => write!(
                f,
                "rate refined against {reference} over {}.{} s (±{uncertainty_ppm} ppm)",
                baseline_ms / 1000,
                baseline_ms % 1000 / 100
            ),
            RateProvenance::OsSupplied => f.write_str("rate supplied by the OS"),
            RateProvenance::BaseFrequencyHint => {
                f.write_str("rate guessed from CPUID leaf 0x16 (MHz)")
            }
        }
    }
}

/// Lowest and highest TSC rate believed: anything outside is firmware or
/// hypervisor garbage (no x86 TSC runs below 100 MHz or above 10 GHz).
pub(crate) const PLAUSIBLE_HZ: core::ops::RangeInclusive<u64> = 100_000_000..=10_000_000_000;

pub(crate) fn plausible(f: &Frequency) -> bool {
    PLAUSIBLE_HZ.contains(&f.hz_rounded())
}

/// CPUID leaf 0x15, when all three values are non-zero, the crystal rate is
/// plausible ([`cpuid::PLAUSIBLE_CRYSTAL_HZ`]) and so is the result.
fn leaf15<H: Hardware>(hw: &H) -> Option<Frequency> {
    let leaf = cpuid::tsc_leaf(hw)?;
    leaf.crystal()?;
    let (num, den) = leaf.tsc_hz_ratio()?;
    Frequency::from_ratio(num, den).ok().filter(plausible)
}

/// The hypervisor timing leaf of the first hypervisor range, or of KVM's
/// when Hyper-V owns the first; never reading above a range's maximum.
fn hypervisor_leaf<H: Hardware>(hw: &H) -> Option<Frequency> {
    cpuid::timing_leaves(hw).find_map(|leaf| {
        Frequency::from_hz(leaf.tsc_khz as u64 * 1_000)
            .ok()
            .filter(plausible)
    })
}

/// The best stated (not measured) rate: CPUID 0x15, the hypervisor leaf,
/// then the caller's hints by provenance rank (implausible ones skipped).
/// What [`Tsc::probe`](crate::Tsc::probe) uses before it calibrates; a
/// caller can ask first whether a calibration reference will be needed.
/// Interrupt-safe: yes.
pub fn stated_rate<H: Hardware>(
    hw: &H,
    hints: &[(Frequency, RateProvenance)],
) -> Option<(Frequency, RateProvenance)> {
    if let Some(f) = leaf15(hw) {
        return Some((f, RateProvenance::CpuidLeaf15));
    }
    if let Some(f) = hypervisor_leaf(hw) {
        return Some((f, RateProvenance::HypervisorLeaf));
    }
    hints
        .iter()
        .filter(|(f, p)| plausible(f) && *p != RateProvenance::BaseFrequencyHint)
        .min_by_key(|(_, p)| p.rank())
        .copied()
}

/// CPUID leaf 0x16's base MHz as a last-resort rate.
pub(crate) fn base_frequency_hint<H: Hardware>(hw: &H) -> Option<Frequency> {
    let mhz = cpuid::base_mhz(hw)?;
    Frequency::from_hz(mhz as u64 * 1_000_000)
        .ok()
        .filter(plausible)
}
