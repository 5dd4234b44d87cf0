//! TSC invariance, rate discovery and rating on simulated machines.

use clockhal_core::{ClockSource, Frequency, Migration, Policy, Quality, ReadCost, Stability};
use clockhal_hpet::Hpet;
use clockhal_sim::{regs, CpuidMissing, HpetConfig, KvmConfig, SimConfig, SimMachine};
use clockhal_tsc::{RateCheck, RateProvenance, SyncStatus, Tsc, TscError, TscOptions};

fn hz(f: u64) -> Frequency {
    Frequency::from_hz(f).unwrap()
}

fn single() -> TscOptions<'static> {
    TscOptions {
        sync: SyncStatus::SingleCpu,
        ..TscOptions::new()
    }
}

/// KVM guest with invtsc and QEMU's timing leaf 0x40000010 (TSC kHz).
fn kvm_with_timing_leaf(max_offset: u32) -> SimMachine {
    SimConfig::cpu(2_600_000_000)
        .without_cpuid(0, 0)
        .with_cpuid(0, 0, regs(0xD, 0, 0, 0))
        .with_invariant_tsc(true)
        .with_kvm(KvmConfig {
            cpuid_max_offset: max_offset,
            ..KvmConfig::default()
        })
        .with_cpuid(0x4000_0010, 0, regs(2_600_000, 1_000_000, 0, 0))
        .with_hpet(HpetConfig::qemu())
        .build()
}

#[test]
fn cpuid_leaf_15_is_exact_and_rated_highest() {
    let m = SimMachine::bare_metal();
    let tsc = Tsc::probe(&m, &single()).unwrap();
    assert_eq!(tsc.provenance(), RateProvenance::CpuidLeaf15);
    assert_eq!(tsc.frequency(), hz(2_592_000_000));
    assert_eq!(tsc.rate_check(), RateCheck::NotChecked);
    assert!(tsc.invariant());
    assert_eq!(tsc.quality(), Quality::new(390));
    assert_eq!(tsc.read_cost(), ReadCost::NoTrap);
    assert_eq!(tsc.name(), "tsc");
    let s = tsc.stability();
    assert!(s.contains(Stability::INVARIANT_RATE | Stability::MONOTONIC_ACROSS_CPUS));
    assert!(!s.contains(Stability::SURVIVES_MIGRATION));

    let opts = TscOptions {
        policy: Policy::new().migration(Migration::WillNot),
        ..single()
    };
    assert_eq!(Tsc::probe(&m, &opts).unwrap().quality(), Quality::new(500));

    // SMP without a warp test: not in step, never auto-selected.
    let smp = TscOptions {
        cpus: 2,
        ..TscOptions::new()
    };
    let tsc = Tsc::probe(&m, &smp).unwrap();
    assert_eq!(tsc.quality(), Quality::UNUSABLE);
    assert_eq!(
        tsc.unusable(),
        Some(clockhal_tsc::Unusable::SyncUnknown { cpus: 2 })
    );
    assert!(!tsc.stability().contains(Stability::MONOTONIC_ACROSS_CPUS));
    // The warp test's result arrives later: rated again.
    tsc.set_sync(SyncStatus::Synchronized);
    assert_eq!(tsc.quality(), Quality::new(390));
}

#[test]
fn leaf_15_is_exact_for_non_integer_ratios() {
    // 25 MHz crystal * 125 / 3 = 1,041,666,666.67 Hz: kept as a fraction.
    let m = SimConfig::cpu(1_041_666_667)
        .with_invariant_tsc(true)
        .with_tsc_leaf(3, 125, 25_000_000)
        .build();
    let tsc = Tsc::probe(&m, &single()).unwrap();
    assert_eq!(
        tsc.frequency(),
        Frequency::from_ratio(3_125_000_000, 3).unwrap()
    );
}

#[test]
fn leaf_15_with_a_zero_field_is_not_a_rate() {
    for (den, num, crystal) in [(0, 216, 24_000_000), (2, 0, 24_000_000), (2, 216, 0)] {
        let m = SimConfig::cpu(2_592_000_000)
            .with_invariant_tsc(true)
            .with_tsc_leaf(den, num, crystal)
            .build();
        // Nothing else states a rate and leaf 0x16 is absent: unknown.
        assert_eq!(
            Tsc::probe(&m, &single()).unwrap_err(),
            TscError::RateUnknown { calibration: None }
        );
    }
}

#[test]
fn hypervisor_timing_leaf_when_the_range_reaches_it() {
    let m = kvm_with_timing_leaf(0x10);
    let tsc = Tsc::probe(&m, &single()).unwrap();
    assert_eq!(tsc.provenance(), RateProvenance::HypervisorLeaf);
    assert_eq!(tsc.frequency(), hz(2_600_000_000));
    assert_eq!(tsc.quality(), Quality::new(390));
}

#[test]
fn hypervisor_timing_leaf_above_the_range_max_is_never_read() {
    // The leaf holds a value, but the range ends at base+1: a guest must
    // not believe it (QEMU TCG returns garbage there).
    let m = kvm_with_timing_leaf(1);
    let hint = [(hz(2_600_000_000), RateProvenance::Pvclock)];
    let tsc = Tsc::probe(
        &m,
        &TscOptions {
            hints: &hint,
            ..single()
        },
    )
    .unwrap();
    assert_eq!(tsc.provenance(), RateProvenance::Pvclock);
}

#[test]
fn hints_by_provenance_not_by_order() {
    let m = SimConfig::cpu(2_400_000_000)
        .with_invariant_tsc(true)
        .build();
    let hints = [
        (hz(2_400_000_123), RateProvenance::Pvclock),
        (hz(2_400_000_000), RateProvenance::HypervMsr),
        (hz(1_000), RateProvenance::CpuidLeaf15), // implausible: skipped
    ];
    let tsc = Tsc::probe(
        &m,
        &TscOptions {
            hints: &hints,
            ..single()
        },
    )
    .unwrap();
    assert_eq!(tsc.provenance(), RateProvenance::HypervMsr);
    assert_eq!(tsc.frequency(), hz(2_400_000_000));
    assert_eq!(
        tsc.provenance().to_string(),
        "rate from the Hyper-V frequency MSR"
    );

    let pv = [(hz(2_400_000_123), RateProvenance::Pvclock)];
    let tsc = Tsc::probe(
        &m,
        &TscOptions {
            hints: &pv,
            ..single()
        },
    )
    .unwrap();
    assert_eq!(tsc.provenance().to_string(), "rate from pvclock");
    assert_eq!(tsc.frequency(), hz(2_400_000_123));

    let os = [(hz(2_400_000_000), RateProvenance::OsSupplied)];
    let tsc = Tsc::probe(
        &m,
        &TscOptions {
            hints: &os,
            ..single()
        },
    )
    .unwrap();
    assert_eq!(tsc.provenance(), RateProvenance::OsSupplied);
}

#[test]
fn not_invariant_with_a_known_rate_is_supervised() {
    // SimMachine::kvm(): no invariant bit.
    let m = SimMachine::kvm();
    let hint = [(hz(2_600_000_000), RateProvenance::Pvclock)];
    let tsc = Tsc::probe(
        &m,
        &TscOptions {
            hints: &hint,
            ..single()
        },
    )
    .unwrap();
    assert!(!tsc.invariant());
    // Beats every trapping source, never a paravirtual clock, and only
    // under a watchdog.
    assert_eq!(tsc.quality(), clockhal_tsc::SUPERVISED_RATING);
    assert!(tsc.supervised());
    assert!(!tsc.stability().contains(Stability::INVARIANT_RATE));
    // No rate at all: no TSC.
    assert!(Tsc::probe(&m, &single()).is_err());
    let a = tsc.read();
    m.advance(1_000);
    assert!(tsc.read() - a >= 2_600);
}

#[test]
fn unsynchronized_is_unusable_and_set_sync_rerates() {
    let m = SimMachine::bare_metal();
    let opts = TscOptions {
        sync: SyncStatus::Unsynchronized {
            worst_backward_ticks: 40,
        },
        policy: Policy::new().migration(Migration::WillNot),
        ..TscOptions::new()
    };
    let tsc = Tsc::probe(&m, &opts).unwrap();
    assert_eq!(tsc.quality(), Quality::UNUSABLE);
    tsc.set_sync(SyncStatus::Synchronized);
    assert_eq!(tsc.quality(), Quality::new(500));
}

#[test]
fn no_rate_anywhere_is_an_error() {
    // KVM profile: max basic leaf 0xD (no 0x15/0x16), range max base+1.
    let m = SimMachine::kvm();
    assert_eq!(
        Tsc::probe(&m, &single()).unwrap_err(),
        TscError::RateUnknown { calibration: None }
    );
}

#[test]
fn base_frequency_leaf_16_is_a_last_resort_never_auto_selected() {
    let m = SimConfig::cpu(2_600_000_000)
        .with_invariant_tsc(true)
        .with_cpuid(0x16, 0, regs(2_600, 3_000, 100, 0))
        .build();
    let tsc = Tsc::probe(&m, &single()).unwrap();
    assert_eq!(tsc.provenance(), RateProvenance::BaseFrequencyHint);
    assert_eq!(tsc.frequency(), hz(2_600_000_000));
    assert_eq!(tsc.quality(), Quality::UNUSABLE);
}

#[test]
fn no_tsc_bit() {
    let m = SimConfig::cpu(2_600_000_000)
        .with_cpuid(1, 0, regs(0, 0, 0, 0))
        .build();
    assert_eq!(Tsc::probe(&m, &single()).unwrap_err(), TscError::NoTsc);
}

/// QEMU TCG as it really answers (leaves past a range's maximum answer
/// leaf 0xD: the timing leaf 0x40000010 would say 543 kHz, leaf 0x15 a
/// 2,696 Hz crystal), and the same machine with a hostile CPUID (garbage
/// for every leaf missing from the table, invariant bit included).
fn tcg_machines() -> [(&'static str, SimMachine); 2] {
    let mut hostile = SimMachine::qemu_tcg_config();
    hostile.cpuid_missing = CpuidMissing::Garbage;
    hostile.cpuid.remove(&(0x8000_0007, 0));
    [
        ("qemu", SimMachine::qemu_tcg()),
        ("garbage", hostile.build()),
    ]
}

#[test]
fn qemu_tcg_out_of_range_cpuid_is_not_believed() {
    // With the HPET as a reference the rate must come out right whatever
    // the leaves past their maximum say.
    for (name, m) in tcg_machines() {
        let hpet = Hpet::probe(&m, m.hpet_region().unwrap(), &Policy::new()).unwrap();
        let opts = TscOptions {
            reference: Some(&hpet),
            ..single()
        };
        let tsc = Tsc::probe(&m, &opts).unwrap();
        assert_ne!(tsc.provenance(), RateProvenance::HypervisorLeaf, "{name}");
        let cal = tsc.calibration().unwrap();
        let err_ppb = tsc.frequency().ppb_from(&hz(2_000_000_000)).unsigned_abs();
        assert!(
            err_ppb <= cal.uncertainty_ppm as u64 * 1_000,
            "{name}: {tsc:?}"
        );
    }
}

#[test]
fn qemu_tcg_cpuid_alone_never_gives_an_auto_selected_tsc() {
    // Without a reference nothing can check what CPUID says: whatever comes
    // out must not be rated for automatic selection.
    for (name, m) in tcg_machines() {
        match Tsc::probe(&m, &single()) {
            Err(e) => assert_eq!(e, TscError::RateUnknown { calibration: None }, "{name}"),
            Ok(tsc) => assert!(!tsc.quality().auto_selectable(), "{name}: {tsc:?}"),
        };
    }
}

#[test]
fn a_missed_rtc_edge_does_not_end_the_seconds_calibration() {
    // Seen under TCG on a loaded host: one edge wait failed after two
    // edges and the TSC had no rate at all. A miss costs one edge; a
    // reference that keeps missing still ends the calibration.
    use clockhal_tsc::{calibrate_against_seconds, SecondEdge};
    let edge = |s: u64| {
        let at = s * 2_000_000_000;
        SecondEdge {
            second: s,
            tsc_from: at - 2_000,
            tsc_by: at + 2_000,
        }
    };
    let mut s = 100;
    let mut calls = 0;
    let c = calibrate_against_seconds(
        || {
            calls += 1;
            s += 1;
            (calls != 3).then(|| edge(s))
        },
        "rtc",
    )
    .unwrap();
    assert_eq!(c.rate.hz_rounded(), 2_000_000_000);
    let mut calls = 0;
    let r = calibrate_against_seconds(
        || {
            calls += 1;
            (calls == 1).then(|| edge(100))
        },
        "rtc",
    );
    assert!(r.is_err());
    assert_eq!(calls, 4, "one edge, then three misses");
}
