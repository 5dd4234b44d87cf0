//! One probed clock source and what clockhal concluded about it.

use clockhal_core::{Frequency, Quality, ReadCost, Stability};
use core::fmt;

/// Which clock source a [`Candidate`] is. Every probe lists its candidates
/// in this order (the order breaks full ties in selection).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
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
    /// The host OS's clock in hosted mode (`monotonic-raw`).
    Os,
    /// A source the OS supplied itself ([`Platform::extra`](crate::Platform::extra)).
    Extra,
}

/// Number of [`SourceId`]s: the capacity of a [`Report`](crate::Report).
pub const MAX_CANDIDATES: usize = 8;

impl SourceId {
    /// Every id, in listing order.
    pub const ALL: [SourceId; MAX_CANDIDATES] = [
        SourceId::Kvmclock,
        SourceId::HypervPage,
        SourceId::HypervMsr,
        SourceId::Tsc,
        SourceId::Hpet,
        SourceId::AcpiPm,
        SourceId::Os,
        SourceId::Extra,
    ];

    /// Position in [`SourceId::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The id at position `i` of [`SourceId::ALL`].
    pub const fn from_index(i: usize) -> Option<SourceId> {
        if i < MAX_CANDIDATES {
            Some(SourceId::ALL[i])
        } else {
            None
        }
    }

    /// The name the backend reports (`"kvmclock"`, ...). For
    /// [`SourceId::Extra`] the real name is the source's own; this returns
    /// `"extra"`.
    pub const fn default_name(self) -> &'static str {
        match self {
            SourceId::Kvmclock => "kvmclock",
            SourceId::HypervPage => "hyperv-page",
            SourceId::HypervMsr => "hyperv-msr",
            SourceId::Tsc => "tsc",
            SourceId::Hpet => "hpet",
            SourceId::AcpiPm => "acpi-pm",
            SourceId::Os => "monotonic-raw",
            SourceId::Extra => "extra",
        }
    }

    /// Whether this source's rate is *estimated* by clockhal (TSC hints and
    /// calibration, or an OS-supplied source of unknown provenance) rather
    /// than fixed by a hardware or hypervisor ABI. When two candidates
    /// disagree and nobody else can arbitrate, the estimated one loses.
    pub const fn rate_is_estimated(self) -> bool {
        matches!(self, SourceId::Tsc | SourceId::Extra)
    }
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
    /// Hosted mode: the host clock could not be read or calibrated against.
    Hosted(&'static str),
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
            Rejection::Hosted(what) => f.write_str(what),
        }
    }
}

/// Why a constructed candidate is no longer eligible for selection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
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
    /// Run time: the watchdog measured drift beyond its bound.
    Drift {
        /// Skew against `against`, in ppm (saturated to `i32`).
        skew_ppm: i64,
        /// The watchdog's reference.
        against: SourceId,
    },
    /// Run time: the watchdog saw the source step backwards.
    SteppedBack {
        /// The watchdog's reference.
        against: SourceId,
    },
}

impl fmt::Display for Demotion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Demotion::NotAdvancing { reads } => write!(f, "did not advance in {reads} reads"),
            Demotion::WentBackwards => f.write_str("went backwards"),
            Demotion::RateDisagrees { ppm, against } => {
                write!(f, "rate off by {ppm} ppm vs {against}")
            }
            Demotion::Drift { skew_ppm, against } => {
                write!(f, "drifted {skew_ppm} ppm vs {against}")
            }
            Demotion::SteppedBack { against } => write!(f, "stepped back (vs {against})"),
        }
    }
}

/// A short remark on a usable candidate (shown after its rating).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Note {
    /// Nothing worth saying.
    None,
    /// Every read is a hypervisor exit.
    Traps,
    /// Readings from different CPUs are clamped to stay ordered.
    Clamped,
    /// The TSC backend's account of its rate.
    #[cfg(feature = "tsc")]
    TscRate(clockhal_tsc::RateProvenance),
    /// The PM timer's read mode.
    #[cfg(feature = "acpi-pm")]
    PmMode(clockhal_acpi_pm::PmMode),
    /// Hosted mode: where the TSC's rate came from.
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    HostedRate(crate::hosted::RateOrigin),
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::None => Ok(()),
            Note::Traps => f.write_str("traps"),
            Note::Clamped => f.write_str("clamped across CPUs"),
            #[cfg(feature = "tsc")]
            Note::TscRate(p) => fmt::Display::fmt(p, f),
            #[cfg(feature = "acpi-pm")]
            Note::PmMode(clockhal_acpi_pm::PmMode::Fast) => f.write_str("fast mode"),
            #[cfg(feature = "acpi-pm")]
            Note::PmMode(clockhal_acpi_pm::PmMode::Verified) => f.write_str("verified mode"),
            #[cfg(all(feature = "std", target_arch = "x86_64"))]
            Note::HostedRate(o) => write!(f, "rate from {o}"),
        }
    }
}

/// What clockhal concluded about one candidate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Constructed and passed its checks: eligible for selection.
    Usable,
    /// Constructed, but failed a check: not selected automatically.
    Demoted(Demotion),
    /// Could not be constructed.
    Rejected(Rejection),
}

/// One clock source as probed: identity, verdict and descriptors.
///
/// Descriptors (`rating`, `frequency`, ...) are `None`/empty for rejected
/// candidates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// Which source.
    pub id: SourceId,
    /// Its name (the backend's [`ClockSource::name`](clockhal_core::ClockSource::name)).
    pub name: &'static str,
    /// The verdict.
    pub verdict: Verdict,
    /// Rating (`None` if rejected).
    pub rating: Option<Quality>,
    /// Exact rate (`None` if rejected).
    pub frequency: Option<Frequency>,
    /// Stability flags (empty if rejected).
    pub stability: Stability,
    /// Hypervisor exits per read (`None` if rejected).
    pub read_cost: Option<ReadCost>,
    /// A short remark: rate provenance, read mode, "traps".
    pub note: Note,
}

impl Candidate {
    /// A candidate that could not be constructed.
    pub const fn rejected(id: SourceId, reason: Rejection) -> Candidate {
        Candidate {
            id,
            name: id.default_name(),
            verdict: Verdict::Rejected(reason),
            rating: None,
            frequency: None,
            stability: Stability::empty(),
            read_cost: None,
            note: Note::None,
        }
    }

    /// A constructed candidate described by `source` (verdict `Usable`
    /// until checked).
    pub fn usable(id: SourceId, source: &dyn clockhal_core::ClockSource, note: Note) -> Candidate {
        Candidate {
            id,
            name: source.name(),
            verdict: Verdict::Usable,
            rating: Some(source.quality()),
            frequency: Some(source.frequency()),
            stability: source.stability(),
            read_cost: Some(source.read_cost()),
            note,
        }
    }

    /// Whether a backend object exists (usable or demoted).
    pub const fn is_constructed(&self) -> bool {
        !matches!(self.verdict, Verdict::Rejected(_))
    }

    /// Whether automatic selection may pick it: usable and rated above 0.
    pub fn is_eligible(&self) -> bool {
        matches!(self.verdict, Verdict::Usable) && self.rating.is_some_and(|q| q.auto_selectable())
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
                Verdict::Usable => defmt::write!(f, "usable"),
                Verdict::Demoted(d) => defmt::write!(f, "demoted: {}", d),
                Verdict::Rejected(r) => defmt::write!(f, "rejected: {}", r),
            }
        }
    }
    impl Format for Candidate {
        fn format(&self, f: Formatter) {
            defmt::write!(
                f,
                "{=str}: {} rating={} freq={} flags={} cost={} note={}",
                self.name,
                self.verdict,
                self.rating,
                self.frequency,
                self.stability,
                self.read_cost,
                self.note
            )
        }
    }
}
