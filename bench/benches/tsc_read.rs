//! TSC read cost on the real host: raw `rdtsc`, ordered `rdtsc`, and the
//! clockhal TSC clock (read, and read + conversion to ns) in one run.
//!
//! `cargo bench -p clockhal-bench --bench tsc_read`

use clockhal_core::{ClockSource, Frequency, Quality, ReadCost, Scale, Stability};
use clockhal_tsc::{Tsc, TscOptions};
use clockhal_x86::{Hardware, Native};
use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::time::Instant;

/// The OS's monotonic clock (vDSO `clock_gettime`) as the calibration
/// reference, in nanoseconds.
struct OsMonotonic(Instant);

impl ClockSource for OsMonotonic {
    fn name(&self) -> &'static str {
        "os-monotonic"
    }
    fn read(&self) -> u64 {
        self.0.elapsed().as_nanos() as u64
    }
    fn frequency(&self) -> Frequency {
        Frequency::from_hz(1_000_000_000).unwrap()
    }
    fn quality(&self) -> Quality {
        Quality::new(1)
    }
    fn stability(&self) -> Stability {
        Stability::MONOTONIC_PER_CPU
    }
    fn read_cost(&self) -> ReadCost {
        ReadCost::NoTrap
    }
}

fn tsc_reads(c: &mut Criterion) {
    // User space: only rdtsc, rdtsc_ordered and cpuid run (see Native::hosted).
    let hw = Native::hosted();
    let reference = OsMonotonic(Instant::now());
    let opts = TscOptions {
        reference: Some(&reference),
        ..TscOptions::new()
    };
    let tsc = Tsc::probe(hw, &opts).expect("TSC probe on the host");
    eprintln!(
        "host TSC: {} ({}), check {:?}, invariant {}",
        tsc.frequency(),
        tsc.provenance(),
        tsc.rate_check(),
        tsc.invariant()
    );
    let scale = Scale::new(tsc.frequency());
    let dynamic: &dyn ClockSource = &tsc;

    let mut g = c.benchmark_group("tsc");
    g.bench_function("rdtsc", |b| b.iter(|| black_box(hw.rdtsc())));
    g.bench_function("rdtsc_ordered", |b| {
        b.iter(|| black_box(hw.rdtsc_ordered()))
    });
    g.bench_function("Tsc::read", |b| b.iter(|| black_box(tsc.read())));
    g.bench_function("Tsc::read+ticks_to_ns", |b| {
        b.iter(|| black_box(scale.ticks_to_ns(black_box(tsc.read()))))
    });
    g.bench_function("dyn read+ticks_to_ns", |b| {
        b.iter(|| black_box(scale.ticks_to_ns(black_box(dynamic).read())))
    });
    g.finish();
}

criterion_group!(benches, tsc_reads);
criterion_main!(benches);
