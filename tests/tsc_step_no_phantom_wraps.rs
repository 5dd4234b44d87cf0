//! A TSC stepped by its hypervisor by a large amount (an hour, 90
//! minutes) while a software-extended device is current or a member:
//! the estimate's error over such a "gap" is wider than an eighth of a
//! wrap, so it places no wraps (before, it was capped at an eighth and a
//! quarter of all steps were taken as whole wraps: `now()` an hour
//! ahead), and a span the stepped TSC measured for a member adds none
//! (before, the honest HPET was demoted against the stepped TSC).
#![cfg(all(feature = "tsc", feature = "hpet", feature = "acpi-pm"))]

use clockhal::{SourceId, Verdict};
use clockhal_sim::{HpetConfig, SimConfig};

mod adversarial;

use adversarial::{clock, leak, ms};

/// `now()` read every 100 ms on CPU 0, whose TSC steps `step_s` ahead
/// (no gap in the reads at all): never ahead of the truth by more than
/// 1 ms, and the honest current device stays usable.
fn stepped(id: SourceId, hpet: HpetConfig, step_s: i64) {
    let m = leak(
        SimConfig::cpu(2_000_000_000)
            .with_invariant_tsc(false)
            .with_pm_timer(clockhal_sim::PmTimerConfig::default())
            .with_hpet(hpet)
            .build(),
    );
    let (c, _) = clock(m);
    c.force(id).unwrap();
    let origin = m.now_ns() - c.now().as_nanos();
    for _ in 0..10 {
        m.advance(ms(100));
        c.now();
    }
    m.step_tsc(Some(0), step_s * m.config().tsc_hz as i64);
    for i in 0..50 {
        m.advance(ms(100));
        let t = c.now().as_nanos();
        let truth = m.now_ns() - origin;
        assert!(
            t <= truth + ms(1),
            "{id:?}, TSC stepped {step_s} s: read {i} is {} ms ahead of the truth; unmeasured_gaps {}; source {:?}\n{}",
            (t - truth) / 1_000_000,
            c.unmeasured_gaps(),
            c.source_id(),
            c.report().table()
        );
    }
    assert!(
        !matches!(c.report().get(id).unwrap().verdict, Verdict::Demoted { .. }),
        "{id:?} demoted\n{}",
        c.report().table()
    );
}

#[test]
fn a_tsc_stepped_an_hour_puts_no_phantom_wraps_into_the_pm_timer() {
    // 3600 s = 768.08 PM timer wraps: 0.375 s off whole wraps.
    stepped(SourceId::AcpiPm, HpetConfig::qemu().narrow(), 3_600);
}

#[test]
fn a_tsc_stepped_an_hour_with_a_64_bit_hpet_demotes_no_honest_pm_timer() {
    stepped(SourceId::AcpiPm, HpetConfig::qemu(), 3_600);
}

#[test]
fn a_tsc_stepped_90_minutes_puts_no_phantom_wraps_into_the_narrow_hpet() {
    // 5,412 s = 126 wraps of 42.95 s and 0.34 s: the bound (5.4 s) is
    // capped at an eighth of a wrap (5.37 s).
    stepped(SourceId::Hpet, HpetConfig::qemu().narrow(), 5_412);
}

/// The watchdog's member of the class, without a 64-bit counter (so the
/// tick gap is the TSC's alone): a supervised TSC current with a 32-bit
/// HPET and the PM timer; the TSC steps ahead by 768 PM timer wraps
/// (3,599.6 s), not near whole HPET wraps. CHANGELOG: "a TSC an hour
/// ahead cannot put 768 false wraps into the PM timer". The honest
/// HPET and PM timer must not be demoted, the PM timer's count must stay
/// the truth, and the clock must leave the TSC.
#[test]
fn a_supervised_tsc_stepped_768_pm_wraps_without_a_64_bit_counter() {
    let m = leak(
        SimConfig::cpu(2_000_000_000)
            .with_invariant_tsc(false)
            .with_pm_timer(clockhal_sim::PmTimerConfig::default())
            .with_hpet(HpetConfig::qemu().narrow())
            .build(),
    );
    let (c, _) = clock(m);
    assert_eq!(c.source_id(), SourceId::Tsc, "{}", c.report().table());
    for _ in 0..8 {
        m.advance(ms(250));
        c.watchdog_tick();
    }
    let pm = c.source_of(SourceId::AcpiPm).unwrap();
    let (p0, n0) = (pm.read(), m.now_ns());
    let step = (768u128 << 24) * 2_000_000_000 / 3_579_545;
    m.step_tsc(None, step as i64);
    let mut evs = vec![];
    for i in 0..12 {
        m.advance(ms(250));
        evs.push((i, c.watchdog_tick()));
    }
    let counted = (pm.read() - p0) as u128 * 1_000_000_000 / 3_579_545;
    let truth = (m.now_ns() - n0) as u128;
    let demoted: Vec<_> = [SourceId::Hpet, SourceId::AcpiPm]
        .into_iter()
        .filter(|id| {
            matches!(
                c.report().get(*id).unwrap().verdict,
                Verdict::Demoted { .. }
            )
        })
        .collect();
    assert!(
        demoted.is_empty() && counted.abs_diff(truth) < 1_000_000_000 && c.source_id() != SourceId::Tsc,
        "honest demoted {demoted:?}; PM counted {counted} ns of {truth} ns; source {:?}; {evs:?}\n{}",
        c.source_id(),
        c.report().table()
    );
}
