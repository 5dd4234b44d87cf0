//! Candidates whose backend feature is off are listed, rejected with
//! "feature disabled". Runs in builds without some backend, e.g.
//! `cargo test -p clockhal --no-default-features --features tsc,kvmclock`.
#![cfg(not(all(
    feature = "kvmclock",
    feature = "hyperv",
    feature = "tsc",
    feature = "hpet",
    feature = "acpi-pm"
)))]

use clockhal::{probe, Duration, Platform, Rejection, SelfCheck, SourceId, Verdict};
use clockhal_sim::SimMachine;

#[test]
fn disabled_backends_are_rejected_with_the_reason() {
    let m = SimMachine::kvm();
    let plat = Platform::new()
        .hpet_region(m.hpet_region().unwrap())
        .pm_timer(0x608, false)
        .pvclock_areas(m.alloc_pvclock_areas(1))
        .self_check(SelfCheck::new().rate_interval(Duration::from_millis(1)));
    let p = probe(&m, plat);
    let r = p.report();
    let disabled = [
        (SourceId::Kvmclock, cfg!(feature = "kvmclock")),
        (SourceId::HypervPage, cfg!(feature = "hyperv")),
        (SourceId::HypervMsr, cfg!(feature = "hyperv")),
        (SourceId::Tsc, cfg!(feature = "tsc")),
        (SourceId::Hpet, cfg!(feature = "hpet")),
        (SourceId::AcpiPm, cfg!(feature = "acpi-pm")),
    ];
    let mut seen = 0;
    for (id, enabled) in disabled {
        let c = r.get(id).expect("every backend is listed");
        if !enabled {
            seen += 1;
            assert_eq!(
                c.verdict,
                Verdict::Rejected(Rejection::FeatureDisabled),
                "{id}"
            );
            assert!(
                format!("{r:#}").contains(&format!("{}(-, feature disabled)", c.name)),
                "{r:#}"
            );
        } else {
            assert_ne!(
                c.verdict,
                Verdict::Rejected(Rejection::FeatureDisabled),
                "{id}"
            );
        }
    }
    assert!(seen > 0);
    // On this KVM machine kvmclock wins when enabled; otherwise something
    // else that was enabled and works (or nothing, with no backend at all).
    if cfg!(feature = "kvmclock") {
        assert_eq!(r.selected_id(), Some(SourceId::Kvmclock));
    }
}
