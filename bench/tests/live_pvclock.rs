//! The kvmclock read path against this machine's live, KVM-maintained
//! pvclock page (the one Linux maps into every process for its vDSO).
//!
//! `cargo test -p clockhal-bench --test live_pvclock -- --nocapture` shows
//! the figures. Where the machine has no such page (bare metal, another
//! hypervisor, kvm-clock without the stable bit, a kernel without the vDSO)
//! every test prints `SKIP <test>: <reason>` and returns; a page that
//! exists but is invalid fails.

use clockhal_bench::host::{self, median, ppm};
use clockhal_kvmclock::{area_tsc_frequency, read_area};
use clockhal_linux::{live_pvclock, LivePvclock};
use clockhal_x86::{Hardware, Native};
use std::collections::BTreeSet;
use std::time::Duration;

/// Allowed disagreement between rates, in ppm.
const TOLERANCE_PPM: f64 = 20.0;
/// Length of one rate-measurement interval (>= 100 ms as required).
const INTERVAL: Duration = Duration::from_millis(120);
/// Intervals per rate measurement (the median is asserted).
const INTERVALS: usize = 7;

fn live_or_skip(test: &str) -> Option<LivePvclock> {
    match live_pvclock() {
        Ok(l) => {
            let p = l.params();
            eprintln!(
                "{test}: live pvclock {} at {:#x}: version {} flags {:#04x} (TSC stable: {}) mul {} shift {}",
                l.mapping(),
                l.address(),
                p.version,
                p.flags,
                p.tsc_stable(),
                p.tsc_to_system_mul,
                p.tsc_shift
            );
            Some(l)
        }
        Err(e) if e.is_absent() => {
            eprintln!("SKIP {test}: no live pvclock page: {e}");
            None
        }
        Err(e) => panic!("the vDSO pvclock page exists but is invalid: {e}"),
    }
}

/// kvmclock ns from the live page and CLOCK_MONOTONIC_RAW ns at the same
/// instant: the tightest of several `raw; kvmclock; raw` brackets.
fn kvm_raw_pair(live: &LivePvclock, hw: &Native) -> (u64, u64) {
    let mut best = (u64::MAX, (0, 0));
    for _ in 0..16 {
        let a = host::raw_ns();
        let k = read_area(live.area(), || hw.rdtsc_ordered())
            .expect("live page read")
            .ns;
        let b = host::raw_ns();
        if b - a < best.0 {
            best = (b - a, (k, a + (b - a) / 2));
        }
    }
    best.1
}

#[test]
fn never_goes_backwards_over_a_million_reads() {
    let Some(live) = live_or_skip("never_goes_backwards_over_a_million_reads") else {
        return;
    };
    let hw = Native::hosted();
    let mut cpus = BTreeSet::new();
    let mut prev = 0u64;
    let (mut first_version, mut last_version) = (None, 0);
    // Hop across every CPU we may run on, 100k reads at a time: the page is
    // vCPU 0's, and the stable flag promises it is valid on all of them.
    let cpus_allowed = host::cpu_count();
    let t0 = host::raw_ns();
    for i in 0..1_000_000u32 {
        if i % 100_000 == 0 {
            host::pin_to_cpu((i / 100_000) as usize % cpus_allowed);
        }
        // rdtscp is ordered after earlier loads and tells which CPU ran the
        // read (Linux keeps the CPU number in IA32_TSC_AUX's low 12 bits).
        let t = read_area(live.area(), || {
            let (tsc, aux) = hw.rdtscp();
            cpus.insert(aux & 0xfff);
            tsc
        })
        .unwrap_or_else(|e| panic!("read {i} failed: {e}"));
        assert!(t.ns >= prev, "read {i} went backwards: {} < {prev}", t.ns);
        prev = t.ns;
        first_version.get_or_insert(t.version);
        last_version = t.version;
    }
    let elapsed = host::raw_ns() - t0;
    eprintln!(
        "10^6 reads monotonic over {:.1} ms ({:.1} ns per read incl. rdtscp), CPUs seen {:?}, versions {:?}..={}",
        elapsed as f64 / 1e6,
        elapsed as f64 / 1e6,
        cpus,
        first_version,
        last_version
    );
}

#[test]
fn advances_at_the_rate_of_clock_monotonic_raw() {
    let Some(live) = live_or_skip("advances_at_the_rate_of_clock_monotonic_raw") else {
        return;
    };
    let hw = Native::hosted();
    let mut errors = Vec::new();
    for _ in 0..INTERVALS {
        let (k0, r0) = kvm_raw_pair(&live, &hw);
        std::thread::sleep(INTERVAL);
        let (k1, r1) = kvm_raw_pair(&live, &hw);
        errors.push(ppm((k1 - k0) as f64, (r1 - r0) as f64));
    }
    let m = median(&errors);
    eprintln!("kvmclock vs CLOCK_MONOTONIC_RAW over {INTERVALS} x {INTERVAL:?}: {errors:.2?} ppm, median {m:+.3} ppm");
    assert!(
        m.abs() <= TOLERANCE_PPM,
        "median rate error {m:.2} ppm > {TOLERANCE_PPM} ppm"
    );
}

#[test]
fn page_tsc_rate_agrees_with_calibration_against_clock_monotonic_raw() {
    let Some(live) =
        live_or_skip("page_tsc_rate_agrees_with_calibration_against_clock_monotonic_raw")
    else {
        return;
    };
    let page = area_tsc_frequency(live.area()).expect("rate from the live page");
    let page_hz = page.numerator() as f64 / page.denominator() as f64;
    let hw = Native::hosted();
    let measured: Vec<f64> = (0..INTERVALS)
        .map(|_| host::tsc_hz_vs_raw(&hw, INTERVAL))
        .collect();
    let errors: Vec<f64> = measured.iter().map(|&hz| ppm(page_hz, hz)).collect();
    let m = median(&errors);
    eprintln!(
        "page TSC rate {page} vs calibrated {:.0} Hz (median of {INTERVALS} x {INTERVAL:?}): {errors:.2?} ppm, median {m:+.3} ppm",
        median(&measured)
    );
    assert!(
        m.abs() <= TOLERANCE_PPM,
        "page rate off by {m:.2} ppm > {TOLERANCE_PPM} ppm"
    );
}
