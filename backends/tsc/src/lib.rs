#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![no_std]
#![forbid(unsafe_code)]

mod calibrate;
mod check;
mod provenance;
mod refine;
mod warp;

pub use calibrate::{
    calibrate, calibrate_against_seconds, Calibration, CalibrationError, SecondEdge,
};
pub use check::{RateCheck, RATE_TOLERANCE_PPM};
pub use provenance::{stated_rate, RateProvenance};
pub use refine::{refined_rate, RefineError, Refinement, REFINED_TARGET_PPM};
pub use warp::{warp_participant, SyncStatus, WarpBudget, WarpReport, WarpShared};

use clockhal_core::{
    ClampGranule, ClockSource, Frequency, LastMap, MapMiss, MapNow, Migration, Policy, Quality,
    ReadCost, Scale, Stability, Timeline, TscMap, TscSource,
};
use clockhal_x86::{cpuid, rdmsr_checked, Hardware, Msr, Seam};
use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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
                write!(f, "{cpus} CPUs and the warp test did not decide")
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
    /// A calibration made beforehand, used like one against `reference`
    /// when there is none (e.g. [`calibrate_against_seconds`] against the
    /// RTC's second edges).
    pub measured: Option<Calibration>,
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
    /// Interrupt-safe: yes.
    pub const fn new() -> TscOptions<'static> {
        TscOptions {
            hints: &[],
            reference: None,
            measured: None,
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
#[non_exhaustive]
pub enum TscError {
    /// CPUID.1:EDX bit 4 is clear: no TSC.
    NoTsc,
    /// Every per-CPU state set of this machine's pool is in use
    /// (`Hardware::slot_pool`; [`SLOT_SETS`](clockhal_core::SLOT_SETS)
    /// clock objects at a time).
    NoPerCpuMemory,
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
            TscError::NoPerCpuMemory => {
                f.write_str("no free per-CPU state set in the machine's pool")
            }
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
    /// Its own reads' per-CPU floors (core's timeline).
    timeline: Timeline,
    rate: Frequency,
    map: TscMap,
    provenance: RateProvenance,
    /// The run-time refinement of a calibrated rate, once adopted
    /// ([`refine`](Self::refine)): replaces rate, map and provenance.
    refined: spin::Once<(Frequency, TscMap, RateProvenance)>,
    check: RateCheck,
    calibration: Option<Calibration>,
    invariant: bool,
    sync: AtomicU64,
    cpus: usize,
    /// The probing CPU's index, and whether another CPU showed up although
    /// the OS stated (or defaulted to) one CPU.
    boot_cpu: usize,
    other_cpu: AtomicBool,
    migration: Migration,
    /// The probing CPU's `IA32_TSC_ADJUST`, where it exists.
    adjust: Option<u64>,
}

impl<H: Hardware> Tsc<H> {
    /// Gathers invariance, rate and sync status (see the crate docs).
    /// Calibrates only when `opts.reference` is given, spending up to
    /// `opts.policy.calibration_budget` of reference time; else takes
    /// `opts.measured` as its calibration, if any.
    ///
    /// Interrupt-safe: no (calibrates; claims per-CPU memory).
    pub fn probe(hw: H, opts: &TscOptions<'_>) -> Result<Tsc<H>, TscError> {
        if hw.cpuid(1, 0).edx & (1 << 4) == 0 {
            return Err(TscError::NoTsc);
        }
        let invariant = cpuid::invariant_tsc(&hw);
        let stated = provenance::stated_rate(&hw, opts.hints);
        let calibration = opts
            .reference
            .map(|r| calibrate(&hw, r, opts.policy.calibration_budget))
            .or(opts.measured.map(Ok));
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
        let boot_cpu = hw.cpu_index();
        let timeline =
            Timeline::claim(hw.slot_pool(), ClampGranule::EXACT).ok_or(TscError::NoPerCpuMemory)?;
        Ok(Tsc {
            boot_cpu,
            other_cpu: AtomicBool::new(false),
            hw,
            timeline,
            map: TscMap::through(&Scale::new(rate), 0, 0),
            rate,
            provenance,
            refined: spin::Once::new(),
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
    /// Interrupt-safe: yes.
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
    /// Interrupt-safe: yes.
    pub fn map(&self) -> TscMap {
        self.refined.get().map_or(self.map, |r| r.1)
    }

    /// The rate in use (the probe's, or its run-time refinement).
    fn rate(&self) -> Frequency {
        self.refined.get().map_or(self.rate, |r| r.0)
    }

    /// Adopts a run-time refinement of a calibrated rate (see
    /// [`refined_rate`]; the facade's watchdog feeds it): once, only over a
    /// calibration, only if tighter, and only if it agrees with the rate in
    /// use within both bounds. From then on [`frequency`](ClockSource::frequency),
    /// [`map`](Self::map), [`provenance`](Self::provenance) and the rating
    /// follow it. Call it while nothing reads this TSC through its old map
    /// (the facade refines only a TSC that is not the current source): the
    /// new map is a different line through 0.
    /// Interrupt-safe: no (`spin::Once`: may wait for the interrupted code).
    pub fn refine(
        &self,
        r: &Refinement,
        reference: &'static str,
        baseline_ms: u32,
    ) -> Result<(), RefineError> {
        if self.refined.is_completed() {
            return Err(RefineError::AlreadyRefined);
        }
        let RateProvenance::Calibrated {
            uncertainty_ppm: was,
            ..
        } = self.provenance
        else {
            return Err(RefineError::NotCalibrated);
        };
        if r.uncertainty_ppm >= was {
            return Err(RefineError::NotTighter);
        }
        let diff = r.rate.ppb_from(&self.rate) / 1_000;
        if diff.unsigned_abs() > u64::from(was) + u64::from(r.uncertainty_ppm) {
            return Err(RefineError::Disagrees { ppm: diff });
        }
        if !provenance::plausible(&r.rate) {
            return Err(RefineError::Implausible);
        }
        let prov = RateProvenance::Refined {
            reference,
            uncertainty_ppm: r.uncertainty_ppm,
            baseline_ms,
        };
        let mut adopted = false;
        self.refined.call_once(|| {
            adopted = true;
            (r.rate, TscMap::through(&Scale::new(r.rate), 0, 0), prov)
        });
        if adopted {
            Ok(())
        } else {
            Err(RefineError::AlreadyRefined)
        }
    }

    /// Why the TSC may not be auto-selected, or `None` if it may.
    /// Interrupt-safe: yes.
    pub fn unusable(&self) -> Option<Unusable> {
        if let SyncStatus::Unsynchronized {
            worst_backward_ticks,
        } = self.sync()
        {
            return Some(Unusable::Unsynchronized {
                worst_backward_ticks,
            });
        }
        if self.provenance() == RateProvenance::BaseFrequencyHint {
            return Some(Unusable::NoRealRate);
        }
        if !self.in_step() {
            return Some(Unusable::SyncUnknown {
                cpus: self.cpu_count(),
            });
        }
        if self.invariant {
            return None;
        }
        if self.check.is_suspect() {
            return Some(Unusable::RateInDoubt);
        }
        let prov = self.provenance();
        let uncertainty_ppm = match prov.uncertainty_ppm() {
            Some(u) => u,
            None if prov.is_exact() => 0,
            None => u32::MAX,
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
    /// Interrupt-safe: yes.
    pub fn supervised(&self) -> bool {
        !self.invariant && self.unusable().is_none()
    }

    /// In step across CPUs: one CPU, or a conclusive warp test. "Single
    /// CPU" stops being evidence once another CPU showed up.
    fn in_step(&self) -> bool {
        let sync = self.sync();
        let one_cpu = self.cpu_count() <= 1;
        one_cpu && !matches!(sync, SyncStatus::Unsynchronized { .. })
            || matches!(sync, SyncStatus::Synchronized)
    }

    /// The CPUs the sync rule counts: as stated, but at least 2 once
    /// another CPU than the probing one showed up ([`saw_cpu`](Self::saw_cpu)).
    fn cpu_count(&self) -> usize {
        if self.other_cpu.load(Ordering::Acquire) {
            self.cpus.max(2)
        } else {
            self.cpus
        }
    }

    /// After a resume (S3, a snapshot restore), on each CPU: forgets this
    /// CPU's floor, so readings follow a TSC that restarted (S3 resets it;
    /// a restored vCPU's may lie before the old value) instead of holding
    /// at the old value for as long as the TSC takes to pass it again. The
    /// caller keeps its own timeline continuous (clockhal's `Clock::resume`
    /// rebases). A CPU sharing the overflow slot keeps the shared floor.
    /// Interrupt-safe: no (a per-CPU lifecycle step).
    pub fn resume_this_cpu(&self) {
        let cpu = self.hw.cpu_index();
        self.timeline
            .resume_cpu(self.hw.slot_pool(), cpu, cpu == self.boot_cpu);
    }

    /// Tells the TSC that CPU `index` runs (e.g. it registered). A CPU other
    /// than the probing one on a TSC counted as single-CPU means the OS has
    /// more CPUs than it said, and nobody tested their TSCs: the TSC is then
    /// in step only by a warp test ([`set_sync`](Self::set_sync)). Returns
    /// whether that changed the TSC's standing.
    /// Interrupt-safe: yes.
    pub fn saw_cpu(&self, index: usize) -> bool {
        if index == self.boot_cpu || self.cpus > 1 {
            return false;
        }
        let was = self.in_step();
        self.other_cpu.store(true, Ordering::Release);
        was != self.in_step()
    }

    /// Where the rate in use came from.
    /// Interrupt-safe: yes.
    pub fn provenance(&self) -> RateProvenance {
        self.refined.get().map_or(self.provenance, |r| r.2)
    }

    /// The cross-check of a stated rate against the calibration.
    /// Interrupt-safe: yes.
    pub fn rate_check(&self) -> RateCheck {
        self.check
    }

    /// The calibration, if one ran and succeeded.
    /// Interrupt-safe: yes.
    pub fn calibration(&self) -> Option<&Calibration> {
        self.calibration.as_ref()
    }

    /// CPUID's invariant-TSC bit (in a VM: the hypervisor's claim for this
    /// host, not a migration guarantee).
    /// Interrupt-safe: yes.
    pub fn invariant(&self) -> bool {
        self.invariant
    }

    /// The sync status the rating uses.
    /// Interrupt-safe: yes.
    pub fn sync(&self) -> SyncStatus {
        SyncStatus::decode(self.sync.load(Ordering::Acquire))
    }

    /// Updates the sync status (e.g. after SMP bring-up ran the warp
    /// tests, at any time, from any CPU); the rating and flags follow.
    /// Interrupt-safe: yes.
    pub fn set_sync(&self, sync: SyncStatus) {
        self.sync.store(sync.encode(), Ordering::Release);
    }

    /// The hardware handle.
    /// Interrupt-safe: yes.
    pub fn hardware(&self) -> &H {
        &self.hw
    }

    /// Whether the rate is exact or tightly calibrated (and not in doubt).
    fn rate_trusted(&self) -> bool {
        if self.check.is_suspect() {
            return false;
        }
        let prov = self.provenance();
        match prov.uncertainty_ppm() {
            Some(u) => u <= TIGHT_PPM,
            None => prov.is_exact(),
        }
    }
}

impl<H: Hardware> Drop for Tsc<H> {
    fn drop(&mut self) {
        self.timeline.release(self.hw.slot_pool());
    }
}

/// The TSC through its map (ticks to ns through 0): no host parameters,
/// one token for ever; ordered across CPUs while in step.
impl<H: Hardware> TscSource for Tsc<H> {
    /// One map for every CPU.
    const PER_CPU_MAP: bool = false;
    #[inline(always)]
    fn token(&self, _: usize) -> Option<u32> {
        Some(0)
    }
    fn map_now(&self, _: usize, _: Option<LastMap>, _: Option<u64>) -> Result<MapNow, MapMiss> {
        Ok(MapNow {
            tag: 0,
            map: self.map(),
            ordered: self.in_step(),
            tsc: self.hw.rdtsc_ordered(),
        })
    }
}

impl<H: Hardware> ClockSource for Tsc<H> {
    fn counter_domain(&self) -> Option<clockhal_core::CounterDomain> {
        Some(clockhal_core::CounterDomain::Tsc)
    }
    fn name(&self) -> &'static str {
        "tsc"
    }

    /// `rdtsc_ordered` (see the crate docs for why ordered), never below
    /// what this CPU read before (a per-CPU floor: a host that steps the TSC
    /// back cannot make time go back).
    #[inline(always)]
    fn read(&self) -> u64 {
        self.timeline
            .read_local(self.hw.slot_pool(), Seam(&self.hw), |hw| {
                hw.0.rdtsc_ordered()
            })
    }

    fn frequency(&self) -> Frequency {
        self.rate()
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
            .field("rate", &self.rate())
            .field("provenance", &self.provenance())
            .field("check", &self.check)
            .field("invariant", &self.invariant)
            .field("sync", &self.sync())
            .finish()
    }
}
