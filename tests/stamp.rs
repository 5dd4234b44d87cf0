//! Tracing stamps (`Clock::stamp`, `StampConverter`), from outside: they
//! convert to the instant `now()` gives at the same TSC, measure machine
//! time, refuse what they cannot convert (a device source, an
//! unregistered CPU, a stamp before the timeline), never turn a host's
//! garbage into years, and race source switches on several threads.
#![cfg(all(
    feature = "kvmclock",
    feature = "hyperv",
    feature = "tsc",
    feature = "hpet",
    feature = "acpi-pm"
))]

mod adversarial;

use adversarial::{clock, clock_with, leak, ms, SimClock};
use clockhal::{SourceId, Stamp};
use clockhal_sim::{PvclockUpdate, SimMachine};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The machines and the TSC-based source each selects.
fn machines() -> Vec<(&'static str, SimMachine, SourceId)> {
    vec![
        ("bare metal", SimMachine::bare_metal(), SourceId::Tsc),
        ("kvm", SimMachine::kvm(), SourceId::Kvmclock),
        ("hyper-v", SimMachine::hyperv(), SourceId::HypervPage),
    ]
}

#[test]
fn a_stamp_converts_to_what_now_gives_and_measures_machine_time() {
    for (what, m, want) in machines() {
        let m = leak(m);
        let (c, _) = clock(m);
        assert_eq!(c.source_id(), want, "{what}: {}", c.report());
        let s0 = c.stamp();
        let n = c.now().as_nanos();
        let s1 = c.stamp();
        assert!(s0 < s1, "{what}: stamps on one CPU are in order");
        let conv = c.stamp_converter().expect("a TSC-based source converts");
        assert_eq!(conv.source_id(), want);
        let at = |s: Stamp| conv.instant(s).expect("inside the window").as_nanos();
        let (i0, i1) = (at(s0), at(s1));
        // The same map as now()'s: now()'s TSC lies between the stamps.
        assert!(
            i0 <= n && n <= i1,
            "{what}: {i0} <= {n} <= {i1} (now() between its stamps)"
        );
        // 100 ms of machine time is 100 ms between two stamps.
        let (t0, a) = (m.now_ns(), c.stamp());
        m.advance(ms(100));
        let (b, t1) = (c.stamp(), m.now_ns());
        let d = at(b) - at(a);
        assert!(
            d <= t1 - t0 && d + 2_000 >= t1 - t0,
            "{what}: {d} ns between stamps over {} ns",
            t1 - t0
        );
        assert_eq!(c.stamp_to_instant(b).map(|i| i.as_nanos()), Some(at(b)));
        // A stamp from before the clock's timeline began is refused.
        assert_eq!(conv.instant(Stamp::from_tsc(0)), None, "{what}");
    }
}

#[test]
fn a_device_source_has_no_converter() {
    let m = leak(SimMachine::bare_metal());
    let (c, _) = clock(m);
    c.force(SourceId::Hpet).unwrap();
    assert_eq!(c.source_id(), SourceId::Hpet);
    assert!(c.stamp_converter().is_none());
    assert!(c.stamp_to_instant(c.stamp()).is_none());
    // Back on the TSC, stamps taken meanwhile convert again.
    let s = c.stamp();
    c.force(SourceId::Tsc).unwrap();
    let conv = c.stamp_converter().unwrap();
    assert!(conv.instant(s).is_some_and(|i| i <= c.now()));
}

#[test]
fn an_unregistered_kvmclock_cpu_has_no_converter() {
    let m = leak(SimMachine::kvm_config().with_cpus(2, &[]).build());
    let (c, _) = clock_with(m, |p| p.tsc_sync(clockhal::tsc::SyncStatus::Synchronized));
    assert_eq!(c.source_id(), SourceId::Kvmclock);
    m.on_cpu(1, || {
        assert!(c.stamp_converter().is_none(), "no area registered yet");
        c.register_this_cpu().unwrap();
        let conv = c.stamp_converter().expect("registered now");
        assert!(conv.instant(c.stamp()).is_some());
        c.unregister_this_cpu();
        assert!(c.stamp_converter().is_none(), "unregistered again");
    });
}

/// Machine ns at the clock's 0.
fn origin(c: &SimClock, m: &SimMachine) -> u64 {
    m.now_ns() - c.now().as_nanos()
}

/// A hostile rewrite of the host's next update.
type Garbage = fn(PvclockUpdate) -> PvclockUpdate;

#[test]
fn a_garbage_host_update_never_converts_to_years() {
    let garbage: [(&str, Garbage); 3] = [
        ("mul = u32::MAX, shift = 32", |u| PvclockUpdate {
            mul: u32::MAX,
            shift: 32,
            ..u
        }),
        ("system_time 100 years ahead", |u| PvclockUpdate {
            system_time: u.system_time + 100 * 365 * 86_400 * 1_000_000_000,
            ..u
        }),
        ("mul = 0", |u| PvclockUpdate { mul: 0, ..u }),
    ];
    for (what, bad) in garbage {
        let m = leak(SimMachine::kvm());
        let (c, _) = clock(m);
        let zero = origin(&c, m);
        let s = c.stamp();
        m.with_kvm(|k, ctx| {
            let u = bad(k.next_update(ctx, 0));
            k.publish(ctx, 0, u);
        });
        m.advance(ms(5));
        for _ in 0..3 {
            if let Some(conv) = c.stamp_converter() {
                let truth = m.now_ns() - zero;
                let got = conv.instant(c.stamp()).map(|i| i.as_nanos());
                assert!(
                    got.is_some_and(|g| g.abs_diff(truth) < ms(1)),
                    "{what}: converted {got:?}, machine says {truth}"
                );
                assert!(conv.instant(s).is_some_and(|i| i.as_nanos() < truth));
            }
        }
    }
}

#[test]
fn stamps_race_source_switches_on_several_threads() {
    let m = leak(SimMachine::kvm_config().with_cpus(3, &[]).build());
    let (c, _) = clock_with(m, |p| p.tsc_sync(clockhal::tsc::SyncStatus::Synchronized));
    for cpu in 1..3 {
        m.on_cpu(cpu, || c.register_this_cpu().unwrap());
    }
    let stop = AtomicBool::new(false);
    let converted = AtomicU64::new(0);
    std::thread::scope(|s| {
        for cpu in 1..3 {
            let (c, stop, converted) = (&c, &stop, &converted);
            s.spawn(move || {
                m.set_cpu(cpu);
                while !stop.load(Ordering::Relaxed) {
                    let before = c.now();
                    let st = c.stamp();
                    let conv = c.stamp_converter();
                    let after = c.now();
                    let Some(i) = conv.and_then(|conv| conv.instant(st)) else {
                        continue;
                    };
                    // Whatever source converted it: between the readings
                    // around it, within a switch's margin and the time the
                    // reads themselves take (never years, never wrapped).
                    assert!(
                        i.as_nanos() + ms(100) >= before.as_nanos()
                            && i.as_nanos() <= after.as_nanos() + ms(1),
                        "stamp at {} outside {}..{}",
                        i.as_nanos(),
                        before.as_nanos(),
                        after.as_nanos()
                    );
                    converted.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        let order = [SourceId::Tsc, SourceId::Hpet, SourceId::Kvmclock];
        let t0 = std::time::Instant::now();
        let mut i = 0;
        while converted.load(Ordering::Relaxed) < 2_000
            && t0.elapsed() < std::time::Duration::from_secs(30)
        {
            c.force(order[i % order.len()]).unwrap();
            i += 1;
            m.advance(50_000);
            std::thread::yield_now();
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(
        converted.load(Ordering::Relaxed) >= 2_000,
        "readers converted only {} stamps",
        converted.load(Ordering::Relaxed)
    );
}
