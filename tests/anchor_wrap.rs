//! The jump check's anchor is a 64-bit counter, and a 64-bit counter can
//! cross 2^64: an HPET that firmware or a long-lived host left near the
//! top (issue 26 §2: a value that must never be trusted). Crossing zero is
//! the counter moving forward by the wrapping difference, not a count
//! back: a kernel that never ticks keeps its honest TSC, time goes on at
//! the true rate, and no counter is convicted for the crossing.
mod adversarial;

use adversarial::*;
use clockhal::tsc::SyncStatus;
use clockhal::SourceId;
use clockhal_sim::{HpetConfig, PmTimerConfig, SimConfig, SimMachine};

/// QEMU's 100 MHz HPET.
const HPET_HZ: u64 = 100_000_000;

/// An invariant 2 GHz TSC on two CPUs, current after 8 ticks, with a
/// 64-bit HPET (the anchor) that reaches 2^64 about 10 s after power-on,
/// and a PM timer.
fn tsc_with_hpet_near_the_top() -> (&'static SimMachine, SimClock) {
    let m = leak(SimMachine::new(
        SimConfig::cpu(2_000_000_000)
            .with_cpus(2, &[0, 0])
            .with_invariant_tsc(true)
            .with_hpet(HpetConfig {
                initial_counter: 0u64.wrapping_sub(10 * HPET_HZ),
                ..HpetConfig::qemu()
            })
            .with_pm_timer(PmTimerConfig::default()),
    ));
    let (c, _) = clock_with(m, |p| p.tsc_sync(SyncStatus::Synchronized));
    for _ in 0..8 {
        m.advance(ms(250));
        assert!(!bad(&c.watchdog_tick()), "{}", c.report().table());
    }
    assert_eq!(c.source_id(), SourceId::Tsc, "{}", c.report().table());
    let left = m.with_hpet(|h, ctx| h.counter(ctx)).unwrap().wrapping_neg() / HPET_HZ;
    assert!((3..10).contains(&left), "HPET {left} s before 2^64");
    (m, c)
}

fn assert_honest(c: &SimClock, moved: u64, truth: u64) {
    let report = c.report();
    assert_eq!(c.source_id(), SourceId::Tsc, "{}", report.table());
    for id in [SourceId::Tsc, SourceId::Hpet] {
        assert!(
            report.get(id).unwrap().is_eligible(),
            "{id:?}\n{}",
            report.table()
        );
    }
    assert!(
        near(moved, truth, ms(10)),
        "now() moved {moved} ns over {truth} ns\n{}",
        report.table()
    );
}

#[test]
fn an_anchor_crossing_2_64_convicts_no_honest_tsc() {
    let (m, c) = tsc_with_hpet_near_the_top();
    // No ticks from here, while readers on both CPUs check every
    // guarantee and the HPET crosses 2^64.
    let (moved, truth) = race(&c, m, &[0, 1], true, |readers| {
        let (n0, t0) = (m.now_ns(), c.now().as_nanos());
        for _ in 0..60 {
            readers.wait(20);
            m.advance(ms(500));
        }
        readers.wait(20);
        (c.now().as_nanos() - t0, m.now_ns() - n0)
    });
    assert_honest(&c, moved, truth);
}

#[test]
fn an_anchor_crossing_2_64_does_not_freeze_an_honest_tsc_single_reader() {
    let (m, c) = tsc_with_hpet_near_the_top();
    let (n0, t0) = (m.now_ns(), c.now().as_nanos());
    let mut last = t0;
    for _ in 0..60 {
        m.advance(ms(500));
        let now = c.now().as_nanos();
        assert!(now >= last, "back: {last} -> {now}");
        // Every step is seen: no reading is held across the crossing.
        assert!(
            near(now - last, ms(500), ms(10)),
            "a 500 ms step read as {} ns\n{}",
            now - last,
            c.report().table()
        );
        last = now;
    }
    assert_honest(&c, last - t0, m.now_ns() - n0);
}

#[test]
fn a_hpet_crossing_2_64_is_judged_forward_by_the_watchdog() {
    // A kernel that ticks on time: the round that sees the HPET cross
    // zero measures a quarter second, like every other.
    let (m, c) = tsc_with_hpet_near_the_top();
    let (n0, t0) = (m.now_ns(), c.now().as_nanos());
    let events = bad_ticks(&c, m, 120, ms(250));
    assert!(events.is_empty(), "{events:?}\n{}", c.report().table());
    assert_honest(&c, c.now().as_nanos() - t0, m.now_ns() - n0);
}
