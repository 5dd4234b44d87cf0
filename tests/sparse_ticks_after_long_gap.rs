//! An honest PM timer after one tick gap too long to place, then ticks
//! 2.5-14 s apart (more than half its wrap, some near whole wraps): its
//! extension restarts from the raw count at the gap and each later span
//! is measured from there, so it is placed again and never demoted
//! (for a while it was held behind its pre-gap value, its phase barely
//! moving between ticks near whole wraps, and demoted as stopped).
#![cfg(all(feature = "tsc", feature = "hpet", feature = "acpi-pm"))]

use clockhal::{SourceId, Verdict};
use clockhal_sim::{HpetConfig, SimConfig};

mod adversarial;

use adversarial::{clock, leak, ms};

fn run(hpet: bool, first: u64, then: u64, n: usize) -> Result<(), String> {
    let mut cfg = SimConfig::cpu(2_000_000_000)
        .with_invariant_tsc(true)
        .with_pm_timer(clockhal_sim::PmTimerConfig::default());
    if hpet {
        cfg = cfg.with_hpet(HpetConfig::qemu());
    }
    let m = leak(cfg.build());
    let (c, _) = clock(m);
    assert_eq!(c.source_id(), SourceId::Tsc);
    for _ in 0..8 {
        m.advance(ms(250));
        c.watchdog_tick();
    }
    let mut evs = vec![];
    m.advance(first);
    evs.push(c.watchdog_tick());
    for _ in 0..n {
        m.advance(then);
        evs.push(c.watchdog_tick());
    }
    let pm = c.report().get(SourceId::AcpiPm).map(|x| x.verdict);
    if matches!(pm, Some(Verdict::Demoted { .. })) {
        return Err(format!(
            "hpet {hpet} first {} ms then {} ms x{n}: {pm:?}",
            first / 1_000_000,
            then / 1_000_000
        ));
    }
    Ok(())
}

#[test]
fn sweep() {
    let mut fails = vec![];
    let mut total = 0;
    for hpet in [false, true] {
        for k in 0..8u64 {
            let first = ms(700_000 + k * 600);
            for then in [
                2_500u64, 3_500, 4_000, 4_400, 4_600, 4_700, 4_800, 5_000, 9_400, 14_000, 20_000,
            ] {
                total += 1;
                if let Err(e) = run(hpet, first, ms(then), 12) {
                    fails.push(e);
                }
            }
        }
    }
    assert!(
        fails.is_empty(),
        "{} of {total} failures:\n{}",
        fails.len(),
        fails.join("\n")
    );
}

/// Minimal: one 700 s gap, then ticks 3.5 s apart (three quarters of the
/// PM timer's 4.69 s wrap; each gap placeable by the TSC), twelve of them.
#[test]
fn pm_700_s_gap_then_ticks_3_5_s_apart() {
    let mut fails = vec![];
    for first in [700_000u64, 700_600, 701_200, 703_000] {
        if let Err(e) = run(false, ms(first), ms(3_500), 12) {
            fails.push(e);
        }
    }
    assert!(fails.is_empty(), "{}", fails.join("\n"));
}
