//! CPUs at the edges of the per-CPU design (found by a red-team pass):
//! indices sharing the overflow slot, CPUs that unregistered or never
//! registered and keep reading, an OS whose warp test or TSC_ADJUST says
//! "out of step", and an SMP kernel that forgot `Platform::cpus`.
#![cfg(all(
    feature = "kvmclock",
    feature = "hyperv",
    feature = "tsc",
    feature = "hpet",
    feature = "acpi-pm"
))]

mod adversarial;

use adversarial::{clock, clock_with, leak, ms};
use clockhal::tsc::SyncStatus;
use clockhal::{Duration, Platform, SourceId};
use clockhal_core::PER_CPU_SLOTS;
use clockhal_sim::{HpetConfig, SimConfig, SimMachine};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

/// A KVM guest with CPUs past the overflow slot; CPU `odd` has its TSC
/// `offset` ticks off the others (per-vCPU offsets: kvmclock areas differ).
fn many_cpus(odd: usize, offset: i64) -> &'static SimMachine {
    let n = PER_CPU_SLOTS + 2;
    let mut offsets = vec![0i64; n];
    offsets[odd] = offset;
    leak(SimMachine::kvm_config().with_cpus(n, &offsets).build())
}

#[test]
fn cpus_sharing_the_overflow_slot_never_read_each_others_map() {
    let last = PER_CPU_SLOTS - 1;
    // 0.5 s of TSC ahead, then behind, on a CPU that shares the slot.
    for (odd, offset) in [(last + 1, 1_300_000_000i64), (last + 1, -1_300_000_000)] {
        let m = many_cpus(odd, offset);
        let (c, _) = clock(m);
        assert_eq!(c.source_id(), SourceId::Kvmclock);
        for cpu in 1..m.cpu_count() {
            m.on_cpu(cpu, || c.register_this_cpu()).unwrap();
        }
        m.advance(ms(10));
        for order in [[last, odd], [odd, last]] {
            let t0 = c.now().as_nanos();
            let reads: Vec<u64> = order
                .iter()
                .map(|&cpu| m.on_cpu(cpu, || c.now().as_nanos()))
                .collect();
            let t1 = c.now().as_nanos();
            for (cpu, t) in order.iter().zip(&reads) {
                assert!(
                    t.abs_diff(t0) < ms(1),
                    "offset {offset}: cpu {cpu} reads {t}, cpu 0 {t0}"
                );
            }
            assert!(t1.abs_diff(t0) < ms(1), "cpu 0 went from {t0} to {t1}");
        }
    }
}

#[test]
fn an_unregistered_cpu_holds_at_once() {
    let m = leak(SimMachine::kvm_config().with_cpus(2, &[]).build());
    let (c, _) = clock(m);
    assert_eq!(c.source_id(), SourceId::Kvmclock);
    m.on_cpu(1, || c.register_this_cpu()).unwrap();
    m.advance(ms(1));
    let _ = m.on_cpu(1, || c.now());
    m.on_cpu(1, || c.unregister_this_cpu());
    let at = m.on_cpu(1, || c.now().as_nanos());
    m.advance(ms(500));
    let later = m.on_cpu(1, || c.now().as_nanos());
    // It holds: at most what CPU 0 (which read nothing since) returned.
    assert!(
        later - at < ms(1),
        "unregistered CPU 1 went on: {at} -> {later}"
    );
}

#[test]
fn a_cpu_kvmclock_does_not_serve_never_demotes_it_for_the_others() {
    for registered_first in [true, false] {
        let m = leak(SimMachine::kvm_config().with_cpus(2, &[]).build());
        let (c, _) = clock(m);
        if registered_first {
            m.on_cpu(1, || c.register_this_cpu()).unwrap();
            m.advance(ms(5));
            m.on_cpu(1, || c.unregister_this_cpu());
        }
        m.advance(ms(1_100));
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                m.set_cpu(0);
                while !stop.load(SeqCst) {
                    let _ = c.now();
                }
            });
            m.set_cpu(1);
            // A CPU going down (or one that forgot to register) waits.
            let _ = c.spin_for(Duration::from_millis(1));
            for _ in 0..3 * clockhal::STUCK_READS {
                let _ = c.now();
            }
            stop.store(true, SeqCst);
        });
        assert_eq!(c.source_id(), SourceId::Kvmclock, "{}", c.report());
    }
}

#[test]
fn an_out_of_step_tsc_keeps_kvmclock_through_the_clamp() {
    // The OS's warp test, then areas that disagree (per-vCPU offsets).
    let m = leak(SimMachine::kvm_config().with_cpus(2, &[]).build());
    let (c, _) = clock(m);
    m.on_cpu(1, || c.register_this_cpu()).unwrap();
    c.set_tsc_sync(SyncStatus::Unsynchronized {
        worst_backward_ticks: 5,
    });
    m.advance(ms(250));
    let e = c.watchdog_tick();
    assert_eq!(c.source_id(), SourceId::Kvmclock, "{e:?}\n{}", c.report());
    let m = leak(SimMachine::kvm_config().with_cpus(2, &[0, 3_000]).build());
    let (c, _) = clock(m);
    m.on_cpu(1, || c.register_this_cpu()).unwrap();
    m.advance(ms(250));
    let e = c.watchdog_tick();
    assert_eq!(c.source_id(), SourceId::Kvmclock, "{e:?}\n{}", c.report());
    // And the clamp orders the two CPUs.
    let a = c.now();
    let b = m.on_cpu(1, || c.now());
    assert!(b >= a);
}

#[test]
fn a_second_cpu_on_a_tsc_said_to_be_single_cpu_withdraws_the_trust() {
    // An SMP kernel that forgot Platform::cpus and passed no ACPI tables;
    // CPU 1's TSC runs 1 ms behind.
    let m = leak(
        SimConfig::cpu(2_592_000_000)
            .with_invariant_tsc(true)
            .with_tsc_leaf(2, 216, 24_000_000)
            .with_hpet(HpetConfig::classic())
            .with_cpus(2, &[0, -2_592_000])
            .build(),
    );
    let probed = clockhal::probe(m, Platform::new().hpet_region(m.hpet_region().unwrap()));
    let c = probed.into_clock().unwrap();
    assert_eq!(c.source_id(), SourceId::Tsc);
    let _ = m.on_cpu(1, || c.register_this_cpu());
    assert_ne!(c.source_id(), SourceId::Tsc, "{}", c.report());
    m.advance(ms(5));
    let a = c.now();
    let b = m.on_cpu(1, || c.now());
    assert!(
        b >= a,
        "a later read on CPU 1 is {} ns earlier",
        a.as_nanos() - b.as_nanos()
    );
}

#[test]
fn the_boot_cpu_registering_again_changes_nothing() {
    let m = leak(SimMachine::bare_metal());
    let (c, _) = clock_with(m, |p| p.tsc_sync(SyncStatus::SingleCpu));
    assert_eq!(c.source_id(), SourceId::Tsc);
    let _ = c.register_this_cpu();
    assert_eq!(c.source_id(), SourceId::Tsc, "{}", c.report());
}

#[test]
fn the_tsc_note_follows_the_warp_test_result() {
    let m = leak(
        SimConfig::cpu(2_592_000_000)
            .with_invariant_tsc(true)
            .with_tsc_leaf(2, 216, 24_000_000)
            .with_hpet(HpetConfig::classic())
            .with_cpus(2, &[])
            .build(),
    );
    let (c, _) = clock(m);
    let note = |c: &adversarial::SimClock| {
        c.report()
            .get(SourceId::Tsc)
            .map(|t| t.note.to_string())
            .unwrap_or_default()
    };
    assert!(note(&c).contains("did not decide"), "{}", note(&c));
    c.set_tsc_sync(SyncStatus::Synchronized);
    assert!(!note(&c).contains("did not decide"), "stale: {}", note(&c));
    assert_eq!(c.source_id(), SourceId::Tsc, "{}", c.report());
}
