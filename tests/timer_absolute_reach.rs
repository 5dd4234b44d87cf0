//! An absolute-counter device's reach (found by red-team round 25, both
//! failing before the fix): `TimerDescriptor::max_delta_ticks` is, for
//! `TimerMode::AbsoluteCounter`, "the largest distance from the counter's
//! current value", and `Timer::arm` programs "a deadline longer than the
//! device's reach ... as its longest piece". The absolute path converted
//! the whole deadline (refused as out of range, for good) and gave a due
//! deadline the current counter, behind the device's shortest distance.
//! Now the target is kept within the reach (pieces, re-armed at each
//! interrupt) and at least `min_delta_ticks` ahead, doubled while the
//! device says it is in the past.
#![cfg(feature = "tsc")]

use clockhal::timer::{
    TimerDescriptor, TimerDevice, TimerError, TimerEvent, TimerMode, TimerScope,
};
use clockhal::x86::Hardware;
use clockhal::{Duration, Frequency, Platform};
use clockhal_sim::SimMachine;
use std::sync::Mutex;

const REACH: u64 = 1_000_000; // TSC ticks: ~386 µs at 2.592 GHz

/// An absolute comparator on the TSC that can only be set up to REACH
/// ticks ahead of the current TSC (like a 20-bit comparator would).
struct ShortAbsolute<'m> {
    m: &'m SimMachine,
    programmed: Mutex<Vec<(u64, u64)>>, // (tsc at program, target)
}

impl TimerDevice for ShortAbsolute<'_> {
    fn descriptor(&self) -> TimerDescriptor {
        TimerDescriptor {
            name: "short-absolute",
            scope: TimerScope::PerCpu,
            mode: TimerMode::AbsoluteCounter,
            max_delta_ticks: REACH,
            min_delta_ticks: 1,
            resolution_ns: 1,
            traps_per_arm: 0,
            needs_calibrated_rate: false,
            stops_in_deep_idle: false,
            rating: 150,
            rating_reason: "test",
        }
    }
    fn rate(&self) -> Option<Frequency> {
        Frequency::from_hz(2_592_000_000).ok()
    }
    fn program(&self, ticks: u64) -> Result<(), TimerError> {
        self.program_at(self.m.rdtsc().saturating_add(ticks))
    }
    fn program_at(&self, counter: u64) -> Result<(), TimerError> {
        let now = self.m.rdtsc();
        self.programmed.lock().unwrap().push((now, counter));
        if counter.saturating_sub(now) > REACH {
            return Err(TimerError::OutOfRange {
                ticks: counter - now,
            });
        }
        Ok(())
    }
    fn cancel(&self) {}
}

#[test]
fn a_deadline_beyond_an_absolute_devices_reach_is_programmed_in_pieces() {
    let m = SimMachine::bare_metal();
    let c = clockhal::probe(&m, Platform::new()).into_clock().unwrap();
    let dev = ShortAbsolute {
        m: &m,
        programmed: Mutex::new(Vec::new()),
    };
    let t = c.timer(&dev).unwrap();
    let deadline = c.now() + Duration::from_millis(10);
    let r = t.arm(deadline);
    let progs = dev.programmed.lock().unwrap().clone();
    let (at, target) = *progs.last().unwrap();
    assert!(
        r.is_ok() && target - at <= REACH,
        "arm: {r:?}; programmed {} ticks ahead, the descriptor's reach is {REACH}",
        target - at
    );
    // And it arrives, piece by piece, never early.
    for _ in 0..100 {
        let (_, target) = *dev.programmed.lock().unwrap().last().unwrap();
        let now_tsc = m.rdtsc();
        if target > now_tsc {
            m.advance(((target - now_tsc) as u128 * 1_000_000_000 / 2_592_000_000) as u64 + 1);
        }
        match t.on_interrupt() {
            TimerEvent::Fired { .. } => {
                assert!(c.now() >= deadline);
                return;
            }
            TimerEvent::Rearmed { programmed, .. } => programmed.unwrap(),
            TimerEvent::Spurious => panic!("lost"),
        }
    }
    panic!("never fired");
}

/// The same device with a minimum distance: "min_delta_ticks: Smallest
/// count the device accepts and still fires" and `arm`: "one at or before
/// `now()` is programmed as the device's shortest count, so its interrupt
/// comes at once". It refuses a target nearer than that, as in the past
/// (the time between clockhal's counter read and its write counts).
struct MarginAbsolute<'m> {
    m: &'m SimMachine,
    programmed: Mutex<Vec<(u64, u64)>>,
}

const MARGIN: u64 = 1_000;

impl TimerDevice for MarginAbsolute<'_> {
    fn descriptor(&self) -> TimerDescriptor {
        TimerDescriptor {
            name: "margin-absolute",
            scope: TimerScope::PerCpu,
            mode: TimerMode::AbsoluteCounter,
            max_delta_ticks: u64::MAX,
            min_delta_ticks: MARGIN,
            resolution_ns: 1,
            traps_per_arm: 0,
            needs_calibrated_rate: false,
            stops_in_deep_idle: false,
            rating: 150,
            rating_reason: "test",
        }
    }
    fn rate(&self) -> Option<Frequency> {
        Frequency::from_hz(2_592_000_000).ok()
    }
    fn program(&self, ticks: u64) -> Result<(), TimerError> {
        self.program_at(self.m.rdtsc().saturating_add(ticks))
    }
    fn program_at(&self, counter: u64) -> Result<(), TimerError> {
        let now = self.m.rdtsc();
        if counter < now.saturating_add(MARGIN) {
            return Err(TimerError::InPast);
        }
        self.programmed.lock().unwrap().push((now, counter));
        Ok(())
    }
    fn cancel(&self) {}
}

#[test]
fn a_due_deadline_on_an_absolute_device_gets_its_shortest_count() {
    let m = SimMachine::bare_metal();
    let c = clockhal::probe(&m, Platform::new()).into_clock().unwrap();
    let dev = MarginAbsolute {
        m: &m,
        programmed: Mutex::new(Vec::new()),
    };
    let t = c.timer(&dev).unwrap();
    m.advance(1_000_000);
    t.arm(clockhal::Instant::from_nanos(0)).unwrap(); // long past
    let (at, target) = *dev.programmed.lock().unwrap().last().unwrap();
    // Soon after it: not a piece of the device's whole reach.
    assert!(target - at <= 8 * MARGIN, "{} ticks ahead", target - at);
    assert!(
        target >= at + MARGIN,
        "a due deadline programmed {} ticks ahead of the counter (at {at}, target {target}); \
         the descriptor's min_delta_ticks is {MARGIN}",
        target as i128 - at as i128
    );
}
