//! The LAPIC timer devices on the simulated machine: register paths
//! (xAPIC MMIO, x2APIC MSRs), divide choice, rounding, TSC-deadline, and
//! the faults (early fire, dropped arm, ignored deadline writes).

use clockhal_core::timer::{plan_piece, Expiry, OneShot, TimerDevice, TimerError, TimerMode};
use clockhal_core::Frequency;
use clockhal_lapic_timer::{LapicOneShot, LapicTimerError, LapicTscDeadline};
use clockhal_sim::{LapicConfig, SimConfig, SimMachine};
use clockhal_x86::timer_regs::{ApicAccess, ApicAccessError};
use clockhal_x86::Hardware;

const TSC_HZ: u64 = 2_000_000_000;

fn machine(cfg: LapicConfig) -> SimMachine {
    SimConfig::cpu(TSC_HZ).with_lapic(cfg).build()
}

fn hz(h: u64) -> Frequency {
    Frequency::from_hz(h).unwrap()
}

fn one_shot(m: &SimMachine) -> LapicOneShot<&SimMachine> {
    let access = ApicAccess::detect(m, m.lapic_region()).unwrap();
    let rate = hz(m.config().lapic.as_ref().unwrap().timer_hz);
    LapicOneShot::new(m, access, 0xEF, rate, 1).unwrap()
}

#[test]
fn access_follows_apic_base() {
    let tcg = machine(LapicConfig::tcg());
    assert!(matches!(
        ApicAccess::detect(&tcg, tcg.lapic_region()),
        Ok(ApicAccess::XApic(_))
    ));
    assert_eq!(
        ApicAccess::detect(&tcg, None),
        Err(ApicAccessError::NoMapping)
    );
    let kvm = machine(LapicConfig::kvm());
    assert_eq!(ApicAccess::detect(&kvm, None), Ok(ApicAccess::X2Apic));
    // No APIC in CPUID: refused before any MSR is read.
    let bare = SimConfig::cpu(TSC_HZ).build();
    assert_eq!(
        ApicAccess::detect(&bare, None),
        Err(ApicAccessError::NoApic)
    );
}

#[test]
fn one_shot_never_fires_early_and_at_most_one_divided_tick_late() {
    // A 24 MHz crystal: 41.67 ns per tick, so rounding matters.
    let cfg = LapicConfig {
        timer_hz: 24_000_000,
        ..LapicConfig::tcg()
    };
    let m = machine(cfg);
    let t = one_shot(&m);
    for ticks in [
        1u64,
        7,
        1_000,
        u32::MAX as u64,
        u32::MAX as u64 + 1,
        u32::MAX as u64 * 100,
    ] {
        let before = m.now_ns();
        t.program(ticks).unwrap();
        let after = m.now_ns();
        let at = m.lapic_next_fire_ns(0).unwrap();
        // ticks / 24 MHz, exact ceiling in ns.
        let want = (ticks as u128 * 1_000_000_000).div_ceil(24_000_000) as u64;
        assert!(
            at >= before + want,
            "{ticks}: fires {} ns early",
            before + want - at
        );
        let divide = clockhal_lapic_timer::choose_divide(ticks).unwrap().0;
        let slack = ((1u128 << divide) * 1_000_000_000).div_ceil(24_000_000) as u64;
        assert!(
            at <= after + want + slack,
            "{ticks}: late by more than a tick"
        );
        t.cancel();
        assert_eq!(m.lapic_next_fire_ns(0), None, "cancel disarms");
    }
    assert_eq!(
        t.program(u32::MAX as u64 * 128 + 1),
        Err(TimerError::OutOfRange {
            ticks: u32::MAX as u64 * 128 + 1
        })
    );
    assert_eq!(t.program(0), Err(TimerError::OutOfRange { ticks: 0 }));
}

#[test]
fn x2apic_uses_msrs_xapic_uses_mmio() {
    let m = machine(LapicConfig::kvm());
    let t = one_shot(&m);
    m.reset_traps();
    t.program(1_000).unwrap();
    let tr = m.traps();
    assert_eq!((tr.msr_writes, tr.mmio_writes), (2, 0));
    assert_eq!(
        t.descriptor().traps_per_arm,
        0,
        "no hypervisor bit: bare metal"
    );

    let m = machine(LapicConfig::tcg());
    let t = one_shot(&m);
    m.reset_traps();
    t.program(1_000_000).unwrap();
    let tr = m.traps();
    assert_eq!((tr.msr_writes, tr.mmio_writes), (0, 2));
    // The current count runs down (each simulated trap costs 1 µs).
    let c0 = t.counter().unwrap();
    m.advance(500_000);
    let c1 = t.counter().unwrap();
    assert!(c0 < 1_000_000 && c1 < c0 - 400_000, "{c0} then {c1}");
}

#[test]
fn calibrated_rate_at_a_divide_is_scaled_to_the_input() {
    let m = machine(LapicConfig::tcg()); // 1 GHz input
    let access = ApicAccess::detect(&m, m.lapic_region()).unwrap();
    // The OS calibrated at divide 16: 62.5 MHz.
    let t = LapicOneShot::new(&m, access, 0xEF, hz(62_500_000), 16).unwrap();
    assert_eq!(t.rate(), Some(hz(1_000_000_000)));
    assert_eq!(
        LapicOneShot::new(&m, access, 0xEF, hz(62_500_000), 3).unwrap_err(),
        LapicTimerError::BadRate
    );
    assert_eq!(
        LapicOneShot::new(&m, access, 14, hz(1_000_000), 1).unwrap_err(),
        LapicTimerError::BadVector(14)
    );
}

#[test]
fn arat_is_reported() {
    let m = machine(LapicConfig::tcg());
    let d = one_shot(&m).descriptor();
    assert!(d.stops_in_deep_idle && d.needs_calibrated_rate);
    assert!(d.rating_reason.contains("ARAT"));
    let m = machine(LapicConfig {
        arat: true,
        ..LapicConfig::tcg()
    });
    let d2 = one_shot(&m).descriptor();
    assert!(!d2.stops_in_deep_idle);
    assert!(d2.rating > d.rating);
}

#[test]
fn interrupt_arrives_at_the_vector_once() {
    let m = machine(LapicConfig::tcg());
    let t = one_shot(&m);
    t.program(10_000).unwrap();
    assert_eq!(m.lapic_take_interrupt(0), None, "not yet");
    let at = m.lapic_next_fire_ns(0).unwrap();
    m.advance(at - m.now_ns());
    assert_eq!(m.lapic_take_interrupt(0), Some(0xEF));
    assert_eq!(m.lapic_take_interrupt(0), None, "one-shot");
}

/// Drives `deadline_ns` (machine ns) through a device and the core's
/// OneShot; returns (machine ns at Fired, interrupts taken).
fn drive(m: &SimMachine, t: &dyn TimerDevice, deadline_ns: u64) -> (u64, u32) {
    let state = OneShot::new();
    state.arm(deadline_ns);
    let d = t.descriptor();
    let rate = t.rate().unwrap();
    let program = |now: u64| {
        let ticks = plan_piece(
            deadline_ns.saturating_sub(now),
            rate,
            d.min_delta_ticks,
            d.max_delta_ticks,
        )
        .unwrap();
        t.program(ticks).unwrap();
    };
    program(m.now_ns());
    for irq in 1..1_000 {
        let at = m.lapic_next_fire_ns(0).expect("armed");
        m.advance(at.saturating_sub(m.now_ns()));
        assert!(m.lapic_take_interrupt(0).is_some());
        match state.on_interrupt(m.now_ns()) {
            Expiry::Fired { .. } => return (m.now_ns(), irq),
            Expiry::Rearm { .. } => program(m.now_ns()),
            Expiry::Spurious => panic!("lost"),
        }
    }
    panic!("never fired");
}

#[test]
fn early_fire_is_rearmed_and_delivered_on_time() {
    let m = machine(LapicConfig::tcg());
    let t = one_shot(&m);
    // Every fire comes 3 µs early (a host that rounds down).
    m.with_lapic(|l, _| l.set_early_ns(3_000));
    let deadline = m.now_ns() + 50_000;
    let (fired_at, irqs) = drive(&m, &t, deadline);
    assert!(
        fired_at >= deadline,
        "fired {} ns early",
        deadline - fired_at
    );
    assert!(irqs >= 2, "the early interrupt was re-armed");
}

#[test]
fn long_deadline_on_a_short_device_goes_in_pieces() {
    // 1 GHz input: max delta 2^32 * 128 ns ≈ 550 s; a 20-minute deadline
    // needs three pieces.
    let m = machine(LapicConfig::tcg());
    let t = one_shot(&m);
    let deadline = m.now_ns() + 1_200_000_000_000;
    let (fired_at, irqs) = drive(&m, &t, deadline);
    assert!(fired_at >= deadline);
    assert_eq!(irqs, 3);
}

#[test]
fn dropped_arm_leaves_the_timer_disarmed() {
    let m = machine(LapicConfig::tcg());
    let t = one_shot(&m);
    m.with_lapic(|l, _| l.drop_next_arms(1));
    t.program(1_000).unwrap();
    // Nothing will fire: the facade's overdue check has to notice.
    assert_eq!(m.lapic_next_fire_ns(0), None);
    t.program(1_000).unwrap();
    assert!(m.lapic_next_fire_ns(0).is_some());
}

#[test]
fn tsc_deadline_fires_when_the_tsc_reaches_it() {
    let m = machine(LapicConfig::kvm());
    let access = ApicAccess::detect(&m, None).unwrap();
    let t = LapicTscDeadline::new(&m, access, 0xEE, hz(TSC_HZ)).unwrap();
    t.self_test().unwrap();
    assert_eq!(m.lapic_next_fire_ns(0), None, "self-test disarms");
    let d = t.descriptor();
    assert_eq!(d.mode, TimerMode::AbsoluteCounter);
    assert!(!d.needs_calibrated_rate);
    let target = m.rdtsc() + 2_000_000; // 1 ms
    t.program_at(target).unwrap();
    let at = m.lapic_next_fire_ns(0).unwrap();
    m.advance(at - m.now_ns());
    assert!(m.tsc_of(0) >= target);
    assert_eq!(m.lapic_take_interrupt(0), Some(0xEE));
    // A deadline in the past fires at once; 0 is not "disarm".
    t.program_at(0).unwrap();
    assert_eq!(m.lapic_take_interrupt(0), Some(0xEE));
    // Cancel disarms.
    t.program_at(m.rdtsc() + 1_000_000).unwrap();
    t.cancel();
    assert_eq!(m.lapic_next_fire_ns(0), None);
}

#[test]
fn tsc_deadline_refused_where_absent_or_dropped() {
    let m = machine(LapicConfig::tcg());
    let access = ApicAccess::detect(&m, m.lapic_region()).unwrap();
    assert_eq!(
        LapicTscDeadline::new(&m, access, 0xEE, hz(TSC_HZ)).unwrap_err(),
        LapicTimerError::NoTscDeadline
    );
    // A nested host that ignores the MSR write: the self-test finds it.
    let m = machine(LapicConfig::kvm());
    m.with_lapic(|l, _| l.set_ignore_deadline_writes(true));
    let access = ApicAccess::detect(&m, None).unwrap();
    let t = LapicTscDeadline::new(&m, access, 0xEE, hz(TSC_HZ)).unwrap();
    assert_eq!(t.self_test(), Err(LapicTimerError::DeadlineDropped));
}

#[test]
fn lifecycle_rows() {
    // AP bring-up: CPU 1 needs its own LVT set up.
    let m = SimConfig::cpu(TSC_HZ)
        .with_cpus(2, &[])
        .with_lapic(LapicConfig::tcg())
        .build();
    let t = one_shot(&m); // LVT set on CPU 0 only
    m.on_cpu(1, || t.program(1_000).unwrap());
    let at = m.lapic_next_fire_ns(1).unwrap();
    m.advance(at - m.now_ns());
    assert_eq!(m.lapic_take_interrupt(1), None, "CPU 1's LVT still masked");
    m.on_cpu(1, || {
        t.init_this_cpu();
        t.program(1_000).unwrap();
    });
    m.advance(2_000);
    assert_eq!(m.lapic_take_interrupt(1), Some(0xEF));
    // CPU offline: masked and stopped.
    t.program(1_000).unwrap();
    t.shutdown_this_cpu();
    assert_eq!(m.lapic_next_fire_ns(0), None);
}
