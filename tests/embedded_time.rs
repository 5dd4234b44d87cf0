//! The selected clock as an `embedded_time::Clock`, on the simulator.
#![cfg(all(feature = "embedded-time", feature = "kvmclock"))]

use clockhal::{probe, Duration, Platform, SelfCheck};
use clockhal_sim::SimMachine;
use embedded_time::duration::{Microseconds, Nanoseconds};
use embedded_time::Clock as _;

#[test]
fn embedded_time_instants_and_timers_follow_the_clock() {
    let m = SimMachine::kvm();
    let plat = Platform::new()
        .pvclock_areas(m.alloc_pvclock_areas(1))
        .self_check(SelfCheck::new().rate_interval(Duration::from_millis(1)));
    let p = probe(&m, plat);
    let clock = p.into_clock().unwrap();
    assert_eq!(clock.source_name(), "kvmclock");

    let start = clock.try_now().unwrap();
    m.advance(5_000_000);
    let end = clock.try_now().unwrap();
    let d: Nanoseconds<u64> = end
        .checked_duration_since(&start)
        .unwrap()
        .try_into()
        .unwrap();
    assert!(d.0 >= 5_000_000 && d.0 < 5_001_000, "{d:?}");
    // Embedded-time instants are clockhal nanoseconds.
    let now_ns = clock.now().as_nanos();
    let et: Nanoseconds<u64> = clock
        .try_now()
        .unwrap()
        .duration_since_epoch()
        .try_into()
        .unwrap();
    assert!(et.0 >= now_ns && et.0 - now_ns < 1_000);

    // A 100 us timer spins on `try_now` until simulated time has passed.
    let t0 = m.now_ns();
    clock
        .new_timer(Microseconds(100u32))
        .start()
        .unwrap()
        .wait()
        .unwrap();
    let waited = m.now_ns() - t0;
    assert!((100_000..110_000).contains(&waited), "{waited}");
}
