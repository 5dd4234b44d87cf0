//! The facade's timer on hostile devices: early fires, fires that never
//! come, devices with no rate or no reach, expiries refused as past, a
//! cancel racing the interrupt, and the selection's reasons.
#![cfg(all(feature = "tsc", feature = "hpet"))]

use clockhal::timer::{
    TimerDescriptor, TimerDevice, TimerError, TimerEvent, TimerMode, TimerRejection, TimerScope,
    TimerSetupError, TimerVerdict,
};
use clockhal::{Clock, Duration, Frequency, Instant, Platform, Policy};
use clockhal_sim::SimMachine;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::Mutex;

/// A scripted device: records every count; `in_past` makes the next
/// programs report `InPast`.
struct Fake {
    desc: TimerDescriptor,
    rate: Option<Frequency>,
    programs: Mutex<Vec<u64>>,
    absolute: Mutex<Vec<u64>>,
    in_past: AtomicU32,
    cancels: AtomicU32,
}

fn desc(name: &'static str, rating: u16, max: u64) -> TimerDescriptor {
    TimerDescriptor {
        name,
        scope: TimerScope::Global,
        mode: TimerMode::Delta,
        max_delta_ticks: max,
        min_delta_ticks: 1,
        resolution_ns: 1,
        traps_per_arm: 0,
        needs_calibrated_rate: false,
        stops_in_deep_idle: false,
        rating,
        rating_reason: "scripted",
    }
}

impl Fake {
    fn new(desc: TimerDescriptor, hz: Option<u64>) -> Fake {
        Fake {
            desc,
            rate: hz.map(|h| Frequency::from_hz(h).unwrap()),
            programs: Mutex::default(),
            absolute: Mutex::default(),
            in_past: AtomicU32::new(0),
            cancels: AtomicU32::new(0),
        }
    }
    fn programs(&self) -> Vec<u64> {
        self.programs.lock().unwrap().clone()
    }
}

impl TimerDevice for Fake {
    fn descriptor(&self) -> TimerDescriptor {
        self.desc
    }
    fn rate(&self) -> Option<Frequency> {
        self.rate
    }
    fn program(&self, ticks: u64) -> Result<(), TimerError> {
        self.programs.lock().unwrap().push(ticks);
        if self
            .in_past
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(TimerError::InPast);
        }
        Ok(())
    }
    fn program_at(&self, counter: u64) -> Result<(), TimerError> {
        self.absolute.lock().unwrap().push(counter);
        Ok(())
    }
    fn cancel(&self) {
        self.cancels.fetch_add(1, SeqCst);
    }
}

fn clock(m: &SimMachine) -> Clock<&SimMachine> {
    clockhal::probe(m, Platform::new()).into_clock().unwrap()
}

fn after(clock: &Clock<&SimMachine>, ns: u64) -> Instant {
    clock.now() + Duration::from_nanos(ns)
}

#[test]
fn never_fired_before_now_reaches_the_deadline() {
    let m = SimMachine::bare_metal();
    let c = clock(&m);
    let dev = Fake::new(desc("fake", 10, u32::MAX as u64), Some(1_000_000_000));
    let t = c.timer(&dev).unwrap();
    // The device "fires" at pseudo-random moments, mostly early.
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    for round in 0..200 {
        let deadline = after(&c, 1_000 + round * 37);
        t.arm(deadline).unwrap();
        loop {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            m.advance(seed % 700);
            match t.on_interrupt() {
                TimerEvent::Fired {
                    deadline: d,
                    late_by,
                } => {
                    assert_eq!(d, deadline);
                    let now = c.now();
                    assert!(now >= deadline, "fired early");
                    assert!(now.as_nanos() - deadline.as_nanos() >= late_by.as_nanos());
                    break;
                }
                TimerEvent::Rearmed {
                    remaining,
                    programmed,
                    ..
                } => {
                    assert!(remaining.as_nanos() > 0);
                    programmed.unwrap();
                }
                TimerEvent::Spurious => panic!("lost the deadline"),
            }
        }
    }
    let s = t.stats();
    assert_eq!(s.fired, 200);
    assert!(s.rearmed > 0);
}

#[test]
fn counts_round_up_to_whole_ticks() {
    let m = SimMachine::bare_metal();
    let c = clock(&m);
    // 3 Hz: one tick is 333,333,333.3 ns.
    let dev = Fake::new(desc("slow", 10, 1_000), Some(3));
    let t = c.timer(&dev).unwrap();
    t.arm(after(&c, 400_000_000)).unwrap();
    // 1.2 ticks (less the clock's progress during the arm) is 2, not 1.
    assert_eq!(dev.programs(), vec![2]);
}

#[test]
fn no_rate_or_no_reach_is_rejected_with_a_reason() {
    let m = SimMachine::bare_metal();
    let c = clock(&m);
    let uncalibrated = Fake::new(desc("uncalibrated", 100, 1 << 32), None);
    assert_eq!(
        c.timer(&uncalibrated).unwrap_err(),
        TimerSetupError::Rejected(TimerRejection::NoRate)
    );
    let zero = Fake::new(desc("zero-reach", 100, 0), Some(1_000));
    assert_eq!(
        c.timer(&zero).unwrap_err(),
        TimerSetupError::Rejected(TimerRejection::Unprogrammable)
    );
    let mut d = desc("min-above-max", 100, 5);
    d.min_delta_ticks = 6;
    let inverted = Fake::new(d, Some(1_000));
    assert!(c.timer(&inverted).is_err());
    // A zero rate cannot even be stated.
    assert!(Frequency::from_hz(0).is_err());
}

#[test]
fn max_delta_one_goes_one_tick_at_a_time() {
    let m = SimMachine::bare_metal();
    let c = clock(&m);
    // 1 MHz, one tick per piece: a 10 µs deadline takes ~10 interrupts.
    let dev = Fake::new(desc("one-tick", 10, 1), Some(1_000_000));
    let t = c.timer(&dev).unwrap();
    let deadline = after(&c, 10_000);
    t.arm(deadline).unwrap();
    let mut irqs = 0;
    loop {
        m.advance(1_000); // the device fires exactly at its one tick
        irqs += 1;
        match t.on_interrupt() {
            TimerEvent::Fired { .. } => break,
            TimerEvent::Rearmed { .. } => assert!(irqs < 50),
            TimerEvent::Spurious => panic!(),
        }
    }
    assert!(c.now() >= deadline);
    assert!(dev.programs().iter().all(|&t| t == 1));
    assert!((8..=12).contains(&irqs), "{irqs}");
}

#[test]
fn past_deadline_fires_at_once() {
    let m = SimMachine::bare_metal();
    let c = clock(&m);
    let dev = Fake::new(desc("fake", 10, 1 << 32), Some(1_000_000_000));
    let t = c.timer(&dev).unwrap();
    m.advance(1_000_000);
    t.arm(Instant::from_nanos(5)).unwrap();
    assert_eq!(dev.programs(), vec![1], "the device's shortest count");
    match t.on_interrupt() {
        TimerEvent::Fired { deadline, late_by } => {
            assert_eq!(deadline, Instant::from_nanos(5));
            assert!(late_by.as_nanos() > 0);
        }
        e => panic!("{e:?}"),
    }
    assert_eq!(t.on_interrupt(), TimerEvent::Spurious);
}

#[test]
fn in_past_is_retried_with_longer_counts_then_reported() {
    let m = SimMachine::bare_metal();
    let c = clock(&m);
    let dev = Fake::new(desc("racy", 10, 1 << 32), Some(1_000_000_000));
    let t = c.timer(&dev).unwrap();
    dev.in_past.store(2, SeqCst);
    t.arm(after(&c, 1_000_000)).unwrap();
    let p = dev.programs();
    assert_eq!(p.len(), 3);
    assert_eq!((p[1], p[2]), (p[0] * 2, p[0] * 4));
    // Refused every time: the caller is told, the deadline stays armed.
    dev.in_past.store(100, SeqCst);
    let deadline = after(&c, 2_000);
    assert_eq!(t.arm(deadline), Err(TimerError::InPast));
    assert_eq!(t.deadline(), Some(deadline));
    assert!(t.stats().in_past >= 6);
    m.advance(5_000);
    assert!(matches!(t.on_interrupt(), TimerEvent::Fired { .. }));
}

#[test]
fn cancel_really_cancels() {
    let m = SimMachine::bare_metal();
    let c = clock(&m);
    let dev = Fake::new(desc("fake", 10, 1 << 32), Some(1_000_000_000));
    let t = c.timer(&dev).unwrap();
    t.arm(after(&c, 1_000)).unwrap();
    assert!(t.cancel());
    assert_eq!(dev.cancels.load(SeqCst), 1);
    m.advance(10_000);
    assert_eq!(t.on_interrupt(), TimerEvent::Spurious);
    assert!(!t.cancel(), "nothing left to cancel");
    assert_eq!(t.check_overdue(), None);
}

#[test]
fn cancel_races_the_interrupt_one_side_wins() {
    let m = SimMachine::bare_metal();
    let c = clock(&m);
    let dev = Fake::new(desc("fake", 10, 1 << 32), Some(1_000_000_000));
    let t = c.timer(&dev).unwrap();
    let rounds = 300;
    let (fired, cancelled) = (AtomicU64::new(0), AtomicU64::new(0));
    let barrier = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..rounds {
                barrier.wait();
                if let TimerEvent::Fired { .. } = t.on_interrupt() {
                    fired.fetch_add(1, SeqCst);
                }
                barrier.wait();
            }
        });
        for _ in 0..rounds {
            t.arm(Instant::from_nanos(0)).unwrap(); // always due
            barrier.wait();
            if t.cancel() {
                cancelled.fetch_add(1, SeqCst);
            }
            barrier.wait();
        }
    });
    assert_eq!(fired.into_inner() + cancelled.into_inner(), rounds);
}

#[test]
fn a_fire_that_never_comes_is_found_overdue() {
    let m = SimMachine::bare_metal();
    let c = clock(&m);
    // Accepts every arm and never fires (a dropped arm).
    let dev = Fake::new(desc("silent", 10, 1 << 32), Some(1_000_000_000));
    let t = c
        .timer(&dev)
        .unwrap()
        .with_overdue_bound(Duration::from_micros(100));
    let deadline = after(&c, 50_000);
    t.arm(deadline).unwrap();
    assert_eq!(t.check_overdue(), None, "not due yet");
    m.advance(120_000);
    assert_eq!(t.check_overdue(), None, "within the bound");
    m.advance(100_000);
    let o = t.check_overdue().expect("overdue");
    assert_eq!(o.deadline, deadline);
    assert!(o.now > o.expected_by);
    o.reprogrammed.unwrap();
    assert_eq!(t.stats().overdue, 1);
    assert_eq!(dev.programs().len(), 2, "programmed again");
    // The late interrupt still delivers, once.
    assert!(matches!(t.on_interrupt(), TimerEvent::Fired { .. }));
    assert_eq!(t.check_overdue(), None);
}

#[test]
fn selection_ranks_by_descriptor_with_reasons() {
    let m = SimMachine::bare_metal();
    let c = clock(&m);
    let best = Fake::new(desc("best", 150, 1 << 32), Some(1_000_000_000));
    let good = Fake::new(desc("good", 100, 1 << 32), Some(24_000_000));
    let mut d = desc("good-trapping", 100, 1 << 32);
    d.traps_per_arm = 2;
    let trapping = Fake::new(d, Some(24_000_000));
    let dead = Fake::new(desc("dead", 1000, 0), Some(1_000));
    let uncal = Fake::new(desc("uncalibrated", 500, 1 << 32), None);
    let devs: [&dyn TimerDevice; 5] = [&trapping, &dead, &good, &uncal, &best];
    let choice = c.select_timer(&devs);
    assert_eq!(choice.selected().unwrap().descriptor().name, "best");
    let order: Vec<_> = choice.iter().map(|e| e.1.name).collect();
    assert_eq!(
        order,
        ["best", "good", "good-trapping", "dead", "uncalibrated"]
    );
    assert_eq!(
        choice.verdict("dead"),
        Some(TimerVerdict::Rejected(TimerRejection::Unprogrammable))
    );
    assert_eq!(
        choice.to_string(),
        "best(150, selected) good(100) good-trapping(100) \
         dead(rejected: accepts no count) uncalibrated(rejected: rate unknown (calibrate it first))"
    );
    assert!(format!("{choice:#}").contains("2 traps per arm"));
    let none: [&dyn TimerDevice; 1] = [&dead];
    assert!(c.select_timer(&none).selected().is_none());
}

#[test]
fn absolute_device_needs_a_tsc_clock() {
    // The HPET as the clock: no TSC map to convert a deadline through.
    let m = SimMachine::bare_metal();
    let c = clockhal::probe(
        &m,
        Platform::new()
            .hpet_region(m.hpet_region().unwrap())
            .policy(Policy::new().force("hpet")),
    )
    .into_clock()
    .unwrap();
    let mut d = desc("deadline", 150, u64::MAX);
    d.mode = TimerMode::AbsoluteCounter;
    let dev = Fake::new(d, Some(2_592_000_000));
    assert_eq!(
        c.timer(&dev).unwrap_err(),
        TimerSetupError::Rejected(TimerRejection::NoTscMap)
    );
    // On the TSC clock it is converted through the map: the least TSC
    // value whose instant is at or after the deadline.
    drop(c); // one clock per machine at a time
    let c = clock(&m);
    let t = c.timer(&dev).unwrap();
    let deadline = after(&c, 1_000_000);
    t.arm(deadline).unwrap();
    let tsc = *dev.absolute.lock().unwrap().last().unwrap();
    let conv = c.stamp_converter().unwrap();
    let at = |t: u64| conv.instant(clockhal::Stamp::from_tsc(t)).unwrap();
    assert!(at(tsc) >= deadline);
    assert!(at(tsc - 1) < deadline);
}
