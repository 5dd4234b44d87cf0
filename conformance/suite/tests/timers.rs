//! The timer checks' verdicts on an honest simulated timer and on hostile
//! ones (early, lost, uncancellable, a past deadline that never comes).

mod fake;

use clockhal_conformance::{
    Check, CheckResult, Config, Deliveries, Status, Suite, TimerSlot, TimerUnderTest, Timers,
};
use core::cell::Cell;
use core::fmt;
use fake::{Fake, Sim};

#[derive(Clone, Copy, PartialEq)]
enum Flaw {
    None,
    /// Delivers 5 µs before the deadline.
    Early,
    /// Never interrupts after the 10th arm.
    LosesOne,
    /// Cancel disarms the timer layer but not the device: it still
    /// interrupts (spurious).
    CancelIgnored,
    /// A deadline at or before now is never programmed.
    PastIgnored,
    /// Not usable when the checks start (TSC-deadline without a TSC map).
    Unavailable,
}

/// A timer on simulated time: `wait()` advances time by 10 µs and raises
/// the "interrupt" when the armed deadline is reached.
struct SimTimer<'s> {
    sim: &'s Sim,
    flaw: Flaw,
    armed: Cell<Option<u64>>,
    /// Device expiry (may outlive a cancel with `CancelIgnored`).
    device: Cell<Option<u64>>,
    arms: Cell<u32>,
    d: Cell<Deliveries>,
    reach: Option<u64>,
    capped: Option<Box<SimTimer<'s>>>,
}

impl<'s> SimTimer<'s> {
    fn new(sim: &'s Sim, flaw: Flaw, reach: Option<u64>) -> SimTimer<'s> {
        SimTimer {
            sim,
            flaw,
            armed: Cell::new(None),
            device: Cell::new(None),
            arms: Cell::new(0),
            d: Cell::new(Deliveries::default()),
            reach,
            capped: reach.map(|_| {
                Box::new(SimTimer {
                    reach: Some(1_000_000),
                    capped: None,
                    ..SimTimer::new(sim, flaw, None)
                })
            }),
        }
    }

    /// Programs the device for `deadline` (a piece of at most the reach).
    fn program(&self, deadline: u64) {
        let now = self.sim.get();
        let piece = match self.reach {
            Some(r) => deadline.min(now + r),
            None => deadline,
        };
        let at = if self.flaw == Flaw::Early {
            piece.saturating_sub(5_000)
        } else {
            piece
        };
        if self.flaw == Flaw::PastIgnored && deadline <= now {
            return;
        }
        if self.flaw == Flaw::LosesOne && self.arms.get() == 10 {
            return;
        }
        self.device.set(Some(at.max(now)));
    }

    /// The interrupt handler: what clockhal's `Timer::on_interrupt` does,
    /// less the early re-arm for the `Early` flaw (so the check sees it).
    fn interrupt(&self) {
        let now = self.sim.get();
        let mut d = self.d.get();
        d.interrupts += 1;
        match self.armed.get() {
            Some(dl) if now >= dl || self.flaw == Flaw::Early => {
                self.armed.set(None);
                d.fired += 1;
                d.last_deadline_ns = dl;
                d.last_seen_ns = now;
                d.last_late_ns = now.saturating_sub(dl);
            }
            Some(dl) => {
                d.rearmed += 1;
                self.program(dl);
            }
            None => d.spurious += 1,
        }
        self.d.set(d);
    }
}

impl TimerUnderTest for SimTimer<'_> {
    fn name(&self) -> &str {
        "lapic-oneshot"
    }
    fn now_ns(&self) -> u64 {
        self.sim.get()
    }
    fn arm(&self, deadline_ns: u64, _why: &mut dyn fmt::Write) -> bool {
        self.arms.set(self.arms.get() + 1);
        self.armed.set(Some(deadline_ns));
        self.program(deadline_ns);
        true
    }
    fn cancel(&self) -> bool {
        if self.flaw != Flaw::CancelIgnored {
            self.device.set(None);
        }
        self.armed.take().is_some()
    }
    fn deliveries(&self) -> Deliveries {
        self.d.get()
    }
    fn wait(&self) {
        let now = self.sim.advance(10_000);
        if let Some(at) = self.device.get() {
            if now >= at {
                self.device.set(None);
                self.interrupt();
            }
        }
    }
    fn reach_ns(&self) -> Option<u64> {
        self.reach
    }
    fn unavailable(&self, why: &mut dyn fmt::Write) -> bool {
        if self.flaw == Flaw::Unavailable {
            let _ = why.write_str("no TSC map now");
        }
        self.flaw == Flaw::Unavailable
    }
    fn capped(&self, why: &mut dyn fmt::Write) -> Option<&dyn TimerUnderTest> {
        if self.capped.is_none() {
            let _ = why.write_str("64-bit reach");
        }
        self.capped.as_deref().map(|t| t as &dyn TimerUnderTest)
    }
}

/// (check, status, detail) of every timer result.
fn run(slots: &[TimerSlot<'_>], selected: Option<&str>) -> Vec<(Check, Status, String, String)> {
    let sim = Sim::new();
    let hpet = Fake::counter(&sim, "hpet", 100_000_000, 0);
    let sources: [&dyn clockhal_core::ClockSource; 1] = [&hpet];
    let cycles = || 0u64;
    let mut out = Vec::new();
    let mut config = Config::quick();
    config.timer_deadlines = 200;
    Suite::new(&sources, &hpet, &cycles)
        .config(config)
        .timers(Timers {
            slots,
            selected,
            reason: "test ranking",
            prepare: None,
        })
        .run(&mut |r: &CheckResult<'_>| {
            if r.check.name().starts_with("timer-") {
                out.push((
                    r.check,
                    r.status,
                    r.source.to_string(),
                    r.detail.to_string(),
                ));
            }
        });
    out
}

fn status(out: &[(Check, Status, String, String)], c: Check) -> (Status, String) {
    let r = out.iter().find(|r| r.0 == c).expect("reported");
    (r.1, r.3.clone())
}

fn one(flaw: Flaw, reach: Option<u64>) -> Vec<(Check, Status, String, String)> {
    let sim = Sim::new();
    let t = SimTimer::new(&sim, flaw, reach);
    // The timer's own clock is the one `run` does not see: give it its own.
    let slots = [TimerSlot::Present(&t)];
    run(&slots, Some("lapic-oneshot"))
}

#[test]
fn an_honest_timer_passes_everything() {
    let out = one(Flaw::None, Some(u32::MAX as u64));
    for c in [
        Check::TimerDeadlines,
        Check::TimerPast,
        Check::TimerCancel,
        Check::TimerLong,
        Check::TimerSelected,
    ] {
        let (s, d) = status(&out, c);
        assert_eq!(s, Status::Pass, "{c}: {d}");
    }
    let (_, d) = status(&out, Check::TimerDeadlines);
    assert!(d.starts_with("median_ns=") && d.contains("max_ns="), "{d}");
}

#[test]
fn a_64_bit_reach_skips_the_long_check() {
    let out = one(Flaw::None, None);
    let (s, d) = status(&out, Check::TimerLong);
    assert_eq!(s, Status::Skip, "{d}");
    assert_eq!(d, "64-bit reach");
}

#[test]
fn an_early_delivery_fails() {
    let out = one(Flaw::Early, None);
    let (s, d) = status(&out, Check::TimerDeadlines);
    assert_eq!(s, Status::Fail, "{d}");
    assert!(d.contains("early"), "{d}");
    assert_eq!(status(&out, Check::TimerSelected).0, Status::Fail);
}

#[test]
fn a_lost_deadline_fails() {
    let (s, d) = status(&one(Flaw::LosesOne, None), Check::TimerDeadlines);
    assert_eq!(s, Status::Fail, "{d}");
    assert!(d.contains("not delivered"), "{d}");
}

#[test]
fn a_device_that_ignores_cancel_fails() {
    let (s, d) = status(&one(Flaw::CancelIgnored, None), Check::TimerCancel);
    assert_eq!(s, Status::Fail, "{d}");
    assert!(d.contains("1 interrupts"), "{d}");
}

#[test]
fn a_past_deadline_that_never_comes_fails() {
    let (s, d) = status(&one(Flaw::PastIgnored, None), Check::TimerPast);
    assert_eq!(s, Status::Fail, "{d}");
}

#[test]
fn absent_devices_skip_with_the_reason() {
    let slots = [TimerSlot::Absent {
        name: "hpet-comparator",
        reason: "no HPET",
    }];
    let out = run(&slots, None);
    assert_eq!(out.len(), 5);
    for (c, s, src, d) in &out[..4] {
        assert_eq!(
            (*s, src.as_str(), d.as_str()),
            (Status::Skip, "hpet-comparator", "no HPET"),
            "{c}"
        );
    }
    assert_eq!(out[4].1, Status::Skip);
}

#[test]
fn no_timers_given_skips_every_known_device() {
    let sim = Sim::new();
    let hpet = Fake::counter(&sim, "hpet", 100_000_000, 0);
    let sources: [&dyn clockhal_core::ClockSource; 1] = [&hpet];
    let cycles = || 0u64;
    let mut n = 0;
    Suite::new(&sources, &hpet, &cycles)
        .config(Config::quick())
        .run(&mut |r: &CheckResult<'_>| {
            if r.check.name().starts_with("timer-") {
                assert_eq!(r.status, Status::Skip);
                n += 1;
            }
        });
    assert_eq!(n, 13);
}

#[test]
fn an_unavailable_device_skips_and_its_selection_is_not_a_pass() {
    let out = one(Flaw::Unavailable, None);
    for c in [
        Check::TimerDeadlines,
        Check::TimerPast,
        Check::TimerCancel,
        Check::TimerLong,
    ] {
        assert_eq!(
            status(&out, c),
            (Status::Skip, "no TSC map now".to_string()),
            "{c}"
        );
    }
    let (s, d) = status(&out, Check::TimerSelected);
    assert_eq!(s, Status::Skip, "{d}");
    assert!(d.contains("unusable when the checks ran"), "{d}");
}
