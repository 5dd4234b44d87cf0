//! A PM timer that really stopped is demoted, also where ticks come
//! about a whole wrap apart and with an HPET beside it: a span is never
//! placed on a raw count that has not moved (before, a frozen count was
//! advanced by whole wraps every tick and never judged stopped).
#![cfg(all(feature = "tsc", feature = "hpet", feature = "acpi-pm"))]

use clockhal::{SourceId, Verdict};
use clockhal_sim::{HpetConfig, SimConfig};

mod adversarial;

use adversarial::{clock, leak, ms};

const PM_WRAP_NS: u64 = (1u64 << 24) * 1_000_000_000 / 3_579_545;

/// Ticks after the gap until the PM timer is demoted (None: not within `n`).
fn run(hpet: bool, stop_at_ns: u64, gap_ns: u64, tick: u64, n: usize) -> Option<usize> {
    let mut cfg = SimConfig::cpu(2_000_000_000)
        .with_invariant_tsc(true)
        .with_pm_timer(clockhal_sim::PmTimerConfig::default());
    if hpet {
        cfg = cfg.with_hpet(HpetConfig::qemu());
    }
    let m = leak(cfg.build());
    let (c, _) = clock(m);
    for _ in 0..8 {
        m.advance(ms(250));
        c.watchdog_tick();
    }
    m.advance(stop_at_ns);
    m.with_pm_timer(|p, ctx| p.set_stopped(ctx, true));
    m.advance(gap_ns - stop_at_ns);
    for i in 0..n {
        c.watchdog_tick();
        let pm = c.report().get(SourceId::AcpiPm).map(|x| x.verdict);
        if matches!(pm, Some(Verdict::Demoted { .. })) {
            return Some(i);
        }
        m.advance(tick);
        c.now();
    }
    None
}

#[test]
fn stopped_in_700_s_gap_demoted_within_30_s_of_250_ms_ticks() {
    let mut fails = vec![];
    for hpet in [false, true] {
        for k in 0..16u64 {
            let stop = PM_WRAP_NS * 100 + PM_WRAP_NS * k / 16;
            if run(hpet, stop, ms(700_000), ms(250), 120).is_none() {
                fails.push((hpet, k));
            }
        }
    }
    assert!(
        fails.is_empty(),
        "not demoted within 30 s (hpet, stop phase k/16): {fails:?}"
    );
}

#[test]
fn stopped_in_700_s_gap_demoted_within_12_sparse_ticks() {
    let mut fails = vec![];
    for hpet in [false, true] {
        for tick in [1_000u64, 2_000, 3_000, 3_500, 5_000, 9_400] {
            for k in 0..8u64 {
                let stop = PM_WRAP_NS * 100 + PM_WRAP_NS * k / 8;
                if run(hpet, stop, ms(700_000), ms(tick), 13).is_none() {
                    fails.push((hpet, tick, k));
                }
            }
        }
    }
    assert!(
        fails.is_empty(),
        "not demoted within 12 ticks (hpet, tick ms, phase k/8): {fails:?}"
    );
}

/// A stop in a gap that is placed (9.4 s) but then ticks 3.5 s apart.
#[test]
fn stopped_in_placeable_gap_then_sparse_ticks() {
    let mut fails = vec![];
    for k in 0..8u64 {
        let stop = PM_WRAP_NS * k / 4;
        if run(false, stop, ms(9_400), ms(3_500), 13).is_none() {
            fails.push(k);
        }
    }
    assert!(fails.is_empty(), "{fails:?}");
}

/// README "A watchdog that finds the liar": "With three or more sources it
/// blames by majority of independent counter domains ... A reference that
/// stops or jumps is itself detected". TSC + HPET + PM timer, ticks 5 s
/// apart (the TSC places each gap's PM wraps): the PM timer stops for good
/// between two ticks, no long gap at all. 100 ticks (500 s) later it is
/// still not demoted (with the PM timer as the reference, no HPET, it is
/// demoted at the next tick).
#[test]
fn stopped_pm_member_with_5_s_ticks_is_demoted() {
    let mut fails = vec![];
    for (tick, k) in [(5_000u64, 0u64), (5_000, 1), (9_400, 0), (9_400, 2)] {
        if run(true, ms(tick) * k / 4, ms(tick), ms(tick), 100).is_none() {
            fails.push((tick, k));
        }
    }
    assert!(
        fails.is_empty(),
        "stopped PM timer never demoted (tick ms, stop at k/4 of the gap): {fails:?}"
    );
}
