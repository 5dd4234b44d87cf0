//! The jump check's independent counter can fail too (issue 26 §2: a
//! value that must never be trusted). A kernel that never ticks the
//! watchdog keeps an honest TSC; if the HPET it anchors on stops, a
//! reading that claims more than `max_jump` finds a reference that
//! counted nothing. A counter that did not move at all in seconds is
//! stopped, not a witness that no time passed: the honest source is
//! not demoted for it, the clock does not move onto the stopped counter,
//! and no time is lost; nor for one that counts back (a reset).
mod adversarial;

use adversarial::*;
use clockhal::tsc::SyncStatus;
use clockhal::SourceId;
use clockhal_sim::{HpetConfig, PmTimerConfig, SimConfig, SimMachine};

/// A 2 GHz TSC on two CPUs (invariant or supervised) with a 64-bit HPET
/// (the jump check's anchor) and a PM timer, the TSC current after 8
/// ticks.
fn tsc_with_devices(invariant: bool) -> (&'static SimMachine, SimClock) {
    let m = leak(SimMachine::new(
        SimConfig::cpu(2_000_000_000)
            .with_cpus(2, &[0, 0])
            .with_invariant_tsc(invariant)
            .with_hpet(HpetConfig::qemu())
            .with_pm_timer(PmTimerConfig::default()),
    ));
    let (c, _) = clock_with(m, |p| p.tsc_sync(SyncStatus::Synchronized));
    for _ in 0..8 {
        m.advance(ms(250));
        assert!(!bad(&c.watchdog_tick()), "{}", c.report().table());
    }
    assert_eq!(c.source_id(), SourceId::Tsc, "{}", c.report().table());
    (m, c)
}

/// 30 s without a watchdog tick while reader threads on both CPUs check
/// every guarantee; how far `now()` moved, and the machine's time.
fn no_ticks_for_30_s(m: &'static SimMachine, c: &SimClock) -> (u64, u64) {
    race(c, m, &[0, 1], true, |readers| {
        let (n0, t0) = (m.now_ns(), c.now().as_nanos());
        for _ in 0..60 {
            readers.wait(20);
            m.advance(ms(500));
        }
        // A read while another CPU checks a jump holds (try-lock): let
        // the readers pass this step's check first.
        readers.wait(20);
        (c.now().as_nanos() - t0, m.now_ns() - n0)
    })
}

#[test]
fn a_stopped_anchor_convicts_no_honest_tsc() {
    let (m, c) = tsc_with_devices(true);
    m.with_hpet(|h, ctx| h.set_stopped(ctx, true));
    // No ticks from here: a kernel whose timer interrupt never came.
    let (moved, truth) = no_ticks_for_30_s(m, &c);
    assert_eq!(c.source_id(), SourceId::Tsc, "{}", c.report().table());
    assert!(
        c.report().get(SourceId::Tsc).unwrap().is_eligible(),
        "{}",
        c.report().table()
    );
    assert!(
        near(moved, truth, ms(10)),
        "now() moved {moved} ns over {truth} ns\n{}",
        c.report().table()
    );
}

#[test]
fn a_supervised_tsc_without_ticks_does_not_move_onto_a_stopped_anchor() {
    // Nothing verifies a supervised TSC without ticks: it goes, as its
    // docs say, but to a counter that still counts, and time goes on.
    let (m, c) = tsc_with_devices(false);
    assert!(c.supervised(), "{}", c.report().table());
    m.with_hpet(|h, ctx| h.set_stopped(ctx, true));
    let (moved, truth) = no_ticks_for_30_s(m, &c);
    let report = c.report();
    assert_eq!(c.source_id(), SourceId::AcpiPm, "{}", report.table());
    assert!(
        !report.get(SourceId::Hpet).unwrap().is_eligible(),
        "{}",
        report.table()
    );
    assert!(
        near(moved, truth, ms(1_000)),
        "now() moved {moved} ns over {truth} ns\n{}",
        report.table()
    );
}

#[test]
fn an_anchor_that_counts_back_convicts_no_honest_tsc() {
    // An HPET reset (or stepped back by garbage) behind the clock's back.
    // Its reads hold until it passes its old count (never behind it): the
    // anchor sees a pause, within the jump check's tolerance, not time
    // that did not pass.
    let (m, c) = tsc_with_devices(true);
    m.with_hpet(|h, ctx| {
        let back = h.counter(ctx) / 2;
        h.jump(ctx, back.wrapping_neg())
    });
    let (moved, truth) = no_ticks_for_30_s(m, &c);
    let report = c.report();
    assert_eq!(c.source_id(), SourceId::Tsc, "{}", report.table());
    assert!(
        report.get(SourceId::Tsc).unwrap().is_eligible(),
        "{}",
        report.table()
    );
    assert!(
        near(moved, truth, ms(10)),
        "now() moved {moved} ns over {truth} ns\n{}",
        report.table()
    );
}
