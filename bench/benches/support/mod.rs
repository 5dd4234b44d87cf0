//! Helpers shared by the criterion benches in `bench/benches/` (a module of
//! each, so criterion stays a dev-dependency).

use clockhal_x86::{Hardware, Native};
use criterion::Criterion;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// This machine's TSC rate in Hz, against CLOCK_MONOTONIC_RAW over 50 ms.
pub fn calibrate_tsc_hz(native: &Native) -> u64 {
    clockhal_bench::host::tsc_hz_vs_raw(native, Duration::from_millis(50)).round() as u64
}

/// The benches' criterion settings (command-line options still win).
pub fn criterion() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50)
        .configure_from_args()
}

/// Median over 301 rounds of `time(b) / time(a)`, each round timing 10,000
/// calls of `a` then of `b` back to back: on a shared, noisy machine the
/// ratio of neighbouring blocks is steadier than medians taken seconds apart.
pub fn interleaved_ratio(a: impl Fn() -> u64, b: impl Fn() -> u64) -> f64 {
    fn block(f: &impl Fn() -> u64) -> f64 {
        let t = Instant::now();
        for _ in 0..10_000 {
            black_box(f());
        }
        t.elapsed().as_nanos() as f64
    }
    let ratios: Vec<f64> = (0..301).map(|_| block(&b) / block(&a)).collect();
    clockhal_bench::host::median(&ratios)
}

/// The baselines every backend is compared with: `rdtsc` and ordered `rdtsc`.
pub fn tsc_baselines(c: &mut Criterion, native: &Native) {
    let mut g = c.benchmark_group("tsc");
    g.bench_function("rdtsc", |b| b.iter(|| black_box(native.rdtsc())));
    g.bench_function("rdtsc_ordered", |b| {
        b.iter(|| black_box(native.rdtsc_ordered()))
    });
    g.finish();
}

/// Prints how far `read` (in units of `unit_ns` ns) advanced over a 20 ms
/// sleep next to `Instant`: a sanity check that the page counts real time.
pub fn report_20ms_sleep(what: &str, unit_ns: u64, read: impl Fn() -> u64) {
    let (a, t) = (read(), Instant::now());
    std::thread::sleep(Duration::from_millis(20));
    let (b, e) = (read(), t.elapsed());
    eprintln!(
        "20 ms sleep: {what} {} ns, Instant {} ns",
        (b - a) * unit_ns,
        e.as_nanos()
    );
}
