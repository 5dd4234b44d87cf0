//! `probed`: the suite over a real clockhal probe of the simulated KVM
//! machine, and the SOURCE lines from its report, read back with the
//! runner's parser.
#![cfg(feature = "clockhal")]

use clockhal::tsc::SyncStatus;
use clockhal::{probe, Duration, Platform, SelfCheck};
use clockhal_conformance::line::{self, Line, SourceRecord};
use clockhal_conformance::probed::{write_sources, ProbedSources, SOURCE_IDS};
use clockhal_conformance::{CheckResult, Config, Status, Suite};
use clockhal_sim::{SimConfig, SimMachine};

fn kvm_platform(m: &SimMachine) -> Platform<'static> {
    Platform::new()
        .tsc_sync(SyncStatus::SingleCpu)
        .self_check(SelfCheck::new().rate_interval(Duration::from_millis(1)))
        .hpet_region(m.hpet_region().unwrap())
        .pm_timer(0x608, false)
        .pvclock_areas(m.alloc_pvclock_areas(1))
}

fn sources_of(text: &str) -> Vec<SourceRecord<'_>> {
    text.lines()
        .filter_map(|l| match line::parse(l) {
            Line::Source(s) => Some(s),
            _ => None,
        })
        .collect()
}

#[test]
fn kvm_sources_reference_selection_and_source_lines() {
    let m = SimMachine::kvm();
    let probed = probe(&m, kvm_platform(&m));
    let report = *probed.report();
    let clock = probed.into_clock().ok();
    let sources = ProbedSources::new(clock.as_ref());

    let names: Vec<_> = sources.as_slice().iter().map(|s| s.name()).collect();
    assert_eq!(names, ["kvmclock", "tsc", "hpet", "acpi-pm"]);
    assert_eq!(sources.reference().map(|r| r.name()), Some("hpet"));
    assert_eq!(sources.selected(), Some("kvmclock"));

    let mut text = String::new();
    write_sources(&mut text, &report).unwrap();
    let recs = sources_of(&text);
    let got: Vec<_> = recs
        .iter()
        .map(|s| (s.name, s.present, s.selected))
        .collect();
    assert_eq!(
        got,
        [
            ("kvmclock", true, true),
            ("hyperv-page", false, false),
            ("hyperv-msr", false, false),
            ("tsc", true, false),
            ("hpet", true, false),
            ("acpi-pm", true, false),
        ]
    );
    assert_eq!(recs.len(), SOURCE_IDS.len());
    let kvmclock = &recs[0];
    assert_eq!(kvmclock.quality, Some(400));
    assert_eq!(kvmclock.freq_hz, Some(1_000_000_000));
    assert_eq!(kvmclock.cost, Some("no-trap"));
    assert!(kvmclock.reason.starts_with("usable"), "{text}");
    assert!(!recs[1].reason.is_empty(), "{text}");
    let hpet = &recs[4];
    assert_eq!(
        (hpet.quality, hpet.freq_hz, hpet.cost),
        (Some(250), Some(100_000_000), Some("one-trap"))
    );
    assert_eq!(hpet.reason, "usable: traps", "{text}");
}

#[test]
fn the_suite_runs_over_the_probed_sources_and_passes() {
    let m = SimMachine::kvm();
    let clock = probe(&m, kvm_platform(&m)).into_clock().ok();
    let sources = ProbedSources::new(clock.as_ref());
    let reference = sources.reference().unwrap();
    let cycles = || clockhal::x86::Hardware::rdtsc(&&m);
    let wait = |ns: u64| m.advance(ns);
    let mut checked = Vec::new();
    let summary = Suite::new(sources.as_slice(), reference, &cycles)
        .config(Config::quick())
        .wait_with(&wait)
        .selected(sources.selected())
        .run(&mut |r: &CheckResult<'_>| {
            assert_ne!(r.status, Status::Fail, "{r}");
            checked.push(r.source.to_string());
        });
    assert!(summary.ok(), "{summary}");
    for name in ["kvmclock", "tsc", "hpet", "acpi-pm"] {
        assert!(checked.iter().any(|c| c == name), "{name} not checked");
    }
}

#[test]
fn a_machine_with_nothing_usable_has_no_sources_and_no_reference() {
    // Like QEMU TCG microvm: no paravirtual clock, no HPET, no PM timer, and
    // no stated TSC rate.
    let m = SimConfig::cpu(2_000_000_000).without_cpuid(0x15, 0).build();
    let probed = probe(&m, Platform::new().tsc_sync(SyncStatus::SingleCpu));
    let report = *probed.report();
    let clock = probed.into_clock().ok();
    assert!(clock.is_none());
    let sources = ProbedSources::new(clock.as_ref());
    assert!(sources.as_slice().is_empty());
    assert!(sources.reference().is_none());
    assert_eq!(sources.selected(), None);

    let mut text = String::new();
    write_sources(&mut text, &report).unwrap();
    let recs = sources_of(&text);
    assert_eq!(recs.len(), SOURCE_IDS.len());
    assert!(
        recs.iter().all(|s| !s.present && !s.reason.is_empty()),
        "{text}"
    );
}
