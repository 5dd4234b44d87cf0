//! The suite over clockhal's real backends on the simulated machine
//! profiles (KVM, KVM with two vCPUs, Hyper-V, bare metal, QEMU TCG): every
//! backend must pass every check that applies, and the expected selection
//! must pass the selection check.

mod common;

use clockhal_acpi_pm::AcpiPm;
use clockhal_conformance::{Check, Config, Status};
use clockhal_core::{ClockSource, Frequency, Policy};
use clockhal_hpet::Hpet;
use clockhal_hyperv::{Hyperv, HypervConfig};
use clockhal_kvmclock::{Kvmclock, KvmclockConfig};
use clockhal_sim::SimMachine;
use clockhal_tsc::{RateProvenance, SyncStatus, Tsc, TscOptions};
use common::*;

fn tsc<'m>(
    m: &'m SimMachine,
    hints: &[(Frequency, RateProvenance)],
    reference: Option<&dyn ClockSource>,
    sync: SyncStatus,
) -> Tsc<&'m SimMachine> {
    let opts = TscOptions {
        hints,
        reference,
        sync,
        ..TscOptions::new()
    };
    Tsc::probe(m, &opts).expect("TSC probes")
}

fn hpet(m: &SimMachine) -> Hpet<&SimMachine> {
    Hpet::probe(m, m.hpet_region().unwrap(), &Policy::new()).expect("HPET probes")
}

fn pm(m: &SimMachine) -> AcpiPm<&SimMachine> {
    AcpiPm::probe(m, 0x608, false, &Policy::new()).expect("PM timer probes")
}

/// Every result is a pass, except the skips listed (source, check).
fn assert_all_pass(r: &Results, skips: &[(&str, Check)]) {
    assert_eq!(r.failures(), vec![]);
    for rec in &r.recs {
        // No timer devices are given here: those checks skip, saying so.
        let no_timers = rec.detail == "the kernel gives the suite no timer interrupts";
        let expected_skip = no_timers
            || skips
                .iter()
                .any(|(s, c)| *s == rec.source && *c == rec.check);
        let want = if expected_skip {
            Status::Skip
        } else {
            Status::Pass
        };
        assert_eq!(rec.status, want, "{rec:?}");
    }
}

#[test]
fn kvm_profile_backends_pass_and_kvmclock_is_a_valid_selection() {
    let m = SimMachine::kvm();
    let k = Kvmclock::probe(
        &m,
        KvmclockConfig::new(m.alloc_pvclock_areas(1)),
        &Policy::new(),
    )
    .expect("kvmclock probes");
    let (h, p) = (hpet(&m), pm(&m));
    let hint = [(k.tsc_frequency().unwrap(), RateProvenance::Pvclock)];
    let t = tsc(&m, &hint, Some(&h), SyncStatus::SingleCpu);
    let sources: [&dyn ClockSource; 4] = [&k, &t, &h, &p];
    let r = run(
        &m,
        &sources,
        &h,
        Config::quick(),
        None,
        Some(Some("kvmclock")),
    );
    let single = [
        ("kvmclock", Check::CrossCpu),
        ("tsc", Check::CrossCpu),
        ("hpet", Check::CrossCpu),
        ("acpi-pm", Check::CrossCpu),
    ];
    let mut skips = single.to_vec();
    skips.push(("hpet", Check::Rate)); // the reference
    assert_all_pass(&r, &skips);
    assert!(
        r.has("acpi-pm", Check::Wrap),
        "the PM timer is software-extended"
    );
    assert!(
        r.get("kvmclock", Check::Selected)
            .detail
            .contains("outranks")
            || r.get("kvmclock", Check::Selected)
                .detail
                .contains("fastest")
    );
}

#[test]
fn kvm_with_two_vcpus_passes_the_warp_test_on_every_source() {
    let m = SimMachine::kvm_config().with_cpus(2, &[0, 0]).build();
    let k = Kvmclock::probe(
        &m,
        KvmclockConfig::new(m.alloc_pvclock_areas(2)),
        &Policy::new(),
    )
    .expect("kvmclock probes");
    m.on_cpu(1, || k.register_this_cpu())
        .expect("CPU 1 registers");
    let (h, p) = (hpet(&m), pm(&m));
    let hint = [(k.tsc_frequency().unwrap(), RateProvenance::Pvclock)];
    let t = tsc(&m, &hint, Some(&h), SyncStatus::Synchronized);
    let sources: [&dyn ClockSource; 4] = [&k, &t, &h, &p];
    let cpus = SimCpus(&m);
    let config = Config::quick().wrap_budget(clockhal_core::Duration::ZERO);
    let r = run(
        &m,
        &sources,
        &h,
        config,
        Some(&cpus),
        Some(Some("kvmclock")),
    );
    assert_all_pass(&r, &[("hpet", Check::Rate), ("acpi-pm", Check::Wrap)]);
    for s in ["kvmclock", "tsc", "hpet", "acpi-pm"] {
        assert!(
            r.get(s, Check::CrossCpu)
                .detail
                .contains("no backward step"),
            "{s}"
        );
    }
}

#[test]
fn hyperv_profile_backends_pass_and_the_page_is_a_valid_selection() {
    let m = SimMachine::hyperv();
    let hv = Hyperv::probe(
        &m,
        HypervConfig::new()
            .with_tsc_page(m.alloc_hv_page())
            .with_guest_os_id(clockhal_hyperv::DEFAULT_GUEST_OS_ID),
        &Policy::new(),
    )
    .expect("Hyper-V probes");
    let (page, msr) = (hv.page().expect("page clock"), hv.msr().expect("MSR clock"));
    let p = pm(&m);
    let hint = [(hv.tsc_frequency().unwrap(), RateProvenance::HypervMsr)];
    let t = tsc(&m, &hint, Some(&p), SyncStatus::SingleCpu);
    let sources: [&dyn ClockSource; 4] = [page, msr, &t, &p];
    let r = run(
        &m,
        &sources,
        &p,
        Config::quick(),
        None,
        Some(Some("hyperv-page")),
    );
    let mut skips: Vec<_> = ["hyperv-page", "hyperv-msr", "tsc", "acpi-pm"]
        .map(|s| (s, Check::CrossCpu))
        .to_vec();
    skips.push(("acpi-pm", Check::Rate)); // the reference
    assert_all_pass(&r, &skips);
    assert_eq!(r.status("acpi-pm", Check::Wrap), Status::Pass);
    // The MSR clock is slower and rated lower: selecting it fails.
    let r = run(
        &m,
        &sources,
        &p,
        Config::quick().wrap_budget(clockhal_core::Duration::ZERO),
        None,
        Some(Some("hyperv-msr")),
    );
    assert_eq!(
        r.failures(),
        vec![("hyperv-msr".to_string(), Check::Selected)]
    );
}

#[test]
fn bare_metal_invariant_tsc_is_the_fastest_valid_selection() {
    let m = SimMachine::bare_metal();
    let (h, p) = (hpet(&m), pm(&m));
    let t = tsc(&m, &[], Some(&h), SyncStatus::SingleCpu);
    let sources: [&dyn ClockSource; 3] = [&t, &h, &p];
    let config = Config::quick().wrap_budget(clockhal_core::Duration::ZERO);
    let r = run(&m, &sources, &h, config, None, Some(Some("tsc")));
    let mut skips: Vec<_> = ["tsc", "hpet", "acpi-pm"]
        .map(|s| (s, Check::CrossCpu))
        .to_vec();
    skips.extend([("hpet", Check::Rate), ("acpi-pm", Check::Wrap)]);
    assert_all_pass(&r, &skips);
    assert!(r
        .get("tsc", Check::Selected)
        .detail
        .starts_with("fastest passing source"));
}

#[test]
fn qemu_tcg_profile_backends_pass() {
    let m = SimMachine::qemu_tcg();
    let (h, p) = (hpet(&m), pm(&m));
    let t = tsc(&m, &[], Some(&h), SyncStatus::SingleCpu);
    let sources: [&dyn ClockSource; 3] = [&t, &h, &p];
    let config = Config::quick().wrap_budget(clockhal_core::Duration::ZERO);
    let r = run(&m, &sources, &h, config, None, None);
    let mut skips: Vec<_> = ["tsc", "hpet", "acpi-pm"]
        .map(|s| (s, Check::CrossCpu))
        .to_vec();
    skips.extend([("hpet", Check::Rate), ("acpi-pm", Check::Wrap)]);
    assert_all_pass(&r, &skips);
}
