//! What one kvmclock read costs on this machine, next to `rdtsc` and
//! ordered `rdtsc`, with the real TSC.
//!
//! The area is written once, as a host (or a vDSO page) would, with this
//! machine's TSC rate calibrated against CLOCK_MONOTONIC_RAW; CPUID and MSR
//! traffic at probe time goes to a simulated KVM so the probe runs in user
//! space. Reads then touch only the area and the real TSC.
//!
//! `cargo bench -p clockhal-bench --bench kvmclock_read` — compare the medians of
//! `kvmclock/read_ns (stable)` and `tsc/rdtsc_ordered` (target: <= 1.3x).

use clockhal_core::Policy;
use clockhal_kvmclock::{read_area, Kvmclock, KvmclockConfig};
use clockhal_sim::{RealTsc, SimMachine};
use clockhal_x86::paravirt::{pvclock_time_scale, PvclockVcpuTimeInfo, PVCLOCK_TSC_STABLE_BIT};
use clockhal_x86::{Hardware, Native};

mod support;
use criterion::Criterion;
use std::hint::black_box;
use support as bench_support;

/// Writes `area` as a host does: the real TSC rate, the timeline
/// continuing from the area's current reading (0 the first time).
fn write_area(area: &PvclockVcpuTimeInfo, native: &Native, tsc_hz: u64, stable: bool) {
    let (mul, shift) = pvclock_time_scale(tsc_hz).expect("TSC rate");
    let now = read_area(area, || native.rdtsc_ordered()).map_or(0, |t| t.ns);
    let flags = if stable { PVCLOCK_TSC_STABLE_BIT } else { 0 };
    area.publish(native.rdtsc_ordered(), now, mul, shift, flags);
}

fn bench(c: &mut Criterion) {
    let native = Native::hosted();
    let tsc_hz = bench_support::calibrate_tsc_hz(&native);
    eprintln!("TSC calibrated at {tsc_hz} Hz");
    let hw: &'static RealTsc = Box::leak(Box::new(RealTsc::new(SimMachine::kvm())));
    let areas = hw.sim().alloc_pvclock_areas(1);
    let clock = Kvmclock::probe(hw, KvmclockConfig::new(areas), &Policy::new()).unwrap();
    let area = &areas.get()[0];
    write_area(area, &native, tsc_hz, true);
    bench_support::report_20ms_sleep("kvmclock", 1, || clock.read_ns());
    bench_support::tsc_baselines(c, &native);

    let mut g = c.benchmark_group("kvmclock");
    g.bench_function("read_area", |b| {
        b.iter(|| {
            black_box(read_area(black_box(area), || native.rdtsc_ordered()).map_or(0, |t| t.ns))
        })
    });
    g.bench_function("read_ns (stable)", |b| {
        b.iter(|| black_box(clock.read_ns()))
    });
    write_area(area, &native, tsc_hz, false);
    g.bench_function("read_ns (clamped)", |b| {
        b.iter(|| black_box(clock.read_ns()))
    });
    g.finish();
    write_area(area, &native, tsc_hz, true);
    let ratio = bench_support::interleaved_ratio(|| native.rdtsc_ordered(), || clock.read_ns());
    eprintln!("interleaved median ratio read_ns (stable) / rdtsc_ordered: {ratio:.3}");
    let s = clock.stats();
    assert_eq!((s.busy_reads, s.unregistered_reads), (0, 0));
    eprintln!("{s:?}");
}

fn main() {
    let mut c = bench_support::criterion();
    bench(&mut c);
    c.final_summary();
}
