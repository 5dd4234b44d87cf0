//! A supervised TSC demoted for going unsupervised (no watchdog ticks)
//! measures no gaps of the current device until it is re-admitted:
//! nothing verifies its rate meanwhile, and one whose rate then changed
//! (why it is supervised) would put a whole phantom wrap into `now()`.
#![cfg(all(feature = "tsc", feature = "hpet", feature = "acpi-pm"))]

use clockhal::SourceId;
use clockhal_sim::{HpetConfig, SimConfig};

mod adversarial;

use adversarial::{clock, leak, ms};

const PM_WRAP_NS: u64 = (1u64 << 24) * 1_000_000_000 / 3_579_545; // 4.687 s

fn run(hpet: bool) {
    let hz = 2_000_000_000u64;
    let mut cfg = SimConfig::cpu(hz)
        .with_invariant_tsc(false)
        .with_pm_timer(clockhal_sim::PmTimerConfig::default());
    if hpet {
        cfg = cfg.with_hpet(HpetConfig::qemu().narrow());
    }
    let m = leak(cfg.build());
    let (c, _) = clock(m);
    assert_eq!(c.source_id(), SourceId::Tsc, "{}", c.report().table());
    assert!(c.supervised());
    let origin = m.now_ns() - c.now().as_nanos();
    // The OS never ticks (interrupts off in a long driver init): past
    // the supervision timeout the TSC is demoted as unsupervised.
    for _ in 0..40 {
        m.advance(ms(250));
        c.now();
    }
    let cur = c.source_id();
    assert_ne!(cur, SourceId::Tsc, "{}", c.report().table());
    // The unsupervised, non-invariant TSC's rate changes by 2 %.
    m.set_tsc_hz(hz + hz / 50);
    c.now();
    let wrap_ns = match cur {
        SourceId::AcpiPm => PM_WRAP_NS,
        SourceId::Hpet => (1u64 << 32) * 10,
        other => panic!("on {other:?}"),
    };
    let gaps = c.unmeasured_gaps();
    // 2 % of the idle is one wrap of the current device.
    m.advance(wrap_ns * 50);
    let t = c.now().as_nanos();
    let truth = m.now_ns() - origin;
    assert!(
        t <= truth + ms(5),
        "on {cur:?} after {} s idle: now() {} ms ahead of the truth (unmeasured_gaps {} -> {})\n{}",
        wrap_ns * 50 / 1_000_000_000,
        (t as i128 - truth as i128) / 1_000_000,
        gaps,
        c.unmeasured_gaps(),
        c.report().table()
    );
}

#[test]
fn an_unsupervised_tsc_2_percent_off_adds_no_wrap_pm_timer() {
    run(false);
}

#[test]
fn an_unsupervised_tsc_2_percent_off_adds_no_wrap_narrow_hpet() {
    run(true);
}
