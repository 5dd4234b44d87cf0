//! A host where every read of the current software-extended device is
//! slow (2.5 ms: each exit reschedules the vCPU). Only reads that took
//! longer than the gap's error bound allows are retried, and such holds
//! count towards `STUCK_READS`: before, pairs came only from fast reads,
//! the last one aged past half a wrap and `now()` froze for good.
#![cfg(all(feature = "tsc", feature = "hpet", feature = "acpi-pm"))]

use clockhal::SourceId;
use clockhal_sim::{HpetConfig, SimConfig};

mod adversarial;

use adversarial::{clock, leak, ms};

/// `id` current (one CPU). After a gap of `gap_ms` (none: 0) every read
/// takes 2.5 ms (a loaded host where each exit reschedules the vCPU).
/// `Clock` docs: "A read that finds no fresh value holds; STUCK_READS of
/// them in a row switch the source": a clock whose every read holds must
/// not stay frozen for good.
fn every_read_slow(id: SourceId, gap_ms: u64) {
    let m = leak(
        SimConfig::cpu(2_000_000_000)
            .with_invariant_tsc(false)
            .with_pm_timer(clockhal_sim::PmTimerConfig::default())
            .with_hpet(HpetConfig::qemu().narrow())
            .build(),
    );
    let (c, _) = clock(m);
    c.force(id).unwrap();
    let origin = m.now_ns() - c.now().as_nanos();
    c.now();
    m.advance(ms(gap_ms));
    m.set_rdtsc_hook(|m| m.advance(2_500_000));
    for _ in 0..10_000 {
        c.now();
    }
    // The second half of the reads: 75 s of machine time.
    let first = c.now().as_nanos();
    let mut t = first;
    for _ in 0..10_000 {
        t = c.now().as_nanos();
    }
    m.clear_rdtsc_hook();
    let truth = m.now_ns() - origin;
    assert!(
        t > first,
        "{id:?} gap {gap_ms} ms: now() stayed at {t} ns over the last 10,000 reads while {} s passed (truth {truth} ns); source {:?}, unmeasured_gaps {}",
        (truth - t) / 1_000_000_000,
        c.source_id(),
        c.unmeasured_gaps(),
    );
}

#[test]
fn pm_timer_every_read_slow_after_a_gap_never_freezes_for_good() {
    every_read_slow(SourceId::AcpiPm, 10_000);
}

#[test]
fn narrow_hpet_every_read_slow_after_a_gap_never_freezes_for_good() {
    every_read_slow(SourceId::Hpet, 30_000);
}

#[test]
fn pm_timer_every_read_slow_without_a_gap_never_freezes_for_good() {
    every_read_slow(SourceId::AcpiPm, 0);
}

#[test]
fn narrow_hpet_every_read_slow_without_a_gap_never_freezes_for_good() {
    every_read_slow(SourceId::Hpet, 0);
}
