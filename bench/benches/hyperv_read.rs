//! What one "hyperv-page" read costs on this machine, next to `rdtsc` and
//! ordered `rdtsc`, with the real TSC.
//!
//! The reference TSC page is written once, as Hyper-V would, with this
//! machine's TSC rate calibrated against CLOCK_MONOTONIC_RAW; CPUID and MSR
//! traffic at probe time goes to a simulated Hyper-V partition so the probe
//! runs in user space. Reads then touch only the page and the real TSC.
//!
//! `cargo bench -p clockhal-bench --bench hyperv_read` — compare the medians of
//! `hyperv/page read` and `tsc/rdtsc_ordered` (target: <= 1.3x).

use clockhal_core::Policy;
use clockhal_hyperv::{read_reference_page, Hyperv, HypervConfig};
use clockhal_sim::{RealTsc, SimMachine};
use clockhal_x86::paravirt::{hv_reference_scale, hv_scale_tsc};
use clockhal_x86::{Hardware, Native};

mod support;
use criterion::Criterion;
use std::hint::black_box;
use support as bench_support;

/// Makes the simulated partition publish a page for the *real* TSC whose
/// reading matches its own reference counter now, as Hyper-V would, so the
/// probe's page/MSR agreement check passes with real `rdtsc` values.
fn real_rate_page(hw: &RealTsc, tsc_hz: u64) {
    let scale = hv_reference_scale(tsc_hz).expect("TSC rate");
    let reference_now = hw.sim().now_ns() / 100;
    let offset =
        reference_now.wrapping_sub(hv_scale_tsc(hw.native().rdtsc_ordered(), scale, 0)) as i64;
    hw.sim()
        .with_hyperv(|h, _| h.set_page_override(Some((scale, offset))));
}

fn bench(c: &mut Criterion) {
    let native = Native::hosted();
    let tsc_hz = bench_support::calibrate_tsc_hz(&native);
    eprintln!("TSC calibrated at {tsc_hz} Hz");
    let hw: &'static RealTsc = Box::leak(Box::new(RealTsc::new(SimMachine::hyperv())));
    let page_mem = hw.sim().alloc_hv_page();
    real_rate_page(hw, tsc_hz);
    let hv = Hyperv::probe(
        hw,
        HypervConfig::new()
            .with_tsc_page(page_mem)
            .with_guest_os_id(clockhal_hyperv::DEFAULT_GUEST_OS_ID),
        &Policy::new(),
    )
    .unwrap();
    let clock = hv
        .page()
        .unwrap_or_else(|| panic!("page refused: {:?}", hv.page_error()));
    let page = page_mem.get();
    bench_support::report_20ms_sleep("hyperv page", 1, || clock.read_ns());
    bench_support::tsc_baselines(c, &native);

    let mut g = c.benchmark_group("hyperv");
    g.bench_function("read_reference_page", |b| {
        b.iter(|| {
            black_box(read_reference_page(black_box(page), || native.rdtsc_ordered()).unwrap_or(0))
        })
    });
    g.bench_function("page read", |b| b.iter(|| black_box(clock.read_ns())));
    g.finish();

    let ratio = bench_support::interleaved_ratio(|| native.rdtsc_ordered(), || clock.read_ns());
    eprintln!("interleaved median ratio page read / rdtsc_ordered: {ratio:.3}");
    let s = clock.stats();
    assert_eq!((s.msr_fallbacks, s.held_reads), (0, 0));
    eprintln!("{s:?}");
}

fn main() {
    let mut c = bench_support::criterion();
    bench(&mut c);
    c.final_summary();
}
