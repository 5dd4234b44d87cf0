//! A TSC whose boot calibration is too loose to supervise (each HPET read
//! traps for 25 us, as under this machine's KVM) is refined from the
//! watchdog's ticks and then selected, as Linux refines its TSC and
//! switches to it; a reference that jumps meanwhile restarts the baseline.
#![cfg(all(feature = "tsc", feature = "hpet", feature = "acpi-pm"))]

use clockhal::tsc::{RateProvenance, SyncStatus};
use clockhal::{probe, ClockSource, Duration, Platform, SelfCheck, SourceId, WatchdogEvent};
use clockhal_sim::{HpetConfig, PmTimerConfig, SimConfig, SimMachine};

const TSC_HZ: u64 = 2_600_000_000;

/// No kvmclock, no stated TSC rate, no invariant bit; slow device reads.
fn slow_devices() -> SimMachine {
    let mut c = SimConfig::cpu(TSC_HZ)
        .without_cpuid(0x15, 0)
        .with_invariant_tsc(false)
        .with_hpet(HpetConfig::qemu())
        .with_pm_timer(PmTimerConfig::default());
    c.costs.trap_ns = 25_000;
    c.build()
}

fn platform(m: &SimMachine) -> Platform<'static> {
    let pm = m.config().pm_timer.clone().unwrap();
    Platform::new()
        .tsc_sync(SyncStatus::SingleCpu)
        .self_check(SelfCheck::new().rate_interval(Duration::from_millis(1)))
        .hpet_region(m.hpet_region().unwrap())
        .pm_timer(pm.port, pm.bits32)
}

/// Ticks every 250 ms until the TSC's rate is refined; returns the tick.
fn tick_until_refined(
    m: &SimMachine,
    clock: &clockhal::Clock<&SimMachine>,
    max: u32,
) -> Option<u32> {
    for i in 1..=max {
        m.advance(250_000_000);
        if let WatchdogEvent::RateRefined {
            source,
            uncertainty_ppm,
        } = clock.watchdog_tick()
        {
            assert_eq!(source, SourceId::Tsc);
            assert!(uncertainty_ppm <= clockhal::tsc::REFINED_TARGET_PPM);
            return Some(i);
        }
    }
    None
}

#[test]
fn a_loose_calibration_is_refined_and_the_tsc_then_selected() {
    let m = slow_devices();
    let probed = probe(&m, platform(&m));
    let r = *probed.report();
    let tsc = r.get(SourceId::Tsc).unwrap();
    assert!(
        tsc.rating().is_some_and(|q| q.get() < 0),
        "a ±500 ppm calibration is not supervised: {tsc:?}"
    );
    assert!(
        tsc.note.to_string().contains("too uncertain"),
        "{}",
        tsc.note
    );
    assert_eq!(r.selected_id(), Some(SourceId::Hpet));

    let clock = probed.into_clock().unwrap();
    let before = clock.now();
    let n = tick_until_refined(&m, &clock, 16).expect("refined within 4 s of ticks");
    assert!(n <= 8, "refined after {n} ticks");
    let after = clock.now();
    assert!(after >= before);

    // Selected now: a supervised TSC (290) beats the trapping HPET (250).
    assert_eq!(clock.source_id(), SourceId::Tsc);
    let r = clock.report();
    let c = r.get(SourceId::Tsc).unwrap();
    assert_eq!(c.rating().map(|q| q.get()), Some(290));
    // Against the watchdog's reference: while the HPET is current that is
    // the PM timer.
    assert!(
        c.note.to_string().contains("rate refined against acpi-pm"),
        "{}",
        c.note
    );
    let t = clock.tsc().unwrap();
    match t.provenance() {
        RateProvenance::Refined {
            reference,
            uncertainty_ppm,
            baseline_ms,
        } => {
            assert_eq!(reference, "acpi-pm");
            assert!(uncertainty_ppm <= 50);
            assert!(baseline_ms >= 500, "{baseline_ms}");
        }
        p => panic!("{p:?}"),
    }
    let err = t
        .frequency()
        .ppb_from(&clockhal::Frequency::from_hz(TSC_HZ).unwrap())
        / 1000;
    assert!(err.abs() <= 50, "refined rate off by {err} ppm");

    // It stays selected while the ticks come, and time keeps its rate.
    let (t0, true0) = (clock.now(), m.now_ns());
    for _ in 0..8 {
        m.advance(250_000_000);
        clock.watchdog_tick();
    }
    assert_eq!(clock.source_id(), SourceId::Tsc);
    let (took, truth) = (clock.elapsed(t0).as_nanos(), m.now_ns() - true0);
    let ppm = (took as i64 - truth as i64) * 1_000_000 / truth as i64;
    assert!(ppm.abs() <= 60, "{truth} ns measured as {took} ns");
}

#[test]
fn a_reference_jump_during_refinement_restarts_the_baseline() {
    let m = slow_devices();
    let clock = probe(&m, platform(&m)).into_clock().unwrap();
    m.advance(250_000_000);
    clock.watchdog_tick(); // baseline
                           // The HPET jumps 3 ms ahead: a refinement across it would be 3000 ppm
                           // off at 1 s, far outside both bounds.
    m.with_hpet(|h, ctx| h.jump(ctx, 300_000));
    let n = tick_until_refined(&m, &clock, 24).expect("refined after a new baseline");
    // Not before a full new baseline after the jump.
    assert!(n >= 3, "refined after {n} ticks, across the jump");
    let t = clock.tsc().unwrap();
    let err = t
        .frequency()
        .ppb_from(&clockhal::Frequency::from_hz(TSC_HZ).unwrap())
        / 1000;
    assert!(err.abs() <= 50, "refined rate off by {err} ppm");
}

#[test]
fn a_current_tsc_is_not_refined_under_its_readers() {
    let m = slow_devices();
    let clock = probe(&m, platform(&m)).into_clock().unwrap();
    clock.force(SourceId::Tsc).unwrap();
    let before = clock.tsc().unwrap().frequency();
    assert_eq!(tick_until_refined(&m, &clock, 12), None);
    assert_eq!(clock.tsc().unwrap().frequency(), before);
    // Back to automatic selection: refined, then selected.
    clock.unforce();
    assert!(tick_until_refined(&m, &clock, 12).is_some());
    assert_eq!(clock.source_id(), SourceId::Tsc);
}

#[test]
fn a_stated_rate_is_never_refined() {
    let m = SimConfig::cpu(TSC_HZ)
        .with_tsc_leaf(2, 216, 24_000_000)
        .with_invariant_tsc(true)
        .with_hpet(HpetConfig::qemu())
        .build();
    let clock = probe(
        &m,
        Platform::new()
            .tsc_sync(SyncStatus::SingleCpu)
            .hpet_region(m.hpet_region().unwrap()),
    )
    .into_clock()
    .unwrap();
    assert_eq!(
        clock.tsc().unwrap().provenance(),
        RateProvenance::CpuidLeaf15
    );
    assert_eq!(tick_until_refined(&m, &clock, 8), None);
}
