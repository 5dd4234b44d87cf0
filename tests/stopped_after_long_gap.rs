//! README "A watchdog that finds the liar": "A reference that stops or
//! jumps is itself detected and replaced". A PM timer that stops during a
//! tick gap longer than half its wrap gives the rounds no count (its
//! extension holds it: "a gap nothing placed"), like an honest one whose
//! wraps could not be placed; an honest one counts again within a wrap,
//! so one that gave no count for longer than a wrap is demoted as
//! stopped (before, it sat the rounds out for ever; as the reference,
//! every round was `Skipped` and the TSC never judged again).
#![cfg(all(feature = "tsc", feature = "hpet", feature = "acpi-pm"))]

use clockhal::{SourceId, Verdict};
use clockhal_sim::{HpetConfig, SimConfig};

mod adversarial;

use adversarial::{clock, leak, ms};

const PM_WRAP_NS: u64 = (1u64 << 24) * 1_000_000_000 / 3_579_545; // 4.687 s

/// One tick gap of two PM wraps (9.4 s, which the TSC places within an
/// eighth of a wrap), 0.7 of a wrap into which the PM timer stops for good.
fn gap_with_stop(m: &clockhal_sim::SimMachine) {
    m.advance(PM_WRAP_NS * 7 / 10);
    m.with_pm_timer(|p, ctx| p.set_stopped(ctx, true));
    m.advance(PM_WRAP_NS * 2 - PM_WRAP_NS * 7 / 10);
}

fn stuck(hpet: bool, invariant: bool) {
    stuck_with(hpet, invariant, gap_with_stop)
}

/// One tick gap of 700 s (too long to place a PM wrap: State::unplaced),
/// 100.3 wraps into which the PM timer stops for good: its extension
/// then reads `current` and never moves on from the value it had when
/// it was put out, so it stays out for good.
fn long_gap_with_stop(m: &clockhal_sim::SimMachine) {
    m.advance(PM_WRAP_NS * 1003 / 10);
    m.with_pm_timer(|p, ctx| p.set_stopped(ctx, true));
    m.advance(ms(700_000) - PM_WRAP_NS * 1003 / 10);
}

fn stuck_with(hpet: bool, invariant: bool, gap: fn(&clockhal_sim::SimMachine)) {
    let hz = 2_000_000_000;
    let mut cfg = SimConfig::cpu(hz)
        .with_invariant_tsc(invariant)
        .with_pm_timer(clockhal_sim::PmTimerConfig::default());
    if hpet {
        cfg = cfg.with_hpet(HpetConfig::qemu());
    }
    let m = leak(cfg.build());
    let (c, _) = clock(m);
    assert_eq!(c.source_id(), SourceId::Tsc, "{}", c.report().table());
    for _ in 0..8 {
        m.advance(ms(250));
        c.watchdog_tick();
    }
    gap(m);
    let mut evs = vec![];
    // A minute of regular ticks afterwards.
    for _ in 0..240 {
        evs.push(c.watchdog_tick());
        m.advance(ms(250));
        c.now();
    }
    let pm = c.report().get(SourceId::AcpiPm).map(|x| x.verdict);
    assert!(
        matches!(pm, Some(Verdict::Demoted { .. })),
        "hpet {hpet} invariant {invariant}: the stopped PM timer is still {pm:?} after 60 s of ticks; last event {:?}\n{}",
        evs.last(),
        c.report().table()
    );
}

/// Control: the PM timer stops without a gap (demoted at once).
#[test]
fn control_pm_stopped_between_ticks_is_demoted() {
    let m = leak(
        SimConfig::cpu(2_000_000_000)
            .with_invariant_tsc(true)
            .with_pm_timer(clockhal_sim::PmTimerConfig::default())
            .build(),
    );
    let (c, _) = clock(m);
    for _ in 0..8 {
        m.advance(ms(250));
        c.watchdog_tick();
    }
    m.with_pm_timer(|p, ctx| p.set_stopped(ctx, true));
    for _ in 0..40 {
        m.advance(ms(250));
        c.watchdog_tick();
    }
    let pm = c.report().get(SourceId::AcpiPm).map(|x| x.verdict);
    assert!(matches!(pm, Some(Verdict::Demoted { .. })), "{pm:?}");
}

/// The PM timer is the invariant TSC's only reference.
#[test]
fn pm_reference_stopped_in_a_9_s_gap_is_demoted() {
    stuck(false, true);
}

/// The HPET is the reference, the PM timer a third member.
#[test]
fn pm_member_stopped_in_a_9_s_gap_is_demoted() {
    stuck(true, true);
}

/// The unplaced rule of e7fdabd: out "until its count moves on".
#[test]
fn pm_reference_stopped_in_a_700_s_gap_is_demoted() {
    stuck_with(false, true, long_gap_with_stop);
}

#[test]
fn pm_member_stopped_in_a_700_s_gap_is_demoted() {
    stuck_with(true, true, long_gap_with_stop);
}
