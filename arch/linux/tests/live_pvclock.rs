//! The hosted locator against this machine's real vDSO pvclock page.
//!
//! Run with `cargo test -p clockhal-x86 --features std --test live_pvclock`.
//! Where the machine has no such page the test prints `SKIP: <reason>` and
//! returns; a page that exists but holds garbage fails. The precise checks
//! of the kvmclock read path against this page (monotonicity, 20 ppm rate
//! agreement with CLOCK_MONOTONIC_RAW) live in `bench/tests/live_pvclock.rs`.

use clockhal_linux::{live_pvclock, live_tsc_rate, LivePvclock};
use clockhal_x86::{Hardware, Native};
use std::time::{Duration, Instant};

/// The live page, or `None` after printing why this machine has none.
fn live_or_skip(test: &str) -> Option<LivePvclock> {
    match live_pvclock() {
        Ok(l) => Some(l),
        Err(e) if e.is_absent() => {
            eprintln!("SKIP {test}: no live pvclock page: {e}");
            None
        }
        Err(e) => panic!("the vDSO pvclock page exists but is invalid: {e}"),
    }
}

#[test]
#[cfg_attr(miri, ignore = "reads /proc/self/maps and runs rdtsc (inline asm)")]
fn live_page_is_a_settled_pvclock_area_written_in_the_past() {
    let Some(live) = live_or_skip("live_page_is_a_settled_pvclock_area_written_in_the_past") else {
        return;
    };
    let p = live.params();
    eprintln!(
        "live pvclock: {} at {:#x}: version {} flags {:#04x} (stable: {}) mul {} shift {} tsc_timestamp {} system_time {}",
        live.mapping(),
        live.address(),
        p.version,
        p.flags,
        p.tsc_stable(),
        p.tsc_to_system_mul,
        p.tsc_shift,
        p.tsc_timestamp,
        p.system_time
    );
    assert_eq!(live.address() % 4096, 0);
    assert!(p.version != 0 && p.version % 2 == 0);
    // The host wrote the page before now, on this machine's TSC timeline.
    let now = Native::hosted().rdtsc_ordered();
    assert!(
        p.tsc_timestamp <= now,
        "tsc_timestamp {} is in the future ({now})",
        p.tsc_timestamp
    );
    // Located once: a second call finds the same page.
    assert_eq!(live_pvclock().unwrap().address(), live.address());
}

#[test]
#[cfg_attr(miri, ignore = "reads /proc/self/maps and runs rdtsc (inline asm)")]
fn page_rate_matches_a_rough_calibration() {
    let Some(_) = live_or_skip("page_rate_matches_a_rough_calibration") else {
        return;
    };
    let rate = live_tsc_rate().unwrap();
    let page_hz = rate.numerator as f64 / rate.denominator as f64;
    // Rough on purpose: std's Instant is CLOCK_MONOTONIC, which NTP may slew
    // by up to 500 ppm. A wrong page or a wrong formula is off by far more.
    let hw = Native::hosted();
    let (t0, c0) = (Instant::now(), hw.rdtsc_ordered());
    std::thread::sleep(Duration::from_millis(100));
    let (t1, c1) = (Instant::now(), hw.rdtsc_ordered());
    let measured_hz = (c1 - c0) as f64 / (t1 - t0).as_secs_f64();
    let ppm = (page_hz / measured_hz - 1.0) * 1e6;
    eprintln!(
        "page says {page_hz:.3} Hz ({}), measured {measured_hz:.0} Hz: {ppm:+.1} ppm",
        rate.provenance
    );
    assert!(ppm.abs() < 1000.0, "page rate off by {ppm:.1} ppm");
}
