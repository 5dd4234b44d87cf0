//! TSCs stepped back (one CPU or all) around a gap in the reads of the
//! current PM timer / 32-bit HPET: never back, never ahead of the truth,
//! and wraps lost only when counted in `Clock::unmeasured_gaps` (before,
//! a TSC behind its pair lost a gap's wraps silently, and one stepped
//! back across zero sent the HPET 292 years ahead).
#![cfg(all(feature = "tsc", feature = "hpet", feature = "acpi-pm"))]

use clockhal::SourceId;
use clockhal_sim::{HpetConfig, SimConfig};

mod adversarial;

use adversarial::{clock, leak, ms};

/// `base`: both TSCs' offset at power-on (ticks), so a step back of
/// `back_s` does (0) or does not (large) cross 0.
fn back_then_gap(
    id: SourceId,
    cpu: Option<usize>,
    back_s: i64,
    gap_ms: u64,
    base: i64,
) -> Result<(), String> {
    let m = leak(
        SimConfig::cpu(2_000_000_000)
            .with_invariant_tsc(false)
            .with_pm_timer(clockhal_sim::PmTimerConfig::default())
            .with_hpet(HpetConfig::qemu().narrow())
            .with_cpus(2, &[base, base])
            .build(),
    );
    let (c, _) = clock(m);
    c.force(id).unwrap();
    let origin = m.now_ns() - c.now().as_nanos();
    for cpu in 0..2 {
        m.on_cpu(cpu, || c.now());
    }
    m.step_tsc(cpu, -back_s * 2_000_000_000);
    m.advance(ms(gap_ms));
    let mut last = 0;
    for i in 0..200 {
        m.advance(ms(50));
        for r in 0..2 {
            let t = m.on_cpu(r, || c.now().as_nanos());
            let truth = m.now_ns() - origin;
            if t < last {
                return Err(format!(
                    "{id:?} cpu {cpu:?} back {back_s} s gap {gap_ms}: back"
                ));
            }
            if t > truth + ms(1) {
                return Err(format!(
                    "{id:?} cpu {cpu:?} back {back_s} s gap {gap_ms}: read {i} on {r} {} ms ahead",
                    (t - truth) / 1_000_000
                ));
            }
            last = t;
        }
    }
    let truth = m.now_ns() - origin;
    let behind = truth - last;
    if behind >= ms(200) && c.unmeasured_gaps() == 0 {
        return Err(format!(
            "{id:?} cpu {cpu:?} back {back_s} s gap {gap_ms}: {} ms behind, unmeasured_gaps 0",
            behind / 1_000_000
        ));
    }
    Ok(())
}

#[test]
fn tscs_stepped_back_around_a_gap() {
    // TSCs a day in (2 GHz): no step below crosses 0.
    let day = 86_400 * 2_000_000_000i64;
    let mut failed = vec![];
    for id in [SourceId::AcpiPm, SourceId::Hpet] {
        for cpu in [None, Some(0), Some(1)] {
            for (back, gap) in [(1, 10_000), (3, 30_000), (100, 60_000), (3_600, 100_000)] {
                if let Err(e) = back_then_gap(id, cpu, back, gap, day) {
                    failed.push(e);
                }
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// A TSC stepped back past 0 (a hostile host: its value is then near
/// 2^64, a 292-year "gap" to the clock's pair). counter_wraps.rs: a TSC
/// that crosses 2^64 "is now a fault of the source: never a jump"; as
/// the current 32-bit HPET's gap witness it places no wrap either.
#[test]
fn a_tsc_stepped_back_across_zero_sends_the_current_hpet_nowhere() {
    back_then_gap(SourceId::Hpet, None, 3_600, 100_000, 0).unwrap();
}
