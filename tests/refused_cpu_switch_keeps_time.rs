//! The switch away from a source that refused an AP (found by red-team
//! round 32, both failing before the fix): the demotion runs on the
//! refused CPU, where the old source serves no read, and the switch
//! started the new source at that held value, the last any CPU returned
//! (2 s of idle measured 1 µs; 200 ms lost since the last tick). The new
//! source starts from the anchor's independent counter now, as after a
//! jump.
#![cfg(all(feature = "kvmclock", feature = "tsc", feature = "hpet"))]

mod adversarial;

use adversarial::{leak, ms, platform, SimClock};
use clockhal::tsc::SyncStatus;
use clockhal_sim::SimMachine;

fn build(cpus: usize) -> (&'static SimMachine, &'static SimClock) {
    let m = leak(SimMachine::kvm_config().with_cpus(cpus, &[]).build());
    let (p, _) = platform(m, cpus, SyncStatus::Synchronized);
    let c: &'static SimClock = Box::leak(Box::new(clockhal::probe(m, p).into_clock().unwrap()));
    (m, c)
}

fn refuse_on_cpu1(m: &SimMachine, c: &SimClock) -> Result<(), clockhal::CpuError> {
    m.with_kvm(|k, _| k.set_scale_override(Some((0, 0))));
    let r = m.on_cpu(1, || c.register_this_cpu());
    m.with_kvm(|k, ctx| {
        k.set_scale_override(None);
        k.update_all(ctx);
    });
    r
}

/// CPU 0 reads, the kernel idles 2 s (nothing reads), then the AP comes up
/// and is refused: the demotion's switch must not lose the 2 s.
#[test]
fn refused_ap_switch_after_idle_keeps_elapsed_time() {
    let (m, c) = build(2);
    let t0 = m.on_cpu(0, || c.now());
    let before = c.source_name();
    m.advance(ms(2_000));
    let r = refuse_on_cpu1(m, c);
    let after = c.source_name();
    let e0 = m.on_cpu(0, || c.elapsed(t0).as_nanos());
    assert!(
        e0 >= ms(1_999),
        "register_this_cpu on cpu 1 -> {r:?} ({before} -> {after}): 2 s of true time \
         measure {e0} ns on cpu 0\n{}",
        c.report().table()
    );
}

/// The same with the watchdog ticking every 250 ms on CPU 0 (a tick's own
/// reads), the AP registering 200 ms after the last tick.
#[test]
fn refused_ap_switch_between_ticks_keeps_elapsed_time() {
    let (m, c) = build(2);
    let t0 = m.on_cpu(0, || c.now());
    for _ in 0..8 {
        m.advance(ms(250));
        m.on_cpu(0, || c.watchdog_tick());
    }
    m.advance(ms(200));
    let r = refuse_on_cpu1(m, c);
    let e0 = m.on_cpu(0, || c.elapsed(t0).as_nanos());
    assert!(
        e0 >= ms(2_199),
        "register_this_cpu on cpu 1 -> {r:?} (now {}): 2.2 s of true time measure {e0} ns on cpu 0\n{}",
        c.source_name(),
        c.report().table()
    );
}
