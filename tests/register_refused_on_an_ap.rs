//! kvmclock refusing an application processor at bring-up
//! (`register_this_cpu` -> Err: a host's unusable first area, no area for
//! the CPU's index). Found by red-team round 29, both failing before the
//! fix: kvmclock stayed current serving no reads on the AP, every watchdog
//! tick said Ok, and time stood still there for good. As at
//! `resume_this_cpu`, the refused current source is demoted and the next
//! best takes over.
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

fn measure_on(m: &SimMachine, c: &SimClock, cpu: usize) -> u64 {
    m.on_cpu(cpu, || {
        let t0 = c.now();
        m.advance(ms(100));
        c.elapsed(t0).as_nanos()
    })
}

/// The same refusal at bring-up: the host writes an unusable first update
/// when CPU 1 registers its area (`register_this_cpu` -> NotWritten), and
/// is good again right after. Time on CPU 1 must not stand still for good
/// (the resume path demotes for exactly this; bring-up does not).
#[test]
fn ap_whose_first_registration_is_refused_does_not_freeze() {
    let (m, c) = build(2);
    m.with_kvm(|k, _| k.set_scale_override(Some((0, 0))));
    let r = m.on_cpu(1, || c.register_this_cpu());
    m.with_kvm(|k, ctx| {
        k.set_scale_override(None);
        k.update_all(ctx);
    });
    let mut events = Vec::new();
    for _ in 0..20 {
        for cpu in 0..2 {
            m.on_cpu(cpu, || {
                for _ in 0..200 {
                    c.now();
                }
            });
        }
        m.advance(ms(250));
        events.push(c.watchdog_tick());
    }
    let d1 = measure_on(m, c, 1);
    let d0 = measure_on(m, c, 0);
    let t0 = m.on_cpu(0, || c.now().as_nanos());
    let t1 = m.on_cpu(1, || c.now().as_nanos());
    assert!(
        d1 >= ms(99) && d0 >= ms(99) && t0.abs_diff(t1) < ms(1),
        "register_this_cpu on cpu 1 -> {r:?}; 100 ms measure {d0} ns on cpu 0, {d1} ns on \
         cpu 1 (now {t0} / {t1}) on {}; events {events:?}\n{}",
        c.source_name(),
        c.report().table()
    );
}

/// The OS passes one pvclock area for two CPUs: CPU 1's
/// `register_this_cpu` answers `Kvmclock(CpuIndexOutOfRange)` and kvmclock
/// stays current, serving no read on CPU 1 for good.
#[test]
fn ap_without_a_pvclock_area_does_not_freeze() {
    use clockhal::{Duration, Platform, SelfCheck};
    let m = leak(SimMachine::kvm_config().with_cpus(2, &[]).build());
    let mut p = Platform::new()
        .cpus(2)
        .tsc_sync(SyncStatus::Synchronized)
        .self_check(SelfCheck::new().rate_interval(Duration::from_millis(1)))
        .pvclock_areas(m.alloc_pvclock_areas(1))
        .pvclock_wall_clock(m.alloc_wall_clock());
    if let Some(r) = m.hpet_region() {
        p = p.hpet_region(r);
    }
    if let Some(pm) = &m.config().pm_timer {
        p = p.pm_timer(pm.port, pm.bits32);
    }
    let c: &'static SimClock = Box::leak(Box::new(clockhal::probe(m, p).into_clock().unwrap()));
    let r = m.on_cpu(1, || c.register_this_cpu());
    let mut events = Vec::new();
    for _ in 0..20 {
        for cpu in 0..2 {
            m.on_cpu(cpu, || {
                for _ in 0..200 {
                    c.now();
                }
            });
        }
        m.advance(ms(250));
        events.push(c.watchdog_tick());
    }
    let d1 = measure_on(m, c, 1);
    let d0 = measure_on(m, c, 0);
    assert!(
        d1 >= ms(99) && d0 >= ms(99),
        "register_this_cpu on cpu 1 -> {r:?}; 100 ms measure {d0} ns on cpu 0, {d1} ns on \
         cpu 1 on {}; last event {:?}\n{}",
        c.source_name(),
        events.last(),
        c.report().table()
    );
}
