//! Hosted mode on this machine: the TSC read from user space, rated and
//! calibrated against CLOCK_MONOTONIC_RAW, behind the same `Clock` API.
#![cfg(all(feature = "std", target_arch = "x86_64"))]

use clockhal::hosted::{Hosted, HostedTsc, OsClock, RateOrigin};
use clockhal::{ClockSource, Demotion, Duration, Policy, Scale, SourceId, Verdict};

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
    let tsc = &HostedTsc::calibrate(Duration::from_millis(50)).expect("TSC calibrated");
    assert_eq!(tsc.origin(), RateOrigin::Calibrated);
    let hz = tsc.frequency().hz_rounded();
    assert!((100_000_000..10_000_000_000).contains(&hz), "{hz}");
    let scale = Scale::new(tsc.frequency());
    let errors = measure(|| scale.ticks_to_ns(tsc.read()));
    let m = median(errors.clone());
    assert!(m.abs() < 1_000, "median {m} ppm of {errors:?}");
}

#[test]
fn hosted_clock_selects_by_rating_and_keeps_time() {
    let hosted = Hosted::probe(&Policy::new());
    let r = hosted.report();
    println!("{}\n{}", r, r.table());
    // The live kvmclock page's rate when Linux maps one, else calibration.
    let origin = hosted.tsc().expect("a TSC rate").origin();
    if clockhal::linux::live_tsc_rate().is_ok() {
        assert_eq!(origin, RateOrigin::Kvmclock);
    } else {
        assert_eq!(origin, RateOrigin::Calibrated);
    }
    let tsc = r.get(SourceId::Tsc).unwrap();
    // The TSC wins exactly when it is invariant and the host kernel itself
    // clocks from it (rated 350 over monotonic-raw's 300).
    let expected = if tsc.is_eligible() && tsc.rating.unwrap().get() > 300 {
        SourceId::Tsc
    } else {
        SourceId::Os
    };
    assert_eq!(r.selected_id(), Some(expected), "{}", r.table());
    let clock = hosted.clock().unwrap();
    let errors = measure(|| clock.now().as_nanos());
    let m = median(errors.clone());
    assert!(m.abs() < 1_000, "median {m} ppm of {errors:?}");

    // Monotonic across threads (the OS migrates them between CPUs).
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
fn the_rate_hook_keeps_the_origin_and_a_wrong_rate_is_demoted() {
    let calibrated = HostedTsc::calibrate(Duration::from_millis(20)).unwrap();
    let f = calibrated.frequency();
    let given = HostedTsc::with_rate(f, RateOrigin::Kvmclock);
    let hosted = Hosted::with_tsc(given, &Policy::new());
    let tsc = hosted.report().get(SourceId::Tsc).unwrap();
    assert_eq!(tsc.note.to_string(), "rate from kvmclock page");
    assert_eq!(tsc.verdict, Verdict::Usable, "{}", hosted.report().table());

    // 5% off: the self-check catches it (two candidates, the estimated TSC
    // rate loses) and the OS clock is used.
    let wrong =
        clockhal::Frequency::from_ratio(f.numerator() as u128 * 105, f.denominator() as u128 * 100)
            .unwrap();
    let hosted = Hosted::with_tsc(
        HostedTsc::with_rate(wrong, RateOrigin::Given),
        &Policy::new(),
    );
    let r = hosted.report();
    match r.get(SourceId::Tsc).unwrap().verdict {
        Verdict::Demoted(Demotion::RateDisagrees {
            ppm,
            against: SourceId::Os,
        }) => {
            assert!((-52_000..=-45_000).contains(&ppm), "{ppm}");
        }
        v => panic!("{v:?}\n{}", r.table()),
    }
    assert_eq!(r.selected_id(), Some(SourceId::Os));
    assert_eq!(hosted.clock().unwrap().source_name(), "monotonic-raw");
}
