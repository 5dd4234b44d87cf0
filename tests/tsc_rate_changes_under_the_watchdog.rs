//! The watchdog when the TSC (the gaps' measure) is the faulty one: a
//! non-invariant TSC whose rate changes while the ticks come further
//! apart than the PM timer's wrap. The honest devices stay; the clock
//! leaves the TSC; and once demoted for its rate, the TSC neither
//! places wraps in a member nor has its rate "refined" against one.
#![cfg(all(feature = "tsc", feature = "hpet", feature = "acpi-pm"))]

use clockhal::{SourceId, Verdict, WatchdogEvent};
use clockhal_sim::{HpetConfig, SimConfig};

mod adversarial;

use adversarial::{clock, leak, ms};

fn demoted(c: &adversarial::SimClock, id: SourceId) -> bool {
    matches!(c.report().get(id).unwrap().verdict, Verdict::Demoted { .. })
}

/// A supervised TSC (not invariant) current with a 32- or 64-bit HPET
/// and the PM timer; 8 ticks at 250 ms, then the TSC's rate changes by
/// `ppm` and ticks come every `tick_ms`. The honest HPET and PM timer
/// must never be demoted (README: a correct source is never demoted),
/// and the clock must not end on the TSC.
fn rate_change(narrow: bool, ppm: i64, tick_ms: u64) -> Vec<(usize, WatchdogEvent)> {
    let hz = 2_000_000_000u64;
    let hpet = if narrow {
        HpetConfig::qemu().narrow()
    } else {
        HpetConfig::qemu()
    };
    let m = leak(
        SimConfig::cpu(hz)
            .with_invariant_tsc(false)
            .with_pm_timer(clockhal_sim::PmTimerConfig::default())
            .with_hpet(hpet)
            .build(),
    );
    let (c, _) = clock(m);
    assert_eq!(c.source_id(), SourceId::Tsc, "{}", c.report().table());
    for _ in 0..8 {
        m.advance(ms(250));
        c.watchdog_tick();
    }
    m.set_tsc_hz((hz as i64 + hz as i64 * ppm / 1_000_000) as u64);
    let origin = m.now_ns() - c.now().as_nanos();
    let mut evs = vec![];
    let mut last = c.now().as_nanos();
    for i in 0..20 {
        m.advance(ms(tick_ms));
        let e = c.watchdog_tick();
        let t = c.now().as_nanos();
        assert!(t >= last);
        last = t;
        evs.push((i, e));
        for id in [SourceId::Hpet, SourceId::AcpiPm] {
            assert!(
                !demoted(&c, id),
                "narrow {narrow} ppm {ppm} tick {tick_ms} ms: honest {id:?} demoted at tick {i}; events {evs:?}\n{}",
                c.report().table()
            );
        }
        let _ = origin;
    }
    assert_ne!(
        c.source_id(),
        SourceId::Tsc,
        "narrow {narrow} ppm {ppm}: still on the TSC; {evs:?}\n{}",
        c.report().table()
    );
    evs
}

#[test]
fn a_slowed_tsc_with_ticks_longer_than_a_pm_wrap_64_bit_hpet() {
    rate_change(false, -100_000, 10_000);
}

#[test]
fn a_slowed_tsc_with_ticks_longer_than_a_pm_wrap_narrow_hpet() {
    rate_change(true, -100_000, 10_000);
}

#[test]
fn a_faster_tsc_with_ticks_longer_than_a_pm_wrap_narrow_hpet() {
    rate_change(true, 100_000, 10_000);
}

#[test]
fn a_faster_tsc_with_ticks_longer_than_a_pm_wrap_64_bit_hpet() {
    rate_change(false, 100_000, 10_000);
}

#[test]
fn a_slightly_slow_tsc_with_ticks_longer_than_a_pm_wrap_narrow_hpet() {
    rate_change(true, -20_000, 10_000);
}

/// After the watchdog demoted the supervised TSC for a 2 % rate error
/// (the clock now on the 32-bit HPET), ticks stop for as long as makes
/// that error one PM timer wrap (234 s), then resume every 250 ms. The
/// demoted TSC still measures the tick gap that places the PM timer
/// member's wraps: the honest PM timer must not be blamed for it.
#[test]
fn a_demoted_tsc_puts_no_wrap_into_an_honest_pm_timer_member() {
    let hz = 2_000_000_000u64;
    let m = leak(
        SimConfig::cpu(hz)
            .with_invariant_tsc(false)
            .with_pm_timer(clockhal_sim::PmTimerConfig::default())
            .with_hpet(HpetConfig::qemu().narrow())
            .build(),
    );
    let (c, _) = clock(m);
    for _ in 0..8 {
        m.advance(ms(250));
        c.watchdog_tick();
    }
    m.set_tsc_hz(hz + hz / 50);
    for _ in 0..20 {
        m.advance(ms(250));
        c.watchdog_tick();
        c.now();
    }
    assert!(demoted(&c, SourceId::Tsc), "{}", c.report().table());
    assert_eq!(c.source_id(), SourceId::Hpet, "{}", c.report().table());
    let pm = c.source_of(SourceId::AcpiPm).unwrap();
    let (p0, n0) = (pm.read(), m.now_ns());
    // 2 % of 234.4 s is one PM timer wrap (4.687 s). `now()` is read
    // meanwhile (every 10 s: the HPET's wrap is 42.9 s).
    for _ in 0..23 {
        m.advance(ms(10_000));
        c.now();
    }
    m.advance(4_370_000_000);
    let mut evs = vec![];
    for i in 0..12 {
        m.advance(ms(250));
        evs.push((i, c.watchdog_tick()));
        c.now();
    }
    let counted = (pm.read() - p0) as u128 * 1_000_000_000 / 3_579_545;
    let truth = (m.now_ns() - n0) as u128;
    assert!(
        !demoted(&c, SourceId::AcpiPm) && counted.abs_diff(truth) < 1_000_000,
        "PM timer counted {counted} ns of {truth} ns; events {evs:?}\n{}",
        c.report().table()
    );
}
