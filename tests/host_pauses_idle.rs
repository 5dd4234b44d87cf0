//! QEMU's stop/cont on a guest that reads nothing between its ticks
//! (issue 26 §1: legitimate host behaviour that is punished). After the
//! cont, the first to read kvmclock may be a watchdog round (kvmclock's
//! own reader), not `now()`: the clock's read loop then met the host's
//! cont update already judged and judged it again, against what that
//! reader had returned through it since, a "step back" from the update's
//! own anchor. It was re-anchored on the old parameters across the pause
//! (`now()` stepped 5 s) and counted as a host fault (kvmclock demoted).
#![cfg(all(
    feature = "kvmclock",
    feature = "tsc",
    feature = "hpet",
    feature = "acpi-pm"
))]

use clockhal::{SourceId, Verdict, WatchdogEvent};
use clockhal_sim::SimMachine;

mod adversarial;

use adversarial::{bad, clock, leak, ms};

fn demoted(c: &adversarial::SimClock) -> Vec<SourceId> {
    c.report()
        .candidates()
        .filter(|c| matches!(c.verdict, Verdict::Demoted { .. }))
        .map(|c| c.id)
        .collect()
}

/// The simplest case: a one-CPU KVM guest (kvmclock current) that
/// reads nothing between its watchdog ticks (idle), one announced QEMU
/// stop/cont of 5 s. README: "Host pauses (kvmclock's `GUEST_STOPPED`)
/// skip an interval but keep strikes"; CHANGELOG: "QEMU's `stop`/`cont`
/// keeps kvmclock". (Before: each of the next tick's three round reads
/// re-judged the cont update, `reanchored_updates: 3`, and the tick after
/// switched away for `HostFaults { count: 3 }`.)
#[test]
fn one_announced_stop_cont_on_an_idle_guest_keeps_kvmclock() {
    let m = leak(SimMachine::kvm_config().build());
    let (c, _) = clock(m);
    assert_eq!(c.source_id(), SourceId::Kvmclock);
    for _ in 0..8 {
        m.advance(ms(250));
        assert!(!bad(&c.watchdog_tick()));
    }
    m.stop_and_cont(ms(5_000), true);
    let evs: Vec<_> = (0..8)
        .map(|_| {
            m.advance(ms(250));
            c.watchdog_tick()
        })
        .collect();
    assert!(
        !evs.iter().any(bad) && demoted(&c).is_empty(),
        "{evs:?}
{:?}
{}",
        c.kvmclock().unwrap().stats(),
        c.report().table()
    );
}

/// kvmclock current; a QEMU stop/cont of `pause_ms` (announced or not)
/// inside each of `n` watchdog intervals. Nothing is demoted or
/// switched, and `now()` never goes back or ahead of the truth.
fn paused_every_interval(pause_ms: u64, announce: bool, n: usize) {
    let m = leak(SimMachine::kvm_config().build());
    let (c, _) = clock(m);
    assert_eq!(c.source_id(), SourceId::Kvmclock);
    let origin = m.now_ns() - c.now().as_nanos();
    for _ in 0..8 {
        m.advance(ms(250));
        assert!(!bad(&c.watchdog_tick()));
    }
    let mut evs: Vec<(usize, WatchdogEvent)> = vec![];
    let mut last = c.now().as_nanos();
    for i in 0..n {
        m.advance(ms(100));
        c.now();
        m.stop_and_cont(ms(pause_ms), announce);
        m.advance(ms(150));
        let e = c.watchdog_tick();
        evs.push((i, e));
        let t = c.now().as_nanos();
        let truth = m.now_ns() - origin;
        assert!(t >= last && t <= truth + ms(1), "{t} vs {truth}");
        last = t;
    }
    for _ in 0..8 {
        m.advance(ms(250));
        evs.push((99, c.watchdog_tick()));
    }
    assert!(
        !evs.iter().any(|(_, e)| bad(e)) && demoted(&c).is_empty(),
        "pause {pause_ms} ms announce {announce}: {evs:?}\n{}",
        c.report().table()
    );
    assert_eq!(c.source_id(), SourceId::Kvmclock);
}

#[test]
fn announced_pauses_longer_than_a_pm_wrap_in_every_interval() {
    paused_every_interval(10_000, true, 20);
}

#[test]
fn announced_short_pauses_in_every_interval() {
    paused_every_interval(300, true, 40);
}

/// The mechanism of `one_announced_stop_cont_on_an_idle_guest_keeps_kvmclock`
/// through the public API: after QEMU's stop/cont, kvmclock's own reader
/// (`source_of(Kvmclock).read()`, what every watchdog round does) reads
/// through the host's new parameters first; the clock's own read loop
/// must take the same update as judged, not judge it at its anchor
/// (`tsc_timestamp`, 250 ms earlier) against that later value (a "step
/// back" of 250 ms, beyond `max_backward_ns`): `now()` does not step
/// (CHANGELOG: "QEMU's `stop`/`cont` keeps kvmclock and `now()` does not
/// step") and no host fault is counted.
#[test]
fn a_backend_read_before_the_clock_s_first_read_after_cont_steps_nothing() {
    let m = leak(SimMachine::kvm_config().build());
    let (c, _) = clock(m);
    for _ in 0..8 {
        m.advance(ms(250));
        c.watchdog_tick();
    }
    let t0 = c.now().as_nanos();
    m.stop_and_cont(ms(5_000), true);
    m.advance(ms(250));
    c.source_of(SourceId::Kvmclock).unwrap().read();
    m.advance(ms(1));
    let moved = c.now().as_nanos() - t0;
    let stats = c.kvmclock().unwrap().stats();
    assert!(
        moved < ms(300) && stats.faults() == 0,
        "now() moved {} ms over 251 ms of running time; {stats:?}",
        moved / 1_000_000
    );
}
