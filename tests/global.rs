//! The global clock: `None` before `install`, the installed clock's
//! readings after, the first install wins. One test: the state is the
//! process's.
#![cfg(feature = "tsc")]

use clockhal::{global, ClockNow, Instant, Platform};
use clockhal_sim::SimMachine;

/// An OS's own clock, to show a second install is refused.
struct Fixed;

impl ClockNow for Fixed {
    fn now(&self) -> Instant {
        Instant::from_nanos(7)
    }
}

#[test]
fn before_install_none_then_the_installed_clock_and_the_first_install_wins() {
    assert!(global::clock().is_none());
    assert_eq!(global::now(), None);
    assert_eq!(global::unix_time_ns(), None);

    // A machine without kvmclock: no wall time until the OS sets one.
    let m: &'static SimMachine = Box::leak(Box::new(SimMachine::bare_metal()));
    let clock = clockhal::probe(m, Platform::new()).into_clock().unwrap();
    let clock = Box::leak(Box::new(clock));
    global::install(clock).unwrap();

    let mut last = Instant::from_nanos(0);
    for _ in 0..1_000 {
        let before = clock.now();
        let t = global::now().expect("installed");
        let after = clock.now();
        assert!(before <= t && t <= after, "{before} {t} {after}");
        assert!(t >= last);
        last = t;
        m.advance(1_000);
    }
    assert_eq!(global::unix_time_ns(), None);
    clock.set_unix_time(1_800_000_000_000_000_000).unwrap();
    let unix = global::unix_time_ns().expect("wall time set");
    assert!((1_800_000_000_000_000_000..1_800_000_001_000_000_000).contains(&unix));

    static OTHER: Fixed = Fixed;
    assert_eq!(global::install(&OTHER), Err(global::AlreadyInstalled));
    assert_ne!(
        global::now(),
        Some(Instant::from_nanos(7)),
        "the first clock stays"
    );
    assert!(global::now().unwrap() >= last);
}
