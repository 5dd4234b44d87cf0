//! The clock never switches onto a counter that stopped (issue 26: a
//! value that must never be trusted). A supervised TSC loses its ticks
//! (interrupts off for 10 s) while the HPET stopped meanwhile (firmware
//! halted it): at the deadline the clock leaves the TSC, for a counter
//! that counts. Before, the 32-bit HPET (no jump-check anchor, so never
//! re-read) was taken and `now()` held up to 8 s behind the truth until
//! `STUCK_READS` moved it on.
#![cfg(all(feature = "tsc", feature = "hpet", feature = "acpi-pm"))]

use clockhal::SourceId;
use clockhal_sim::{HpetConfig, SimConfig};

mod adversarial;

use adversarial::{clock, leak, ms};

fn switch_after_deadline(narrow: bool) {
    let m = leak(
        SimConfig::cpu(2_000_000_000)
            .with_invariant_tsc(false)
            .with_pm_timer(clockhal_sim::PmTimerConfig::default())
            .with_hpet(if narrow {
                HpetConfig::qemu().narrow()
            } else {
                HpetConfig::qemu()
            })
            .build(),
    );
    let (c, _) = clock(m);
    assert_eq!(c.source_id(), SourceId::Tsc, "{}", c.report().table());
    let origin = m.now_ns() - c.now().as_nanos();
    for _ in 0..8 {
        m.advance(ms(250));
        c.watchdog_tick();
    }
    m.with_hpet(|h, ctx| h.set_stopped(ctx, true));
    // No ticks for 10 s; reads every ms.
    let mut last = 0;
    let mut stuck = 0u64;
    let mut worst = 0u64;
    for _ in 0..10_000 {
        m.advance(ms(1));
        let t = c.now().as_nanos();
        let truth = m.now_ns() - origin;
        if t == last {
            stuck += 1;
        }
        worst = worst.max(truth.saturating_sub(t));
        last = t;
    }
    assert!(
        c.source_id() != SourceId::Hpet && worst < ms(100),
        "narrow {narrow}: on {:?}, {stuck} held reads, now() up to {} ms behind the truth\n{}",
        c.source_id(),
        worst / 1_000_000,
        c.report().table()
    );
}

#[test]
fn the_deadline_switch_skips_a_stopped_64_bit_hpet() {
    switch_after_deadline(false);
}

#[test]
fn the_deadline_switch_skips_a_stopped_narrow_hpet() {
    switch_after_deadline(true);
}
