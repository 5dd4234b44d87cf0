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

/// Two CPUs, kvmclock without the stable bit, CPU 1's area 50 µs ahead:
/// CPU 0's readings are clamped above its own map by CPU 1's lead for
/// good. Its stamps carry no floor, and it keeps getting converters.
#[test]
fn a_cpu_behind_another_on_an_unordered_source_keeps_its_converter() {
    let m = leak(
        SimMachine::kvm_config()
            .with_kvm(clockhal_sim::KvmConfig {
                stable_bit: false,
                ..clockhal_sim::KvmConfig::default()
            })
            .with_cpus(2, &[])
            .build(),
    );
    let (c, _) = adversarial::clock_with(m, |p| p);
    m.on_cpu(1, || c.register_this_cpu()).unwrap();
    m.with_kvm(|k, ctx| {
        k.set_system_time_skew(Some(1), 50_000);
        k.update_all(ctx);
    });
    for _ in 0..10 {
        m.advance(ms(1));
        let lead = m.on_cpu(1, || c.now().as_nanos());
        let own = m.on_cpu(0, || c.now().as_nanos());
        assert!(own >= lead, "CPU 0 not clamped: {own} < {lead}");
        assert!(
            m.on_cpu(0, || c.stamp_converter()).is_some(),
            "CPU 0 lost its converter to CPU 1's lead\n{}",
            c.report().table()
        );
    }
}
