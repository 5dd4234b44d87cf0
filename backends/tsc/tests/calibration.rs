//! TSC calibration against simulated references, clean and noisy, and the
//! cross-check of stated rates.

use clockhal_acpi_pm::AcpiPm;
use clockhal_core::{ClockSource, Duration, Frequency, Policy, Quality, ReadCost, Stability};
use clockhal_hpet::Hpet;
use clockhal_sim::{SimConfig, SimMachine};
use clockhal_tsc::{
    calibrate, CalibrationError, RateCheck, RateProvenance, SyncStatus, Tsc, TscOptions,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

fn hz(f: u64) -> Frequency {
    Frequency::from_hz(f).unwrap()
}

fn hpet(m: &SimMachine) -> Hpet<&SimMachine> {
    Hpet::probe(m, m.hpet_region().unwrap(), &Policy::new()).unwrap()
}

/// Relative error of `f` against the machine's true TSC rate, in ppb.
fn error_ppb(m: &SimMachine, f: Frequency) -> u64 {
    f.ppb_from(&hz(m.config().tsc_hz)).unsigned_abs()
}

/// A reference that is slow and erratic to read (random exit latency
/// before and after the sample, an occasional 50 µs "SMI") and whose
/// values carry up to `value_jitter` ticks of noise (kept monotonic).
struct Noisy<'a> {
    inner: &'a dyn ClockSource,
    m: &'a SimMachine,
    seed: Mutex<u64>,
    max_delay_ns: u64,
    value_jitter: u64,
    last: AtomicU64,
}

impl<'a> Noisy<'a> {
    fn new(
        inner: &'a dyn ClockSource,
        m: &'a SimMachine,
        seed: u64,
        max_delay_ns: u64,
        value_jitter: u64,
    ) -> Self {
        Noisy {
            inner,
            m,
            seed: Mutex::new(seed | 1),
            max_delay_ns,
            value_jitter,
            last: AtomicU64::new(0),
        }
    }
    fn rand(&self, bound: u64) -> u64 {
        let mut s = self.seed.lock().unwrap();
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        *s % bound.max(1)
    }
}

impl ClockSource for Noisy<'_> {
    fn name(&self) -> &'static str {
        "noisy"
    }
    fn read(&self) -> u64 {
        self.m.advance(self.rand(self.max_delay_ns));
        if self.rand(50) == 0 {
            self.m.advance(50_000);
        }
        let v = self.inner.read() + self.rand(self.value_jitter + 1);
        self.m.advance(self.rand(self.max_delay_ns));
        self.last.fetch_max(v, Ordering::SeqCst).max(v)
    }
    fn frequency(&self) -> Frequency {
        self.inner.frequency()
    }
    fn quality(&self) -> Quality {
        Quality::new(1)
    }
    fn stability(&self) -> Stability {
        Stability::MONOTONIC_PER_CPU
    }
    fn read_cost(&self) -> ReadCost {
        ReadCost::OneTrap
    }
}

/// A reference frozen at one value; `cost_ns` of machine time per read.
struct Stuck<'a>(&'a SimMachine, u64);
impl ClockSource for Stuck<'_> {
    fn name(&self) -> &'static str {
        "stuck"
    }
    fn read(&self) -> u64 {
        self.0.advance(self.1);
        42
    }
    fn frequency(&self) -> Frequency {
        hz(100_000_000)
    }
    fn quality(&self) -> Quality {
        Quality::new(1)
    }
    fn stability(&self) -> Stability {
        Stability::empty()
    }
    fn read_cost(&self) -> ReadCost {
        ReadCost::NoTrap
    }
}

#[test]
fn clean_hpet_reference_within_its_bound() {
    for (m, label) in [
        (SimMachine::kvm(), "kvm 100 MHz HPET"),
        (SimMachine::bare_metal(), "14.3 MHz HPET"),
    ] {
        let h = hpet(&m);
        let t0 = m.now_ns();
        let c = calibrate(&m, &h, Duration::from_millis(50)).unwrap();
        let spent = m.now_ns() - t0;
        let err = error_ppb(&m, c.rate);
        println!(
            "{label}: error {err} ppb, bound {} ppm, {spent} ns",
            c.uncertainty_ppm
        );
        assert!(err <= c.uncertainty_ppm as u64 * 1_000);
        assert!(c.uncertainty_ppm <= 100, "{c:?}");
        assert_eq!(c.reference, "hpet");
        // The budget is respected: 50 ms plus the sample groups.
        assert!((50_000_000..51_000_000).contains(&spent), "{spent}");
    }
}

#[test]
fn clean_pm_timer_reference_within_its_bound() {
    let m = SimMachine::kvm();
    let pm = AcpiPm::probe(&m, 0x608, false, &Policy::new()).unwrap();
    let c = calibrate(&m, &pm, Duration::from_millis(50)).unwrap();
    let err = error_ppb(&m, c.rate);
    println!("pm timer: error {err} ppb, bound {} ppm", c.uncertainty_ppm);
    assert!(err <= c.uncertainty_ppm as u64 * 1_000);
    assert!(c.uncertainty_ppm <= 100, "{c:?}");
}

#[test]
fn noisy_reference_bound_holds() {
    let m = SimMachine::kvm();
    let h = hpet(&m);
    let mut worst_ratio = 0.0f64;
    for seed in 1..=30u64 {
        // Up to 5 µs of latency each side and up to 200 ticks (2 µs) of
        // value noise on a 100 MHz reference, over 20 ms.
        let noisy = Noisy::new(&h, &m, seed * 0x9E37_79B9, 5_000, 200);
        let c = calibrate(&m, &noisy, Duration::from_millis(20)).unwrap();
        let err = error_ppb(&m, c.rate);
        assert!(
            err <= c.uncertainty_ppm as u64 * 1_000,
            "seed {seed}: error {err} ppb > bound {} ppm",
            c.uncertainty_ppm
        );
        worst_ratio = worst_ratio.max(err as f64 / (c.uncertainty_ppm as f64 * 1_000.0));
        if seed <= 3 {
            println!(
                "noisy seed {seed}: error {err} ppb, bound {} ppm",
                c.uncertainty_ppm
            );
        }
    }
    println!("noisy: worst error / bound = {worst_ratio:.3}");
}

#[test]
fn stuck_reference_is_bounded() {
    let m = SimMachine::kvm();
    // Free to read: the read bound ends it.
    let e = calibrate(&m, &Stuck(&m, 0), Duration::from_millis(50)).unwrap_err();
    assert_eq!(e, CalibrationError::ReferenceStuck);
    // Slow to read (a trapping device that froze): the TSC bound ends it
    // long before 2^22 reads.
    let t0 = m.now_ns();
    let e = calibrate(&m, &Stuck(&m, 1_000), Duration::from_millis(50)).unwrap_err();
    assert_eq!(e, CalibrationError::ReferenceStuck);
    let spent = m.now_ns() - t0;
    assert!(spent < 2_000_000_000, "{spent} ns");
}

#[test]
fn too_short_budget() {
    let m = SimMachine::kvm();
    let h = hpet(&m);
    assert_eq!(
        calibrate(&m, &h, Duration::from_nanos(5)).unwrap_err(),
        CalibrationError::BudgetTooShort
    );
}

#[test]
fn probe_without_stated_rate_calibrates_with_the_policy_budget() {
    // An odd rate that nothing states: only calibration can find it.
    let m2 = SimConfig::cpu(2_345_678_901)
        .with_invariant_tsc(true)
        .with_hpet(clockhal_sim::HpetConfig::qemu())
        .build();
    let h = hpet(&m2);
    let opts = TscOptions {
        reference: Some(&h),
        sync: SyncStatus::SingleCpu,
        policy: Policy::new().calibration_budget(Duration::from_millis(10)),
        ..TscOptions::new()
    };
    let t0 = m2.now_ns();
    let tsc = Tsc::probe(&m2, &opts).unwrap();
    assert!(m2.now_ns() - t0 < 11_000_000);
    let RateProvenance::Calibrated {
        reference,
        uncertainty_ppm,
    } = tsc.provenance()
    else {
        panic!("{tsc:?}")
    };
    assert_eq!(reference, "hpet");
    assert!(error_ppb(&m2, tsc.frequency()) <= uncertainty_ppm as u64 * 1_000);
    assert_eq!(tsc.rate_check(), RateCheck::NotChecked);
    // Trusted for rating only if within TIGHT_PPM.
    let expected = if uncertainty_ppm <= clockhal_tsc::TIGHT_PPM {
        390
    } else {
        350
    };
    assert_eq!(tsc.quality().get(), expected);
    assert_eq!(
        tsc.provenance().to_string(),
        format!("rate calibrated against hpet (±{uncertainty_ppm} ppm)")
    );
}

#[test]
fn correct_cpuid_rate_is_confirmed() {
    let m = SimConfig::cpu(2_592_000_000)
        .with_invariant_tsc(true)
        .with_tsc_leaf(2, 216, 24_000_000)
        .with_hpet(clockhal_sim::HpetConfig::classic())
        .build();
    let h = hpet(&m);
    let opts = TscOptions {
        reference: Some(&h),
        sync: SyncStatus::SingleCpu,
        ..TscOptions::new()
    };
    let tsc = Tsc::probe(&m, &opts).unwrap();
    assert_eq!(tsc.provenance(), RateProvenance::CpuidLeaf15);
    assert_eq!(tsc.frequency(), hz(2_592_000_000));
    assert!(
        matches!(tsc.rate_check(), RateCheck::Consistent { deviation_ppm, .. } if deviation_ppm.abs() <= 100)
    );
    assert_eq!(tsc.quality().get(), 390);
}

#[test]
fn wrong_cpuid_rate_is_overruled_by_calibration() {
    // The TSC really runs at 2.6 GHz; leaf 0x15 claims 2.592 GHz (3,086 ppm
    // slow), e.g. a hypervisor passing the host's leaf through.
    let m = SimConfig::cpu(2_600_000_000)
        .with_invariant_tsc(true)
        .with_tsc_leaf(2, 216, 24_000_000)
        .with_hpet(clockhal_sim::HpetConfig::qemu())
        .build();
    let h = hpet(&m);
    let opts = TscOptions {
        reference: Some(&h),
        sync: SyncStatus::SingleCpu,
        ..TscOptions::new()
    };
    let tsc = Tsc::probe(&m, &opts).unwrap();
    let RateCheck::Overruled {
        stated,
        stated_by,
        deviation_ppm,
        ..
    } = tsc.rate_check()
    else {
        panic!("{tsc:?}")
    };
    assert_eq!(
        (stated, stated_by),
        (hz(2_592_000_000), RateProvenance::CpuidLeaf15)
    );
    assert!(
        (-3_100..=-3_050).contains(&deviation_ppm),
        "{deviation_ppm}"
    );
    assert!(matches!(
        tsc.provenance(),
        RateProvenance::Calibrated {
            reference: "hpet",
            ..
        }
    ));
    assert!(error_ppb(&m, tsc.frequency()) < 100_000);
}

#[test]
fn failed_calibration_keeps_the_stated_rate() {
    let m = SimMachine::bare_metal();
    let stuck = Stuck(&m, 0);
    let opts = TscOptions {
        reference: Some(&stuck),
        sync: SyncStatus::SingleCpu,
        ..TscOptions::new()
    };
    let tsc = Tsc::probe(&m, &opts).unwrap();
    assert_eq!(tsc.provenance(), RateProvenance::CpuidLeaf15);
    assert_eq!(
        tsc.rate_check(),
        RateCheck::CalibrationFailed(CalibrationError::ReferenceStuck)
    );
}
