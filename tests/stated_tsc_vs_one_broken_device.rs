//! A TSC whose rate CPUID leaf 0x15 states exactly, against one broken
//! device counter (a PM timer 5 % fast, the chipset fault Linux's
//! verify_pmtmr_rate exists for; an HPET 3 % slow or whose period
//! register lies). Found by red-team round 27: with a stated rate the PIT
//! was never probed, so two rates alone decided, and the two-way rule
//! demoted the honest TSC; the clock ran on the broken device (10x fast
//! for good with the HPET's lie). The PIT is the third witness there now,
//! where the machine has one; without one the two-way rule still blames
//! the TSC (under a hypervisor CPUID is the VMM's word, and a migration
//! changes the TSC's rate under a stated one), as the README's known
//! limits say.
#![cfg(all(feature = "tsc", feature = "hpet", feature = "acpi-pm"))]

use clockhal::{probe, Duration, Platform, SelfCheck, SourceId, Verdict};
use clockhal_sim::{Answer, HpetConfig, PitConfig, PmTimerConfig, SimConfig, SimMachine};

fn leak(m: SimMachine) -> &'static SimMachine {
    Box::leak(Box::new(m))
}

fn plat(m: &'static SimMachine) -> Platform<'static> {
    let mut p = Platform::new()
        .cpus(1)
        .self_check(SelfCheck::new().rate_interval(Duration::from_millis(2)));
    if let Some(r) = m.hpet_region() {
        p = p.hpet_region(r);
    }
    if let Some(pm) = &m.config().pm_timer {
        p = p.pm_timer(pm.port, pm.bits32);
    }
    p
}

fn second_reads_as(m: &'static SimMachine) -> (u64, String) {
    let pr = probe(m, plat(m));
    let table = format!("{}", pr.report().table());
    let c = pr.into_clock().expect("a clock");
    // 20 s of watchdog ticks at the suggested 250 ms: "for good".
    for _ in 0..80 {
        m.advance(250_000_000);
        let _ = c.watchdog_tick();
    }
    let t0 = c.now();
    for _ in 0..4 {
        m.advance(250_000_000);
        let _ = c.watchdog_tick();
    }
    let d = c.elapsed(t0).as_nanos() as u64;
    let tsc = c.report().get(SourceId::Tsc).map(|c| c.verdict);
    (
        d,
        format!(
            "on {}; tsc {tsc:?}\nprobe:\n{table}\nnow:\n{}",
            c.source_name(),
            c.report().table()
        ),
    )
}

/// Bare metal (Intel, leaf 0x15 exact, invariant TSC, a PIT), no HPET,
/// the FADT's PM timer 5 % fast.
#[test]
fn exact_cpuid_tsc_is_not_demoted_for_a_pm_timer_5_percent_fast() {
    let m = leak(
        SimConfig::cpu(2_592_000_000)
            .with_invariant_tsc(true)
            .with_tsc_leaf(2, 216, 24_000_000)
            .with_pit(PitConfig::hardware())
            .with_pm_timer(PmTimerConfig::default())
            .build(),
    );
    m.with_pm_timer(|p, ctx| p.set_rate_error_ppm(ctx, 50_000));
    let (d, why) = second_reads_as(m);
    assert!(
        (999_000_000..=1_001_000_000).contains(&d),
        "1 s of machine time read as {d} ns {why}"
    );
}

/// Bare metal, no PM timer, an HPET counter 3 % slow (the counter, not
/// its period register).
#[test]
fn exact_cpuid_tsc_is_not_demoted_for_an_hpet_3_percent_slow() {
    let m = leak(
        SimConfig::cpu(2_592_000_000)
            .with_invariant_tsc(true)
            .with_tsc_leaf(2, 216, 24_000_000)
            .with_pit(PitConfig::hardware())
            .with_hpet(HpetConfig::classic())
            .build(),
    );
    m.with_hpet(|h, ctx| h.set_rate_error_ppm(ctx, -30_000));
    let (d, why) = second_reads_as(m);
    assert!(
        (999_000_000..=1_001_000_000).contains(&d),
        "1 s of machine time read as {d} ns {why}"
    );
}

/// Bare metal, no PM timer, a 100 MHz HPET whose capabilities register
/// claims 10 MHz (a period lie inside the accepted range).
#[test]
fn exact_cpuid_tsc_is_not_demoted_for_an_hpet_period_lie() {
    let m = leak(
        SimConfig::cpu(2_592_000_000)
            .with_invariant_tsc(true)
            .with_tsc_leaf(2, 216, 24_000_000)
            .with_pit(PitConfig::hardware())
            .with_hpet(HpetConfig::qemu())
            .build(),
    );
    m.override_mmio(
        0xFED0_0000,
        Some(Answer::Value((100_000_000u64 << 32) | (1 << 13))),
    );
    let (d, why) = second_reads_as(m);
    assert!(
        (999_000_000..=1_001_000_000).contains(&d),
        "1 s of machine time read as {d} ns {why}"
    );
}

/// The TSC's verdict itself: an exact, invariant CPUID rate demoted in
/// favour of one device counter that disagrees by 5 %.
#[test]
fn exact_cpuid_tsc_verdict_against_one_fast_pm_timer() {
    let m = leak(
        SimConfig::cpu(2_592_000_000)
            .with_invariant_tsc(true)
            .with_tsc_leaf(2, 216, 24_000_000)
            .with_pit(PitConfig::hardware())
            .with_pm_timer(PmTimerConfig::default())
            .build(),
    );
    m.with_pm_timer(|p, ctx| p.set_rate_error_ppm(ctx, 50_000));
    let pr = probe(m, plat(m));
    let tsc = pr.report().get(SourceId::Tsc).unwrap().verdict;
    assert!(
        !matches!(tsc, Verdict::Demoted { .. }),
        "exact-rate TSC demoted: {}",
        pr.report().table()
    );
}

/// The other way round: CPUID states a rate 2x off (a VMM's garbage) and
/// the one device is honest: the stated rate is checked against it and
/// not used (the TSC is calibrated instead), and the time is right.
#[test]
fn a_cpuid_rate_2x_off_is_not_used() {
    let m = leak(
        SimConfig::cpu(2_592_000_000)
            .with_invariant_tsc(true)
            .with_tsc_leaf(1, 108, 24_000_000 * 4)
            .with_pit(PitConfig::hardware())
            .with_pm_timer(PmTimerConfig::default())
            .build(),
    );
    let (d, why) = second_reads_as(m);
    assert!(
        (999_000_000..=1_001_000_000).contains(&d),
        "1 s of machine time read as {d} ns {why}"
    );
    let pr = probe(m, plat(m));
    let note = pr.report().get(SourceId::Tsc).unwrap().note.to_string();
    assert!(
        note.contains("calibrated against"),
        "{}",
        pr.report().table()
    );
}

/// No PIT: two rates alone cannot tell which is wrong, and the two-way
/// rule blames the TSC (README, known limits), stated rate or not.
#[test]
fn without_a_pit_the_two_way_rule_blames_the_tsc() {
    let m = leak(
        SimConfig::cpu(2_592_000_000)
            .with_invariant_tsc(true)
            .with_tsc_leaf(2, 216, 24_000_000)
            .with_pm_timer(PmTimerConfig::default())
            .build(),
    );
    m.with_pm_timer(|p, ctx| p.set_rate_error_ppm(ctx, 50_000));
    let pr = probe(m, plat(m));
    let r = pr.report();
    assert!(
        matches!(
            r.get(SourceId::Tsc).unwrap().verdict,
            Verdict::Demoted { .. }
        ),
        "{}",
        r.table()
    );
    assert!(r
        .get(SourceId::Pit)
        .is_none_or(|c| !matches!(c.verdict, Verdict::Usable(_))));
}
