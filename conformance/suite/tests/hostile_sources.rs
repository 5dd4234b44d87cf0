//! The suite's own verdicts against fake sources (found by a red-team
//! pass): a stuck reference never hangs it nor leaves a run "ok", a warp
//! seen once fails a source that claims cross-CPU order, a CPU that
//! refuses work or a stopped source cannot stretch the cross-CPU test, a
//! source whose rate went unchecked is not "selected", a correct coarse
//! counter passes, and huge readings saturate instead of overflowing.
//! The reference is told apart by identity, not by name, and one source's
//! read limit or coarseness never changes another source's verdict.

mod common;
mod fake;

use clockhal_conformance::{Check, Config, Cpus, Status, Suite, Value};
use clockhal_core::{ClockSource, Frequency};
use common::collect;
use fake::{cpu, sim_wait, with_timeout, Fake, Sim, Threads};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::Duration;

#[test]
fn a_stuck_reference_with_a_wait_function_gives_up_quickly() {
    let sim = Sim::new();
    let hpet = Fake::counter(&sim, "hpet", 100_000_000, 1_000).with_model(Box::new(|_| 42));
    let tsc = Fake::counter(&sim, "tsc", 2_600_000_000, 20);
    let sources: [&dyn ClockSource; 2] = [&hpet, &tsc];
    let cycles = || sim.get();
    let asked = AtomicU64::new(0);
    let wait = |ns: u64| {
        asked.fetch_add(ns, SeqCst);
        sim.advance(ns);
    };
    let r = collect(
        Suite::new(&sources, &hpet, &cycles)
            .wait_with(&wait)
            .config(Config::quick()),
    );
    let secs = asked.load(SeqCst) / 1_000_000_000;
    assert!(secs < 60, "a stuck reference made the suite wait {secs} s");
    assert_eq!(r.status("hpet", Check::Rate), Status::Fail);
}

#[test]
fn a_stuck_reference_outside_the_list_fails_the_run() {
    let sim = Sim::new();
    let hpet = Fake::counter(&sim, "hpet", 100_000_000, 1_000).with_model(Box::new(|_| 42));
    let tsc = Fake::counter(&sim, "tsc", 2_600_000_000, 20);
    let sources: [&dyn ClockSource; 1] = [&tsc];
    let cycles = || sim.get();
    let r = collect(
        Suite::new(&sources, &hpet, &cycles)
            .config(Config::quick())
            .selected(Some("tsc")),
    );
    assert!(
        !r.summary.ok(),
        "a run with a stuck reference was ok: {}",
        r.summary
    );
    assert_eq!(r.status("hpet", Check::Rate), Status::Fail);
    // Its rate unchecked, the TSC is not "passed everything".
    assert_eq!(r.status("tsc", Check::Selected), Status::Fail);
}

#[test]
fn a_source_whose_rate_went_unchecked_is_not_selected() {
    let sim = Sim::new();
    let hpet = Fake::counter(&sim, "hpet", 100_000_000, 1_000).with_model(Box::new(|_| 42));
    let fast = Fake::counter(&sim, "tsc", 2_600_000_000, 20)
        .claiming(Frequency::from_hz(2_548_000_000).unwrap()); // 2 % off
    let sources: [&dyn ClockSource; 2] = [&hpet, &fast];
    let cycles = || sim.get();
    let r = collect(
        Suite::new(&sources, &hpet, &cycles)
            .config(Config::quick())
            .selected(Some("tsc")),
    );
    assert_ne!(r.status("tsc", Check::Selected), Status::Pass);
}

/// A source claiming cross-CPU order whose reading on CPU 1 is `ahead_ns`
/// ahead of CPU 0's.
fn skewed(sim: &Sim, ahead_ns: u64) -> Fake<'_> {
    Fake::counter(sim, "tsc", 1_000_000_000, 20).with_model(Box::new(move |t| {
        if cpu() == 1 {
            t + ahead_ns
        } else {
            t
        }
    }))
}

#[test]
fn a_partner_far_ahead_fails_a_source_that_claims_cross_cpu_order() {
    for (ahead, config) in [
        (2_000_000_000, Config::default()),
        (200_000_000, Config::quick()),
        (1_000_000, Config::quick()),
    ] {
        let sim = Sim::new();
        let hpet = Fake::counter(&sim, "hpet", 100_000_000, 1_000);
        let tsc = skewed(&sim, ahead);
        let sources: [&dyn ClockSource; 2] = [&hpet, &tsc];
        let cycles = || sim.get();
        let wait = sim_wait(&sim);
        let cpus = Threads(2);
        let r = collect(
            Suite::new(&sources, &hpet, &cycles)
                .wait_with(&wait)
                .cpus(&cpus)
                .config(config),
        );
        assert_eq!(
            r.status("tsc", Check::CrossCpu),
            Status::Fail,
            "{ahead} ns ahead"
        );
    }
}

/// A partner CPU that runs the caller's half, then reports it could not
/// take the work.
struct RefusesAfterLocal;

impl Cpus for RefusesAfterLocal {
    fn count(&self) -> usize {
        2
    }
    fn run_concurrently(
        &self,
        _: usize,
        _: &(dyn Fn() + Sync),
        local: &mut dyn FnMut(),
    ) -> Result<(), &'static str> {
        local();
        Err("CPU 1 is offline")
    }
}

#[test]
fn a_refusing_cpu_and_a_stopped_source_end_the_cross_cpu_test_soon() {
    // A hang detector, not a speed bound: about 6 s in a debug build on an
    // idle machine; 20 s was exceeded on a loaded 2-core one.
    let r = with_timeout(Duration::from_secs(90), || {
        let sim: &'static Sim = Box::leak(Box::new(Sim::new()));
        let good = Fake::counter(sim, "good", 1_000_000_000, 20);
        let stopped = Fake::counter(sim, "stopped", 1_000_000_000, 20).with_model(Box::new(|_| 7));
        let sources: [&dyn ClockSource; 2] = [&good, &stopped];
        let cycles = || sim.get();
        collect(
            Suite::new(&sources, &good, &cycles)
                .cpus(&RefusesAfterLocal)
                .config(Config::quick()),
        )
    });
    assert_eq!(r.status("stopped", Check::CrossCpu), Status::Skip);
    assert!(r
        .get("stopped", Check::CrossCpu)
        .detail
        .contains("could not run"));
}

#[test]
fn a_correct_coarse_counter_passes_rate_and_agreement() {
    let sim = Sim::new();
    let hpet = Fake::counter(&sim, "hpet", 100_000_000, 25_000);
    let jiffies = Fake::counter(&sim, "jiffies", 1_000, 50); // exact, 1 ms steps
    let sources: [&dyn ClockSource; 2] = [&hpet, &jiffies];
    let cycles = || sim.get();
    let wait = sim_wait(&sim);
    let r = collect(Suite::new(&sources, &hpet, &cycles).wait_with(&wait));
    for check in [Check::Resolution, Check::Rate, Check::Agreement] {
        assert_eq!(
            r.status("jiffies", check),
            Status::Pass,
            "{check}: {:?}",
            r.get("jiffies", check)
        );
    }
    // A coarse counter that is 5 % off still fails.
    let sim = Sim::new();
    let hpet = Fake::counter(&sim, "hpet", 100_000_000, 25_000);
    let off =
        Fake::counter(&sim, "jiffies", 1_050, 50).claiming(Frequency::from_hz(1_000).unwrap());
    let sources: [&dyn ClockSource; 2] = [&hpet, &off];
    let cycles = || sim.get();
    let wait = sim_wait(&sim);
    let r = collect(Suite::new(&sources, &hpet, &cycles).wait_with(&wait));
    assert_eq!(r.status("jiffies", Check::Rate), Status::Fail);
}

#[test]
fn a_huge_step_at_a_wide_denominator_saturates() {
    let sim = Sim::new();
    let hpet = Fake::counter(&sim, "hpet", 100_000_000, 1_000);
    let f = Frequency::from_ratio(u64::MAX as u128, (u64::MAX - 1) as u128).unwrap(); // ~1 Hz
    let n = AtomicU64::new(0);
    let glitch = Fake::counter(&sim, "glitch", 1, 1_000)
        .claiming(f)
        .with_model(Box::new(move |t| {
            if n.fetch_add(1, SeqCst) == 1 {
                u64::MAX
            } else {
                t / 1_000_000_000
            }
        }));
    let sources: [&dyn ClockSource; 2] = [&hpet, &glitch];
    let cycles = || sim.get();
    let wait = sim_wait(&sim);
    let r = collect(
        Suite::new(&sources, &hpet, &cycles)
            .wait_with(&wait)
            .config(Config::quick()),
    );
    // No overflow panic; the step is far too coarse, and widens nothing.
    assert_eq!(r.status("glitch", Check::Resolution), Status::Fail);
    assert_eq!(r.status("glitch", Check::Rate), Status::Fail);
}

/// Every result for `source`/`check`, in the order reported.
fn all<'r>(r: &'r common::Results, source: &str, check: Check) -> Vec<&'r common::Rec> {
    r.recs
        .iter()
        .filter(|x| x.source == source && x.check == check)
        .collect()
}

#[test]
fn a_source_named_like_the_reference_still_gets_its_rate_checked() {
    let sim = Sim::new();
    let reference = Fake::counter(&sim, "hpet", 100_000_000, 1_000);
    // A second HPET block (same backend name), 50 % fast.
    let second = Fake::counter(&sim, "hpet", 150_000_000, 1_000)
        .claiming(Frequency::from_hz(100_000_000).unwrap());
    let sources: [&dyn ClockSource; 1] = [&second];
    let cycles = || sim.get();
    let wait = sim_wait(&sim);
    let r = collect(
        Suite::new(&sources, &reference, &cycles)
            .wait_with(&wait)
            .config(Config::quick())
            .selected(Some("hpet")),
    );
    let rate = r.get("hpet", Check::Rate);
    assert_eq!(rate.status, Status::Fail, "{rate:?}");
    assert!(
        matches!(rate.value, Value::I64(v) if v > 400_000),
        "measured against the reference, 50 % fast: {rate:?}"
    );
    assert_eq!(r.status("hpet", Check::Agreement), Status::Fail);
    assert_ne!(r.status("hpet", Check::Selected), Status::Pass);
    assert!(!r.summary.ok());
}

#[test]
fn two_checked_sources_with_one_name_are_both_checked_and_never_selected() {
    let sim = Sim::new();
    let reference = Fake::counter(&sim, "ref", 100_000_000, 1_000);
    // Two HPET blocks, both correct: each is checked, but a selection by
    // their shared name cannot say which one the OS uses.
    let a = Fake::counter(&sim, "hpet", 100_000_000, 1_000);
    let b = Fake::counter(&sim, "hpet", 100_000_000, 1_000);
    let sources: [&dyn ClockSource; 3] = [&reference, &a, &b];
    let cycles = || sim.get();
    let wait = sim_wait(&sim);
    let r = collect(
        Suite::new(&sources, &reference, &cycles)
            .wait_with(&wait)
            .config(Config::quick())
            .selected(Some("hpet")),
    );
    let rates = all(&r, "hpet", Check::Rate);
    assert_eq!(rates.len(), 2, "{rates:?}");
    assert!(rates.iter().all(|x| x.status == Status::Pass), "{rates:?}");
    let sel = r.get("hpet", Check::Selected);
    assert_eq!(sel.status, Status::Fail, "{sel:?}");
    assert!(sel.detail.contains("ambiguous"), "{sel:?}");
    // The reference itself, in the list, is still recognised as such.
    assert_eq!(r.status("ref", Check::Rate), Status::Skip);
}

#[test]
fn a_narrow_source_does_not_make_another_sources_wrong_rate_pass() {
    for with_narrow in [false, true] {
        let sim = Sim::new();
        let reference = Fake::counter(&sim, "hpet", 100_000_000, 1_000);
        // Claims 100 MHz, runs 10 % fast; 1 us per read (a trapping device).
        let off = Fake::counter(&sim, "off", 110_000_000, 1_000)
            .claiming(Frequency::from_hz(100_000_000).unwrap());
        // A correct software-extended 16-bit counter at 1 GHz.
        let mut narrow = Fake::counter(&sim, "narrow", 1_000_000_000, 20);
        narrow.max_read = Some(1 << 15);
        let both: [&dyn ClockSource; 2] = [&off, &narrow];
        let alone: [&dyn ClockSource; 1] = [&off];
        let sources: &[&dyn ClockSource] = if with_narrow { &both } else { &alone };
        let cycles = || sim.get();
        let wait = sim_wait(&sim);
        let r = collect(Suite::new(sources, &reference, &cycles).wait_with(&wait));
        let rate = r.get("off", Check::Rate);
        assert_eq!(
            rate.status,
            Status::Fail,
            "with_narrow={with_narrow}: 10 % off passed: {rate:?}"
        );
        // Its own interval, the configured one.
        assert!(rate.detail.contains("of 100.000 ms"), "{rate:?}");
        assert_eq!(r.status("off", Check::Agreement), Status::Fail);
        if with_narrow {
            // The narrow source gets the short interval it needs, alone,
            // and is not called wrong.
            let n = r.get("narrow", Check::Rate);
            assert_ne!(n.status, Status::Fail, "{n:?}");
            assert!(n.detail.contains("of 0.016 ms"), "{n:?}");
        }
    }
}

#[test]
fn an_interval_too_short_for_a_coarse_source_skips_its_rate() {
    // 1 ms steps over 5 ms intervals: quantization alone is 40 %, so even a
    // 5 % error cannot be seen. That is a skip (unverified), not a pass.
    let sim = Sim::new();
    let hpet = Fake::counter(&sim, "hpet", 100_000_000, 1_000);
    let off =
        Fake::counter(&sim, "jiffies", 1_050, 50).claiming(Frequency::from_hz(1_000).unwrap());
    let sources: [&dyn ClockSource; 2] = [&hpet, &off];
    let cycles = || sim.get();
    let wait = sim_wait(&sim);
    let r = collect(
        Suite::new(&sources, &hpet, &cycles)
            .wait_with(&wait)
            .config(Config::default().rate_interval(clockhal_core::Duration::from_millis(5)))
            .selected(Some("jiffies")),
    );
    for check in [Check::Rate, Check::Agreement] {
        let x = r.get("jiffies", check);
        assert_eq!(x.status, Status::Skip, "{x:?}");
        assert!(x.detail.contains("too short to resolve"), "{x:?}");
    }
    // Unverified: never "passed everything".
    assert_eq!(r.status("jiffies", Check::Selected), Status::Fail);
}

#[test]
fn an_imprecise_sources_vote_does_not_carry_a_wrong_rate_through_agreement() {
    // "slow" takes 250 us per read, so its smallest step is ~260 us and over
    // 10 ms intervals its tolerance widens by ~52,000 ppm: 4.55 % fast, it
    // passes its own rate. It must not vote "off" (4.6 % fast, finely
    // resolved, rate FAIL) into agreement with the median.
    let sim = Sim::new();
    let hpet = Fake::counter(&sim, "hpet", 100_000_000, 1_000);
    let off = Fake::counter(&sim, "off", 104_600_000, 1_000)
        .claiming(Frequency::from_hz(100_000_000).unwrap());
    let slow = Fake::counter(&sim, "slow", 1_045_500_000, 250_000)
        .claiming(Frequency::from_hz(1_000_000_000).unwrap());
    let sources: [&dyn ClockSource; 2] = [&off, &slow];
    let cycles = || sim.get();
    let wait = sim_wait(&sim);
    let r = collect(
        Suite::new(&sources, &hpet, &cycles)
            .wait_with(&wait)
            .config(Config::quick()),
    );
    assert_eq!(r.status("off", Check::Rate), Status::Fail);
    let a = r.get("off", Check::Agreement);
    assert_eq!(a.status, Status::Fail, "{a:?}");
}
