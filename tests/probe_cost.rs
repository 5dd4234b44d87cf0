//! The report's probe cost: duration from the TSC, and trapping reads per
//! phase (calibration, self-check) and candidate, checked against the
//! simulator's own exit counts and against sources that count themselves.
#![cfg(all(feature = "tsc", feature = "hpet"))]

use clockhal::tsc::SyncStatus;
use clockhal::x86::MmioRegion;
use clockhal::{
    probe, ClockSource, Duration, Frequency, Platform, Quality, ReadCost, SelfCheck, SourceId,
    Stability,
};
use clockhal_sim::{HpetConfig, SimConfig, SimMachine};
use std::sync::atomic::{AtomicU64, Ordering};

fn fast_check() -> SelfCheck {
    SelfCheck::new().rate_interval(Duration::from_millis(1))
}

/// A TSC with no stated rate and an HPET as the only device counter: the
/// TSC is calibrated against the HPET, every HPET read one MMIO exit.
fn hpet_only() -> SimMachine {
    SimConfig::cpu(2_000_000_000)
        .with_hpet(HpetConfig::qemu())
        .build()
}

fn hpet_platform(m: &SimMachine) -> Platform<'static> {
    Platform::new()
        .hpet_region(m.hpet_region().unwrap())
        .tsc_sync(SyncStatus::SingleCpu)
        .self_check(fast_check())
}

#[test]
fn calibration_and_self_check_reads_match_the_machines_exits() {
    let m = hpet_only();
    m.reset_traps();
    let p = probe(&m, hpet_platform(&m));
    let exits = m.traps().mmio_reads;
    let r = p.report();
    let cost = r.cost();
    let calibration = cost.calibration_reads(SourceId::Hpet) as u64;
    let check = cost.self_check_reads(SourceId::Hpet) as u64;
    assert!(calibration > 0, "{}", r.table());
    assert!(check > 0, "{}", r.table());
    assert_eq!(cost.trapping_reads(), calibration + check);
    // Every counted read is an MMIO load; the uncounted rest is the HPET
    // probe's own register reads (a few dozen at most).
    assert!(
        cost.trapping_reads() <= exits && exits <= cost.trapping_reads() + 64,
        "counted {} of {exits} MMIO reads\n{}",
        cost.trapping_reads(),
        r.table()
    );
    // Nothing else traps here.
    for id in SourceId::ALL.into_iter().filter(|&id| id != SourceId::Hpet) {
        assert_eq!(cost.calibration_reads(id), 0, "{id:?}");
        assert_eq!(cost.self_check_reads(id), 0, "{id:?}");
    }
}

#[test]
fn duration_is_the_simulated_time_the_probe_took() {
    let m = hpet_only();
    let t0 = m.now_ns();
    let p = probe(&m, hpet_platform(&m));
    let took = m.now_ns() - t0;
    let cost = *p.report().cost();
    let d = cost.duration().expect("the TSC has a rate").as_nanos();
    // The TSC's rate is calibrated (ppm-close) and the probe's last rdtsc
    // comes a little before it returns.
    assert!(d > 0 && d <= took + took / 1000, "{d} ns of {took} ns");
    assert!(d >= took - took / 10, "{d} ns of {took} ns");
    assert!(cost.tsc_ticks() > 0);
    let line = p.report().table().to_string();
    let last = line.lines().last().unwrap();
    assert!(
        last.starts_with("probe ") && last.contains(" ms; "),
        "{line}"
    );
    assert!(last.contains("calibration: hpet "), "{line}");
    assert!(last.contains("self-check: hpet "), "{line}");
}

#[test]
fn a_stated_tsc_rate_needs_no_calibration_reads() {
    let m = SimMachine::bare_metal(); // leaf 0x15 states the TSC's rate
    let mut map = |phys: u64, len: usize| Some(MmioRegion::simulated(phys as usize, len));
    let p = probe(
        &m,
        Platform::new()
            .hpet_mapper(&mut map)
            .hpet_region(m.hpet_region().unwrap())
            .pm_timer(0x608, false)
            .tsc_sync(SyncStatus::SingleCpu)
            .self_check(fast_check()),
    );
    let cost = p.report().cost();
    for id in SourceId::ALL {
        assert_eq!(
            cost.calibration_reads(id),
            0,
            "{id:?}\n{}",
            p.report().table()
        );
    }
    assert!(cost.self_check_reads(SourceId::Hpet) > 0);
    assert!(cost.self_check_reads(SourceId::AcpiPm) > 0);
    assert_eq!(
        cost.self_check_reads(SourceId::Tsc),
        0,
        "the TSC does not trap"
    );
    assert!(cost.duration().is_some());
}

/// A trapping clock that counts its own reads (simulated time, 1 GHz).
struct SelfCounting {
    m: &'static SimMachine,
    reads: AtomicU64,
}

impl ClockSource for SelfCounting {
    fn name(&self) -> &'static str {
        "counting"
    }
    fn read(&self) -> u64 {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.m.advance(500); // an exit's worth
        self.m.now_ns()
    }
    fn frequency(&self) -> Frequency {
        Frequency::from_hz(1_000_000_000).unwrap()
    }
    fn quality(&self) -> Quality {
        Quality::new(50)
    }
    fn stability(&self) -> Stability {
        Stability::device_counter(true, true)
    }
    fn read_cost(&self) -> ReadCost {
        ReadCost::OneTrap
    }
}

#[test]
fn the_os_reference_and_an_extra_source_are_counted_exactly() {
    let m: &'static SimMachine = Box::leak(Box::new(SimConfig::cpu(2_000_000_000).build()));
    let reference: &'static SelfCounting = Box::leak(Box::new(SelfCounting {
        m,
        reads: AtomicU64::new(0),
    }));
    let extra: &'static SelfCounting = Box::leak(Box::new(SelfCounting {
        m,
        reads: AtomicU64::new(0),
    }));
    let p = probe(
        m,
        Platform::new()
            .tsc_reference(reference)
            .extra(extra)
            .tsc_sync(SyncStatus::SingleCpu)
            .self_check(fast_check()),
    );
    let cost = *p.report().cost();
    let by_reference = reference.reads.load(Ordering::SeqCst);
    assert!(by_reference > 0, "{}", p.report().table());
    assert_eq!(cost.os_reference_reads() as u64, by_reference);
    assert_eq!(
        cost.self_check_reads(SourceId::Extra) as u64,
        extra.reads.load(Ordering::SeqCst)
    );
    assert!(cost.self_check_reads(SourceId::Extra) > 0);
    assert!(cost.to_string().contains("os reference "), "{cost}");
}

#[test]
fn an_owned_machine_reports_no_cost() {
    let m = hpet_only();
    let first = probe(&m, hpet_platform(&m));
    let second = probe(&m, hpet_platform(&m));
    assert_eq!(second.report().cost().trapping_reads(), 0);
    assert_eq!(second.report().cost().duration(), None);
    let table = second.report().table().to_string();
    assert!(!table.lines().any(|l| l.starts_with("probe ")), "{table}");
    drop(first);
}
