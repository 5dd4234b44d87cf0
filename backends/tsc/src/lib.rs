//! # clockhal-tsc
//!
//! The CPU's time-stamp counter as a [`ClockSource`]: no hypervisor exits
//! per read, but only as good as three facts that [`Tsc::probe`] gathers.
//!
//! 1. **Invariant?** CPUID 0x80000007 EDX bit 8: the rate does not change
//!    with P-, C- or T-states. Inside a VM this is the *hypervisor's claim
//!    for the current host*: it says nothing about live migration to a host
//!    with another TSC rate (only TSC scaling or a no-migration promise
//!    covers that, see [`Migration`]).
//! 2. **Rate?** Best first, with its [`RateProvenance`]: CPUID 0x15, the
//!    hypervisor timing leaf (base+0x10, only if the range reaches it), the
//!    caller's hints (Hyper-V frequency MSR, pvclock mul/shift, OS-supplied:
//!    this crate does not depend on those backends), then a calibration
//!    against a reference [`ClockSource`] ([`calibrate`]). Rates are kept
//!    exact ([`Frequency`] is rational), never rounded to MHz. When a stated
//!    rate and a reference both exist, they are cross-checked
//!    ([`RateCheck`]).
//! 3. **In step across CPUs?** The OS runs the warp test
//!    ([`warp_participant`]) on CPU pairs and passes the [`SyncStatus`].
//!
//! ## Rating
//! - Not invariant, a warp seen, or no real rate (only CPUID 0x16's MHz):
//!   [`Quality::UNUSABLE`] (-100): never auto-selected, still usable by
//!   explicit choice.
//! - Otherwise 300 (Linux's `tsc` rating), +50 when in step (single CPU or
//!   warp-tested), +40 when the rate is exact (a stated rate not contradicted
//!   by a calibration) or calibrated to within [`TIGHT_PPM`]: 300..=390,
//!   below kvmclock (400) and the Hyper-V page (450), because the raw TSC
//!   does not survive migration to a host with another rate.
//! - 500 when all of that holds *and* the OS promises
//!   [`Migration::WillNot`]: then the TSC
//!   is as correct as the paravirtual clocks and cheaper.
//!
//! ## Read
//! [`ClockSource::read`] is [`Hardware::rdtsc_ordered`] (`lfence; rdtsc`,
//! or `mfence; rdtsc` on AMD): a plain `rdtsc` may execute before earlier
//! loads complete, so a timestamp taken after reading some shared state
//! could be older than that state — and two reads on different CPUs could
//! be misordered against the memory operations between them. The fence
//! costs a few cycles (see the crate's benchmark).
//!
//! ```
//! use clockhal_core::{ClockSource, Policy};
//! use clockhal_tsc::{RateProvenance, SyncStatus, Tsc, TscOptions};
//! use clockhal_sim::SimMachine;
//!
//! let m = SimMachine::bare_metal(); // invariant TSC, CPUID 0x15
//! let opts = TscOptions { sync: SyncStatus::SingleCpu, ..TscOptions::new() };
//! let tsc = Tsc::probe(&m, &opts).unwrap();
//! assert_eq!(tsc.provenance(), RateProvenance::CpuidLeaf15);
//! assert_eq!(tsc.frequency().hz_rounded(), 2_592_000_000);
//! assert_eq!(tsc.quality().get(), 390);
//! ```
#![no_std]

mod calibrate;
mod check;
mod provenance;
mod warp;

pub use calibrate::{calibrate, Calibration, CalibrationError};
pub use check::{RateCheck, RATE_TOLERANCE_PPM};
pub use provenance::RateProvenance;
pub use warp::{warp_participant, SyncStatus, WarpBudget, WarpReport, WarpShared};

use clockhal_core::{ClockSource, Frequency, Migration, Policy, Quality, ReadCost, Stability};
use clockhal_x86::{cpuid, Hardware};
use core::fmt;

/// A calibration at least this tight counts as an exact rate for rating.
pub const TIGHT_PPM: u32 = 100;

/// What [`Tsc::probe`] is told.
#[derive(Clone, Copy)]
pub struct TscOptions<'a> {
    /// Rates from other sources, e.g. `(f, RateProvenance::Pvclock)` from
    /// the kvmclock backend or `(f, RateProvenance::HypervMsr)` from the
    /// Hyper-V one. Used after CPUID, best provenance first.
    pub hints: &'a [(Frequency, RateProvenance)],
    /// A clock to calibrate against (HPET, PM timer, an OS clock). Without
    /// a stated rate it gives the rate; with one, it cross-checks it.
    pub reference: Option<&'a dyn ClockSource>,
    /// What the OS's warp tests found (default: unknown).
    pub sync: SyncStatus,
    /// Migration stance and calibration budget.
    pub policy: Policy,
}

impl Default for TscOptions<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl TscOptions<'_> {
    /// No hints, no reference, sync unknown, default policy.
    pub const fn new() -> TscOptions<'static> {
        TscOptions {
            hints: &[],
            reference: None,
            sync: SyncStatus::Unknown,
            policy: Policy::new(),
        }
    }
}

impl fmt::Debug for TscOptions<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TscOptions")
            .field("hints", &self.hints)
            .field("reference", &self.reference.map(|r| r.name()))
            .field("sync", &self.sync)
            .field("policy", &self.policy)
            .finish()
    }
}

/// Why there is no TSC clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TscError {
    /// CPUID.1:EDX bit 4 is clear: no TSC.
    NoTsc,
    /// No stated rate, no (successful) calibration, no base-frequency hint.
    RateUnknown {
        /// Why the calibration failed, if one was tried.
        calibration: Option<CalibrationError>,
    },
}

impl fmt::Display for TscError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TscError::NoTsc => f.write_str("CPU has no TSC"),
            TscError::RateUnknown { calibration: None } => f.write_str(
                "TSC rate unknown (no CPUID/hypervisor rate, no hint, no reference clock)",
            ),
            TscError::RateUnknown {
                calibration: Some(e),
            } => write!(f, "TSC rate unknown: {e}"),
        }
    }
}

/// The TSC, probed.
pub struct Tsc<H: Hardware> {
    hw: H,
    rate: Frequency,
    provenance: RateProvenance,
    check: RateCheck,
    calibration: Option<Calibration>,
    invariant: bool,
    sync: SyncStatus,
    migration: Migration,
}

impl<H: Hardware> Tsc<H> {
    /// Gathers invariance, rate and sync status (see the crate docs).
    /// Calibrates only when `opts.reference` is given, spending up to
    /// `opts.policy.calibration_budget` of reference time.
    pub fn probe(hw: H, opts: &TscOptions<'_>) -> Result<Tsc<H>, TscError> {
        if hw.cpuid(1, 0).edx & (1 << 4) == 0 {
            return Err(TscError::NoTsc);
        }
        let invariant = cpuid::invariant_tsc(&hw);
        let stated = provenance::stated_rate(&hw, opts.hints);
        let calibration = opts
            .reference
            .map(|r| calibrate(&hw, r, opts.policy.calibration_budget));
        let (rate, provenance, check) = match (stated, calibration) {
            (Some(s), Some(Ok(c))) => check::cross_check(s, &c),
            (Some(s), Some(Err(e))) => (s.0, s.1, RateCheck::CalibrationFailed(e)),
            (Some(s), None) => (s.0, s.1, RateCheck::NotChecked),
            (None, Some(Ok(c))) => (
                c.rate,
                RateProvenance::Calibrated {
                    reference: c.reference,
                    uncertainty_ppm: c.uncertainty_ppm,
                },
                RateCheck::NotChecked,
            ),
            (None, failed) => {
                let err = failed.and_then(Result::err);
                match provenance::base_frequency_hint(&hw) {
                    Some(f) => (
                        f,
                        RateProvenance::BaseFrequencyHint,
                        err.map_or(RateCheck::NotChecked, RateCheck::CalibrationFailed),
                    ),
                    None => return Err(TscError::RateUnknown { calibration: err }),
                }
            }
        };
        Ok(Tsc {
            hw,
            rate,
            provenance,
            check,
            calibration: calibration.and_then(Result::ok),
            invariant,
            sync: opts.sync,
            migration: opts.policy.migration,
        })
    }

    /// Where the rate in use came from.
    pub fn provenance(&self) -> RateProvenance {
        self.provenance
    }

    /// The cross-check of a stated rate against the calibration.
    pub fn rate_check(&self) -> RateCheck {
        self.check
    }

    /// The calibration, if one ran and succeeded.
    pub fn calibration(&self) -> Option<&Calibration> {
        self.calibration.as_ref()
    }

    /// CPUID's invariant-TSC bit (in a VM: the hypervisor's claim for this
    /// host, not a migration guarantee).
    pub fn invariant(&self) -> bool {
        self.invariant
    }

    /// The sync status the rating uses.
    pub fn sync(&self) -> SyncStatus {
        self.sync
    }

    /// Updates the sync status (e.g. after SMP bring-up ran the warp
    /// tests); the rating and flags follow.
    pub fn set_sync(&mut self, sync: SyncStatus) {
        self.sync = sync;
    }

    /// The hardware handle.
    pub fn hardware(&self) -> &H {
        &self.hw
    }

    /// Whether the rate is exact or tightly calibrated (and not in doubt).
    fn rate_trusted(&self) -> bool {
        if self.check.is_suspect() {
            return false;
        }
        match self.provenance {
            RateProvenance::Calibrated {
                uncertainty_ppm, ..
            } => uncertainty_ppm <= TIGHT_PPM,
            p => p.is_exact(),
        }
    }
}

impl<H: Hardware> ClockSource for Tsc<H> {
    fn name(&self) -> &'static str {
        "tsc"
    }

    /// `rdtsc_ordered`: see the crate docs for why ordered.
    #[inline(always)]
    fn read(&self) -> u64 {
        self.hw.rdtsc_ordered()
    }

    fn frequency(&self) -> Frequency {
        self.rate
    }

    fn quality(&self) -> Quality {
        let unsynchronized = matches!(self.sync, SyncStatus::Unsynchronized { .. });
        if !self.invariant || unsynchronized || self.provenance == RateProvenance::BaseFrequencyHint
        {
            return Quality::UNUSABLE;
        }
        let in_step = self.sync.in_step();
        let trusted = self.rate_trusted();
        if in_step && trusted && self.migration == Migration::WillNot {
            return Quality::new(500);
        }
        Quality::new(300 + if in_step { 50 } else { 0 } + if trusted { 40 } else { 0 })
    }

    fn stability(&self) -> Stability {
        let mut s = Stability::MONOTONIC_PER_CPU;
        if self.invariant {
            s |= Stability::INVARIANT_RATE;
        }
        if self.sync.in_step() {
            s |= Stability::MONOTONIC_ACROSS_CPUS;
        }
        s
    }

    fn read_cost(&self) -> ReadCost {
        ReadCost::NoTrap
    }
}

impl<H: Hardware> fmt::Debug for Tsc<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tsc")
            .field("rate", &self.rate)
            .field("provenance", &self.provenance)
            .field("check", &self.check)
            .field("invariant", &self.invariant)
            .field("sync", &self.sync)
            .finish()
    }
}
