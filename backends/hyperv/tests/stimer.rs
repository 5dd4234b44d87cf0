//! Hyper-V STIMER0 (direct mode) on the simulated partition.

use clockhal_core::timer::{plan_piece, Expiry, OneShot, TimerDevice, TimerError};
use clockhal_hyperv::stimer::{HypervStimer, StimerError};
use clockhal_sim::{HypervConfig, SimConfig, SimMachine};
use clockhal_x86::{Hardware, Msr};

fn machine(stimers: bool) -> SimMachine {
    SimConfig::cpu(2_000_000_000)
        .with_hyperv(HypervConfig {
            synthetic_timers: stimers,
            ..Default::default()
        })
        .build()
}

#[test]
fn gated_on_cpuid() {
    assert_eq!(
        HypervStimer::new(&machine(false), 0xEC).unwrap_err(),
        StimerError::NoSyntheticTimers
    );
    assert_eq!(
        HypervStimer::new(&SimConfig::cpu(1_000_000_000).build(), 0xEC).unwrap_err(),
        StimerError::NotHyperv
    );
    assert_eq!(
        HypervStimer::new(&machine(true), 2).unwrap_err(),
        StimerError::BadVector(2)
    );
}

#[test]
fn fires_at_the_reference_time_at_its_vector() {
    let m = machine(true);
    let t = HypervStimer::new(&m, 0xEC).unwrap();
    let before_100ns = m.rdmsr(Msr::HV_TIME_REF_COUNT);
    t.program(1_000).unwrap(); // 100 µs
    let at = m.stimer_next_fire_ns(0).unwrap();
    assert!(at >= (before_100ns + 1_000) * 100, "early");
    assert_eq!(m.stimer_take_interrupt(0), None);
    m.advance(at - m.now_ns());
    assert_eq!(m.stimer_take_interrupt(0), Some(0xEC));
    assert_eq!(m.stimer_take_interrupt(0), None, "one-shot");
    // An expiry in the past fires at once.
    t.program_at(1).unwrap();
    assert_eq!(m.stimer_take_interrupt(0), Some(0xEC));
    // Cancel disables.
    t.program(1_000).unwrap();
    t.cancel();
    assert_eq!(m.stimer_next_fire_ns(0), None);
    assert_eq!(t.program(0), Err(TimerError::OutOfRange { ticks: 0 }));
}

#[test]
fn per_vcpu() {
    let m = SimConfig::cpu(2_000_000_000)
        .with_cpus(2, &[])
        .with_hyperv(HypervConfig {
            synthetic_timers: true,
            ..Default::default()
        })
        .build();
    let t = HypervStimer::new(&m, 0xEC).unwrap();
    m.on_cpu(1, || t.program(10).unwrap());
    assert_eq!(m.stimer_next_fire_ns(0), None);
    assert!(m.stimer_next_fire_ns(1).is_some());
}

#[test]
fn early_fire_is_rearmed() {
    let m = machine(true);
    m.with_hyperv(|h, _| h.set_stimer_early_ns(5_000));
    let t = HypervStimer::new(&m, 0xEC).unwrap();
    let d = t.descriptor();
    assert!(d.rating > 150, "above the LAPIC timers under Hyper-V");
    let deadline = m.now_ns() + 1_000_000;
    let state = OneShot::new();
    state.arm(deadline);
    let mut irqs = 0;
    loop {
        let rem = deadline.saturating_sub(m.now_ns());
        let ticks = plan_piece(rem, t.rate().unwrap(), 1, d.max_delta_ticks).unwrap();
        t.program(ticks).unwrap();
        let at = m.stimer_next_fire_ns(0).unwrap();
        m.advance(at.saturating_sub(m.now_ns()));
        assert!(m.stimer_take_interrupt(0).is_some());
        irqs += 1;
        match state.on_interrupt(m.now_ns()) {
            Expiry::Fired { .. } => break,
            Expiry::Rearm { .. } => assert!(irqs < 10),
            Expiry::Spurious => panic!("lost"),
        }
    }
    assert!(m.now_ns() >= deadline);
    assert!(irqs >= 2);
}
