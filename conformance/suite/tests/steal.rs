//! The steal-time check's verdicts on honest and hostile steal readers.

mod fake;

use clockhal_conformance::{Check, CheckResult, Status, StealTime, Suite};
use core::fmt;
use fake::{sim_wait, Fake, Sim};

/// Steal as a function of simulated time (`None`: unavailable).
struct Steal<'s>(&'s Sim, fn(u64) -> Option<u64>);

impl StealTime for Steal<'_> {
    fn steal_ns(&self, why: &mut dyn fmt::Write) -> Option<u64> {
        let v = (self.1)(self.0.get());
        if v.is_none() {
            let _ = why.write_str("KVM does not offer steal time");
        }
        v
    }
}

fn verdict(model: fn(u64) -> Option<u64>) -> (Status, String) {
    let sim = Sim::new();
    let hpet = Fake::counter(&sim, "hpet", 100_000_000, 0);
    let sources: [&dyn clockhal_core::ClockSource; 1] = [&hpet];
    let steal = Steal(&sim, model);
    let wait = sim_wait(&sim);
    let cycles = || 0u64;
    let mut out = Vec::new();
    Suite::new(&sources, &hpet, &cycles)
        .wait_with(&wait)
        .steal(&steal)
        .run(&mut |r: &CheckResult<'_>| {
            if r.check == Check::StealTime {
                out.push((r.status, format!("{} {}", r.source, r.detail)));
            }
        });
    assert_eq!(out.len(), 1, "{out:?}");
    out.pop().unwrap()
}

#[test]
fn honest_steal_passes() {
    let (s, d) = verdict(|t| Some(7_000 + t / 4));
    assert_eq!(s, Status::Pass, "{d}");
    assert!(d.starts_with("kvmclock "), "{d}");
}

#[test]
fn steal_that_goes_back_fails() {
    let (s, d) = verdict(|t| Some(if (t / 1_000_000) % 2 == 0 { 500_000 } else { 0 }));
    assert_eq!(s, Status::Fail, "{d}");
    assert!(d.contains("went back"), "{d}");
}

#[test]
fn steal_faster_than_time_fails() {
    let (s, d) = verdict(|t| Some(t * 2));
    assert_eq!(s, Status::Fail, "{d}");
    assert!(d.contains("stolen in"), "{d}");
}

#[test]
fn no_steal_time_is_skipped_with_the_reason() {
    let (s, d) = verdict(|_| None);
    assert_eq!(s, Status::Skip);
    assert!(d.contains("does not offer steal time"), "{d}");
}
