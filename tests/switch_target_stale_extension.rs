//! A switch target is re-read for 100 µs and one that does not count is
//! demoted as `Watchdog { Stopped }`. A software-extended target (the PM
//! timer) left unread for more than half its wrap holds its extension's
//! last value on those reads (its raw count behind it): that tells
//! nothing, and the honest PM timer is not demoted (for a while it was,
//! for good).
#![cfg(all(feature = "tsc", feature = "acpi-pm"))]

use clockhal::{SourceId, Verdict};
use clockhal_sim::SimConfig;

mod adversarial;

use adversarial::{clock, leak, ms};

/// A supervised TSC current, the PM timer its only reference. The OS
/// ticks, then stops ticking and reading (idle) for `idle_ms`; the first
/// read after that is past the supervision deadline.
fn idle_then_deadline(idle_ms: u64) {
    let m = leak(
        SimConfig::cpu(2_000_000_000)
            .with_invariant_tsc(false)
            .with_pm_timer(clockhal_sim::PmTimerConfig::default())
            .build(),
    );
    let (c, _) = clock(m);
    assert_eq!(c.source_id(), SourceId::Tsc, "{}", c.report().table());
    for _ in 0..8 {
        m.advance(ms(250));
        c.watchdog_tick();
    }
    m.advance(ms(idle_ms));
    for _ in 0..100 {
        m.advance(ms(1));
        c.now();
    }
    let pm = c.report().get(SourceId::AcpiPm).map(|x| x.verdict);
    assert!(
        matches!(pm, Some(Verdict::Usable(_))) && c.source_id() == SourceId::AcpiPm,
        "idle {idle_ms} ms: on {:?}; the counting PM timer is {pm:?}\n{}",
        c.source_id(),
        c.report().table()
    );
}

/// 3.5 s: past half the PM timer's 4.69 s wrap.
#[test]
fn an_idle_of_3_5_s_does_not_make_the_pm_timer_stopped() {
    idle_then_deadline(3_500);
}

/// 2 s: under half a wrap (control: the switch lands on the PM timer).
#[test]
fn an_idle_of_2_s_switches_to_the_pm_timer() {
    idle_then_deadline(2_000);
}
