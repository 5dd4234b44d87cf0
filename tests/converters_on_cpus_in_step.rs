//! Converters on CPUs whose ordered source differs by less than the CPUs'
//! agreement (found by red-team round 32 against ccf5213, which refused a
//! converter below any CPU's floor; held since d94f921): a TSC 200 ticks
//! behind another CPU's (within what the warp test accepts), a kvmclock
//! area 500 ns behind (within `STABLE_AGREEMENT_NS`), and CPUs in step
//! all get converters while the other CPU reads.
#![cfg(all(feature = "tsc", feature = "hpet"))]

mod adversarial;

use adversarial::{leak, ms, platform, SimClock};
use clockhal::tsc::SyncStatus;
use clockhal_sim::{HpetConfig, SimConfig};

#[test]
fn converter_on_a_cpu_whose_tsc_is_200_ticks_behind() {
    let m = leak(
        SimConfig::cpu(2_000_000_000)
            .with_invariant_tsc(true)
            .with_hpet(HpetConfig::qemu())
            .with_cpus(2, &[0, -200])
            .build(),
    );
    let (p, _) = platform(m, 2, SyncStatus::Synchronized);
    let c: &'static SimClock = Box::leak(Box::new(clockhal::probe(m, p).into_clock().unwrap()));
    m.on_cpu(1, || c.register_this_cpu()).unwrap();
    assert_eq!(c.source_name(), "tsc", "{}", c.report().table());
    let mut none = 0;
    let mut log = Vec::new();
    for _ in 0..50 {
        m.advance(ms(1));
        let n0 = m.on_cpu(0, || c.now().as_nanos());
        let (a, conv, b) = m.on_cpu(1, || {
            let a = c.now().as_nanos();
            let conv = c.stamp_converter();
            let b = c.now().as_nanos();
            (a, conv, b)
        });
        if conv.is_none() {
            none += 1;
            if log.len() < 3 {
                log.push(format!(
                    "cpu0 now {n0}, cpu1 now {a} then {b}: no converter"
                ));
            }
        }
    }
    assert_eq!(
        none,
        0,
        "{none}/50 converters refused on cpu 1: {log:?}\n{}",
        c.report().table()
    );
}

/// The same on kvmclock with a trusted stable bit: CPU 1's area 500 ns
/// behind CPU 0's (within the 1 us `STABLE_AGREEMENT_NS` the clock
/// accepts, so the stable bit stays trusted and reads are not clamped).
#[cfg(feature = "kvmclock")]
#[test]
fn converter_on_a_cpu_whose_kvmclock_area_is_500_ns_behind() {
    let m = leak(
        clockhal_sim::SimMachine::kvm_config()
            .with_cpus(2, &[])
            .build(),
    );
    let (p, _) = platform(m, 2, SyncStatus::Synchronized);
    let c: &'static SimClock = Box::leak(Box::new(clockhal::probe(m, p).into_clock().unwrap()));
    m.with_kvm(|k, ctx| {
        k.set_system_time_skew(Some(1), -500);
        k.update_all(ctx);
    });
    m.on_cpu(1, || c.register_this_cpu()).unwrap();
    assert_eq!(c.source_name(), "kvmclock", "{}", c.report().table());
    let mut none = 0;
    let mut log = Vec::new();
    for _ in 0..50 {
        m.advance(ms(1));
        let n0 = m.on_cpu(0, || c.now().as_nanos());
        let (a, conv, b) = m.on_cpu(1, || {
            let a = c.now().as_nanos();
            let conv = c.stamp_converter();
            let b = c.now().as_nanos();
            (a, conv, b)
        });
        if conv.is_none() {
            none += 1;
            if log.len() < 3 {
                log.push(format!(
                    "cpu0 now {n0}, cpu1 now {a} then {b}: no converter"
                ));
            }
        }
    }
    assert_eq!(
        none,
        0,
        "{none}/50 converters refused on cpu 1: {log:?}\n{}",
        c.report().table()
    );
}

/// TSCs in step: the converter is given.
#[test]
fn converter_with_tscs_in_step() {
    let m = leak(
        SimConfig::cpu(2_000_000_000)
            .with_invariant_tsc(true)
            .with_hpet(HpetConfig::qemu())
            .with_cpus(2, &[0, 0])
            .build(),
    );
    let (p, _) = platform(m, 2, SyncStatus::Synchronized);
    let c: &'static SimClock = Box::leak(Box::new(clockhal::probe(m, p).into_clock().unwrap()));
    m.on_cpu(1, || c.register_this_cpu()).unwrap();
    for _ in 0..50 {
        m.advance(ms(1));
        m.on_cpu(0, || c.now());
        assert!(m.on_cpu(1, || c.stamp_converter()).is_some());
    }
}
