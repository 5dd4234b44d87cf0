//! Hosted mode on this machine: the TSC read from user space, rated and
//! calibrated against CLOCK_MONOTONIC_RAW, behind the same `Clock` API.
#![cfg(all(feature = "std", target_arch = "x86_64"))]

use clockhal::hosted::{self, OsClock};
use clockhal::{Demotion, Duration, Frequency, Policy, Scale, SourceId};
use clockhal_x86::{Hardware, Native};

/// Relative error of `source_ns` against `reference_ns`, ppm.
fn ppm(source_ns: u64, reference_ns: u64) -> i64 {
    (source_ns as i128 - reference_ns as i128) as i64 * 1_000_000 / reference_ns as i64
}

fn median(mut v: Vec<i64>) -> i64 {
    v.sort_unstable();
    v[v.len() / 2]
}

/// Five 60 ms intervals of `ns` against CLOCK_MONOTONIC_RAW.
fn measure(mut ns: impl FnMut() -> u64) -> Vec<i64> {
    let os = OsClock;
    (0..5)
        .map(|_| {
            let (o0, s0) = (os.now_ns(), ns());
            std::thread::sleep(std::time::Duration::from_millis(60));
            let (o1, s1) = (os.now_ns(), ns());
            ppm(s1 - s0, o1 - o0)
        })
        .collect()
}

#[test]
fn calibrated_tsc_rate_is_within_1000_ppm_of_monotonic_raw() {
    let f = hosted::calibrate_tsc(Duration::from_millis(50)).expect("TSC calibrated");
    let hz = f.hz_rounded();
    assert!((100_000_000..10_000_000_000).contains(&hz), "{hz}");
    let scale = Scale::new(f);
    let hw = Native::hosted();
    let errors = measure(|| scale.ticks_to_ns(hw.rdtsc_ordered()));
    let m = median(errors.clone());
    assert!(m.abs() < 1_000, "median {m} ppm of {errors:?}");
}

#[test]
fn hosted_clock_selects_by_rating_and_keeps_time() {
    let probed = hosted::probe(&Policy::new());
    let r = *probed.report();
    println!("{}\n{}", r, r.table());
    let tsc = r.get(SourceId::Tsc).expect("a TSC candidate");
    // The TSC wins when it is eligible and rated above monotonic-raw (an
    // invariant TSC in step: the host kernel clocks from it).
    let expected = if tsc.is_eligible() && tsc.rating().unwrap().get() > 300 {
        SourceId::Tsc
    } else {
        SourceId::Extra
    };
    assert_eq!(r.selected_id(), Some(expected), "{}", r.table());
    let clock = probed.into_clock().unwrap();
    let errors = measure(|| clock.now().as_nanos());
    let m = median(errors.clone());
    assert!(m.abs() < 1_000, "median {m} ppm of {errors:?}");

    // Monotonic per thread (the guarantee hosted mode states), on threads
    // the OS migrates between CPUs.
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let mut last = clock.now();
                for _ in 0..200_000 {
                    let t = clock.now();
                    assert!(t >= last);
                    last = t;
                }
            });
        }
    });
}

#[test]
fn a_wrong_stated_rate_is_demoted_by_the_self_check() {
    let f = hosted::calibrate_tsc(Duration::from_millis(20)).unwrap();
    let probed = hosted::probe_with_rate(&Policy::new(), Some(f));
    let tsc = probed.report().get(SourceId::Tsc).unwrap();
    assert!(tsc.is_constructed(), "{}", probed.report().table());
    assert!(tsc.demotion().is_none(), "{}", probed.report().table());
    drop(probed);

    // 5% off: the self-check catches it (two candidates, the estimated TSC
    // rate loses) and the OS clock is used.
    let wrong =
        Frequency::from_ratio(f.numerator() as u128 * 105, f.denominator() as u128 * 100).unwrap();
    let probed = hosted::probe_with_rate(&Policy::new(), Some(wrong));
    let r = *probed.report();
    match r.get(SourceId::Tsc).unwrap().demotion() {
        Some(Demotion::RateDisagrees {
            ppm,
            against: SourceId::Extra,
        }) => assert!((-52_000..=-45_000).contains(&ppm), "{ppm}"),
        v => panic!("{v:?}\n{}", r.table()),
    }
    assert_eq!(r.selected_id(), Some(SourceId::Extra));
    assert_eq!(probed.into_clock().unwrap().source_name(), "monotonic-raw");
}
