//! QEMU's stop/cont on an idle two-vCPU guest whose areas carry different
//! version numbers (the host updated one vCPU once more before: a vCPU
//! migration, KVM_REQ_CLOCK_UPDATE). After the cont a watchdog round on
//! CPU 0 reads first (kvmclock's own reader); each CPU's first `now()`
//! then judges its own cont update against what was returned before,
//! through any parameters on any CPU, at the new parameters' value now,
//! not at their anchor: kvmclock stays and `now()` does not step (for a
//! while the second CPU's update was taken for a step back of the time
//! since the cont, and kvmclock switched away for host faults).
#![cfg(all(
    feature = "kvmclock",
    feature = "tsc",
    feature = "hpet",
    feature = "acpi-pm"
))]

use clockhal::{SourceId, Verdict};
use clockhal_sim::SimMachine;

mod adversarial;

use adversarial::{bad, clock, leak, ms};

fn run(announce: bool) {
    run_on(announce, 2)
}

fn run_on(announce: bool, cpus: usize) {
    let m = leak(
        SimMachine::kvm_config()
            .with_cpus(cpus, &vec![0; cpus])
            .build(),
    );
    let (c, _) = clock(m);
    let other = cpus - 1;
    if other != 0 {
        m.on_cpu(1, || c.register_this_cpu()).unwrap();
    }
    assert_eq!(c.source_id(), SourceId::Kvmclock, "{}", c.report().table());
    let origin = m.now_ns() - c.now().as_nanos();
    // The host updates CPU 1's area once more (its version moves ahead).
    m.advance(ms(1));
    m.with_kvm(|k, ctx| k.update(ctx, other));
    let mut evs = vec![];
    for _ in 0..8 {
        m.advance(ms(250));
        evs.push(m.on_cpu(0, || c.watchdog_tick()));
        m.on_cpu(0, || c.now());
        m.on_cpu(other, || c.now());
    }
    m.stop_and_cont(ms(5_000), announce);
    m.advance(ms(250));
    evs.push(m.on_cpu(0, || c.watchdog_tick()));
    let mut worst = (0i128, 0usize);
    for cpu in [other, 0, other, 0] {
        m.advance(ms(1));
        let t = m.on_cpu(cpu, || c.now().as_nanos());
        let d = t as i128 - (m.now_ns() - origin) as i128;
        if d > worst.0 {
            worst = (d, cpu);
        }
    }
    for _ in 0..8 {
        m.advance(ms(250));
        evs.push(m.on_cpu(0, || c.watchdog_tick()));
        for cpu in [other, 0] {
            let t = m.on_cpu(cpu, || c.now().as_nanos());
            let d = t as i128 - (m.now_ns() - origin) as i128;
            if d > worst.0 {
                worst = (d, cpu);
            }
        }
    }
    let demoted: Vec<_> = c
        .report()
        .candidates()
        .filter(|x| matches!(x.verdict, Verdict::Demoted { .. }))
        .map(|x| x.id)
        .collect();
    assert!(
        worst.0 < ms(20) as i128 && demoted.is_empty() && !evs.iter().any(bad),
        "announce {announce}: now() up to {} ms ahead of the truth (cpu {}); demoted {demoted:?}; {:?}; {:?}\n{}",
        worst.0 / 1_000_000,
        worst.1,
        evs.iter().filter(|e| bad(e)).collect::<Vec<_>>(),
        c.kvmclock().unwrap().stats(),
        c.report().table()
    );
}

#[test]
fn announced_stop_cont_on_an_idle_two_cpu_guest_keeps_kvmclock() {
    run(true);
}

/// Control: the same on a one-CPU guest (passes).
#[test]
fn control_announced_one_cpu() {
    run_on(true, 1);
}
