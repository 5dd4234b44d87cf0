//! A software-extended member whose rate is 1,000 ppm off is demoted,
//! whatever the tick interval (also longer than its wrap), and nothing
//! honest is.
#![cfg(all(feature = "tsc", feature = "hpet", feature = "acpi-pm"))]

use clockhal::{SourceId, Verdict};
use clockhal_sim::{HpetConfig, SimConfig};

mod adversarial;

use adversarial::{clock, leak, ms};

fn wrong_member(bad: SourceId, tick_ms: u64) {
    let m = leak(
        SimConfig::cpu(2_000_000_000)
            .with_invariant_tsc(true)
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
    match bad {
        SourceId::Hpet => m.with_hpet(|h, ctx| h.set_rate_error_ppm(ctx, 1_000)),
        _ => m.with_pm_timer(|p, ctx| p.set_rate_error_ppm(ctx, 1_000)),
    };
    let mut evs = vec![];
    for i in 0..30 {
        m.advance(ms(tick_ms));
        c.now();
        evs.push((i, c.watchdog_tick()));
    }
    let verdict = |id| c.report().get(id).unwrap().verdict;
    let honest = [SourceId::Tsc, SourceId::Hpet, SourceId::AcpiPm]
        .into_iter()
        .filter(|id| *id != bad)
        .filter(|id| matches!(verdict(*id), Verdict::Demoted { .. }))
        .collect::<Vec<_>>();
    assert!(
        matches!(verdict(bad), Verdict::Demoted { .. }) && honest.is_empty(),
        "{bad:?} 1000 ppm, ticks {tick_ms} ms: honest demoted {honest:?}; {evs:?}\n{}",
        c.report().table()
    );
}

#[test]
fn a_fast_narrow_hpet_is_demoted() {
    wrong_member(SourceId::Hpet, 250);
    wrong_member(SourceId::Hpet, 30_000);
}

/// On bare metal (TSC calibrated against the HPET) a PM timer 5,000 ppm
/// off is never demoted: the TSC votes in the HPET's domain, so there is
/// no independent majority (documented: "no independent majority ...
/// demotes nobody"). Under KVM (the TSC's rate stated by the host) it is.
#[cfg(feature = "kvmclock")]
#[test]
fn a_fast_pm_timer_is_demoted_under_kvm() {
    for tick in [250, 10_000] {
        let m = leak(clockhal_sim::SimMachine::kvm_config().build());
        let (c, _) = clock(m);
        for _ in 0..8 {
            m.advance(ms(250));
            c.watchdog_tick();
        }
        m.with_pm_timer(|p, ctx| p.set_rate_error_ppm(ctx, 1_000));
        for _ in 0..10 {
            m.advance(ms(tick));
            c.now();
            c.watchdog_tick();
        }
        assert!(matches!(
            c.report().get(SourceId::AcpiPm).unwrap().verdict,
            Verdict::Demoted { .. }
        ));
        assert_eq!(c.source_id(), SourceId::Kvmclock);
    }
}
