//! One probed clock source and what clockhal concluded about it.

use clockhal_core::select::Descriptor;
use clockhal_core::{ClockSource, CounterDomain, Fault, Frequency, Quality, ReadCost, Stability};
use core::fmt;

/// Which clock source a [`Candidate`] is. Every probe lists its candidates
/// in this order (the order breaks full ties in selection).
///
/// Non-exhaustive: new backends (an aarch64 generic timer, ...) join
/// without a semver break; [`MAX_CANDIDATES`] leaves room for them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum SourceId {
    /// KVM's paravirtual clock (`kvmclock`).
    Kvmclock,
    /// Hyper-V reference TSC page (`hyperv-page`).
    HypervPage,
    /// Hyper-V TIME_REF_COUNT MSR (`hyperv-msr`).
    HypervMsr,
    /// The time-stamp counter (`tsc`).
    Tsc,
    /// The HPET main counter (`hpet`).
    Hpet,
    /// The ACPI PM timer (`acpi-pm`).
    AcpiPm,
    /// The 8254 PIT's channel 2 (`pit`).
    Pit,
    /// The host OS's clock in hosted mode (`monotonic-raw`).
    Os,
    /// A source the OS supplied itself ([`Platform::extra`](crate::Platform::extra)).
    Extra,
}

/// Capacity of a [`Report`](crate::Report): every [`SourceId`] plus room
/// for backends to come.
pub const MAX_CANDIDATES: usize = 12;

impl SourceId {
    /// Every id, in listing order.
    pub const ALL: [SourceId; 9] = [
        SourceId::Kvmclock,
        SourceId::HypervPage,
        SourceId::HypervMsr,
        SourceId::Tsc,
        SourceId::Hpet,
        SourceId::AcpiPm,
        SourceId::Pit,
        SourceId::Os,
        SourceId::Extra,
    ];

    /// Position in [`SourceId::ALL`] (below [`MAX_CANDIDATES`]).
    /// Interrupt-safe: yes.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The id at position `i` of [`SourceId::ALL`].
    /// Interrupt-safe: yes.
    pub const fn from_index(i: usize) -> Option<SourceId> {
        if i < SourceId::ALL.len() {
            Some(SourceId::ALL[i])
        } else {
            None
        }
    }

    /// The name the backend reports (`"kvmclock"`, ...). For
    /// [`SourceId::Extra`] the real name is the source's own; this returns
    /// `"extra"`.
    /// Interrupt-safe: yes.
    pub const fn default_name(self) -> &'static str {
        match self {
            SourceId::Kvmclock => "kvmclock",
            SourceId::HypervPage => "hyperv-page",
            SourceId::HypervMsr => "hyperv-msr",
            SourceId::Tsc => "tsc",
            SourceId::Hpet => "hpet",
            SourceId::AcpiPm => "acpi-pm",
            SourceId::Pit => "pit",
            SourceId::Os => "monotonic-raw",
            SourceId::Extra => "extra",
        }
    }

    /// Whether this source's rate is the weaker word in a two-way
    /// disagreement that nobody else can arbitrate (then it loses): the
    /// TSC's, calibrated or stated (under a hypervisor CPUID is the VMM's
    /// word, and a migration changes the TSC's rate under a stated one),
    /// and an OS-supplied source's, of unknown provenance; not a device
    /// counter's, whose rate a hardware ABI fixes.
    /// Interrupt-safe: yes.
    pub const fn rate_is_estimated(self) -> bool {
        matches!(self, SourceId::Tsc | SourceId::Extra)
    }
}

impl SourceId {
    /// Which counter the source reads (sources of one domain vote once).
    pub(crate) const fn domain(self) -> CounterDomain {
        match self {
            SourceId::Kvmclock | SourceId::HypervPage | SourceId::Tsc => CounterDomain::Tsc,
            SourceId::HypervMsr => CounterDomain::HypervisorCounter,
            SourceId::Hpet => CounterDomain::Hpet,
            SourceId::AcpiPm => CounterDomain::AcpiPm,
            SourceId::Pit => CounterDomain::Pit,
            SourceId::Os => CounterDomain::HostOs,
            _ => CounterDomain::Other(self.index() as u8),
        }
    }

    /// The source whose counter this one falls back to when it has no map
    /// (the Hyper-V page's TIME_REF_COUNT): it cannot vouch for readings of
    /// its own counter in the jump check.
    pub(crate) const fn fallback_counter(self) -> Option<SourceId> {
        match self {
            SourceId::HypervPage => Some(SourceId::HypervMsr),
            _ => None,
        }
    }
}

/// The source objects of one probe, indexed by [`SourceId::index`].
pub(crate) type Sources<'a> = [Option<&'a dyn ClockSource>; MAX_CANDIDATES];

/// The TSC-based sources of one probe (read through a map by the clock's
/// read loop), indexed by [`SourceId::index`].
pub(crate) type TscSources<'a> = [Option<&'a dyn clockhal_core::DynTscSource>; MAX_CANDIDATES];

/// The counter `id` reads now: as its source says
/// ([`ClockSource::counter_domain`]), else the id's own.
pub(crate) fn domain_in(sources: &Sources<'_>, id: SourceId) -> CounterDomain {
    sources[id.index()]
        .and_then(|s| s.counter_domain())
        .unwrap_or(id.domain())
}

impl fmt::Display for SourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.default_name())
    }
}

/// Why a candidate could not be constructed at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rejection {
    /// The cargo feature for this backend is off.
    FeatureDisabled,
    /// The OS did not give clockhal what this backend needs (the string
    /// says what, e.g. `"no pvclock memory given"`).
    NotConfigured(&'static str),
    /// ACPI discovery failed for this device.
    Acpi(clockhal_x86::acpi::AcpiError),
    /// The OS's HPET mapper returned no region for the HPET at this
    /// physical address.
    NotMapped(u64),
    /// The kvmclock backend refused.
    #[cfg(feature = "kvmclock")]
    Kvmclock(clockhal_kvmclock::KvmclockError),
    /// The Hyper-V backend refused.
    #[cfg(feature = "hyperv")]
    Hyperv(clockhal_hyperv::HypervError),
    /// The Hyper-V partition is there, but its reference TSC page is not
    /// usable.
    #[cfg(feature = "hyperv")]
    HypervPage(clockhal_hyperv::PageError),
    /// The Hyper-V partition is there, but does not offer TIME_REF_COUNT.
    HypervNoMsr,
    /// The TSC backend refused.
    #[cfg(feature = "tsc")]
    Tsc(clockhal_tsc::TscError),
    /// The HPET backend refused.
    #[cfg(feature = "hpet")]
    Hpet(clockhal_hpet::HpetError),
    /// The ACPI PM timer backend refused.
    #[cfg(feature = "acpi-pm")]
    AcpiPm(clockhal_acpi_pm::AcpiPmError),
    /// The PIT backend refused.
    #[cfg(feature = "pit")]
    Pit(clockhal_pit::PitError),
    /// Hosted mode: the host clock could not be read or calibrated against.
    Hosted(&'static str),
    /// Another probe result owns this machine's clock hardware (drop it,
    /// or keep using it: see [`probe`](crate::probe)).
    HardwareOwned,
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::FeatureDisabled => f.write_str("feature disabled"),
            Rejection::NotConfigured(what) => f.write_str(what),
            Rejection::Acpi(e) => fmt::Display::fmt(e, f),
            Rejection::NotMapped(phys) => write!(f, "OS did not map the HPET at {phys:#x}"),
            #[cfg(feature = "kvmclock")]
            Rejection::Kvmclock(e) => fmt::Display::fmt(e, f),
            #[cfg(feature = "hyperv")]
            Rejection::Hyperv(e) => fmt::Display::fmt(e, f),
            #[cfg(feature = "hyperv")]
            Rejection::HypervPage(e) => fmt::Display::fmt(e, f),
            Rejection::HypervNoMsr => f.write_str("TIME_REF_COUNT not offered by this partition"),
            #[cfg(feature = "tsc")]
            Rejection::Tsc(e) => fmt::Display::fmt(e, f),
            #[cfg(feature = "hpet")]
            Rejection::Hpet(e) => fmt::Display::fmt(e, f),
            #[cfg(feature = "acpi-pm")]
            Rejection::AcpiPm(e) => fmt::Display::fmt(e, f),
            #[cfg(feature = "pit")]
            Rejection::Pit(e) => fmt::Display::fmt(e, f),
            Rejection::Hosted(what) => f.write_str(what),
            Rejection::HardwareOwned => f.write_str("clock hardware owned by another probe result"),
        }
    }
}

/// Why a constructed candidate is no longer eligible for selection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Demotion {
    /// Self-check: the counter did not change over this many reads.
    NotAdvancing {
        /// Reads attempted.
        reads: u32,
    },
    /// Self-check: a later read returned a smaller value.
    WentBackwards,
    /// Self-check: over a common interval, the rate disagreed with the
    /// other candidates.
    RateDisagrees {
        /// This source's rate relative to `against`, in ppm (positive: fast).
        ppm: i64,
        /// The candidate it was compared with.
        against: SourceId,
    },
    /// Run time: the watchdog found the source at fault (drift, a step
    /// back, or it stopped) against `against` (its reference, or the
    /// consensus the reference belongs to).
    Watchdog {
        /// What was wrong.
        fault: Fault,
        /// The reference of that round.
        against: SourceId,
    },
    /// Run time: the backend reported host updates it could not believe
    /// (rejected, reanchored, a revoked stable bit).
    HostFaults {
        /// How many since the previous watchdog tick.
        count: u64,
    },
    /// Run time: a reading jumped further ahead than the reference's
    /// elapsed time explains.
    Jumped {
        /// The jump beyond what the reference explains, ns (saturated).
        excess_ns: u64,
    },
    /// Run time: reads found no fresh value too many times in a row.
    Stuck {
        /// Consecutive held reads.
        held_reads: u32,
    },
    /// Run time: a supervised TSC went unsupervised (no watchdog round
    /// verified it for longer than the supervision timeout: the ticks
    /// stopped, or no round could be judged).
    Unsupervised,
}

impl fmt::Display for Demotion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Demotion::NotAdvancing { reads } => write!(f, "did not advance in {reads} reads"),
            Demotion::WentBackwards => f.write_str("went backwards"),
            Demotion::RateDisagrees { ppm, against } => {
                write!(f, "rate off by {ppm} ppm vs {against}")
            }
            Demotion::Watchdog { fault, against } => match fault {
                Fault::Drift { skew_ppm } => write!(f, "drifted {skew_ppm} ppm vs {against}"),
                Fault::SteppedBack => write!(f, "stepped back (vs {against})"),
                Fault::Stopped => write!(f, "stopped (vs {against})"),
            },
            Demotion::HostFaults { count } => {
                write!(f, "{count} implausible host updates")
            }
            Demotion::Jumped { excess_ns } => {
                write!(f, "jumped {excess_ns} ns beyond the reference")
            }
            Demotion::Stuck { held_reads } => write!(f, "no fresh value in {held_reads} reads"),
            Demotion::Unsupervised => {
                f.write_str("supervised TSC not verified by a watchdog round in time")
            }
        }
    }
}

/// A short remark on a usable candidate (shown after its rating): why it
/// is rated as it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Note {
    /// Nothing worth saying.
    None,
    /// Every read is a hypervisor exit.
    Traps,
    /// Readings from different CPUs are clamped to stay ordered.
    Clamped,
    /// The TSC backend's account of its rate (and of why it is not
    /// auto-selectable, or supervised).
    #[cfg(feature = "tsc")]
    Tsc {
        /// Where the rate came from.
        rate: clockhal_tsc::RateProvenance,
        /// Why it may not be auto-selected, if so.
        unusable: Option<clockhal_tsc::Unusable>,
        /// Selected only under the watchdog's supervision.
        supervised: bool,
        /// Not invariant, and the clock has no independent counter to
        /// supervise it with (QEMU microvm without a PIT): kept unsupervised.
        unwatched: bool,
    },
    /// The PM timer's read mode.
    #[cfg(feature = "acpi-pm")]
    PmMode(clockhal_acpi_pm::PmMode),
    /// What the PIT may be used for.
    #[cfg(feature = "pit")]
    Pit(clockhal_pit::PitRole),
    /// Hosted mode: where the TSC's rate came from.
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    HostedRate(RateOrigin),
}

#[cfg(feature = "tsc")]
impl Note {
    /// The TSC backend's account of `t` as it stands now.
    pub(crate) fn of_tsc<H: clockhal_x86::Hardware>(t: &clockhal_tsc::Tsc<H>) -> Note {
        Note::Tsc {
            rate: t.provenance(),
            unusable: t.unusable(),
            supervised: t.supervised(),
            unwatched: false,
        }
    }
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::None => Ok(()),
            Note::Traps => f.write_str("traps"),
            Note::Clamped => f.write_str("clamped across CPUs"),
            #[cfg(feature = "tsc")]
            Note::Tsc {
                rate,
                unusable,
                supervised,
                unwatched,
            } => {
                fmt::Display::fmt(rate, f)?;
                if let Some(u) = unusable {
                    write!(f, "; {u}")?;
                } else if *unwatched {
                    f.write_str("; not invariant, and no counter to supervise it with")?;
                } else if *supervised {
                    f.write_str("; not invariant: supervised by the watchdog")?;
                }
                Ok(())
            }
            #[cfg(feature = "acpi-pm")]
            Note::PmMode(clockhal_acpi_pm::PmMode::Fast) => f.write_str("fast mode"),
            #[cfg(feature = "acpi-pm")]
            Note::PmMode(clockhal_acpi_pm::PmMode::Verified) => f.write_str("verified mode"),
            #[cfg(feature = "pit")]
            Note::Pit(role) => fmt::Display::fmt(role, f),
            #[cfg(all(feature = "std", target_arch = "x86_64"))]
            Note::HostedRate(o) => write!(f, "rate from {o}"),
        }
    }
}

/// What clockhal concluded about one candidate. A constructed candidate
/// carries its [`Descriptor`] (rating, rate, flags, cost); a rejected one
/// has none. The three states are complete (exhaustive matches are fine).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Constructed and passed its checks: eligible for selection (if rated
    /// above 0).
    Usable(Descriptor),
    /// Constructed, but failed a check: not selected automatically.
    Demoted {
        /// What it was.
        descriptor: Descriptor,
        /// Why it is out.
        reason: Demotion,
    },
    /// Could not be constructed.
    Rejected(Rejection),
}

/// One clock source as probed: identity, verdict, remark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// Which source.
    pub id: SourceId,
    /// Its name (the backend's [`ClockSource::name`](clockhal_core::ClockSource::name)).
    pub name: &'static str,
    /// The verdict.
    pub verdict: Verdict,
    /// A short remark: rate provenance, read mode, "traps".
    pub note: Note,
}

impl Candidate {
    /// A candidate that could not be constructed.
    /// Interrupt-safe: yes.
    pub const fn rejected(id: SourceId, reason: Rejection) -> Candidate {
        Candidate {
            id,
            name: id.default_name(),
            verdict: Verdict::Rejected(reason),
            note: Note::None,
        }
    }

    /// A constructed candidate described by `source` (verdict `Usable`
    /// until checked).
    /// Interrupt-safe: yes.
    pub fn usable(id: SourceId, source: &dyn clockhal_core::ClockSource, note: Note) -> Candidate {
        Candidate {
            id,
            name: source.name(),
            verdict: Verdict::Usable(source.descriptor()),
            note,
        }
    }

    /// The descriptor of a constructed candidate.
    /// Interrupt-safe: yes.
    pub const fn descriptor(&self) -> Option<&Descriptor> {
        match &self.verdict {
            Verdict::Usable(d) | Verdict::Demoted { descriptor: d, .. } => Some(d),
            Verdict::Rejected(_) => None,
        }
    }

    /// Rating, if constructed.
    /// Interrupt-safe: yes.
    pub fn rating(&self) -> Option<Quality> {
        self.descriptor().map(|d| d.rating)
    }

    /// Exact rate, if constructed.
    /// Interrupt-safe: yes.
    pub fn frequency(&self) -> Option<Frequency> {
        self.descriptor().map(|d| d.frequency)
    }

    /// Stability flags (empty if rejected).
    /// Interrupt-safe: yes.
    pub fn stability(&self) -> Stability {
        self.descriptor()
            .map_or(Stability::empty(), |d| d.stability)
    }

    /// Hypervisor exits per read, if constructed.
    /// Interrupt-safe: yes.
    pub fn read_cost(&self) -> Option<ReadCost> {
        self.descriptor().map(|d| d.read_cost)
    }

    /// Why it was demoted, if it was.
    /// Interrupt-safe: yes.
    pub const fn demotion(&self) -> Option<Demotion> {
        match self.verdict {
            Verdict::Demoted { reason, .. } => Some(reason),
            _ => None,
        }
    }

    /// Whether a backend object exists (usable or demoted).
    /// Interrupt-safe: yes.
    pub const fn is_constructed(&self) -> bool {
        !matches!(self.verdict, Verdict::Rejected(_))
    }

    /// Whether automatic selection may pick it: usable and rated above 0.
    /// Interrupt-safe: yes.
    pub fn is_eligible(&self) -> bool {
        matches!(&self.verdict, Verdict::Usable(d) if d.rating.auto_selectable())
    }

    /// Demotes a constructed candidate (a rejected one stays rejected, a
    /// demoted one keeps its first reason).
    pub(crate) fn demote(&mut self, reason: Demotion) {
        // The first reason stays: the one the switch event reported.
        if let Verdict::Usable(d) = self.verdict {
            self.verdict = Verdict::Demoted {
                descriptor: d,
                reason,
            };
        }
    }

    /// Makes a demoted candidate usable again (`clock::readmit`: only on
    /// fresh evidence, for a demotion that said nothing against it).
    pub(crate) fn readmit(&mut self) {
        if let Verdict::Demoted { descriptor, .. } = self.verdict {
            self.verdict = Verdict::Usable(descriptor);
        }
    }

    /// Replaces the descriptor (a rating that changed), keeping the verdict.
    #[cfg(feature = "tsc")]
    pub(crate) fn set_descriptor(&mut self, d: Descriptor) {
        match &mut self.verdict {
            Verdict::Usable(x) | Verdict::Demoted { descriptor: x, .. } => *x = d,
            Verdict::Rejected(_) => {}
        }
    }
}

#[cfg(feature = "defmt")]
mod defmt_impls {
    use super::*;
    use defmt::{Display2Format, Format, Formatter};

    impl Format for Rejection {
        fn format(&self, f: Formatter) {
            defmt::write!(f, "{}", Display2Format(self))
        }
    }
    impl Format for Note {
        fn format(&self, f: Formatter) {
            defmt::write!(f, "{}", Display2Format(self))
        }
    }
    impl Format for Verdict {
        fn format(&self, f: Formatter) {
            match self {
                Verdict::Usable(d) => defmt::write!(f, "usable {}", d),
                Verdict::Demoted { descriptor, reason } => {
                    defmt::write!(f, "demoted {}: {}", descriptor, reason)
                }
                Verdict::Rejected(r) => defmt::write!(f, "rejected: {}", r),
            }
        }
    }
    impl Format for Candidate {
        fn format(&self, f: Formatter) {
            defmt::write!(f, "{=str}: {} note={}", self.name, self.verdict, self.note)
        }
    }
}

/// Where a hosted TSC's rate came from (`clockhal::hosted::RateOrigin`).
#[cfg(all(feature = "std", target_arch = "x86_64"))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum RateOrigin {
    /// Measured against `CLOCK_MONOTONIC_RAW`.
    Calibrated,
    /// The host kernel's kvmclock (vDSO pvclock page).
    Kvmclock,
}

#[cfg(all(feature = "std", target_arch = "x86_64"))]
impl fmt::Display for RateOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RateOrigin::Calibrated => "CLOCK_MONOTONIC_RAW calibration",
            RateOrigin::Kvmclock => "kvmclock page",
        })
    }
}
