//! No TSC at all (nothing measures gaps but the clock's own timeline); a
//! 32-bit HPET current and the PM timer a member; ticks further apart
//! than the PM timer's wrap (and, in one case, than half the HPET's): a
//! tick interval longer than a counter's wrap is a skipped interval,
//! never "Stopped" (issue 26 §4), and honest counters are never demoted.
#![cfg(all(feature = "hpet", feature = "acpi-pm"))]

use clockhal::{SourceId, Verdict};
use clockhal_sim::{HpetConfig, SimConfig};

mod adversarial;

use adversarial::{bad, clock, leak, ms};

fn no_tsc(tick_ms: u64, reads_between: bool) {
    let m = leak(
        SimConfig::cpu(2_000_000_000)
            .with_cpuid(1, 0, clockhal_sim::regs(0x000906EA, 0, 0, 0))
            .with_pm_timer(clockhal_sim::PmTimerConfig::default())
            .with_hpet(HpetConfig::qemu().narrow())
            .build(),
    );
    let (c, _) = clock(m);
    assert_eq!(c.source_id(), SourceId::Hpet, "{}", c.report().table());
    for _ in 0..8 {
        m.advance(ms(250));
        c.watchdog_tick();
    }
    let mut evs = vec![];
    for i in 0..20 {
        let mut left = tick_ms;
        while left > 0 {
            let s = left.min(1_000);
            m.advance(ms(s));
            left -= s;
            if reads_between {
                c.now();
            }
        }
        evs.push((i, c.watchdog_tick()));
    }
    let demoted: Vec<_> = c
        .report()
        .candidates()
        .filter(|x| matches!(x.verdict, Verdict::Demoted { .. }))
        .map(|x| x.id)
        .collect();
    assert!(
        demoted.is_empty() && !evs.iter().any(|(_, e)| bad(e)),
        "ticks every {tick_ms} ms, reads {reads_between}: demoted {demoted:?}; {evs:?}\n{}",
        c.report().table()
    );
}

#[test]
fn no_tsc_ticks_every_10_s_with_reads() {
    no_tsc(10_000, true);
}

#[test]
fn no_tsc_ticks_every_10_s_idle() {
    no_tsc(10_000, false);
}

#[test]
fn no_tsc_ticks_every_30_s_idle() {
    no_tsc(30_000, false);
}
