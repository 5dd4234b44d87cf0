//! Legitimate host pauses are not punished (issue 26): QEMU `stop`/`cont`
//! restores kvmclock where the guest stopped while the TSC and the devices
//! moved on; an update is a step back only against what was returned.
//! Reader threads on two CPUs check every guarantee meanwhile.
#![cfg(all(
    feature = "kvmclock",
    feature = "tsc",
    feature = "hpet",
    feature = "acpi-pm"
))]

mod adversarial;

use adversarial::{clock, leak, ms, race, ticks};
use clockhal::{SourceId, Verdict, WatchdogEvent};
use clockhal_sim::SimMachine;

/// QEMU/KVM with two vCPUs.
fn two_cpu_kvm() -> &'static SimMachine {
    leak(SimMachine::kvm_config().with_cpus(2, &[0, 0]).build())
}

#[test]
fn qemu_stop_cont_keeps_kvmclock_and_now_does_not_step() {
    // Issue 26: a 5 s stop ended with kvmclock reanchored ("5 s back"),
    // demoted for host faults, and now() stepping 5 s.
    let m = two_cpu_kvm();
    let (c, _) = clock(m);
    assert_eq!(c.source_id(), SourceId::Kvmclock, "{}", c.report());
    let (before, after, truth, events) = race(&c, m, &[0, 1], true, |readers| {
        let mut events = ticks(&c, m, readers, 4, 50);
        let (n0, t0) = (m.now_ns(), c.now().as_nanos());
        m.stop_and_cont(ms(5_000), true);
        readers.wait(200);
        events.extend(ticks(&c, m, readers, 8, 50));
        (t0, c.now().as_nanos(), m.now_ns() - n0, events)
    });
    let stats = c.kvmclock().unwrap().stats();
    assert_eq!(stats.faults(), 0, "{stats:?}");
    assert!(
        !events.iter().any(|e| matches!(
            e,
            WatchdogEvent::Switched { .. } | WatchdogEvent::Demoted { .. }
        )),
        "{events:?}"
    );
    assert_eq!(c.source_id(), SourceId::Kvmclock, "{}", c.report());
    assert!(
        matches!(
            c.report().get(SourceId::Kvmclock).unwrap().verdict,
            Verdict::Usable(_)
        ),
        "{}",
        c.report()
    );
    // The guest's time did not pass over the stop: now() moved by the
    // running time only (no 5 s step), to the readers' progress.
    let moved = after - before;
    let running = truth - ms(5_000);
    assert!(
        moved + ms(1) >= running && moved <= running + ms(50),
        "now() moved {moved} ns over {running} ns of running time"
    );
}

#[test]
fn a_guest_paused_in_every_interval_is_still_judged() {
    // Issue 26: GUEST_STOPPED in every tick skipped every round: a 1,000
    // ppm drift went unjudged for 10 s (40 of 40 ticks). Pauses shorten
    // the evidence; they cannot erase it. (The HPET drifts: the simulated
    // host re-anchors kvmclock at the truth at every update.)
    use clockhal::{Demotion, Fault};
    let m = two_cpu_kvm();
    let (c, _) = clock(m);
    assert_eq!(c.source_id(), SourceId::Kvmclock);
    let events = race(&c, m, &[0, 1], true, |readers| {
        let mut e = ticks(&c, m, readers, 4, 20);
        m.with_hpet(|h, ctx| h.set_rate_error_ppm(ctx, 1_000));
        for _ in 0..40 {
            readers.wait(20);
            m.with_kvm(|k, _| k.pause_guest());
            m.advance(ms(100));
            m.with_kvm(|k, ctx| k.update_all(ctx));
            readers.wait(20);
            m.advance(ms(250));
            e.push(c.watchdog_tick());
        }
        e
    });
    assert!(events.contains(&WatchdogEvent::GuestStopped), "{events:?}");
    let drift = events.iter().find_map(|e| match *e {
        WatchdogEvent::Demoted {
            source: SourceId::Hpet,
            reason:
                Demotion::Watchdog {
                    fault: Fault::Drift { skew_ppm },
                    ..
                },
            ..
        } => Some(skew_ppm),
        _ => None,
    });
    assert!(
        drift.is_some_and(|s| (900..=1_100).contains(&s)),
        "{events:?}\n{}",
        c.report().table()
    );
    assert_eq!(c.source_id(), SourceId::Kvmclock);
}
