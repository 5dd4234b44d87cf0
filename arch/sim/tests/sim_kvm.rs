//! The simulator's KVM host against a hand-written pvclock decode: the
//! areas it writes must tell the machine's true time, registration must be
//! one MSR write, and reads must cost no exit.

use clockhal_sim::SimMachine;
use clockhal_x86::paravirt::{
    kvm_register_system_time, kvm_unregister_system_time, PvclockVcpuTimeInfo,
};
use clockhal_x86::{Hardware, Msr};
use std::sync::atomic::Ordering::SeqCst;

/// The pvclock ABI written out independently of the crate under test.
fn decode_by_hand(m: &SimMachine, area: &PvclockVcpuTimeInfo) -> (u64, u32) {
    loop {
        let v = area.version.load(SeqCst);
        if v % 2 == 1 {
            continue;
        }
        let ts = area.tsc_timestamp.load(SeqCst);
        let sys = area.system_time.load(SeqCst);
        let mul = area.tsc_to_system_mul.load(SeqCst) as u128;
        let shift = area.tsc_shift.load(SeqCst) as i32;
        let tsc = m.rdtsc();
        if area.version.load(SeqCst) != v {
            continue;
        }
        let mut d = (tsc - ts) as u128;
        if shift >= 0 {
            d <<= shift;
        } else {
            d >>= -shift;
        }
        return (sys + ((d * mul) >> 32) as u64, v);
    }
}

fn register(
    m: &SimMachine,
    areas: &clockhal_x86::paravirt::PhysMapped<[PvclockVcpuTimeInfo]>,
    cpu: usize,
) {
    m.on_cpu(cpu, || {
        kvm_register_system_time(m, Msr::KVM_SYSTEM_TIME_NEW, areas.element(cpu).unwrap()).unwrap()
    });
}

#[test]
fn profile_area_tells_true_time_without_exits() {
    let m = SimMachine::kvm();
    let areas = m.alloc_pvclock_areas(1);
    m.reset_traps();
    register(&m, &areas, 0);
    let t = m.traps();
    assert_eq!(
        (t.msr_writes, t.msr_reads),
        (1, 0),
        "registration is one MSR write"
    );
    let area = &areas.get()[0];
    assert_ne!(
        area.tsc_to_system_mul.load(SeqCst),
        0,
        "host filled the area on registration"
    );
    assert_eq!(
        area.flags.load(SeqCst) & 1,
        1,
        "kvm profile sets the stable flag"
    );

    m.reset_traps();
    for step in [0u64, 1_000, 1_000_000, 10_000_000_000] {
        m.advance(step);
        let before = m.now_ns();
        let (ns, _) = decode_by_hand(&m, area);
        let after = m.now_ns();
        // mul is truncated by the host: < 0.5 ns/s of error, 10 s at most here.
        assert!(
            ns + 10 >= before && ns <= after,
            "decoded {ns} outside [{before}, {after}]"
        );
    }
    assert_eq!(m.traps().exits(), 0, "reading the area never exits");
}

#[test]
fn per_cpu_areas_follow_their_own_tsc() {
    let offsets = [0i64, 5_000_000_000, -1_000_000_000, 123_456_789];
    let m = SimMachine::kvm_config().with_cpus(4, &offsets).build();
    let areas = m.alloc_pvclock_areas(4);
    for cpu in 0..4 {
        register(&m, &areas, cpu);
    }
    m.advance(3_000_000);
    for (cpu, (area, offset)) in areas.get().iter().zip(offsets).enumerate() {
        let tsc_at_update = area.tsc_timestamp.load(SeqCst);
        let before = m.now_ns();
        let (ns, _) = m.on_cpu(cpu, || decode_by_hand(&m, area));
        assert!(
            ns + 10 >= before && ns <= m.now_ns(),
            "cpu {cpu}: {ns} vs {before}"
        );
        // Each area holds its own CPU's TSC (offsets of seconds apart).
        let expected =
            (area.system_time.load(SeqCst) as u128 * 2_600_000_000 / 1_000_000_000) as i64 + offset;
        assert!(
            (tsc_at_update as i64 - expected).abs() < 3,
            "cpu {cpu} timestamp"
        );
    }
}

#[test]
fn updates_keep_versions_even_and_unregister_stops_them() {
    let m = SimMachine::kvm();
    let areas = m.alloc_pvclock_areas(1);
    register(&m, &areas, 0);
    let area = &areas.get()[0];
    let v0 = area.version.load(SeqCst);
    m.with_kvm(|k, ctx| k.update(ctx, 0)).unwrap();
    assert_eq!(area.version.load(SeqCst), v0 + 2);

    m.with_kvm(|k, ctx| k.stall_update(ctx, 0)).unwrap();
    assert_eq!(
        area.version.load(SeqCst) % 2,
        1,
        "stalled update leaves the version odd"
    );
    m.with_kvm(|k, ctx| k.update(ctx, 0)).unwrap();
    assert_eq!(
        area.version.load(SeqCst) % 2,
        0,
        "the next update finishes it"
    );

    kvm_unregister_system_time(&m, Msr::KVM_SYSTEM_TIME_NEW).unwrap();
    assert_eq!(m.with_kvm(|k, _| k.registered(0)).unwrap(), None);
    let v = area.version.load(SeqCst);
    m.with_kvm(|k, ctx| k.update_all(ctx)).unwrap();
    assert_eq!(
        area.version.load(SeqCst),
        v,
        "no writes after unregistering"
    );
}

#[test]
fn fault_injection_reaches_the_area() {
    let m = SimMachine::kvm();
    let areas = m.alloc_pvclock_areas(1);
    register(&m, &areas, 0);
    let area = &areas.get()[0];
    m.with_kvm(|k, ctx| {
        k.set_scale_override(Some((0, -77)));
        k.set_stable_flag(false);
        k.set_system_time_skew(Some(0), -500);
        k.pause_guest();
        k.update(ctx, 0);
    });
    assert_eq!(area.tsc_to_system_mul.load(SeqCst), 0);
    assert_eq!(area.tsc_shift.load(SeqCst), -77);
    assert_eq!(
        area.flags.load(SeqCst),
        0b10,
        "stable off, guest stopped on"
    );
    assert_eq!(area.system_time.load(SeqCst) + 500, m.now_ns());
}

#[test]
fn rdtsc_hook_lands_an_update_inside_a_read() {
    let m = SimMachine::kvm();
    let areas = m.alloc_pvclock_areas(1);
    register(&m, &areas, 0);
    let area = &areas.get()[0];
    let v0 = area.version.load(SeqCst);
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let c = calls.clone();
    m.set_rdtsc_hook(move |m| {
        // The first three rdtscs each see the host update the area.
        if c.fetch_add(1, SeqCst) < 3 {
            m.with_kvm(|k, ctx| k.update(ctx, 0));
        }
    });
    let before = m.now_ns();
    let (ns, v) = decode_by_hand(&m, area);
    m.clear_rdtsc_hook();
    assert_eq!(v, v0 + 6, "three retries, then a consistent read");
    assert!(ns + 10 >= before && ns <= m.now_ns());
}
