//! The host's reference clocks, CPU pinning and TSC calibration.

use clockhal_linux::LivePvclock;
use clockhal_x86::{Hardware, Native};
use std::time::Duration;

use rustix::time::{clock_gettime, ClockId};

/// `clock_gettime(clock)` in nanoseconds (rustix: the vDSO, no libc).
#[inline(always)]
pub fn clock_ns(clock: ClockId) -> u64 {
    let t = clock_gettime(clock);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// CLOCK_MONOTONIC_RAW now, in ns: the kernel clocksource without NTP
/// frequency corrections, the reference every rate here is checked against.
pub fn raw_ns() -> u64 {
    clock_ns(ClockId::MonotonicRaw)
}

/// CLOCK_MONOTONIC now, in ns, through the vDSO.
#[inline(always)]
pub fn mono_ns() -> u64 {
    clock_ns(ClockId::Monotonic)
}

/// Pins the calling thread to `cpu`. Returns whether it worked (a cpuset
/// may forbid it; the numbers are then noisier, not wrong).
pub fn pin_to_cpu(cpu: usize) -> bool {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).is_ok()
}

/// Number of CPUs this process may run on.
pub fn cpu_count() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A TSC reading and a CLOCK_MONOTONIC_RAW reading taken at (nearly) the
/// same instant.
#[derive(Clone, Copy, Debug)]
pub struct Pair {
    /// TSC ticks.
    pub tsc: u64,
    /// CLOCK_MONOTONIC_RAW ns.
    pub ns: u64,
}

/// The tightest of several `rdtsc_ordered; raw; rdtsc_ordered` brackets,
/// with the TSC taken at the bracket's middle (so preemption in one attempt
/// does not skew the pair).
pub fn pair(hw: &Native) -> Pair {
    let mut best = (u64::MAX, Pair { tsc: 0, ns: 0 });
    for _ in 0..16 {
        let a = hw.rdtsc_ordered();
        let ns = raw_ns();
        let b = hw.rdtsc_ordered();
        if b - a < best.0 {
            best = (
                b - a,
                Pair {
                    tsc: a + (b - a) / 2,
                    ns,
                },
            );
        }
    }
    best.1
}

/// The TSC rate in Hz measured against CLOCK_MONOTONIC_RAW over `interval`.
pub fn tsc_hz_vs_raw(hw: &Native, interval: Duration) -> f64 {
    let a = pair(hw);
    std::thread::sleep(interval);
    let b = pair(hw);
    (b.tsc - a.tsc) as f64 * 1e9 / (b.ns - a.ns) as f64
}

/// The real TSC rate in Hz and where it came from: the live pvclock page if
/// there is one (exact, what KVM itself uses), else a 200 ms calibration
/// against CLOCK_MONOTONIC_RAW.
pub fn tsc_rate(hw: &Native, live: Result<&LivePvclock, String>) -> (u64, String) {
    match live {
        Ok(l) => {
            let (n, d) = l.params().tsc_hz_ratio();
            (
                (n / d) as u64,
                format!("live pvclock page ({})", l.mapping()),
            )
        }
        Err(e) => {
            let hz = tsc_hz_vs_raw(hw, Duration::from_millis(200));
            (
                hz.round() as u64,
                format!("calibrated against CLOCK_MONOTONIC_RAW (no live page: {e})"),
            )
        }
    }
}

/// `model name` from /proc/cpuinfo.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_default()
}

/// The median of `values` (sorted copy; the mean of the middle two for an
/// even count). `NaN` for an empty slice.
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// `(a / b - 1)` in parts per million.
pub fn ppm(a: f64, b: f64) -> f64 {
    (a / b - 1.0) * 1e6
}
