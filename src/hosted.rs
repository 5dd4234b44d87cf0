//! Hosted mode (feature `std`): the same [`Clock`](crate::Clock) API in
//! Linux user space, for tests and benchmarks off-kernel.
//!
//! [`probe`] runs the facade's own probe on [`HostedHw`] — the real TSC and
//! CPUID of the process, with the hypervisor hidden (a process cannot
//! write MSRs) and no ports or MMIO — with two candidates: the TSC, whose
//! rate comes from the host's live kvmclock page when Linux maps one into
//! the process (else a calibration against `CLOCK_MONOTONIC_RAW`), and the
//! host's `CLOCK_MONOTONIC_RAW` itself ([`OsClock`], `"monotonic-raw"`),
//! which also serves the watchdog as the TSC's reference.
//!
//! **"One CPU" means one thread here.** Threads migrate between CPUs at any
//! instruction, so clockhal's per-CPU floors are per thread: up to 63
//! threads at a time get a floor of their own (lock-free, like a kernel's
//! per-CPU one), further ones share one updated with locked instructions.
//! Across threads the TSC is ordered as far as the host kernel found it
//! synchronised (it uses the TSC as its own clocksource only then).
//!
//! ```no_run
//! use clockhal::{hosted, Policy};
//! let probed = hosted::probe(&Policy::new());
//! println!("{}", probed.report().table());
//! let clock = probed.into_clock().expect("a clock");
//! let t0 = clock.now();
//! let took = clock.elapsed(t0);
//! ```

use crate::{Platform, Probed};
use clockhal_core::{Duration, Frequency, Policy};
pub use clockhal_linux::{HostedHw, OsClock};
use clockhal_x86::{Hardware, Native};
use core::fmt;

const NS_PER_SEC: u64 = 1_000_000_000;

/// Where a hosted TSC's rate came from (defined with the report's notes,
/// which name it).
pub use crate::candidate::RateOrigin;

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

static OS_CLOCK: OsClock = OsClock;

/// Measures the TSC rate against `CLOCK_MONOTONIC_RAW` over `budget`
/// (clamped to 1..=50 ms): the narrowest of several clock/TSC/clock
/// brackets at each end, most of the interval asleep.
/// Interrupt-safe: no (hosted: sleeps and makes system calls).
pub fn calibrate_tsc(budget: Duration) -> Result<Frequency, HostedError> {
    let budget = budget.as_nanos().clamp(1_000_000, 50_000_000);
    let hw = Native::hosted();
    let os = OsClock;
    let bracket = || {
        let b = clockhal_core::Bracketed::tightest(16, 0, || os.now_ns(), || hw.rdtsc_ordered());
        b.map_or((0, 0), |b| (b.mid(), b.inner))
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
    Frequency::from_ratio(dtsc as u128 * NS_PER_SEC as u128, dns as u128)
        .map_err(|_| HostedError::RateOutOfRange)
}

/// The TSC rate: from the host's live kvmclock page when Linux maps one
/// into the process ([`clockhal_linux::live_tsc_rate`]), else calibrated
/// against `CLOCK_MONOTONIC_RAW` within `budget`.
/// Interrupt-safe: no (hosted: sleeps and makes system calls).
pub fn tsc_rate(budget: Duration) -> Result<(Frequency, RateOrigin), HostedError> {
    if let Some(f) = clockhal_linux::live_tsc_rate()
        .ok()
        .and_then(|r| Frequency::from_ratio(r.numerator, r.denominator).ok())
    {
        return Ok((f, RateOrigin::Kvmclock));
    }
    calibrate_tsc(budget).map(|f| (f, RateOrigin::Calibrated))
}

/// Whether the host kernel found the TSCs synchronised: its clocksource is
/// the TSC (Linux uses it only then), or kvm-clock whose live page carries
/// the hypervisor's stable bit (kvm-clock alone is no proof: Linux runs it
/// on every KVM guest, and without the bit precisely when the TSCs are not
/// in step).
fn host_clocksource_is_tsc() -> bool {
    let current =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .unwrap_or_default();
    match current.trim() {
        "tsc" => true,
        "kvm-clock" => clockhal_linux::live_pvclock().is_ok_and(|p| {
            p.area().flags.load(core::sync::atomic::Ordering::Relaxed)
                & clockhal_x86::paravirt::PVCLOCK_TSC_STABLE_BIT
                != 0
        }),
        _ => false,
    }
}

/// Probes the hosted candidates (see the module docs) with `policy`: the
/// TSC (rate from [`tsc_rate`]; in step across CPUs if the host kernel uses
/// the TSC as its clocksource, or kvmclock with the stable bit) and
/// `CLOCK_MONOTONIC_RAW`.
/// Interrupt-safe: no (hosted: sleeps and makes system calls).
pub fn probe(policy: &Policy) -> Probed<HostedHw> {
    probe_with_rate(
        policy,
        tsc_rate(policy.calibration_budget).ok().map(|r| r.0),
    )
}

/// Like [`probe`], with the TSC rate the caller states (or none: then the
/// TSC is calibrated against `CLOCK_MONOTONIC_RAW` by the probe itself).
/// A stated rate is still cross-checked against that clock.
/// Interrupt-safe: no (hosted: sleeps and makes system calls).
pub fn probe_with_rate(policy: &Policy, rate: Option<Frequency>) -> Probed<HostedHw> {
    let mut platform = Platform::new()
        .policy(*policy)
        .extra(&OS_CLOCK)
        .tsc_reference(&OS_CLOCK)
        .cpus(std::thread::available_parallelism().map_or(1, |n| n.get()));
    if let Some(f) = rate {
        platform = platform.tsc_rate(f);
    }
    #[cfg(feature = "tsc")]
    if host_clocksource_is_tsc() {
        platform = platform.tsc_sync(clockhal_tsc::SyncStatus::Synchronized);
    }
    #[cfg(not(feature = "tsc"))]
    let _ = host_clocksource_is_tsc;
    crate::probe(HostedHw::new(), platform)
}
