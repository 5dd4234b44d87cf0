//! The same on a KVM guest (kvmclock current, a narrow HPET and the PM
//! timer members): an honest PM timer is not demoted after a long tick
//! gap followed by ticks seconds apart.
#![cfg(all(
    feature = "tsc",
    feature = "hpet",
    feature = "acpi-pm",
    feature = "kvmclock"
))]

use clockhal::Verdict;
use clockhal_sim::{HpetConfig, SimMachine};

mod adversarial;

use adversarial::{clock, leak, ms};

fn run(first: u64, then: u64, n: usize) -> Option<String> {
    let m = leak(
        SimMachine::kvm_config()
            .with_hpet(HpetConfig::qemu().narrow())
            .build(),
    );
    let (c, _) = clock(m);
    let cur = c.source_id();
    for _ in 0..8 {
        m.advance(ms(250));
        c.watchdog_tick();
    }
    m.advance(first);
    c.watchdog_tick();
    for _ in 0..n {
        m.advance(then);
        c.watchdog_tick();
    }
    let d: Vec<_> = c
        .report()
        .candidates()
        .filter(|x| matches!(x.verdict, Verdict::Demoted { .. }))
        .map(|x| x.id)
        .collect();
    (!d.is_empty()).then(|| {
        format!(
            "cur {cur:?} first {} s then {} ms: demoted {d:?}",
            first / 1_000_000_000,
            then / 1_000_000
        )
    })
}

#[test]
fn kvm_narrow_hpet_long_gap_then_sparse_ticks() {
    let mut fails = vec![];
    for first in [ms(700_000), ms(701_200), ms(7_200_000), ms(7_203_000)] {
        for then in [250u64, 1_000, 3_500, 4_000, 30_000] {
            if let Some(e) = run(first, ms(then), 12) {
                fails.push(e);
            }
        }
    }
    assert!(
        fails.is_empty(),
        "{} failures:\n{}",
        fails.len(),
        fails.join("\n")
    );
}
