//! Timers never early in true time and late by at most microseconds
//! (red-team round 25's hypotheses that held, kept as regression checks):
//! - across S3 (TSC restarted, HPET reset), following the module's
//!   lifecycle table (per-CPU init, then `rearm`);
//! - a TSC-deadline after a host TSC step back with a kvmclock update,
//!   found by the overdue check's remap.
#![cfg(all(feature = "tsc", feature = "hpet", feature = "kvmclock"))]

mod adversarial;

use adversarial::leak;
use clockhal::timer::{Timer, TimerDevice, TimerEvent};
use clockhal::{Clock, Duration, Frequency, Instant, Platform, SourceId};
use clockhal_hpet::comparator::{HpetComparator, HpetRoute};
use clockhal_lapic_timer::LapicTscDeadline;
use clockhal_sim::{LapicConfig, SimMachine};
use clockhal_x86::timer_regs::ApicAccess;
use clockhal_x86::Hardware as _;

fn s3(m: &SimMachine, secs: u64) {
    m.advance(secs * 1_000_000_000);
    let t = m.tsc_of(0);
    m.step_tsc(Some(0), (t as i64).wrapping_neg().wrapping_add(1_000_000));
    let region = m.hpet_region().unwrap();
    m.mmio_write64(region, 0x10, 0);
    m.mmio_write64(region, 0xF0, 0);
}

fn run<H: clockhal::x86::Hardware + Clone>(
    m: &SimMachine,
    c: &Clock<H>,
    t: &Timer<'_, H>,
    deadline: Instant,
    next: impl Fn() -> Option<u64>,
    take: impl Fn(),
) -> Result<Instant, String> {
    for _ in 0..100 {
        let at = next().ok_or("nothing armed on the device")?;
        m.advance(at.saturating_sub(m.now_ns()));
        take();
        match t.on_interrupt() {
            TimerEvent::Fired { deadline: d, .. } => {
                assert_eq!(d, deadline);
                return Ok(c.now());
            }
            TimerEvent::Rearmed { programmed, .. } => programmed.map_err(|e| format!("{e}"))?,
            TimerEvent::Spurious => return Err("spurious".into()),
        }
    }
    Err("never fired".into())
}

fn clock(m: &'static SimMachine) -> Clock<&'static SimMachine> {
    clockhal::probe(m, Platform::new().hpet_region(m.hpet_region().unwrap()))
        .into_clock()
        .unwrap()
}

#[test]
fn a_tsc_deadline_across_s3() {
    let m = leak(
        SimMachine::bare_metal_config()
            .with_lapic(LapicConfig::kvm())
            .build(),
    );
    let c = clock(m);
    for _ in 0..8 {
        m.advance(250_000_000);
        c.watchdog_tick();
    }
    assert_eq!(c.source_id(), SourceId::Tsc);
    let dev = LapicTscDeadline::new(
        m,
        ApicAccess::detect(m, None).unwrap(),
        0xEF,
        Frequency::from_hz(m.tsc_state().hz()).unwrap(),
    )
    .unwrap();
    let t = c.timer(&dev).unwrap();
    let deadline = c.now() + Duration::from_millis(5);
    t.arm(deadline).unwrap();
    s3(m, 30);
    c.resume().unwrap();
    dev.init_this_cpu();
    t.rearm().unwrap();
    let left = deadline.as_nanos().saturating_sub(c.now().as_nanos());
    let true0 = m.now_ns();
    let at = run(
        m,
        &c,
        &t,
        deadline,
        || m.lapic_next_fire_ns(0),
        || {
            m.lapic_take_interrupt(0);
        },
    )
    .unwrap();
    let true_elapsed = m.now_ns() - true0;
    assert!(
        true_elapsed + 1_000 >= left,
        "{true_elapsed} ns of true time for {left} left"
    );
    let late = at.as_nanos() - deadline.as_nanos();
    assert!(late < 20_000, "late by {late} ns");
    for _ in 0..8 {
        m.advance(250_000_000);
        c.watchdog_tick();
    }
    let deadline = c.now() + Duration::from_millis(2);
    t.arm(deadline).unwrap();
    let at = run(
        m,
        &c,
        &t,
        deadline,
        || m.lapic_next_fire_ns(0),
        || {
            m.lapic_take_interrupt(0);
        },
    )
    .unwrap();
    assert!(at.as_nanos() - deadline.as_nanos() < 20_000);
}

#[test]
fn an_hpet_comparator_deadline_across_s3() {
    let m = leak(SimMachine::bare_metal_config().build());
    let c = clock(m);
    let dev = HpetComparator::new(m, m.hpet_region().unwrap(), 0, HpetRoute::Auto).unwrap();
    let t = c.timer(&dev).unwrap();
    let deadline = c.now() + Duration::from_millis(5);
    t.arm(deadline).unwrap();
    s3(m, 30);
    c.resume().unwrap();
    t.rearm().unwrap();
    let at = run(
        m,
        &c,
        &t,
        deadline,
        || m.hpet_next_fire_ns(0),
        || {
            m.hpet_take_interrupt(0);
        },
    )
    .unwrap();
    let late = at.as_nanos() - deadline.as_nanos();
    assert!(late < 20_000, "late by {late} ns");
    let _ = dev.counter();
}

#[test]
fn a_tsc_deadline_after_a_host_tsc_step_back_on_kvmclock() {
    use adversarial::clock_with;
    for step_ms in [-2i64, 2] {
        let m = leak(
            SimMachine::kvm_config()
                .with_lapic(LapicConfig::kvm())
                .build(),
        );
        let (c, _mem) = clock_with(m, |p| p);
        assert_eq!(c.source_id(), SourceId::Kvmclock);
        let hz = m.tsc_state().hz();
        let dev = LapicTscDeadline::new(
            m,
            ApicAccess::detect(m, None).unwrap(),
            0xEF,
            Frequency::from_hz(hz).unwrap(),
        )
        .unwrap();
        let t = c.timer(&dev).unwrap();
        let deadline = c.now() + Duration::from_millis(5);
        t.arm(deadline).unwrap();
        m.advance(500_000);
        // The host moves the TSC (a migration) and rewrites the areas.
        m.step_tsc(None, step_ms * (hz as i64 / 1_000));
        m.with_kvm(|k, ctx| k.update_all(ctx));
        // A watchdog tick before the deadline.
        let _ = t.check_overdue();
        let true0 = m.now_ns();
        let left = deadline.as_nanos() - c.now().as_nanos();
        let at = run(
            m,
            &c,
            &t,
            deadline,
            || m.lapic_next_fire_ns(0),
            || {
                m.lapic_take_interrupt(0);
            },
        )
        .unwrap();
        let late = at.as_nanos() - deadline.as_nanos();
        assert!(late < 20_000, "step {step_ms} ms: late by {late} ns");
        assert!(
            m.now_ns() - true0 + 1_000 >= left,
            "step {step_ms} ms: early in true time"
        );
    }
}
