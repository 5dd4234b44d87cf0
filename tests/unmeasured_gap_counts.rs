//! `Clock::unmeasured_gaps` counts "gaps in the reads of the current
//! software-extended device (a 32-bit HPET, the PM timer) longer than half
//! its wrap the clock found and nothing measured", each once: no alarm
//! where another CPU kept the device read, and one long gap counts once.
#![cfg(all(feature = "tsc", feature = "hpet", feature = "acpi-pm"))]

use clockhal::SourceId;
use clockhal_sim::{HpetConfig, SimConfig};

mod adversarial;

use adversarial::{clock, leak, ms};

const PM_WRAP_NS: u64 = (1u64 << 24) * 1_000_000_000 / 3_579_545; // 4.687 s

fn machine(cpus: usize) -> &'static clockhal_sim::SimMachine {
    leak(
        SimConfig::cpu(2_000_000_000)
            .with_invariant_tsc(true)
            .with_pm_timer(clockhal_sim::PmTimerConfig::default())
            .with_hpet(HpetConfig::qemu().narrow())
            .with_cpus(cpus, &vec![0; cpus])
            .build(),
    )
}

/// Two CPUs (TSCs not known to agree: per-CPU pairs), the PM timer
/// current. CPU 0 reads it every second, so its reads never have a gap;
/// CPU 1 reads once, then after 10 minutes. Nothing was lost (the value
/// is right), yet a gap is reported: CPU 1's own pair is old enough that
/// its error bound exceeds an eighth of a wrap, and `unmeasurable` is
/// counted although the extender was current.
#[test]
fn a_device_read_every_second_has_no_unmeasured_gap() {
    let m = machine(2);
    let (c, _) = clock(m);
    c.force(SourceId::AcpiPm).unwrap();
    let origin = m.now_ns() - c.now().as_nanos();
    m.on_cpu(1, || c.now());
    for _ in 0..700 {
        m.advance(ms(1_000));
        m.on_cpu(0, || c.now());
    }
    let t = m.on_cpu(1, || c.now().as_nanos());
    let truth = m.now_ns() - origin;
    assert!(t.abs_diff(truth) < ms(5), "{t} vs {truth}");
    assert_eq!(
        c.unmeasured_gaps(),
        0,
        "the PM timer was read every second, yet an unmeasured gap was reported"
    );
}

/// One CPU, the PM timer current, idle 130.7 wraps (612 s: past what the
/// TSC may measure, `estimate_within` > an eighth of a wrap). The gap is
/// found and counted: once.
#[test]
fn one_long_gap_counts_once() {
    let m = machine(1);
    let (c, _) = clock(m);
    c.force(SourceId::AcpiPm).unwrap();
    c.now();
    let before = c.unmeasured_gaps();
    m.advance(PM_WRAP_NS * 130 + PM_WRAP_NS * 7 / 10);
    for _ in 0..10_000 {
        m.advance(ms(1));
        c.now();
    }
    assert_eq!(
        c.unmeasured_gaps() - before,
        1,
        "one gap nothing measured, counted {} times",
        c.unmeasured_gaps() - before
    );
}
