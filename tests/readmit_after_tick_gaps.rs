//! A supervised TSC whose ticks stop comes back within 5 s of their
//! return (issue 26 §1), also where every other counter is
//! software-extended and the gap is many of their wraps.
#![cfg(all(feature = "tsc", feature = "hpet", feature = "acpi-pm"))]

use clockhal::{SourceId, Verdict};
use clockhal_sim::{HpetConfig, SimConfig};

mod adversarial;

use adversarial::{bad, clock, leak, ms};

fn comes_back(narrow: bool, pm: bool, gap_ms: u64, reads_in_gap: bool) {
    let mut cfg = SimConfig::cpu(2_000_000_000)
        .with_invariant_tsc(false)
        .with_hpet(if narrow {
            HpetConfig::qemu().narrow()
        } else {
            HpetConfig::qemu()
        });
    if pm {
        cfg = cfg.with_pm_timer(clockhal_sim::PmTimerConfig::default());
    }
    let m = leak(cfg.build());
    let (c, _) = clock(m);
    assert_eq!(c.source_id(), SourceId::Tsc, "{}", c.report().table());
    let origin = m.now_ns() - c.now().as_nanos();
    for _ in 0..8 {
        m.advance(ms(250));
        assert!(!bad(&c.watchdog_tick()));
    }
    let mut left = gap_ms;
    while left > 0 {
        let step = left.min(100);
        m.advance(ms(step));
        left -= step;
        if reads_in_gap {
            c.now();
        }
    }
    let mut evs = vec![];
    let mut back = None;
    for k in 1..=20 {
        m.advance(ms(250));
        evs.push(c.watchdog_tick());
        let t = c.now().as_nanos();
        let truth = m.now_ns() - origin;
        assert!(
            t <= truth + ms(5),
            "narrow {narrow} pm {pm} gap {gap_ms}: {} ms ahead",
            (t - truth) / 1_000_000
        );
        if c.source_id() == SourceId::Tsc {
            back = Some(k);
            break;
        }
    }
    assert!(
        back.is_some(),
        "narrow {narrow} pm {pm} gap {gap_ms} ms reads {reads_in_gap}: not back in 5 s; {evs:?}\n{}",
        c.report().table()
    );
    // Honest devices are never demoted.
    for id in [SourceId::Hpet, SourceId::AcpiPm] {
        if let Some(cand) = c.report().get(id) {
            assert!(
                !matches!(cand.verdict, Verdict::Demoted { .. }),
                "{id:?} demoted: {evs:?}\n{}",
                c.report().table()
            );
        }
    }
}

#[test]
fn narrow_hpet_and_pm_gap_3_s() {
    comes_back(true, true, 3_000, true);
    comes_back(true, true, 3_000, false);
}

#[test]
fn narrow_hpet_and_pm_gap_30_s() {
    comes_back(true, true, 30_000, true);
    comes_back(true, true, 30_000, false);
}

#[test]
fn narrow_hpet_and_pm_gap_100_s() {
    comes_back(true, true, 100_000, true);
    comes_back(true, true, 100_000, false);
}

#[test]
fn narrow_hpet_alone_gap_100_s() {
    comes_back(true, false, 100_000, true);
    comes_back(true, false, 100_000, false);
}

#[test]
fn wide_hpet_and_pm_gap_100_s() {
    comes_back(false, true, 100_000, true);
    comes_back(false, true, 100_000, false);
}
