//! The clock in fugit's types: `now_fugit` is `now`, and fugit's
//! arithmetic measures what clockhal's does.
#![cfg(all(feature = "fugit", feature = "tsc"))]

use clockhal::{Duration, FugitDuration, FugitInstant, Instant, Platform};
use clockhal_sim::SimMachine;

#[test]
fn now_fugit_lies_between_two_nows_and_differences_agree() {
    let m = SimMachine::bare_metal();
    let clock = clockhal::probe(&m, Platform::new()).into_clock().unwrap();
    let first = clock.now_fugit();
    let mut prev = first;
    for i in 0..1_000u64 {
        let a = clock.now();
        let f = clock.now_fugit();
        let b = clock.now();
        assert!(a <= Instant::from(f) && Instant::from(f) <= b);
        assert!(f >= prev, "monotonic as a fugit Monotonic instant");
        prev = f;
        m.advance(i * 997);
    }
    let fugit_took: FugitDuration = prev - first;
    let took = Instant::from(prev) - Instant::from(first);
    assert_eq!(Duration::from(fugit_took), took);
    assert!(took >= Duration::from_millis(490)); // 997 ns x 499,500
    let deadline: FugitInstant = first + FugitDuration::from_millis(1);
    assert!(Instant::from(deadline) == Instant::from(first) + Duration::from_millis(1));
}
