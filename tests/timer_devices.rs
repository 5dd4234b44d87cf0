//! The facade's timer over the simulated devices: LAPIC TSC-deadline
//! through the clock's map, LAPIC one-shot with a rate that is off, the
//! HPET comparator, Hyper-V STIMER0, PIT channel 0, a dropped arm,
//! failover, and the selection.
#![cfg(all(
    feature = "tsc",
    feature = "hpet",
    feature = "hyperv",
    feature = "kvmclock",
    feature = "pit"
))]

mod adversarial;

use clockhal::timer::{Timer, TimerDevice, TimerEvent, TimerMode};
use clockhal::{Clock, Duration, Frequency, Instant, Platform};
use clockhal_hpet::comparator::{HpetComparator, HpetRoute};
use clockhal_hyperv::stimer::HypervStimer;
use clockhal_lapic_timer::{LapicOneShot, LapicTscDeadline};
use clockhal_sim::{HpetConfig, HypervConfig, LapicConfig, SimMachine};
use clockhal_x86::timer_regs::ApicAccess;

const TSC_HZ: u64 = 2_592_000_000; // bare_metal's

fn machine(lapic: LapicConfig) -> SimMachine {
    SimMachine::bare_metal_config().with_lapic(lapic).build()
}

fn clock(m: &SimMachine) -> Clock<&SimMachine> {
    clockhal::probe(m, Platform::new().hpet_region(m.hpet_region().unwrap()))
        .into_clock()
        .unwrap()
}

/// Runs the machine to the next fire of `next` (machine ns), takes the
/// interrupt with `take`, calls the timer's entry; until Fired. Returns the
/// clock time at Fired and the interrupts taken.
fn run<H: clockhal::x86::Hardware + Clone>(
    m: &SimMachine,
    c: &Clock<H>,
    t: &Timer<'_, H>,
    deadline: Instant,
    next: impl Fn() -> Option<u64>,
    take: impl Fn() -> bool,
) -> (Instant, u32) {
    for irq in 1..100 {
        let at = next().expect("armed");
        m.advance(at.saturating_sub(m.now_ns()));
        assert!(take(), "interrupt due");
        match t.on_interrupt() {
            TimerEvent::Fired { deadline: d, .. } => {
                assert_eq!(d, deadline);
                let now = c.now();
                assert!(
                    now >= deadline,
                    "delivered {} ns early",
                    deadline.as_nanos() - now.as_nanos()
                );
                return (now, irq);
            }
            TimerEvent::Rearmed { programmed, .. } => programmed.unwrap(),
            TimerEvent::Spurious => panic!("lost"),
        }
    }
    panic!("never fired");
}

#[test]
fn tsc_deadline_through_the_clocks_map() {
    let m = machine(LapicConfig::kvm());
    let c = clock(&m);
    let dev = LapicTscDeadline::new(
        &m,
        ApicAccess::detect(&m, None).unwrap(),
        0xEF,
        Frequency::from_hz(TSC_HZ).unwrap(),
    )
    .unwrap();
    dev.self_test().unwrap();
    let t = c.timer(&dev).unwrap();
    assert_eq!(t.descriptor().mode, TimerMode::AbsoluteCounter);
    for us in [1u64, 50, 1_000, 10_000] {
        let deadline = c.now() + Duration::from_micros(us);
        t.arm(deadline).unwrap();
        let (at, irqs) = run(
            &m,
            &c,
            &t,
            deadline,
            || m.lapic_next_fire_ns(0),
            || m.lapic_take_interrupt(0).is_some(),
        );
        assert_eq!(irqs, 1, "exact conversion: no early fire to re-arm");
        // Late by the interrupt entry's own clock read at most.
        assert!(
            at.as_nanos() - deadline.as_nanos() < 5_000,
            "{us} µs: late by {}",
            at.as_nanos() - deadline.as_nanos()
        );
    }
    // A deadline in the past fires at once.
    t.arm(Instant::from_nanos(0)).unwrap();
    assert_eq!(m.lapic_next_fire_ns(0), Some(m.now_ns()));
}

#[test]
fn lapic_one_shot_with_a_rate_that_is_off_is_never_early() {
    let m = machine(LapicConfig::tcg()); // 1 GHz input, xAPIC, no ARAT
    let c = clock(&m);
    let access = ApicAccess::detect(&m, m.lapic_region()).unwrap();
    // A calibration 0.5 % low: every count is 0.5 % short.
    let dev = LapicOneShot::new(
        &m,
        access,
        0xEF,
        Frequency::from_hz(995_000_000).unwrap(),
        1,
    )
    .unwrap();
    let t = c.timer(&dev).unwrap();
    assert!(t.descriptor().stops_in_deep_idle);
    let deadline = c.now() + Duration::from_millis(5);
    t.arm(deadline).unwrap();
    let (_, irqs) = run(
        &m,
        &c,
        &t,
        deadline,
        || m.lapic_next_fire_ns(0),
        || m.lapic_take_interrupt(0).is_some(),
    );
    assert!(irqs >= 2, "the early fire was re-armed");
    assert!(t.stats().rearmed >= 1);
}

#[test]
fn lapic_early_fire_fault_and_dropped_arm() {
    let m = machine(LapicConfig::tcg());
    let c = clock(&m);
    let access = ApicAccess::detect(&m, m.lapic_region()).unwrap();
    let dev = LapicOneShot::new(
        &m,
        access,
        0xEF,
        Frequency::from_hz(1_000_000_000).unwrap(),
        1,
    )
    .unwrap();
    let t = c
        .timer(&dev)
        .unwrap()
        .with_overdue_bound(Duration::from_micros(200));
    m.with_lapic(|l, _| l.set_early_ns(20_000));
    let deadline = c.now() + Duration::from_micros(100);
    t.arm(deadline).unwrap();
    run(
        &m,
        &c,
        &t,
        deadline,
        || m.lapic_next_fire_ns(0),
        || m.lapic_take_interrupt(0).is_some(),
    );
    m.with_lapic(|l, _| {
        l.set_early_ns(0);
        l.drop_next_arms(1);
    });
    let deadline = c.now() + Duration::from_micros(100);
    t.arm(deadline).unwrap();
    assert_eq!(m.lapic_next_fire_ns(0), None, "the host dropped it");
    m.advance(1_000_000);
    let o = t.check_overdue().expect("found overdue");
    o.reprogrammed.unwrap();
    // Programmed again: it fires now.
    let (at, _) = run(
        &m,
        &c,
        &t,
        deadline,
        || m.lapic_next_fire_ns(0),
        || m.lapic_take_interrupt(0).is_some(),
    );
    assert!(at >= deadline);
}

#[test]
fn hpet_comparator_on_the_clocks_timeline() {
    let m = machine(LapicConfig::tcg());
    let c = clock(&m);
    let dev = HpetComparator::new(&m, m.hpet_region().unwrap(), 0, HpetRoute::Auto).unwrap();
    let t = c.timer(&dev).unwrap();
    let deadline = c.now() + Duration::from_millis(3);
    t.arm(deadline).unwrap();
    let (at, irqs) = run(
        &m,
        &c,
        &t,
        deadline,
        || m.hpet_next_fire_ns(0),
        || m.hpet_take_interrupt(0) == Some(2),
    );
    assert_eq!(irqs, 1);
    assert!(at.as_nanos() - deadline.as_nanos() < 10_000);
}

#[test]
fn long_deadline_on_a_32_bit_comparator_arrives() {
    // 100 MHz, 32-bit: 2^31 - 1 ticks (21.5 s) per piece; 50 s is 3.
    let m = SimMachine::bare_metal_config()
        .with_hpet(HpetConfig::qemu().narrow())
        .build();
    let c = clock(&m);
    let dev = HpetComparator::new(&m, m.hpet_region().unwrap(), 0, HpetRoute::Auto).unwrap();
    let t = c.timer(&dev).unwrap();
    let deadline = c.now() + Duration::from_secs(50);
    t.arm(deadline).unwrap();
    let (_, irqs) = run(
        &m,
        &c,
        &t,
        deadline,
        || m.hpet_next_fire_ns(0),
        || m.hpet_take_interrupt(0).is_some(),
    );
    assert_eq!(irqs, 3);
}

#[test]
fn tsc_deadline_follows_a_kvmclock_map_change_on_rearm() {
    use adversarial::{clock_with, leak};
    #[derive(Clone, Copy, PartialEq)]
    enum Fix {
        Nothing,
        Rearm,
        WatchdogTick,
    }
    let late_by = |fix: Fix| {
        let m = leak(
            SimMachine::kvm_config()
                .with_lapic(LapicConfig::kvm())
                .build(),
        );
        let (c, _mem) = clock_with(m, |p| p);
        assert_eq!(c.report().selected_id(), Some(clockhal::SourceId::Kvmclock));
        let tsc_hz = m.tsc_state().hz();
        let dev = LapicTscDeadline::new(
            m,
            ApicAccess::detect(m, None).unwrap(),
            0xEF,
            Frequency::from_hz(tsc_hz).unwrap(),
        )
        .unwrap();
        let t = c.timer(&dev).unwrap();
        let deadline = c.now() + Duration::from_millis(1);
        t.arm(deadline).unwrap();
        // The host moves kvmclock 20 µs ahead: the old TSC target is now
        // 20 µs after the deadline on the clock's timeline.
        m.with_kvm(|k, ctx| {
            k.set_system_time_skew(Some(0), 20_000);
            k.update_all(ctx);
        });
        match fix {
            Fix::Nothing => {}
            Fix::Rearm => t.rearm().unwrap(),
            Fix::WatchdogTick => {
                assert_eq!(t.check_overdue(), None);
                assert_eq!(t.stats().remapped, 1, "the moved map was noticed");
            }
        }
        let (at, _) = run(
            m,
            &c,
            &t,
            deadline,
            || m.lapic_next_fire_ns(0),
            || m.lapic_take_interrupt(0).is_some(),
        );
        at.as_nanos() - deadline.as_nanos()
    };
    let stale = late_by(Fix::Nothing);
    assert!(stale >= 15_000, "stale map: late by {stale} ns");
    for fix in [Fix::Rearm, Fix::WatchdogTick] {
        let fresh = late_by(fix);
        assert!(
            fresh < 5_000,
            "converted through the new map: late by {fresh} ns"
        );
    }
}

#[test]
fn hyperv_stimer_ranks_first_under_hyperv() {
    let m = SimMachine::hyperv_config()
        .with_hyperv(HypervConfig {
            synthetic_timers: true,
            ..Default::default()
        })
        .with_lapic(LapicConfig::kvm())
        .build();
    let c = clockhal::probe(&m, Platform::new()).into_clock().unwrap();
    let stimer = HypervStimer::new(&m, 0xEC).unwrap();
    let access = ApicAccess::detect(&m, None).unwrap();
    let lapic_rate = clockhal::lapic::stated_rate(&m).unwrap().frequency;
    let oneshot = LapicOneShot::new(&m, access, 0xEF, lapic_rate, 1).unwrap();
    let devs: [&dyn TimerDevice; 2] = [&oneshot, &stimer];
    let choice = c.select_timer(&devs);
    assert_eq!(
        choice.selected().unwrap().descriptor().name,
        "hyperv-stimer0"
    );
    let t = c.timer(choice.selected().unwrap()).unwrap();
    let deadline = c.now() + Duration::from_micros(300);
    t.arm(deadline).unwrap();
    run(
        &m,
        &c,
        &t,
        deadline,
        || m.stimer_next_fire_ns(0),
        || m.stimer_take_interrupt(0) == Some(0xEC),
    );
}

#[test]
fn selection_on_kvm_like_and_tcg_like_lapics() {
    let m = machine(LapicConfig::kvm());
    let c = clock(&m);
    let tscd = LapicTscDeadline::new(
        &m,
        ApicAccess::detect(&m, None).unwrap(),
        0xEF,
        Frequency::from_hz(TSC_HZ).unwrap(),
    )
    .unwrap();
    let hpet = HpetComparator::new(&m, m.hpet_region().unwrap(), 0, HpetRoute::Auto).unwrap();
    let devs: [&dyn TimerDevice; 2] = [&hpet, &tscd];
    let choice = c.select_timer(&devs);
    assert_eq!(
        choice.selected().unwrap().descriptor().name,
        "lapic-tsc-deadline"
    );
    assert_eq!(
        choice.to_string(),
        "lapic-tsc-deadline(150, selected) hpet-comparator(50)"
    );
}

#[test]
fn a_lapic_that_drops_every_arm_fails_over_to_the_hpet() {
    let m = machine(LapicConfig::tcg());
    let c = clock(&m);
    let access = ApicAccess::detect(&m, m.lapic_region()).unwrap();
    let lapic = LapicOneShot::new(
        &m,
        access,
        0xEF,
        Frequency::from_hz(1_000_000_000).unwrap(),
        1,
    )
    .unwrap();
    let hpet = HpetComparator::new(&m, m.hpet_region().unwrap(), 0, HpetRoute::Auto).unwrap();
    let devs: [&dyn TimerDevice; 2] = [&hpet, &lapic];
    let choice = c.select_timer(&devs);
    let t = c
        .timer_from(&choice)
        .unwrap()
        .with_overdue_bound(Duration::from_micros(500));
    assert_eq!(t.descriptor().name, "lapic-oneshot");
    m.with_lapic(|l, _| l.drop_next_arms(u32::MAX));
    let deadline = c.now() + Duration::from_micros(200);
    t.arm(deadline).unwrap();
    m.advance(1_000_000);
    let first = t.check_overdue().expect("overdue");
    assert_eq!(first.switched_to, None, "one strike");
    m.advance(1_000_000);
    let second = t.check_overdue().expect("still overdue");
    assert_eq!(second.switched_to, Some("hpet-comparator"));
    second.reprogrammed.unwrap();
    assert_eq!(t.descriptor().name, "hpet-comparator");
    assert_eq!(t.stats().failovers, 1);
    // The HPET delivers it (late, as it must be after two checks).
    let (at, _) = run(
        &m,
        &c,
        &t,
        deadline,
        || m.hpet_next_fire_ns(0),
        || m.hpet_take_interrupt(0).is_some(),
    );
    assert!(at >= deadline);
    // A single-device timer has nowhere to go.
    let alone = c
        .timer(&lapic)
        .unwrap()
        .with_overdue_bound(Duration::from_micros(500));
    alone.arm(c.now() + Duration::from_micros(200)).unwrap();
    for _ in 0..3 {
        m.advance(1_000_000);
        assert_eq!(alone.check_overdue().unwrap().switched_to, None);
    }
}

#[test]
fn pit_channel0_is_the_last_resort() {
    use clockhal_pit::channel0::PitChannel0;
    use clockhal_x86::pit::Channel0Grant;
    let m = machine(LapicConfig::tcg());
    let c = clock(&m);
    let pit = PitChannel0::new(&m, Channel0Grant::simulated());
    let hpet = HpetComparator::new(&m, m.hpet_region().unwrap(), 0, HpetRoute::Auto).unwrap();
    let devs: [&dyn TimerDevice; 2] = [&pit, &hpet];
    assert_eq!(
        c.select_timer(&devs).to_string(),
        "hpet-comparator(50, selected) pit-ch0(10)"
    );
    // Alone it still works: 100 ms in two 54.9 ms pieces.
    let t = c.timer(&pit).unwrap();
    let deadline = c.now() + Duration::from_millis(100);
    t.arm(deadline).unwrap();
    let (_, irqs) = run(
        &m,
        &c,
        &t,
        deadline,
        || m.pit_ch0_next_fire_ns(),
        || m.pit_ch0_take_interrupt(),
    );
    assert_eq!(irqs, 2);
}

#[test]
fn lapic_rate_calibrated_against_the_clock_where_nothing_states_it() {
    use clockhal_x86::timer_regs::{apic_timer_read, apic_timer_write, ApicTimerReg};
    // The path where nothing states the rate (QEMU TCG): measure the
    // current count against the clock (Clock::calibrate_lapic), at the
    // OS's divide, and hand both to the device.
    let m = machine(LapicConfig {
        timer_hz: 1_000_000_000,
        ..LapicConfig::tcg()
    });
    let c = clock(&m);
    let access = ApicAccess::detect(&m, m.lapic_region()).unwrap();
    // The OS's calibration set-up: divide 16 (0b0011), LVT masked.
    apic_timer_write(&m, access, ApicTimerReg::DivideConfig, 0b0011);
    apic_timer_write(&m, access, ApicTimerReg::LvtTimer, 1 << 16);
    let rate = c
        .calibrate_lapic(
            |count| apic_timer_write(&m, access, ApicTimerReg::InitialCount, count),
            || apic_timer_read(&m, access, ApicTimerReg::CurrentCount),
            Duration::from_millis(2),
        )
        .unwrap();
    assert!(
        rate.frequency.hz_rounded().abs_diff(62_500_000) < 62_500,
        "{rate}"
    );
    let dev = LapicOneShot::new(&m, access, 0xEF, rate.frequency, 16).unwrap();
    let t = c.timer(&dev).unwrap();
    for us in [20u64, 700, 5_000] {
        let deadline = c.now() + Duration::from_micros(us);
        t.arm(deadline).unwrap();
        run(
            &m,
            &c,
            &t,
            deadline,
            || m.lapic_next_fire_ns(0),
            || m.lapic_take_interrupt(0).is_some(),
        );
    }
}
