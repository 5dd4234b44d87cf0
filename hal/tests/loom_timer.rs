//! loom models of the one-shot deadline state (`clockhal_core::timer::OneShot`)
//! over the real code: `./scripts/deep-checks.sh loom`. Empty without
//! `cfg(loom)`.
#![cfg(loom)]

use clockhal_core::timer::{Expiry, OneShot};
use loom::sync::Arc;
use loom::thread;

#[test]
fn cancel_and_interrupt_exactly_one_wins() {
    loom::model(|| {
        let t = Arc::new(OneShot::new());
        t.arm(5);
        let irq = {
            let t = t.clone();
            thread::spawn(move || t.on_interrupt(10))
        };
        let cancelled = t.cancel().is_some();
        let fired = matches!(irq.join().unwrap(), Expiry::Fired { deadline_ns: 5 });
        assert!(cancelled != fired, "cancelled {cancelled}, fired {fired}");
        assert_eq!(t.deadline(), None);
    });
}

#[test]
fn two_interrupts_report_one_fire() {
    loom::model(|| {
        let t = Arc::new(OneShot::new());
        t.arm(5);
        let other = {
            let t = t.clone();
            thread::spawn(move || t.on_interrupt(10))
        };
        let mine = t.on_interrupt(10);
        let theirs = other.join().unwrap();
        let fires = [mine, theirs]
            .iter()
            .filter(|e| matches!(e, Expiry::Fired { .. }))
            .count();
        assert_eq!(fires, 1, "{mine:?} {theirs:?}");
    });
}

#[test]
fn a_rearm_racing_the_interrupt_is_never_fired_early() {
    loom::model(|| {
        let t = Arc::new(OneShot::new());
        t.arm(5);
        let irq = {
            let t = t.clone();
            thread::spawn(move || t.on_interrupt(10))
        };
        let old = t.arm(20);
        match irq.join().unwrap() {
            // The old deadline fired before the re-arm replaced it...
            Expiry::Fired { deadline_ns } => {
                assert_eq!(deadline_ns, 5);
                assert_eq!(old, None);
            }
            // ...or the interrupt saw the new one, not yet due.
            Expiry::Rearm {
                deadline_ns,
                remaining_ns,
            } => {
                assert_eq!((deadline_ns, remaining_ns), (20, 10));
                assert_eq!(old, Some(5));
            }
            Expiry::Spurious => panic!("an armed deadline was lost"),
        }
        // The new deadline is armed either way.
        assert_eq!(t.deadline(), Some(20));
    });
}
