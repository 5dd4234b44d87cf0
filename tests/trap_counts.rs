//! Hypervisor exits per read, counted by the simulator, for every backend:
//! the structural half of the read-cost story (the conformance report gives
//! the cycles). Targets: 0 for TSC, kvmclock and the Hyper-V page; exactly 1
//! for the Hyper-V MSR and the HPET; exactly 2 for the PM timer's paired
//! read (fast mode: one tear cannot pass); at least 3 (bounded) for its
//! verified read.
#![cfg(all(
    feature = "kvmclock",
    feature = "hyperv",
    feature = "tsc",
    feature = "hpet",
    feature = "acpi-pm"
))]

use clockhal::acpi_pm::{AcpiPm, PmMode};
use clockhal::hpet::Hpet;
use clockhal::hyperv::{Hyperv, HypervConfig};
use clockhal::kvmclock::{Kvmclock, KvmclockConfig};
use clockhal::tsc::{SyncStatus, Tsc, TscOptions};
use clockhal::{ClockSource, Policy};
use clockhal_sim::{PmTimerConfig, SimConfig, SimMachine};

const READS: u64 = 1_000;

/// Exits per read of `source` on `m`, over `READS` reads.
fn exits_per_read(m: &SimMachine, source: &dyn ClockSource) -> f64 {
    m.reset_traps();
    for _ in 0..READS {
        std::hint::black_box(source.read());
        m.advance(997);
    }
    let t = m.traps();
    assert_eq!(
        t.msr_writes + t.mmio_writes,
        0,
        "{}: writes on the read path",
        source.name()
    );
    t.exits() as f64 / READS as f64
}

#[test]
fn exits_per_read_match_each_backends_class() {
    let policy = Policy::new();
    let mut rows = Vec::new();

    let kvm = SimMachine::kvm();
    let k = Kvmclock::probe(
        &kvm,
        KvmclockConfig::new(kvm.alloc_pvclock_areas(1)),
        &policy,
    )
    .expect("kvmclock");
    rows.push(("kvmclock", exits_per_read(&kvm, &k), 0.0));

    let bare = SimMachine::bare_metal();
    let opts = TscOptions {
        sync: SyncStatus::SingleCpu,
        ..TscOptions::new()
    };
    let tsc = Tsc::probe(&bare, &opts).expect("tsc");
    rows.push(("tsc", exits_per_read(&bare, &tsc), 0.0));
    let hpet = Hpet::probe(&bare, bare.hpet_region().unwrap(), &policy).expect("hpet");
    rows.push(("hpet", exits_per_read(&bare, &hpet), 1.0));
    let pm = AcpiPm::probe(&bare, 0x608, false, &policy).expect("pm");
    assert_eq!(pm.mode(), PmMode::Fast);
    rows.push(("acpi-pm (fast)", exits_per_read(&bare, &pm), 2.0));

    let glitchy = SimConfig::cpu(2_000_000_000)
        .with_pm_timer(PmTimerConfig {
            glitchy: true,
            ..PmTimerConfig::default()
        })
        .build();
    let pmv = AcpiPm::probe(&glitchy, 0x608, false, &policy).expect("pm verified");
    assert_eq!(pmv.mode(), PmMode::Verified);
    let verified = exits_per_read(&glitchy, &pmv);
    // Three port reads per attempt, plus a retry whenever a torn value is
    // caught (this chipset tears one read in five); attempts are bounded.
    assert!(
        (3.0..=24.0).contains(&verified),
        "verified read: {verified}"
    );

    let hv = SimMachine::hyperv();
    let h = Hyperv::probe(
        &hv,
        HypervConfig::new()
            .with_tsc_page(hv.alloc_hv_page())
            .with_guest_os_id(clockhal_hyperv::DEFAULT_GUEST_OS_ID),
        &policy,
    )
    .expect("hyperv");
    rows.push((
        "hyperv-page",
        exits_per_read(&hv, h.page().expect("page")),
        0.0,
    ));
    rows.push((
        "hyperv-msr",
        exits_per_read(&hv, h.msr().expect("msr")),
        1.0,
    ));

    eprintln!("{:<16} {:>10} {:>8}", "source", "exits/read", "target");
    for (name, got, want) in &rows {
        eprintln!("{name:<16} {got:>10.3} {want:>8.1}");
    }
    eprintln!("{:<16} {verified:>10.3} {:>8}", "acpi-pm (verif.)", ">=3");
    for (name, got, want) in rows {
        assert_eq!(got, want, "{name}: {got} exits per read, want {want}");
    }
}
