//! Honest long gaps between watchdog ticks (an OS that stopped ticking
//! for ten minutes: a long driver init with interrupts off, a tickless
//! idle). A member whose wraps over the gap the TSC cannot place (1,000
//! ppm of the gap past an eighth of its wrap: over ~582 s for the PM
//! timer) sits the rounds out until its count moves on, and is never
//! demoted as "Stopped" (for a while its count, placed by the plain rule,
//! held just behind its last value and was judged).
#![cfg(all(feature = "tsc", feature = "hpet", feature = "acpi-pm"))]

use clockhal::{SourceId, Verdict};
use clockhal_sim::{HpetConfig, SimConfig};

mod adversarial;

use adversarial::{bad, clock, leak, ms};

fn long_gap(force: Option<SourceId>, narrow: bool, gap_s: u64) {
    let mut hpet = HpetConfig::qemu();
    if narrow {
        hpet = hpet.narrow();
    }
    let m = leak(
        SimConfig::cpu(2_000_000_000)
            .with_invariant_tsc(true)
            .with_pm_timer(clockhal_sim::PmTimerConfig::default())
            .with_hpet(hpet)
            .build(),
    );
    let (c, _) = clock(m);
    if let Some(f) = force {
        c.force(f).unwrap();
    }
    let first = c.source_id();
    let mut evs = vec![];
    for _ in 0..8 {
        m.advance(ms(250));
        evs.push(c.watchdog_tick());
    }
    // No tick, no read for `gap_s`.
    m.advance(ms(gap_s * 1_000));
    for _ in 0..20 {
        evs.push(c.watchdog_tick());
        m.advance(ms(250));
        c.now();
    }
    let demoted: Vec<_> = c
        .report()
        .candidates()
        .filter(|x| matches!(x.verdict, Verdict::Demoted { .. }))
        .map(|x| (x.id, x.verdict))
        .collect();
    assert!(
        demoted.is_empty() && !evs.iter().any(bad),
        "{first:?} current, narrow HPET {narrow}, one tick gap of {gap_s} s: demoted {demoted:?}; {:?}\n{}",
        evs.iter().filter(|e| bad(e)).collect::<Vec<_>>(),
        c.report().table()
    );
}

/// Bare metal as it comes: invariant TSC current, 64-bit HPET, PM timer.
#[test]
fn tsc_current_one_tick_gap_of_590_s_demotes_no_member() {
    long_gap(None, false, 590);
}

#[test]
fn tsc_current_one_tick_gap_of_800_s_demotes_no_member() {
    long_gap(None, false, 800);
}

/// The 32-bit HPET current (the OS's choice).
#[test]
fn narrow_hpet_current_one_tick_gap_of_600_s_demotes_no_member() {
    long_gap(Some(SourceId::Hpet), true, 600);
}
