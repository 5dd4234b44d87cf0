//! Hosted mode (feature `std`): the same [`Clock`] API in Linux user space,
//! for tests and benchmarks off-kernel.
//!
//! Two candidates: the TSC read with `lfence; rdtsc` through
//! [`Native::hosted`] ([`HostedTsc`], `"tsc"`), and the host's
//! `CLOCK_MONOTONIC_RAW` ([`OsClock`], `"monotonic-raw"`). The TSC's rate
//! comes from the host's live kvmclock page when Linux maps one into the
//! process (KVM guests whose vDSO ran in pvclock mode), is given by the
//! caller ([`HostedTsc::with_rate`]: a known crystal, another source), or is
//! calibrated against `CLOCK_MONOTONIC_RAW` within the policy's calibration
//! budget (at most 50 ms).
//!
//! ```no_run
//! use clockhal::{hosted::Hosted, Policy};
//! let hosted = Hosted::probe(&Policy::new());
//! println!("{}", hosted.report().table());
//! let clock = hosted.clock().expect("a clock");
//! let t0 = clock.now();
//! let took = clock.elapsed(t0);
//! ```

use crate::{
    Candidate, Clock, NoClock, Note, Rejection, Report, SelfCheck, SourceId, MAX_CANDIDATES,
};
use clockhal_core::{
    ClockSource, Duration, Frequency, Policy, Quality, ReadCost, Stability, WatchdogConfig,
};
use clockhal_x86::{Hardware, Native};
use core::fmt;

/// Where a hosted TSC's rate came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum RateOrigin {
    /// Measured against `CLOCK_MONOTONIC_RAW` ([`HostedTsc::calibrate`]).
    Calibrated,
    /// The host kernel's kvmclock (vDSO pvclock page).
    Kvmclock,
    /// CPUID (leaf 0x15 or a hypervisor timing leaf).
    Cpuid,
    /// Supplied by the caller for another reason.
    Given,
}

impl fmt::Display for RateOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RateOrigin::Calibrated => "CLOCK_MONOTONIC_RAW calibration",
            RateOrigin::Kvmclock => "kvmclock page",
            RateOrigin::Cpuid => "cpuid",
            RateOrigin::Given => "caller",
        })
    }
}

/// Why hosted calibration failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum HostedError {
    /// The TSC or the host clock did not advance during calibration.
    NoProgress,
    /// The measured rate is outside what [`Frequency`] accepts.
    RateOutOfRange,
}

impl fmt::Display for HostedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HostedError::NoProgress => "TSC or CLOCK_MONOTONIC_RAW did not advance",
            HostedError::RateOutOfRange => "calibrated TSC rate out of range",
        })
    }
}

impl std::error::Error for HostedError {}

/// The host's `CLOCK_MONOTONIC_RAW` (not slewed by NTP) as a 1 GHz source.
#[derive(Clone, Copy, Debug, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct OsClock;

const NS_PER_SEC: u64 = 1_000_000_000;
const GHZ: Frequency = match Frequency::from_hz(NS_PER_SEC) {
    Ok(f) => f,
    Err(_) => panic!("1 GHz is in range"),
};

impl OsClock {
    /// Nanoseconds of `CLOCK_MONOTONIC_RAW`.
    #[cfg(target_os = "linux")]
    pub fn now_ns(&self) -> u64 {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::MonotonicRaw);
        (t.tv_sec as u64)
            .saturating_mul(NS_PER_SEC)
            .saturating_add(t.tv_nsec as u64)
    }

    /// Nanoseconds of the host's monotonic clock (since first use; not
    /// Linux: `std::time::Instant`).
    #[cfg(not(target_os = "linux"))]
    pub fn now_ns(&self) -> u64 {
        static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        let e = *EPOCH.get_or_init(std::time::Instant::now);
        u64::try_from(e.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

impl ClockSource for OsClock {
    fn name(&self) -> &'static str {
        "monotonic-raw"
    }
    fn read(&self) -> u64 {
        self.now_ns()
    }
    fn frequency(&self) -> Frequency {
        GHZ
    }
    fn quality(&self) -> Quality {
        Quality::new(300)
    }
    fn stability(&self) -> Stability {
        Stability::MONOTONIC_PER_CPU
            | Stability::MONOTONIC_ACROSS_CPUS
            | Stability::INVARIANT_RATE
            | Stability::SURVIVES_MIGRATION
    }
    fn read_cost(&self) -> ReadCost {
        ReadCost::NoTrap
    }
}

/// The TSC in user space (`lfence; rdtsc` via [`Native::hosted`]).
///
/// Rated 350 when CPUID reports an invariant TSC and the host kernel itself
/// uses the TSC as its clocksource (so it is synchronised across CPUs),
/// 150 otherwise (then [`OsClock`] wins).
#[derive(Clone, Copy, Debug)]
pub struct HostedTsc {
    hw: Native,
    frequency: Frequency,
    origin: RateOrigin,
    stability: Stability,
    quality: Quality,
}

impl HostedTsc {
    /// A TSC with a known rate: the hook for rate sources other than
    /// calibration (the host's kvmclock vDSO page, a known crystal).
    pub fn with_rate(frequency: Frequency, origin: RateOrigin) -> HostedTsc {
        let hw = Native::hosted();
        let invariant = clockhal_x86::cpuid::invariant_tsc(&hw);
        let os_uses_tsc = host_clocksource_is_tsc();
        let mut stability = Stability::MONOTONIC_PER_CPU;
        if invariant {
            stability |= Stability::INVARIANT_RATE;
        }
        if os_uses_tsc {
            stability |= Stability::MONOTONIC_ACROSS_CPUS;
        }
        let quality = Quality::new(if invariant && os_uses_tsc { 350 } else { 150 });
        HostedTsc {
            hw,
            frequency,
            origin,
            stability,
            quality,
        }
    }

    /// Measures the TSC rate against `CLOCK_MONOTONIC_RAW` over `budget`
    /// (clamped to 1..=50 ms): the narrowest of several
    /// clock/TSC/clock brackets at each end, most of the interval asleep.
    pub fn calibrate(budget: Duration) -> Result<HostedTsc, HostedError> {
        let budget = budget.as_nanos().clamp(1_000_000, 50_000_000);
        let hw = Native::hosted();
        let os = OsClock;
        let bracket = || {
            let mut best = (0u64, 0u64, u64::MAX);
            for _ in 0..16 {
                let a = os.now_ns();
                let t = hw.rdtsc_ordered();
                let b = os.now_ns();
                if b >= a && b - a < best.2 {
                    best = (a + (b - a) / 2, t, b - a);
                }
            }
            (best.0, best.1)
        };
        let (ns0, tsc0) = bracket();
        // Sleep most of the budget; the brackets make the endpoints exact.
        std::thread::sleep(core::time::Duration::from_nanos(
            budget.saturating_sub(200_000),
        ));
        while os.now_ns().saturating_sub(ns0) < budget {
            core::hint::spin_loop();
        }
        let (ns1, tsc1) = bracket();
        let (dns, dtsc) = (ns1.saturating_sub(ns0), tsc1.saturating_sub(tsc0));
        if dns == 0 || dtsc == 0 {
            return Err(HostedError::NoProgress);
        }
        let f = Frequency::from_ratio(dtsc as u128 * NS_PER_SEC as u128, dns as u128)
            .map_err(|_| HostedError::RateOutOfRange)?;
        Ok(HostedTsc::with_rate(f, RateOrigin::Calibrated))
    }

    /// Where the rate came from.
    pub fn origin(&self) -> RateOrigin {
        self.origin
    }
}

/// Whether the host kernel's current clocksource is the TSC (Linux sysfs).
fn host_clocksource_is_tsc() -> bool {
    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .map(|s| s.trim() == "tsc")
        .unwrap_or(false)
}

impl ClockSource for HostedTsc {
    fn name(&self) -> &'static str {
        "tsc"
    }
    #[inline]
    fn read(&self) -> u64 {
        self.hw.rdtsc_ordered()
    }
    fn frequency(&self) -> Frequency {
        self.frequency
    }
    fn quality(&self) -> Quality {
        self.quality
    }
    fn stability(&self) -> Stability {
        self.stability
    }
    fn read_cost(&self) -> ReadCost {
        ReadCost::NoTrap
    }
}

/// The hosted probe result: owns the candidates, like [`Probed`](crate::Probed).
#[derive(Debug)]
pub struct Hosted {
    tsc: Option<HostedTsc>,
    os: OsClock,
    report: Report,
    watchdog: WatchdogConfig,
}

impl Hosted {
    /// Takes the TSC rate from the host's live kvmclock page when Linux maps
    /// one into the process ([`clockhal_linux::live_tsc_rate`]),
    /// otherwise calibrates it (within `policy.calibration_budget`, at most
    /// 50 ms); then self-checks both candidates and selects one.
    pub fn probe(policy: &Policy) -> Hosted {
        let live = clockhal_linux::live_tsc_rate()
            .ok()
            .and_then(|r| Frequency::from_ratio(r.numerator, r.denominator).ok());
        let tsc = match live {
            Some(f) => Ok(HostedTsc::with_rate(f, RateOrigin::Kvmclock)),
            None => HostedTsc::calibrate(policy.calibration_budget),
        };
        Hosted::build(tsc, policy)
    }

    /// Like [`probe`](Self::probe) with a TSC whose rate is already known.
    pub fn with_tsc(tsc: HostedTsc, policy: &Policy) -> Hosted {
        Hosted::build(Ok(tsc), policy)
    }

    fn build(tsc: Result<HostedTsc, HostedError>, policy: &Policy) -> Hosted {
        let mut report = Report::new();
        report.set_force_request(policy.force);
        let tsc = match tsc {
            Ok(t) => {
                report.insert(Candidate::usable(
                    SourceId::Tsc,
                    &t,
                    Note::HostedRate(t.origin),
                ));
                Some(t)
            }
            Err(e) => {
                let why = match e {
                    HostedError::NoProgress => "TSC calibration: no progress",
                    HostedError::RateOutOfRange => "TSC calibration: rate out of range",
                };
                report.insert(Candidate::rejected(SourceId::Tsc, Rejection::Hosted(why)));
                None
            }
        };
        report.insert(Candidate::usable(SourceId::Os, &OsClock, Note::None));
        let mut hosted = Hosted {
            tsc,
            os: OsClock,
            report,
            watchdog: WatchdogConfig::default(),
        };
        let mut report = hosted.report;
        crate::finish(&mut report, &hosted.sources(), &SelfCheck::new());
        hosted.report = report;
        hosted
    }

    fn sources(&self) -> crate::check::Sources<'_> {
        let mut s: crate::check::Sources<'_> = [None; MAX_CANDIDATES];
        s[SourceId::Tsc.index()] = self.tsc.as_ref().map(|t| t as &dyn ClockSource);
        s[SourceId::Os.index()] = Some(&self.os);
        s
    }

    /// Both candidates with verdicts.
    pub fn report(&self) -> &Report {
        &self.report
    }

    /// The TSC candidate, if calibration worked.
    pub fn tsc(&self) -> Option<&HostedTsc> {
        self.tsc.as_ref()
    }

    /// The ready clock.
    pub fn clock(&self) -> Result<Clock<'_>, NoClock> {
        Clock::build(self.report, self.sources(), None, self.watchdog)
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for HostedTsc {
    fn format(&self, f: defmt::Formatter) {
        defmt::write!(
            f,
            "HostedTsc {{ frequency: {}, origin: {}, quality: {} }}",
            self.frequency,
            self.origin,
            self.quality
        )
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for Hosted {
    fn format(&self, f: defmt::Formatter) {
        defmt::write!(f, "Hosted({})", self.report)
    }
}
