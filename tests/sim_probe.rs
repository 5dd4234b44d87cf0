//! The facade on simulated machines: what gets selected per profile, the
//! no-trap rule, rejection reasons, self-check demotions, run-time watchdog
//! switching without a backward step, guest-stopped handling.
#![cfg(all(
    feature = "kvmclock",
    feature = "hyperv",
    feature = "tsc",
    feature = "hpet",
    feature = "acpi-pm"
))]

use clockhal::tsc::SyncStatus;
use clockhal::x86::MmioRegion;
use clockhal::{
    probe, ClockSource, Demotion, Duration, Fault, Frequency, MemberVerdict, Outcome, Platform,
    Policy, Quality, ReadCost, Rejection, Report, SelfCheck, SourceId, Stability, Verdict,
    WatchdogEvent,
};
use clockhal_sim::{AcpiTablesBuilder, HpetConfig, PmTimerConfig, SimConfig, SimMachine};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

/// The OS keeps the CMOS RTC to itself (with the `rtc` feature it is
/// otherwise the TSC's calibration reference of last resort).
fn keeps_the_rtc(p: Platform<'static>) -> Platform<'static> {
    #[cfg(feature = "rtc")]
    let p = p.rtc_reference(false);
    p
}

/// A short rate-check interval keeps the simulated pacing loop quick.
fn fast_check() -> SelfCheck {
    SelfCheck::new().rate_interval(Duration::from_millis(1))
}

/// Everything a single-CPU kernel would pass on machine `m`.
fn platform(m: &SimMachine) -> Platform<'static> {
    let mut p = Platform::new()
        .tsc_sync(SyncStatus::SingleCpu)
        .self_check(fast_check());
    if let Some(r) = m.hpet_region() {
        p = p.hpet_region(r);
    }
    if let Some(pm) = &m.config().pm_timer {
        p = p.pm_timer(pm.port, pm.bits32);
    }
    if m.config().kvm.is_some() {
        p = p
            .pvclock_areas(m.alloc_pvclock_areas(1))
            .pvclock_wall_clock(m.alloc_wall_clock());
    }
    if m.config().hyperv.is_some() {
        p = p
            .hyperv_tsc_page(m.alloc_hv_page())
            .hyperv_guest_os_id(clockhal::hyperv::DEFAULT_GUEST_OS_ID);
    }
    p
}

fn verdict(r: &Report, id: SourceId) -> Verdict {
    r.get(id)
        .unwrap_or_else(|| panic!("{id} not listed"))
        .verdict
}

fn rejection_text(r: &Report, id: SourceId) -> String {
    match verdict(r, id) {
        Verdict::Rejected(why) => why.to_string(),
        v => panic!("{id} not rejected: {v:?}"),
    }
}

/// The selection rule every profile must obey.
fn assert_no_trap_rule(r: &Report) {
    let selected = r.selected().expect("something selected");
    let no_trap_eligible = r
        .candidates()
        .any(|c| c.is_eligible() && c.read_cost() == Some(ReadCost::NoTrap));
    if no_trap_eligible {
        assert_eq!(selected.read_cost(), Some(ReadCost::NoTrap), "{r:#}");
    }
}

#[test]
fn kvm_selects_kvmclock_and_feeds_the_tsc_its_rate() {
    let m = SimMachine::kvm();
    let p = probe(&m, platform(&m));
    let report = *p.report();
    let r = &report;
    assert_eq!(r.selected_id(), Some(SourceId::Kvmclock), "{}", r.table());
    assert_no_trap_rule(r);
    let tsc = r.get(SourceId::Tsc).unwrap();
    assert_eq!(
        tsc.note.to_string(),
        "rate from pvclock; not invariant: supervised by the watchdog"
    );
    // Exact to pvclock's own rounding of `mul` (< 2^-31 relative).
    let hz = tsc.frequency().unwrap().hz_rounded() as i64;
    assert!((hz - 2_600_000_000).abs() <= 2, "{hz}");
    // No invariant bit on this host: eligible only under supervision, and
    // below the paravirtual clock.
    assert!(tsc.is_eligible());
    assert_eq!(tsc.rating(), Some(clockhal::tsc::SUPERVISED_RATING));
    assert!(r.get(SourceId::Hpet).unwrap().is_eligible());
    assert!(r.get(SourceId::AcpiPm).unwrap().is_eligible());
    assert!(
        rejection_text(r, SourceId::HypervPage).contains("Microsoft Hv"),
        "{}",
        r.table()
    );
    assert!(rejection_text(r, SourceId::HypervMsr).contains("Microsoft Hv"));
    assert!(r.get(SourceId::Os).is_none() && r.get(SourceId::Extra).is_none());

    let line = r.to_string();
    assert!(line.starts_with("kvmclock(400, selected) "), "{line}");
    assert!(line.contains("hpet(250, traps)"), "{line}");
    assert!(line.contains("acpi-pm(150, fast mode)"), "{line}");
    assert!(
        !line.contains("hyperv"),
        "rejected ones only in {{:#}}: {line}"
    );
    assert!(format!("{r:#}").contains("hyperv-page(-, no \"Microsoft Hv\" signature)"));

    let clock = p.into_clock().unwrap();
    assert_eq!(clock.source_name(), "kvmclock");
    let t0 = clock.now();
    m.advance(2_000_000);
    let d = clock.elapsed(t0);
    assert!(
        d >= Duration::from_millis(2) && d < Duration::from_micros(2_100),
        "{d}"
    );
}

#[test]
fn bare_metal_selects_the_exact_tsc() {
    let m = SimMachine::bare_metal();
    let p = probe(&m, platform(&m));
    let report = *p.report();
    let r = &report;
    assert_eq!(r.selected_id(), Some(SourceId::Tsc), "{}", r.table());
    let tsc = r.selected().unwrap();
    assert_eq!(tsc.rating(), Some(Quality::new(390)));
    assert_eq!(tsc.note.to_string(), "rate from CPUID leaf 0x15");
    assert_no_trap_rule(r);
    assert_eq!(rejection_text(r, SourceId::Kvmclock), "not a KVM guest");
    assert!(rejection_text(r, SourceId::HypervPage).contains("no hypervisor"));
    let hpet = r.get(SourceId::Hpet).unwrap();
    assert_eq!(
        hpet.frequency(),
        Some(Frequency::from_period_fs(69_841_279).unwrap())
    );
    assert!(hpet.is_eligible());
    let clock = p.into_clock().unwrap();
    let t0 = clock.now();
    m.advance(1_000_000_000);
    let d = clock.elapsed(t0).as_nanos();
    assert!((1_000_000_000..1_000_010_000).contains(&d), "{d}");
    assert_eq!(
        clock.ticks_to_duration(2_592_000_000),
        Duration::from_secs(1)
    );
    assert_eq!(clock.duration_to_ticks(Duration::from_millis(1)), 2_592_000);
}

#[test]
fn hyperv_selects_the_reference_page() {
    let m = SimMachine::hyperv();
    let p = probe(&m, platform(&m));
    let report = *p.report();
    let r = &report;
    assert_eq!(r.selected_id(), Some(SourceId::HypervPage), "{}", r.table());
    assert_no_trap_rule(r);
    let msr = r.get(SourceId::HypervMsr).unwrap();
    assert!(msr.is_eligible());
    assert_eq!(msr.note.to_string(), "traps");
    let tsc = r.get(SourceId::Tsc).unwrap();
    assert_eq!(tsc.note.to_string(), "rate from the Hyper-V frequency MSR");
    assert_eq!(
        rejection_text(r, SourceId::Hpet),
        "no HPET region or mapper given"
    );
    assert_eq!(rejection_text(r, SourceId::Kvmclock), "not a KVM guest");
    let clock = p.into_clock().unwrap();
    m.reset_traps();
    for _ in 0..100 {
        clock.now();
    }
    assert_eq!(m.traps().exits(), 0, "the page path never exits");
}

#[test]
fn hyperv_without_page_memory_says_so_and_uses_a_no_trap_source() {
    let m = SimMachine::hyperv();
    let plat = Platform::new()
        .tsc_sync(SyncStatus::SingleCpu)
        .self_check(fast_check())
        .pm_timer(0x608, false);
    let p = probe(&m, plat);
    let report = *p.report();
    let r = &report;
    assert_eq!(
        rejection_text(r, SourceId::HypervPage),
        "no reference TSC page memory given"
    );
    // The TSC (invariant, rate from the MSR) beats the trapping MSR clock.
    assert_eq!(r.selected_id(), Some(SourceId::Tsc), "{}", r.table());
    assert_no_trap_rule(r);
}

#[test]
fn qemu_tcg_calibrates_the_tsc_against_the_hpet() {
    let m = SimMachine::qemu_tcg();
    let p = probe(&m, platform(&m));
    let report = *p.report();
    let r = &report;
    // No stated rate anywhere: calibrated against the HPET (the automatic
    // reference), then selected as the only no-trap source.
    let tsc = r.get(SourceId::Tsc).unwrap();
    assert!(
        tsc.note
            .to_string()
            .starts_with("rate calibrated against hpet"),
        "{}",
        tsc.note
    );
    let hz = tsc.frequency().unwrap().hz_rounded() as i64;
    assert!((hz - 2_000_000_000).abs() < 200_000, "{hz}");
    assert_eq!(r.selected_id(), Some(SourceId::Tsc), "{}", r.table());
    assert_eq!(rejection_text(r, SourceId::Kvmclock), "not a KVM guest");
    assert_no_trap_rule(r);
}

#[test]
fn unsynchronised_tsc_leaves_only_trapping_sources_and_the_hpet_wins() {
    let m = SimMachine::qemu_tcg();
    let plat = platform(&m).tsc_sync(SyncStatus::Unsynchronized {
        worst_backward_ticks: 5_000,
    });
    let p = probe(&m, plat);
    let report = *p.report();
    let r = &report;
    assert_eq!(
        r.get(SourceId::Tsc).unwrap().rating(),
        Some(Quality::UNUSABLE)
    );
    assert_eq!(r.selected_id(), Some(SourceId::Hpet), "{}", r.table());
    assert!(
        r.to_string()
            .starts_with("hpet(250, selected, traps) acpi-pm(150, fast mode) tsc(-100, "),
        "{r}"
    );
    assert!(p.into_clock().is_ok());
}

#[test]
fn acpi_tables_and_the_hpet_mapper_are_used() {
    let m = SimMachine::kvm();
    let image = AcpiTablesBuilder::q35().build();
    let memory = image.memory();
    let mapped = AtomicU64::new(0);
    let mut map = |phys: u64, len: usize| {
        mapped.store(phys, Ordering::Relaxed);
        Some(MmioRegion::simulated(phys as usize, len))
    };
    let plat = Platform::new()
        .acpi(image.rsdp(), &memory)
        .hpet_mapper(&mut map)
        .pvclock_areas(m.alloc_pvclock_areas(1))
        .self_check(fast_check());
    let p = probe(&m, plat);
    let report = *p.report();
    let r = &report;
    assert_eq!(mapped.load(Ordering::Relaxed), 0xFED0_0000);
    assert!(
        r.get(SourceId::Hpet).unwrap().is_eligible(),
        "{}",
        r.table()
    );
    assert!(
        r.get(SourceId::AcpiPm).unwrap().is_eligible(),
        "{}",
        r.table()
    );
    assert_eq!(r.selected_id(), Some(SourceId::Kvmclock));

    // microvm: no HPET table, no PM timer; each reason names the table.
    let image = AcpiTablesBuilder::microvm().build();
    let memory = image.memory();
    let plat = Platform::new()
        .acpi(image.rsdp(), &memory)
        .hpet_mapper(&mut map)
        .pvclock_areas(m.alloc_pvclock_areas(1))
        .self_check(fast_check());
    drop(p);
    let p = probe(&m, plat);
    let report = *p.report();
    let r = &report;
    assert_eq!(rejection_text(r, SourceId::Hpet), "ACPI: no HPET table");
    assert!(
        rejection_text(r, SourceId::AcpiPm).starts_with("ACPI FACP"),
        "{}",
        r.table()
    );
    assert_eq!(r.selected_id(), Some(SourceId::Kvmclock));

    // A mapper that refuses: the reason says so.
    let image = AcpiTablesBuilder::q35().build();
    let memory = image.memory();
    let mut refuse = |_: u64, _: usize| None;
    let plat = Platform::new()
        .acpi(image.rsdp(), &memory)
        .hpet_mapper(&mut refuse)
        .self_check(fast_check());
    drop(p);
    let p = probe(&m, plat);
    assert_eq!(
        rejection_text(p.report(), SourceId::Hpet),
        "OS did not map the HPET at 0xfed00000"
    );
    drop(p);
}

#[test]
fn backend_errors_become_reasons() {
    // A stuck HPET and a KVM host that never writes the pvclock areas.
    let m = SimMachine::kvm_config()
        .with_hpet(HpetConfig {
            stuck: true,
            ..HpetConfig::qemu()
        })
        .build();
    m.with_kvm(|k, _| k.set_scale_override(Some((0, 0))));
    let p = probe(&m, platform(&m));
    let report = *p.report();
    let r = &report;
    assert_eq!(
        rejection_text(r, SourceId::Hpet),
        "HPET main counter does not advance"
    );
    assert!(
        matches!(
            verdict(r, SourceId::Kvmclock),
            Verdict::Rejected(Rejection::Kvmclock(_))
        ),
        "{}",
        r.table()
    );
    assert_no_trap_rule(r);
}

/// A 1 GHz clock on simulated time, with a switchable rate error and a
/// switchable stuck mode; every read costs 20 ns of machine time.
struct Fake {
    m: &'static SimMachine,
    name: &'static str,
    quality: i32,
    /// Rate error in ppm applied since `drift_from` (0: not yet).
    drift_ppm: AtomicI64,
    drift_from: AtomicU64,
    stuck: AtomicBool,
}

impl Fake {
    fn new(m: &'static SimMachine, name: &'static str, quality: i32) -> &'static Fake {
        Box::leak(Box::new(Fake {
            m,
            name,
            quality,
            drift_ppm: AtomicI64::new(0),
            drift_from: AtomicU64::new(0),
            stuck: AtomicBool::new(false),
        }))
    }
    fn start_drift(&self, ppm: i64) {
        self.drift_from.store(self.m.now_ns(), Ordering::SeqCst);
        self.drift_ppm.store(ppm, Ordering::SeqCst);
    }
}

impl ClockSource for Fake {
    fn name(&self) -> &'static str {
        self.name
    }
    fn read(&self) -> u64 {
        if self.stuck.load(Ordering::SeqCst) {
            return 42;
        }
        self.m.advance(20);
        let now = self.m.now_ns();
        let from = self.drift_from.load(Ordering::SeqCst);
        if from == 0 {
            return now;
        }
        let err = now.saturating_sub(from) as i128 * self.drift_ppm.load(Ordering::SeqCst) as i128
            / 1_000_000;
        (now as i128 + err) as u64
    }
    fn frequency(&self) -> Frequency {
        Frequency::from_hz(1_000_000_000).unwrap()
    }
    fn quality(&self) -> Quality {
        Quality::new(self.quality)
    }
    fn stability(&self) -> Stability {
        Stability::MONOTONIC_PER_CPU | Stability::MONOTONIC_ACROSS_CPUS
    }
    fn read_cost(&self) -> ReadCost {
        ReadCost::NoTrap
    }
}

fn leaked(m: SimMachine) -> &'static SimMachine {
    Box::leak(Box::new(m))
}

#[test]
fn a_low_rated_no_trap_source_beats_higher_rated_trapping_ones() {
    let m = leaked(SimMachine::qemu_tcg());
    let slow_but_free = Fake::new(m, "os-pit", 50);
    let plat = platform(m)
        .tsc_sync(SyncStatus::Unsynchronized {
            worst_backward_ticks: 5_000,
        })
        .extra(slow_but_free);
    let p = probe(m, plat);
    let report = *p.report();
    let r = &report;
    assert_eq!(
        r.get(SourceId::Hpet).unwrap().rating(),
        Some(Quality::new(250))
    );
    assert_eq!(r.selected_id(), Some(SourceId::Extra), "{}", r.table());
    assert_eq!(r.selected().unwrap().name, "os-pit");
}

#[test]
fn self_check_demotes_a_stuck_source_and_a_wrong_rate() {
    // Invariant TSC without any stated rate: it is calibrated against the
    // OS's reference, which is 5% fast, so the TSC rate is 5% off.
    let m = leaked(
        SimConfig::cpu(2_000_000_000)
            .with_invariant_tsc(true)
            .with_hpet(HpetConfig::classic())
            .with_pm_timer(PmTimerConfig::default())
            .build(),
    );
    let bad_reference = Fake::new(m, "bad-ref", 1);
    bad_reference.drift_from.store(1, Ordering::SeqCst);
    bad_reference.drift_ppm.store(50_000, Ordering::SeqCst);
    let stuck = Fake::new(m, "stuck", 600);
    stuck.stuck.store(true, Ordering::SeqCst);
    let plat = platform(m).tsc_reference(bad_reference).extra(stuck);
    let p = probe(m, plat);
    let report = *p.report();
    let r = &report;
    assert_eq!(
        r.get(SourceId::Extra).unwrap().demotion(),
        Some(Demotion::NotAdvancing { reads: 2_000 }),
        "{}",
        r.table()
    );
    match r.get(SourceId::Tsc).unwrap().demotion() {
        Some(Demotion::RateDisagrees { ppm, against }) => {
            assert_eq!(against, SourceId::Hpet);
            // Calibrated against a 5% fast reference, the TSC rate is 4.76%
            // low (1/1.05), so the TSC clock runs 5% fast; the measure's
            // own windows allow a little either way.
            assert!((45_000..=51_000).contains(&ppm), "{ppm}\n{}", r.table());
        }
        v => panic!("{v:?}\n{}", r.table()),
    }
    assert!(r.get(SourceId::Hpet).unwrap().is_eligible());
    assert!(r.get(SourceId::AcpiPm).unwrap().is_eligible());
    assert_eq!(r.selected_id(), Some(SourceId::Hpet), "{}", r.table());
    assert!(
        r.to_string().contains("tsc(390, demoted: rate off by "),
        "{r}"
    );
    assert!(r
        .table()
        .to_string()
        .contains("did not advance in 2000 reads"));
}

#[test]
fn policy_force_wins_and_is_reported() {
    let m = SimMachine::kvm();
    let plat = platform(&m).policy(Policy::new().force("acpi-pm"));
    let p = probe(&m, plat);
    let report = *p.report();
    let r = &report;
    assert_eq!(r.selected_id(), Some(SourceId::AcpiPm));
    assert!(r.is_forced());
    assert!(
        r.to_string()
            .starts_with("acpi-pm(150, selected, forced, fast mode)"),
        "{r}"
    );

    let plat = platform(&m).policy(Policy::new().force("hyperv-page"));
    drop(p);
    let p = probe(&m, plat);
    let report = *p.report();
    let r = &report;
    assert_eq!(r.selected_id(), Some(SourceId::Kvmclock));
    assert!(!r.is_forced());
    assert!(r
        .table()
        .to_string()
        .contains("policy forced \"hyperv-page\", which is not available"));
}

#[test]
fn watchdog_demotes_a_drifting_source_and_switches_without_stepping_back() {
    let m = leaked(SimMachine::kvm());
    // An OS-supplied source (its correctness is the OS's word: conditional).
    let fake = Fake::new(m, "drifty", 600);
    let p = probe(m, platform(m).extra(fake));
    assert_eq!(
        p.report().selected_id(),
        Some(SourceId::Extra),
        "{}",
        p.report().table()
    );
    let clock = p.into_clock().unwrap();
    assert_eq!(clock.source_name(), "drifty");

    let mut last = clock.now();
    let mut check = |what: &str| {
        let t = clock.now();
        assert!(t >= last, "{what}: {t} < {last}");
        last = t;
    };
    // Healthy: the watchdog starts, then judges OK against kvmclock.
    assert!(
        matches!(
            clock.watchdog_tick(),
            WatchdogEvent::Judged {
                outcome: Outcome::Started,
                ..
            }
        ),
        "first tick"
    );
    for _ in 0..3 {
        m.advance(150_000_000);
        check("healthy");
        let e = clock.watchdog_tick();
        assert!(
            matches!(
                e,
                WatchdogEvent::Judged {
                    source: SourceId::Extra,
                    reference: SourceId::Kvmclock,
                    verdict: MemberVerdict::Ok { .. },
                    ..
                }
            ),
            "{e:?}"
        );
    }
    // 2% fast from now on: kvmclock, the HPET and the PM timer agree
    // against it; a conditional source is demoted at the first such round.
    fake.start_drift(20_000);
    m.advance(150_000_000);
    check("drifting");
    let e = clock.watchdog_tick();
    check("after tick");
    let WatchdogEvent::Switched { from, to, reason } = e else {
        panic!("{e:?}");
    };
    assert_eq!((from, to), (SourceId::Extra, SourceId::Kvmclock));
    assert!(
        matches!(reason, Demotion::Watchdog { fault: Fault::Drift { skew_ppm }, against: SourceId::Kvmclock } if (19_000..=21_000).contains(&skew_ppm)),
        "{reason:?}"
    );
    assert_eq!(clock.source_name(), "kvmclock");
    assert_eq!(clock.switches(), 1);

    // The new source continues from the last instant: no step back, and it
    // then runs at kvmclock's (true) rate.
    let before = clock.now();
    m.advance(10_000_000);
    let after = clock.now();
    assert!(after >= before);
    let d = after.duration_since(before).as_nanos();
    assert!((10_000_000..10_010_000).contains(&d), "{d}");
    let report = clock.report();
    assert_eq!(report.selected_id(), Some(SourceId::Kvmclock));
    assert!(matches!(
        report.get(SourceId::Extra).unwrap().demotion(),
        Some(Demotion::Watchdog { .. })
    ));
    assert!(
        report.to_string().starts_with("kvmclock(400, selected)"),
        "{report}"
    );
    // The watchdog now guards kvmclock.
    let e = clock.watchdog_tick();
    assert!(
        matches!(
            e,
            WatchdogEvent::Judged {
                source: SourceId::Kvmclock,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn an_unconditional_source_needs_strikes_and_the_majority() {
    // The HPET drifts 1000 ppm on a KVM guest: kvmclock, the TSC and the PM
    // timer agree, so the HPET is the liar — never kvmclock, which stays.
    let m = leaked(SimMachine::kvm());
    let clock = probe(m, platform(m)).into_clock().unwrap();
    assert_eq!(clock.source_name(), "kvmclock");
    clock.watchdog_tick();
    m.with_hpet(|h, ctx| h.set_rate_error_ppm(ctx, 1_000));
    let mut demoted = None;
    for _ in 0..6 {
        m.advance(250_000_000);
        match clock.watchdog_tick() {
            WatchdogEvent::Demoted { source, reason, .. } => demoted = Some((source, reason)),
            WatchdogEvent::Switched { .. } => panic!("kvmclock must not be demoted"),
            _ => {}
        }
    }
    let (source, reason) = demoted.expect("the HPET was demoted");
    assert_eq!(source, SourceId::Hpet);
    assert!(
        matches!(reason, Demotion::Watchdog { fault: Fault::Drift { skew_ppm }, .. } if (900..=1_100).contains(&skew_ppm)),
        "{reason:?}"
    );
    assert_eq!(clock.source_name(), "kvmclock");
}

#[test]
fn a_slow_source_is_demoted_too_and_time_does_not_jump() {
    // 2% slow: at the switch kvmclock is ahead of the clock's timeline; the
    // clock continues from its last instant (no jump either way).
    let m = leaked(SimMachine::kvm());
    let fake = Fake::new(m, "slow", 600);
    let p = probe(m, platform(m).extra(fake));
    let clock = p.into_clock().unwrap();
    clock.watchdog_tick();
    fake.start_drift(-20_000);
    let mut last = clock.now();
    let mut switched = None;
    for _ in 0..6 {
        m.advance(150_000_000);
        let t = clock.now();
        assert!(t >= last);
        last = t;
        if let WatchdogEvent::Switched { from, to, reason } = clock.watchdog_tick() {
            switched = Some((from, to, reason));
            let t = clock.now();
            assert!(t >= last);
            // No forward jump: at most the tick's own reads passed.
            assert!(
                t.duration_since(last) < Duration::from_micros(50),
                "{}",
                t.duration_since(last)
            );
            last = t;
        }
    }
    let (from, to, reason) = switched.expect("switched");
    assert_eq!((from, to), (SourceId::Extra, SourceId::Kvmclock));
    assert!(
        matches!(reason, Demotion::Watchdog { fault: Fault::Drift { skew_ppm }, .. } if skew_ppm < -19_000),
        "{reason:?}"
    );
}

#[test]
fn guest_stopped_skips_the_interval_but_keeps_watching() {
    let m = SimMachine::kvm();
    let clock = probe(&m, platform(&m)).into_clock().unwrap();
    assert!(matches!(
        clock.watchdog_tick(),
        WatchdogEvent::Judged {
            source: SourceId::Kvmclock,
            ..
        }
    ));
    m.with_kvm(|k, ctx| {
        k.pause_guest();
        k.update_all(ctx);
    });
    m.advance(5_000_000_000); // the pause
    clock.now(); // a read sees GUEST_STOPPED and latches it
    assert_eq!(clock.watchdog_tick(), WatchdogEvent::GuestStopped);
    // The next interval is judged again (the baseline moved, the strikes
    // stayed).
    m.advance(250_000_000);
    let e = clock.watchdog_tick();
    assert!(
        matches!(
            e,
            WatchdogEvent::Judged {
                outcome: Outcome::Judged,
                ..
            }
        ),
        "{e:?}"
    );
    clock.restart_watchdog();
    assert_eq!(clock.watchdog_tick(), WatchdogEvent::Restarted);
}

#[test]
fn single_candidate_has_no_watchdog_and_no_clock_is_an_error() {
    let m = SimMachine::bare_metal();
    let plat = Platform::new()
        .tsc_sync(SyncStatus::SingleCpu)
        .self_check(fast_check());
    let clock = probe(&m, plat).into_clock().unwrap();
    assert_eq!(clock.source_name(), "tsc");
    assert_eq!(clock.watchdog_tick(), WatchdogEvent::Inactive);
    drop(clock);

    // TCG without HPET/PM access, and the PIT (and the CMOS RTC) kept by
    // the OS: nothing to rate the TSC with.
    let m = SimMachine::qemu_tcg();
    let p = probe(
        &m,
        keeps_the_rtc(Platform::new().pit(None).self_check(fast_check())),
    );
    assert_eq!(p.report().selected_id(), None);
    let report = *p.report();
    let err = p.into_clock().unwrap_err();
    assert_eq!(err.report, report);
    assert_eq!(err.reason, clockhal::NoClockReason::NothingUsable);
    assert!(report
        .table()
        .to_string()
        .contains("no usable clock source"));
}

#[test]
fn the_table_lists_every_candidate_with_its_descriptors() {
    let m = SimMachine::kvm();
    let p = probe(&m, platform(&m));
    let table = p.report().table().to_string();
    let lines: Vec<&str> = table.lines().collect();
    // Header, seven candidates, the probe's cost.
    assert_eq!(lines.len(), 9, "{table}");
    assert!(
        lines[8].starts_with("probe ") && lines[8].contains(" ms; "),
        "{table}"
    );
    let pit = lines.iter().find(|l| l.starts_with("pit")).unwrap();
    assert!(
        pit.contains("rejected") && pit.contains("not needed"),
        "{pit}"
    );
    assert!(lines[0].starts_with("source") && lines[0].contains("read cost"));
    let kvm = lines.iter().find(|l| l.starts_with("kvmclock")).unwrap();
    assert!(
        kvm.contains("selected") && kvm.contains("400") && kvm.contains("1000000000 Hz"),
        "{kvm}"
    );
    assert!(kvm.contains("no-trap") && kvm.contains("migr"), "{kvm}");
    let hpet = lines.iter().find(|l| l.starts_with("hpet")).unwrap();
    assert!(
        hpet.contains("usable") && hpet.contains("100000000 Hz") && hpet.contains("one-trap"),
        "{hpet}"
    );
    let hv = lines.iter().find(|l| l.starts_with("hyperv-msr")).unwrap();
    assert!(
        hv.contains("rejected") && hv.contains("no \"Microsoft Hv\" signature"),
        "{hv}"
    );
}

#[test]
fn the_clock_lives_in_a_static_and_owns_the_hardware() {
    let m: &'static SimMachine = leaked(SimMachine::kvm());
    let clock: &'static clockhal::Clock<&SimMachine> =
        Box::leak(Box::new(probe(m, platform(m)).into_clock().unwrap()));
    let handle = std::thread::spawn(move || clock.now());
    let t = handle.join().unwrap();
    assert!(clock.now() >= t);
    assert!(clock.kvmclock().is_some());
    // A second probe while the first clock lives is refused: it would tear
    // the first one's registrations down when dropped.
    let second = probe(m, platform(m));
    assert_eq!(second.report().selected_id(), None);
    assert!(second
        .report()
        .candidates()
        .all(|c| c.verdict == Verdict::Rejected(Rejection::HardwareOwned)));
    drop(second);
    assert!(
        m.with_kvm(|k, _| k.registered(0)).unwrap().is_some(),
        "still registered"
    );
}

#[test]
fn tsc_sync_found_after_probing_updates_rating_and_selection() {
    let m = SimMachine::bare_metal();
    // Two CPUs, no warp test yet: the TSC waits, the HPET runs.
    let plat = platform(&m).cpus(2).tsc_sync(SyncStatus::Unknown);
    let clock = probe(&m, plat).into_clock().unwrap();
    let r = clock.report();
    let tsc = r.get(SourceId::Tsc).unwrap();
    assert_eq!(tsc.rating(), Some(Quality::UNUSABLE));
    assert!(!tsc.stability().contains(Stability::MONOTONIC_ACROSS_CPUS));
    assert!(
        tsc.note
            .to_string()
            .contains("2 CPUs and the warp test did not decide"),
        "{}",
        tsc.note
    );
    assert_eq!(clock.source_id(), SourceId::Hpet, "{}", r.table());

    clock.set_tsc_sync(SyncStatus::Unsynchronized {
        worst_backward_ticks: 900,
    });
    assert_eq!(clock.source_id(), SourceId::Hpet);
    let t0 = clock.now();
    clock.set_tsc_sync(SyncStatus::Synchronized);
    let r = clock.report();
    let tsc = r.get(SourceId::Tsc).unwrap();
    assert_eq!(tsc.rating(), Some(Quality::new(390)));
    assert!(tsc.stability().contains(Stability::MONOTONIC_ACROSS_CPUS));
    assert_eq!(clock.source_name(), "tsc");
    assert!(clock.now() >= t0);
}

#[test]
fn readers_on_other_threads_stay_ordered_across_a_switch() {
    // Three reader threads check that every instant is at least the largest
    // one any thread had *finished* reading before (cross-thread order),
    // while the main thread drives the drift, the watchdog and the switch.
    let m = leaked(SimMachine::kvm());
    let fake = Fake::new(m, "drifty", 600);
    let p = probe(m, platform(m).extra(fake));
    let clock = p.into_clock().unwrap();
    let seen = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                while !stop.load(Ordering::SeqCst) {
                    let before = seen.load(Ordering::SeqCst);
                    let t = clock.now().as_nanos();
                    assert!(t >= before, "{t} < {before}");
                    seen.fetch_max(t, Ordering::SeqCst);
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        clock.watchdog_tick();
        fake.start_drift(50_000);
        let mut switched = false;
        for _ in 0..8 {
            m.advance(150_000_000);
            if matches!(clock.watchdog_tick(), WatchdogEvent::Switched { .. }) {
                switched = true;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        stop.store(true, Ordering::SeqCst);
        assert!(switched);
    });
    assert!(reads.load(Ordering::Relaxed) > 1_000);
    assert_eq!(clock.source_name(), "kvmclock");
}

#[test]
fn microvm_calibrates_the_tsc_against_the_pit_and_selects_it() {
    // QEMU TCG microvm: no HPET, no PM timer, no stated TSC rate; a PIT.
    let m = SimMachine::qemu_tcg_microvm();
    let p = probe(
        &m,
        Platform::new()
            .tsc_sync(SyncStatus::SingleCpu)
            .self_check(fast_check()),
    );
    let r = *p.report();
    let pit = r.get(SourceId::Pit).unwrap();
    assert!(
        pit.note.to_string().contains("calibration reference only"),
        "{pit:?}"
    );
    assert!(!pit.rating().unwrap().auto_selectable());
    let tsc = r.get(SourceId::Tsc).unwrap();
    assert!(
        tsc.note.to_string().contains("rate calibrated against pit"),
        "{}",
        tsc.note
    );
    assert_eq!(r.selected_id(), Some(SourceId::Tsc));
    let clock = p.into_clock().unwrap();
    // Nothing can supervise it: it stays without watchdog ticks.
    let t0 = clock.now();
    m.advance(5_000_000_000);
    let took = clock.elapsed(t0).as_nanos();
    assert!(
        took.abs_diff(5_000_000_000) <= 500_000,
        "5 s measured as {took} ns"
    );
    assert_eq!(clock.source_id(), SourceId::Tsc);
    let f = clock.tsc().unwrap().frequency();
    let err = f.ppb_from(&Frequency::from_hz(2_000_000_000).unwrap()) / 1000;
    assert!(err.abs() <= 100, "rate off by {err} ppm");

    // An OS that keeps the PIT (and the CMOS RTC) gets no clock here, and
    // no PIT port is touched.
    let m = SimMachine::qemu_tcg_microvm();
    let tap = clockhal_sim::PortTap::new(&m);
    let p = probe(
        &tap,
        keeps_the_rtc(Platform::new().pit(None).tsc_sync(SyncStatus::SingleCpu)),
    );
    assert_eq!(p.report().selected_id(), None);
    let touched: Vec<_> = tap
        .log()
        .into_iter()
        .filter(|a| match *a {
            clockhal_sim::PortAccess::Read { port, .. }
            | clockhal_sim::PortAccess::Write { port, .. } => {
                (0x40..=0x43).contains(&port) || port == 0x61
            }
        })
        .collect();
    assert!(touched.is_empty(), "{touched:?}");
}
