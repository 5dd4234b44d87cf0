//! A forced supervised TSC (issue 26): `force` promises the source "stays
//! even without ticks", yet the next watchdog tick renewed its supervision
//! deadline, so ticks that stopped afterwards had it marked demoted
//! ("not verified by a watchdog round in time") while it stayed current,
//! and `unforce` then switched away from an honest TSC. Forced, it is not
//! supervised; `unforce` puts it under supervision again.
#![cfg(all(feature = "tsc", feature = "hpet"))]

use clockhal::{Demotion, SourceId, Verdict};
use clockhal_sim::SimMachine;

mod adversarial;

use adversarial::{leak, ms};

/// Bare metal, a TSC that is not invariant (supervised), the HPET.
fn supervised_tsc() -> (&'static SimMachine, adversarial::SimClock) {
    let mut config = SimMachine::bare_metal_config().with_invariant_tsc(false);
    config.pm_timer = None;
    let m = leak(config.build());
    let (c, _) = adversarial::clock(m);
    assert_eq!(c.source_id(), SourceId::Tsc, "{}", c.report().table());
    assert!(c.supervised());
    (m, c)
}

fn tsc_usable(c: &adversarial::SimClock) -> bool {
    matches!(
        c.report().get(SourceId::Tsc).unwrap().verdict,
        Verdict::Usable(_)
    )
}

#[test]
fn a_forced_supervised_tsc_is_not_demoted_when_ticks_stop() {
    let (m, c) = supervised_tsc();
    c.force(SourceId::Tsc).unwrap();
    assert!(!c.supervised(), "forced: kept without ticks");
    for _ in 0..8 {
        m.advance(ms(250));
        c.watchdog_tick();
    }
    assert!(
        !c.supervised(),
        "a tick put the forced TSC under supervision"
    );
    // No ticks for 10 s, reading all along.
    for _ in 0..100 {
        m.advance(ms(100));
        c.now();
    }
    assert_eq!(c.source_id(), SourceId::Tsc);
    assert!(tsc_usable(&c), "{}", c.report().table());
    // Automatic again: supervised again, and demoted when ticks stop.
    c.unforce();
    assert_eq!(c.source_id(), SourceId::Tsc, "{}", c.report().table());
    assert!(c.supervised());
    for _ in 0..100 {
        m.advance(ms(100));
        c.now();
    }
    assert_eq!(
        c.report().get(SourceId::Tsc).unwrap().demotion(),
        Some(Demotion::Unsupervised),
        "{}",
        c.report().table()
    );
    assert_ne!(c.source_id(), SourceId::Tsc);
}
