//! One read of the current PM timer preempted for a few hundred ms (the
//! vCPU descheduled between the TSC read and the port read; less than
//! `took_a_pause`'s eighth of a wrap), then an honest idle of 10 s: the
//! TSC still recovers the two wraps the idle hid. The skewed read does
//! not replace a tighter pair (for a while it did, and its skew made the
//! gap "unmeasurable": 9.4 s lost).
#![cfg(all(feature = "tsc", feature = "hpet", feature = "acpi-pm"))]

use clockhal::SourceId;
use clockhal_sim::{HpetConfig, SimConfig};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

mod adversarial;

use adversarial::{clock, leak, ms};

fn preempted_then_idle(preempt_ms: u64, idle_ms: u64) {
    let m = leak(
        SimConfig::cpu(2_000_000_000)
            .with_invariant_tsc(true)
            .with_pm_timer(clockhal_sim::PmTimerConfig::default())
            .with_hpet(HpetConfig::qemu().narrow())
            .build(),
    );
    let (c, _) = clock(m);
    c.force(SourceId::AcpiPm).unwrap();
    let origin = m.now_ns() - c.now().as_nanos();
    for _ in 0..10 {
        m.advance(ms(100));
        c.now();
    }
    // One read preempted after its TSC read (the read's second rdtsc).
    let n = Arc::new(AtomicU64::new(0));
    let seen = n.clone();
    m.set_rdtsc_hook(move |m| {
        if seen.fetch_add(1, Ordering::SeqCst) == 1 {
            m.advance(ms(preempt_ms));
        }
    });
    c.now();
    m.clear_rdtsc_hook();
    let gaps = c.unmeasured_gaps();
    m.advance(ms(idle_ms));
    let t = c.now().as_nanos();
    let truth = m.now_ns() - origin;
    assert!(
        t.abs_diff(truth) < ms(10),
        "preempted {preempt_ms} ms, idle {idle_ms} ms: now() {} ms off the truth (unmeasured_gaps {gaps} -> {})",
        (t as i128 - truth as i128) / 1_000_000,
        c.unmeasured_gaps()
    );
}

#[test]
fn a_read_preempted_300_ms_then_10_s_idle() {
    preempted_then_idle(300, 10_000);
}

#[test]
fn a_read_preempted_100_ms_then_10_s_idle() {
    preempted_then_idle(100, 10_000);
}
