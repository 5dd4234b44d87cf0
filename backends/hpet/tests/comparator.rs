//! The HPET comparator as a timer device on the simulated machine: routes,
//! 32/64-bit comparisons, the write-in-the-past race, dropped writes, a
//! fast counter, long deadlines in pieces.

use clockhal_core::timer::{plan_piece, Expiry, OneShot, TimerDevice, TimerError, TimerScope};
use clockhal_core::Policy;
use clockhal_hpet::comparator::{ComparatorError, HpetComparator, HpetRoute, MIN_MARGIN_TICKS};
use clockhal_hpet::Hpet;
use clockhal_sim::{HpetConfig, SimConfig, SimMachine};

fn machine(hpet: HpetConfig) -> SimMachine {
    let m = SimConfig::cpu(2_000_000_000).with_hpet(hpet).build();
    // Probing enables the main counter.
    Hpet::probe(&m, m.hpet_region().unwrap(), &Policy::new()).unwrap();
    m
}

fn comparator(m: &SimMachine) -> HpetComparator<&SimMachine> {
    HpetComparator::new(m, m.hpet_region().unwrap(), 0, HpetRoute::Auto).unwrap()
}

#[test]
fn routes_follow_the_route_cap() {
    let m = machine(HpetConfig::qemu());
    assert_eq!(comparator(&m).gsi(), 2);
    let r = m.hpet_region().unwrap();
    assert_eq!(
        HpetComparator::new(&m, r, 1, HpetRoute::Gsi(8))
            .unwrap()
            .gsi(),
        8
    );
    assert_eq!(
        HpetComparator::new(&m, r, 0, HpetRoute::Gsi(3)).unwrap_err(),
        ComparatorError::RouteNotAllowed {
            gsi: Some(3),
            cap: 0x00FF_0104
        }
    );
    assert_eq!(
        HpetComparator::new(&m, r, 3, HpetRoute::Auto).unwrap_err(),
        ComparatorError::NoSuchTimer { index: 3, count: 3 }
    );
    m.with_hpet(|h, _| h.set_route_cap(0));
    assert_eq!(
        HpetComparator::new(&m, r, 0, HpetRoute::Auto).unwrap_err(),
        ComparatorError::RouteNotAllowed { gsi: None, cap: 0 }
    );
}

#[test]
fn fires_at_or_after_the_count_on_its_gsi() {
    for cfg in [
        HpetConfig::qemu(),
        HpetConfig::classic(),
        HpetConfig::qemu().narrow(),
    ] {
        let period = cfg.period_fs as u64;
        let m = machine(cfg);
        let t = comparator(&m);
        let d = t.descriptor();
        assert_eq!(d.scope, TimerScope::Global);
        let ticks = 100_000;
        let before = m.now_ns();
        t.program(ticks).unwrap();
        let at = m.hpet_next_fire_ns(0).unwrap();
        // The counter was read after `before`: the fire is at least
        // `ticks` periods after it.
        assert!(at >= before + ticks * period / 1_000_000, "early");
        assert_eq!(m.hpet_take_interrupt(0), None, "not yet");
        m.advance(at - m.now_ns());
        assert_eq!(m.hpet_take_interrupt(0), Some(2));
        t.cancel();
        assert_eq!(m.hpet_next_fire_ns(0), None, "cancel disables");
    }
}

#[test]
fn comparison_width_bounds_the_delta() {
    let (mw, mn) = (
        machine(HpetConfig::qemu()),
        machine(HpetConfig::qemu().narrow()),
    );
    let wide = comparator(&mw);
    assert!(wide.comparator_64bit());
    assert_eq!(wide.descriptor().max_delta_ticks, i64::MAX as u64);
    let narrow = comparator(&mn);
    assert!(!narrow.comparator_64bit());
    let max = narrow.descriptor().max_delta_ticks;
    assert_eq!(max, i32::MAX as u64);
    narrow.program(max).unwrap();
    assert_eq!(
        narrow.program(max + 1),
        Err(TimerError::OutOfRange { ticks: max + 1 })
    );
    assert_eq!(
        narrow.program(MIN_MARGIN_TICKS),
        Err(TimerError::OutOfRange {
            ticks: MIN_MARGIN_TICKS
        })
    );
}

#[test]
fn write_in_the_past_is_reported_not_lost() {
    // Every simulated MMIO access costs 1 µs = 100 ticks at 100 MHz: by
    // the time a 256-tick comparator is written and enabled, the counter
    // has passed it.
    let m = machine(HpetConfig::qemu().narrow());
    let t = comparator(&m);
    assert_eq!(t.program(256), Err(TimerError::InPast));
    // On the hardware it would fire only after the 32-bit counter wraps
    // (~43 s): that is why the caller must be told.
    let at = m.hpet_next_fire_ns(0).unwrap();
    assert!(at - m.now_ns() > 40_000_000_000, "{}", at - m.now_ns());
    // With room for the writes it is fine.
    t.program(1_000).unwrap();
    assert!(m.hpet_next_fire_ns(0).unwrap() - m.now_ns() < 10_000);
}

#[test]
fn dropped_comparator_write_fires_at_the_old_value() {
    let m = machine(HpetConfig::qemu());
    let t = comparator(&m);
    t.program(1_000_000).unwrap();
    let first = m.hpet_next_fire_ns(0).unwrap();
    m.with_hpet(|h, _| h.drop_comparator_writes(1));
    // The re-read check cannot see a dropped write (the old comparator is
    // still ahead): the deadline state must not trust the device.
    t.program(100_000_000).unwrap();
    assert_eq!(m.hpet_next_fire_ns(0), Some(first));
}

/// Drives a deadline (machine ns, which the HPET counts from its
/// enable) through a comparator and OneShot, with Linux-style handling of
/// `InPast` (due now: the caller checks the clock). Returns (fired-at ns,
/// interrupts taken).
fn drive(m: &SimMachine, t: &HpetComparator<&SimMachine>, deadline: u64) -> (u64, u32) {
    let state = OneShot::new();
    state.arm(deadline);
    let d = t.descriptor();
    let rate = t.rate().unwrap();
    for irq in 1..100 {
        let rem = deadline.saturating_sub(m.now_ns());
        let ticks = plan_piece(rem, rate, d.min_delta_ticks, d.max_delta_ticks).unwrap();
        match t.program(ticks) {
            Ok(()) => {
                let at = m.hpet_next_fire_ns(0).unwrap();
                m.advance(at - m.now_ns());
                assert!(m.hpet_take_interrupt(0).is_some());
            }
            Err(TimerError::InPast) => {} // due now: go straight to the check
            Err(e) => panic!("{e}"),
        }
        match state.on_interrupt(m.now_ns()) {
            Expiry::Fired { .. } => return (m.now_ns(), irq),
            Expiry::Rearm { .. } => {}
            Expiry::Spurious => panic!("lost"),
        }
    }
    panic!("never fired");
}

#[test]
fn long_deadline_on_a_32_bit_comparator() {
    // 100 MHz, 2^31 - 1 ticks ≈ 21.5 s per piece: 50 s takes 3.
    let m = machine(HpetConfig::qemu().narrow());
    let t = comparator(&m);
    let deadline = m.now_ns() + 50_000_000_000;
    let (at, irqs) = drive(&m, &t, deadline);
    assert!(at >= deadline);
    assert_eq!(irqs, 3);
}

#[test]
fn fast_counter_fires_early_and_is_rearmed() {
    let m = machine(HpetConfig::qemu());
    // 2000 ppm fast: a 10 ms deadline comes 20 µs early on the HPET alone.
    m.with_hpet(|h, ctx| h.set_rate_error_ppm(ctx, 2_000));
    let t = comparator(&m);
    let deadline = m.now_ns() + 10_000_000;
    let (at, irqs) = drive(&m, &t, deadline);
    assert!(at >= deadline, "early by {}", deadline - at);
    assert!(irqs >= 2);
}
