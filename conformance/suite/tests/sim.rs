//! The suite against hand-written sources over the simulated machine, and
//! against broken fakes that must fail the right check.

mod common;

use clockhal_conformance::{Check, Config, Status, Value};
use clockhal_core::{ClockSource, Duration};
use clockhal_sim::{HpetConfig, PmTimerConfig, SimConfig, SimMachine};
use common::*;
use std::sync::atomic::AtomicU64;

fn tcg() -> SimMachine {
    SimMachine::qemu_tcg()
}

#[test]
fn healthy_machine_passes_every_check() {
    let m = tcg();
    let (hpet, pm, tsc) = (SimHpet::new(&m), SimPm::new(&m), SimTsc::new(&m));
    let sources: [&dyn ClockSource; 3] = [&hpet, &pm, &tsc];
    let r = run(
        &m,
        &sources,
        &hpet,
        Config::quick(),
        None,
        Some(Some("tsc")),
    );
    assert_eq!(r.failures(), vec![], "healthy sources must pass");
    for s in ["hpet", "acpi-pm", "tsc"] {
        for c in [
            Check::Monotonic,
            Check::Resolution,
            Check::ReadCost,
            Check::Agreement,
        ] {
            assert_eq!(r.status(s, c), Status::Pass, "{s} {c}");
        }
        assert_eq!(r.status(s, Check::CrossCpu), Status::Skip, "one CPU");
    }
    assert_eq!(r.status("acpi-pm", Check::Rate), Status::Pass);
    assert_eq!(r.status("tsc", Check::Rate), Status::Pass);
    assert_eq!(r.status("hpet", Check::Rate), Status::Skip, "the reference");
    // Only the extended source gets a wrap check, and it covers a wrap.
    assert_eq!(r.status("acpi-pm", Check::Wrap), Status::Pass);
    assert!(
        r.get("acpi-pm", Check::Wrap).detail.starts_with("1.1"),
        "{:?}",
        r.get("acpi-pm", Check::Wrap)
    );
    assert!(!r.has("hpet", Check::Wrap) && !r.has("tsc", Check::Wrap));
    assert_eq!(r.status("tsc", Check::Selected), Status::Pass);
    // Measured values reflect the simulated hardware.
    assert_eq!(
        r.get("hpet", Check::Resolution).value,
        Value::U64(1_000),
        "100 MHz HPET read every 1 us"
    );
    // A simulated port read takes 1 us, so consecutive reads are 3-4 ticks apart.
    assert_eq!(
        r.get("acpi-pm", Check::Resolution).value,
        Value::U64(839),
        "3 ticks of 279.4 ns"
    );
    let Value::U64(hpet_cost) = r.get("hpet", Check::ReadCost).value else {
        panic!()
    };
    let Value::U64(tsc_cost) = r.get("tsc", Check::ReadCost).value else {
        panic!()
    };
    assert!(
        hpet_cost >= 1_900 && tsc_cost <= 100,
        "hpet {hpet_cost} tsc {tsc_cost} cycles"
    );
    let s = r.summary;
    assert_eq!(
        (
            s.failed as usize,
            (s.passed + s.skipped + s.failed) as usize
        ),
        (0, r.recs.len())
    );
}

#[test]
fn a_source_that_steps_back_fails_monotonic() {
    let m = tcg();
    let (hpet, pm, tsc) = (SimHpet::new(&m), SimPm::new(&m), SimTsc::new(&m));
    // 1000 ticks (0.5 us) back every 50th read: more than the 20 ticks the
    // simulated TSC advances per read.
    let bad = StepsBack {
        inner: SimTsc::new(&m),
        every: 50,
        by: 1_000,
        reads: AtomicU64::new(0),
    };
    let sources: [&dyn ClockSource; 4] = [&hpet, &pm, &tsc, &bad];
    let r = run(
        &m,
        &sources,
        &hpet,
        Config::quick().wrap_budget(Duration::ZERO),
        None,
        None,
    );
    assert_eq!(
        r.failures(),
        vec![("steps-back".to_string(), Check::Monotonic)]
    );
    assert_eq!(
        r.get("steps-back", Check::Monotonic).value,
        Value::U64(490),
        "1000 ticks at 2 GHz, minus one read's 20"
    );
}

#[test]
fn a_source_two_percent_fast_fails_rate_and_agreement() {
    let m = tcg();
    let (hpet, pm, tsc) = (SimHpet::new(&m), SimPm::new(&m), SimTsc::new(&m));
    // Claims 2% less than the true rate, so its nanoseconds run 2% fast.
    let fast = SimTsc {
        name: "fast-tsc",
        claimed_hz: m.config().tsc_hz * 98 / 100,
        ..SimTsc::new(&m)
    };
    let sources: [&dyn ClockSource; 4] = [&hpet, &pm, &tsc, &fast];
    let r = run(
        &m,
        &sources,
        &hpet,
        Config::quick().wrap_budget(Duration::ZERO),
        None,
        None,
    );
    assert_eq!(
        r.failures(),
        vec![
            ("fast-tsc".to_string(), Check::Agreement),
            ("fast-tsc".to_string(), Check::Rate)
        ]
    );
    let Value::I64(ppm) = r.get("fast-tsc", Check::Rate).value else {
        panic!()
    };
    assert!(
        (20_300..=20_500).contains(&ppm),
        "1/0.98 - 1 = 20,408 ppm, got {ppm}"
    );
    assert!(r
        .get("fast-tsc", Check::Rate)
        .detail
        .contains("claims 1960000000 Hz"));
}

#[test]
fn two_sources_that_disagree_are_decided_for_the_reference() {
    let m = tcg();
    let hpet = SimHpet::new(&m);
    let slow = SimTsc {
        name: "slow-tsc",
        claimed_hz: m.config().tsc_hz * 102 / 100,
        ..SimTsc::new(&m)
    };
    let sources: [&dyn ClockSource; 2] = [&hpet, &slow];
    let r = run(&m, &sources, &hpet, Config::quick(), None, None);
    assert_eq!(
        r.failures(),
        vec![
            ("slow-tsc".to_string(), Check::Agreement),
            ("slow-tsc".to_string(), Check::Rate)
        ]
    );
}

#[test]
fn an_extended_counter_that_loses_wraps_fails_wrap() {
    let m = tcg();
    let (hpet, good, bad) = (SimHpet::new(&m), SimPm::new(&m), SimPm::forgetful(&m));
    let sources: [&dyn ClockSource; 3] = [&hpet, &good, &bad];
    let r = run(&m, &sources, &hpet, Config::quick(), None, None);
    assert_eq!(r.status("acpi-pm", Check::Wrap), Status::Pass);
    assert_eq!(r.status("forgetful-pm", Check::Wrap), Status::Fail);
    assert!(
        r.failures().iter().all(|(s, _)| s == "forgetful-pm"),
        "{:?}",
        r.failures()
    );
}

#[test]
fn wrap_check_is_skipped_with_the_reason_when_a_wrap_is_too_long() {
    let m = tcg();
    let (hpet, pm) = (SimHpet::new(&m), SimPm::new(&m));
    let sources: [&dyn ClockSource; 2] = [&hpet, &pm];
    let r = run(
        &m,
        &sources,
        &hpet,
        Config::quick().wrap_budget(Duration::from_secs(1)),
        None,
        None,
    );
    let w = r.get("acpi-pm", Check::Wrap);
    assert_eq!(w.status, Status::Skip);
    assert_eq!(w.detail, "one wrap takes 4686 ms, over the 1000 ms budget");
}

fn smp_machine(offsets: &[i64]) -> SimMachine {
    SimConfig::cpu(2_000_000_000)
        .with_cpus(offsets.len(), offsets)
        .with_hpet(HpetConfig::qemu())
        .with_pm_timer(PmTimerConfig::default())
        .build()
}

#[test]
fn synchronised_cpus_pass_the_warp_test() {
    let m = smp_machine(&[0, 0]);
    let (hpet, tsc) = (SimHpet::new(&m), SimTsc::new(&m));
    let sources: [&dyn ClockSource; 2] = [&hpet, &tsc];
    let cpus = SimCpus(&m);
    let r = run(
        &m,
        &sources,
        &hpet,
        Config::quick().wrap_budget(Duration::ZERO),
        Some(&cpus),
        None,
    );
    assert_eq!(r.failures(), vec![]);
    assert_eq!(
        r.status("tsc", Check::CrossCpu),
        Status::Pass,
        "{:?}",
        r.get("tsc", Check::CrossCpu)
    );
    assert_eq!(r.status("hpet", Check::CrossCpu), Status::Pass);
}

#[test]
fn a_tsc_behind_on_cpu_1_fails_the_warp_test_when_it_claims_smp() {
    // CPU 1's TSC is 1 ms behind.
    let m = smp_machine(&[0, -2_000_000]);
    let hpet = SimHpet::new(&m);
    let claims = SimTsc::new(&m);
    let honest = SimTsc {
        name: "tsc-no-smp",
        smp: false,
        ..SimTsc::new(&m)
    };
    let sources: [&dyn ClockSource; 3] = [&hpet, &claims, &honest];
    let cpus = SimCpus(&m);
    let r = run(
        &m,
        &sources,
        &hpet,
        Config::quick().wrap_budget(Duration::ZERO),
        Some(&cpus),
        None,
    );
    assert_eq!(r.failures(), vec![("tsc".to_string(), Check::CrossCpu)]);
    let Value::U64(warp) = r.get("tsc", Check::CrossCpu).value else {
        panic!()
    };
    assert!((900_000..=1_000_000).contains(&warp), "warp {warp} ns");
    assert_eq!(r.status("tsc-no-smp", Check::CrossCpu), Status::Skip);
    assert!(r
        .get("tsc-no-smp", Check::CrossCpu)
        .detail
        .contains("not claimed"));
    assert_eq!(r.status("hpet", Check::CrossCpu), Status::Pass);
}

#[test]
fn selection_must_be_the_fastest_passing_source_or_outrank_it() {
    let m = tcg();
    let (hpet, pm, tsc) = (SimHpet::new(&m), SimPm::new(&m), SimTsc::new(&m));
    let sources: [&dyn ClockSource; 3] = [&hpet, &pm, &tsc];
    let quick = Config::quick().wrap_budget(Duration::ZERO);
    let sel = |name| run(&m, &sources, &hpet, quick, None, Some(name));

    // HPET is slower and rated lower (250) than the passing TSC (300).
    let r = sel(Some("hpet"));
    assert_eq!(r.failures(), vec![("hpet".to_string(), Check::Selected)]);
    assert!(r
        .get("hpet", Check::Selected)
        .detail
        .starts_with("tsc passed every check"));
    assert_eq!(sel(Some("tsc")).failures(), vec![]);
    assert_eq!(
        sel(Some("nonexistent")).failures(),
        vec![("nonexistent".to_string(), Check::Selected)]
    );
    assert_eq!(
        sel(None).failures(),
        vec![("none".to_string(), Check::Selected)]
    );

    // A slower source that outranks the fastest by quality (kvmclock-like).
    let tsc_low = SimTsc {
        quality: 200,
        ..SimTsc::new(&m)
    };
    let sources: [&dyn ClockSource; 2] = [&hpet, &tsc_low];
    let r = run(&m, &sources, &hpet, quick, None, Some(Some("hpet")));
    assert_eq!(r.failures(), vec![]);
    assert!(r
        .get("hpet", Check::Selected)
        .detail
        .starts_with("outranks faster tsc"));

    // A selected source that failed a check fails selection too.
    let bad = StepsBack {
        inner: SimTsc::new(&m),
        every: 50,
        by: 1_000,
        reads: AtomicU64::new(0),
    };
    let sources: [&dyn ClockSource; 2] = [&hpet, &bad];
    let r = run(&m, &sources, &hpet, quick, None, Some(Some("steps-back")));
    assert!(r
        .failures()
        .contains(&("steps-back".to_string(), Check::Selected)));

    // A source rated <= 0 is never a legitimate automatic choice.
    let unusable = SimTsc {
        quality: -100,
        ..SimTsc::new(&m)
    };
    let sources: [&dyn ClockSource; 2] = [&hpet, &unusable];
    let r = run(&m, &sources, &hpet, quick, None, Some(Some("tsc")));
    assert_eq!(r.failures(), vec![("tsc".to_string(), Check::Selected)]);
}

#[test]
fn a_stuck_reference_fails_itself_and_never_hangs() {
    let m = SimConfig::cpu(2_000_000_000)
        .with_hpet(HpetConfig {
            stuck: true,
            ..HpetConfig::qemu()
        })
        .build();
    let (hpet, tsc) = (SimHpet::new(&m), SimTsc::new(&m));
    let sources: [&dyn ClockSource; 2] = [&hpet, &tsc];
    let r = run(&m, &sources, &hpet, Config::quick(), None, None);
    assert_eq!(r.status("hpet", Check::Resolution), Status::Fail);
    assert_eq!(
        r.get("hpet", Check::Resolution).detail,
        "never advanced over 2000 reads"
    );
    assert_eq!(r.status("hpet", Check::Rate), Status::Fail);
    assert_eq!(r.status("tsc", Check::Rate), Status::Skip);
}

#[test]
fn a_stuck_source_fails_resolution_rate_and_agreement() {
    let m = tcg();
    let (hpet, pm, tsc) = (SimHpet::new(&m), SimPm::new(&m), SimTsc::new(&m));
    let sources: [&dyn ClockSource; 4] = [&hpet, &pm, &tsc, &Stuck];
    let r = run(
        &m,
        &sources,
        &hpet,
        Config::quick().wrap_budget(Duration::ZERO),
        None,
        None,
    );
    assert_eq!(
        r.failures(),
        vec![
            ("stuck".to_string(), Check::Agreement),
            ("stuck".to_string(), Check::Rate),
            ("stuck".to_string(), Check::Resolution),
        ]
    );
    assert_eq!(r.get("stuck", Check::Rate).value, Value::I64(-1_000_000));
}
