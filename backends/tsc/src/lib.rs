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
//! - [`Quality::UNUSABLE`] (-100: never auto-selected, still usable by
//!   explicit choice) with the reason in [`Tsc::unusable`]: a warp seen,
//!   no real rate (only CPUID 0x16's MHz), several CPUs without a warp-test
//!   result, or — for a TSC that is not invariant — no rate good enough to
//!   supervise.
//! - **Invariant:** 300 (Linux's `tsc` rating), +50 when in step (single
//!   CPU or warp-tested), +40 when the rate is exact (a stated rate not
//!   contradicted by a calibration) or calibrated to within [`TIGHT_PPM`]:
//!   300..=390, below kvmclock (400) and the Hyper-V page (450), because
//!   the raw TSC does not survive migration to a host with another rate.
//!   500 when all of that holds *and* the OS promises
//!   [`Migration::WillNot`]: then the TSC is as correct as the paravirtual
//!   clocks and cheaper.
//! - **Not invariant, but in step and with a known or calibrated rate:**
//!   [`SUPERVISED_RATING`] (290) — a *supervised* TSC, Linux's
//!   `CLOCK_SOURCE_MUST_VERIFY`: it beats every trapping source (HPET 250,
//!   Hyper-V MSR 280, PM timer 150) and never a paravirtual clock, and is
//!   correct only while a watchdog keeps comparing it with an independent
//!   counter ([`Tsc::supervised`]; the facade enforces that and demotes it
//!   at the first skew).
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
#![forbid(unsafe_code)]

mod calibrate;
mod check;
mod provenance;
mod warp;

pub use calibrate::{calibrate, Calibration, CalibrationError};
pub use check::{RateCheck, RATE_TOLERANCE_PPM};
pub use provenance::RateProvenance;
pub use warp::{warp_participant, SyncStatus, WarpBudget, WarpReport, WarpShared};

use clockhal_core::{
    ClockSource, Frequency, Migration, PerCpuSlots, Policy, Quality, ReadCost, Scale, Stability,
    TscMap,
};
use clockhal_x86::{cpuid, rdmsr_checked, Hardware, Msr};
use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};

/// A calibration at least this tight counts as an exact rate for rating.
pub const TIGHT_PPM: u32 = 100;

/// The rating of a supervised TSC (not invariant, in step, rate known).
pub const SUPERVISED_RATING: Quality = Quality::new(290);

/// A non-invariant TSC is supervised only with a rate at least this tight
/// (a watchdog bound of 500 ppm could not tell a worse one from drift).
pub const SUPERVISED_MAX_UNCERTAINTY_PPM: u32 = 250;

/// Why a TSC is not auto-selectable ([`Tsc::unusable`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Unusable {
    /// The warp test saw a CPU's TSC behind another's.
    Unsynchronized {
        /// The largest backward step, in ticks.
        worst_backward_ticks: u64,
    },
    /// Several CPUs and no conclusive warp-test result.
    SyncUnknown {
        /// The CPU count the OS gave.
        cpus: usize,
    },
    /// Only CPUID 0x16's base MHz: not the TSC rate.
    NoRealRate,
    /// Not invariant, and the rate is not known well enough to supervise.
    NotInvariantRateUncertain {
        /// The rate's uncertainty, ppm (`u32::MAX` if unknown).
        uncertainty_ppm: u32,
    },
    /// The stated rate disagrees with the calibration.
    RateInDoubt,
}

impl fmt::Display for Unusable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unusable::Unsynchronized {
                worst_backward_ticks,
            } => write!(f, "out of step across CPUs ({worst_backward_ticks} ticks)"),
            Unusable::SyncUnknown { cpus } => {
                write!(f, "{cpus} CPUs and no warp-test result")
            }
            Unusable::NoRealRate => f.write_str("no real rate (only CPUID 0x16's MHz)"),
            Unusable::NotInvariantRateUncertain { uncertainty_ppm } => write!(
                f,
                "not invariant, rate too uncertain to supervise (±{uncertainty_ppm} ppm)"
            ),
            Unusable::RateInDoubt => f.write_str("stated rate contradicted by calibration"),
        }
    }
}

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
    /// How many CPUs the OS runs (default 1). With more than one, the TSC
    /// is not auto-selected until `sync` says the TSCs are in step.
    pub cpus: usize,
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
            cpus: 1,
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
            .field("cpus", &self.cpus)
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
    slots: PerCpuSlots,
    rate: Frequency,
    map: TscMap,
    provenance: RateProvenance,
    check: RateCheck,
    calibration: Option<Calibration>,
    invariant: bool,
    sync: AtomicU64,
    cpus: usize,
    migration: Migration,
    /// The probing CPU's `IA32_TSC_ADJUST`, where it exists.
    adjust: Option<u64>,
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
        let adjust = cpuid::has_tsc_adjust(&hw)
            .then(|| rdmsr_checked(&hw, Msr::IA32_TSC_ADJUST))
            .flatten();
        Ok(Tsc {
            hw,
            slots: PerCpuSlots::new(),
            map: TscMap::through(&Scale::new(rate), 0, 0),
            rate,
            provenance,
            check,
            calibration: calibration.and_then(Result::ok),
            invariant,
            sync: AtomicU64::new(opts.sync.encode()),
            cpus: opts.cpus.max(1),
            migration: opts.policy.migration,
            adjust,
        })
    }

    /// Compares the calling CPU's `IA32_TSC_ADJUST` with the probing CPU's
    /// (Linux's `tsc_store_and_check_tsc_adjust`): firmware or an OS that
    /// wrote one CPU's TSC leaves them different, and the TSCs are then out
    /// of step by that difference whatever a warp test saw. A mismatch marks
    /// the TSC unsynchronised and is returned as `Err(difference)`. Call it
    /// on every AP (the facade's `register_this_cpu` does). `Ok` where the
    /// MSR does not exist.
    pub fn check_tsc_adjust_this_cpu(&self) -> Result<(), u64> {
        let Some(bsp) = self.adjust else {
            return Ok(());
        };
        let Some(here) = rdmsr_checked(&self.hw, Msr::IA32_TSC_ADJUST) else {
            return Ok(());
        };
        if here == bsp {
            return Ok(());
        }
        let diff = here.abs_diff(bsp);
        self.set_sync(SyncStatus::Unsynchronized {
            worst_backward_ticks: diff,
        });
        Err(diff)
    }

    /// The TSC ticks-to-nanoseconds map of the rate in use (through 0), for
    /// a reader that composes it with its own offset (the facade's `Clock`).
    pub fn map(&self) -> TscMap {
        self.map
    }

    /// Why the TSC may not be auto-selected, or `None` if it may.
    pub fn unusable(&self) -> Option<Unusable> {
        if let SyncStatus::Unsynchronized {
            worst_backward_ticks,
        } = self.sync()
        {
            return Some(Unusable::Unsynchronized {
                worst_backward_ticks,
            });
        }
        if self.provenance == RateProvenance::BaseFrequencyHint {
            return Some(Unusable::NoRealRate);
        }
        if !self.in_step() {
            return Some(Unusable::SyncUnknown { cpus: self.cpus });
        }
        if self.invariant {
            return None;
        }
        if self.check.is_suspect() {
            return Some(Unusable::RateInDoubt);
        }
        let uncertainty_ppm = match self.provenance {
            RateProvenance::Calibrated {
                uncertainty_ppm, ..
            } => uncertainty_ppm,
            p if p.is_exact() => 0,
            _ => u32::MAX,
        };
        if uncertainty_ppm > SUPERVISED_MAX_UNCERTAINTY_PPM {
            return Some(Unusable::NotInvariantRateUncertain { uncertainty_ppm });
        }
        None
    }

    /// Whether this TSC is correct only under supervision: not advertised
    /// invariant (its rate may change with P-states, stop in C-states, or
    /// change after a migration). A supervised TSC may be selected only
    /// while a watchdog compares it with an independent counter.
    pub fn supervised(&self) -> bool {
        !self.invariant && self.unusable().is_none()
    }

    /// In step across CPUs: one CPU, or a conclusive warp test.
    fn in_step(&self) -> bool {
        let sync = self.sync();
        self.cpus <= 1 && !matches!(sync, SyncStatus::Unsynchronized { .. }) || sync.in_step()
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
        SyncStatus::decode(self.sync.load(Ordering::Acquire))
    }

    /// Updates the sync status (e.g. after SMP bring-up ran the warp
    /// tests, at any time, from any CPU); the rating and flags follow.
    pub fn set_sync(&self, sync: SyncStatus) {
        self.sync.store(sync.encode(), Ordering::Release);
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

    /// `rdtsc_ordered` (see the crate docs for why ordered), never below
    /// what this CPU read before (a per-CPU floor: a host that steps the TSC
    /// back cannot make time go back).
    #[inline(always)]
    fn read(&self) -> u64 {
        let cpu = self.hw.cpu_index();
        let t = self.hw.rdtsc_ordered();
        self.slots
            .raise(cpu, t, |cell, v| self.hw.fetch_max_local(cell, v))
    }

    fn frequency(&self) -> Frequency {
        self.rate
    }

    fn quality(&self) -> Quality {
        if self.unusable().is_some() {
            return Quality::UNUSABLE;
        }
        if !self.invariant {
            return SUPERVISED_RATING;
        }
        let trusted = self.rate_trusted();
        if trusted && self.migration == Migration::WillNot {
            return Quality::new(500);
        }
        Quality::new(350 + if trusted { 40 } else { 0 })
    }

    fn stability(&self) -> Stability {
        let mut s = Stability::MONOTONIC_PER_CPU;
        if self.invariant {
            s |= Stability::INVARIANT_RATE;
        }
        if self.in_step() {
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
            .field("sync", &self.sync())
            .finish()
    }
}
