//! Stamps against what `now()` returned (found by red-team round 30,
//! failing before the fix): after a kvmclock step back within
//! `max_backward_ns`, `now()` holds at its floor while the source catches
//! up, but `stamp_converter()` handed out the source's new map, so a stamp
//! taken after a `now()` converted 199 µs below it. The converter is
//! refused while the source reads below what the clock returned (as its
//! docs list), and given again once the source has caught up.
#![cfg(feature = "kvmclock")]

mod adversarial;

use adversarial::{clock, leak, ms};
use clockhal_sim::SimMachine;

#[test]
fn no_converter_maps_a_stamp_below_an_earlier_now_after_a_host_step_back() {
    let m = leak(SimMachine::kvm());
    let (c, _) = clock(m);
    m.advance(ms(5));
    let _ = c.now();
    m.with_kvm(|k, ctx| {
        k.set_system_time_skew(None, -200_000);
        k.update_all(ctx);
    });
    m.advance(1_000);
    let n = c.now().as_nanos();
    let s = c.stamp();
    // Held at the floor: no map is the clock's.
    assert!(
        c.stamp_converter().is_none(),
        "a converter while now() holds 199 us above the source"
    );
    assert_eq!(c.stamp_to_instant(s), None);
    // Caught up: the converter is back, and a stamp taken after a now()
    // converts at or after it.
    m.advance(300_000);
    let n2 = c.now().as_nanos();
    assert!(n2 > n);
    let s2 = c.stamp();
    let conv = c.stamp_converter().expect("a converter once caught up");
    let i = conv.instant(s2).unwrap().as_nanos();
    assert!(i >= n2, "stamp after now()={n2} converts to {i}");
}
