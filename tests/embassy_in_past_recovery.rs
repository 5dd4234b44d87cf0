//! The embassy driver when the timer refuses an expiry as already past
//! (`TimerError::InPast`) at every attempt (found by red-team round 30):
//! the deadline stayed armed with nothing programmed and no interrupt
//! coming, and nothing in the driver ever looked again: the wake was lost.
//! `ClockhalDriver::check_overdue`, from the OS's watchdog tick (as
//! `Timer::check_overdue`), wakes what became due and arms the next; the
//! wake is late by at most a tick, never early.
#![cfg(all(feature = "embassy", feature = "tsc"))]

use clockhal::embassy::{ClockhalDriver, DriverTimer};
use clockhal::timer::{TimerError, TimerEvent};
use clockhal::{Duration, Instant};
use embassy_time_driver::Driver;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Wake, Waker};

embassy_time_driver::time_driver_impl!(static DRIVER: ClockhalDriver = ClockhalDriver::new());

/// A one-shot device with a minimum programmable distance of 5 µs, like a
/// comparator that reports a near expiry as already past. Mirrors
/// `Timer::arm`: on `InPast` the deadline stays armed but nothing is
/// programmed (no interrupt will come by itself).
struct MinDeltaTimer {
    now: AtomicU64,
    armed: AtomicU64,
    programmed: AtomicBool,
}
const NONE: u64 = u64::MAX;
const MIN_DELTA: u64 = 5_000;

impl DriverTimer for MinDeltaTimer {
    fn now_ns(&self) -> u64 {
        self.now.load(SeqCst)
    }
    fn arm_ns(&self, deadline_ns: u64) -> Result<(), TimerError> {
        self.armed.store(deadline_ns, SeqCst);
        let now = self.now_ns();
        if deadline_ns > now && deadline_ns - now < MIN_DELTA {
            self.programmed.store(false, SeqCst);
            return Err(TimerError::InPast);
        }
        self.programmed.store(true, SeqCst);
        Ok(())
    }
    fn cancel(&self) {
        self.armed.store(NONE, SeqCst);
        self.programmed.store(false, SeqCst);
    }
    fn on_interrupt(&self) -> TimerEvent {
        let d = self.armed.load(SeqCst);
        let now = self.now_ns();
        if d != NONE && now >= d {
            self.armed.store(NONE, SeqCst);
            self.programmed.store(false, SeqCst);
            TimerEvent::Fired {
                deadline: Instant::from_nanos(d),
                late_by: Duration::from_nanos(now - d),
            }
        } else {
            TimerEvent::Spurious
        }
    }
}

struct Flag(AtomicBool);
impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, SeqCst);
    }
}

/// A wake 2 µs ahead: the device refuses it as past. The wake must not
/// come early, and must come at the OS's next watchdog tick after it is
/// due.
#[test]
fn a_wake_the_timer_refuses_as_past_is_delivered_at_the_next_tick() {
    let t: &'static MinDeltaTimer = Box::leak(Box::new(MinDeltaTimer {
        now: AtomicU64::new(1_000_000),
        armed: AtomicU64::new(NONE),
        programmed: AtomicBool::new(false),
    }));
    DRIVER.install(t).unwrap();
    let flag = Arc::new(Flag(AtomicBool::new(false)));
    let waker = Waker::from(flag.clone());
    let now_ticks = DRIVER.now();
    DRIVER.schedule_wake(now_ticks + 2, &waker);
    assert!(!t.programmed.load(SeqCst), "the device took it after all");
    // A tick before it is due: not woken (never early).
    DRIVER.check_overdue();
    assert!(!flag.0.load(SeqCst), "woken before its tick");
    // Time passes beyond the deadline; no interrupt comes (nothing is
    // programmed); the OS's watchdog tick runs the check.
    t.now.fetch_add(1_000_000, SeqCst);
    if t.programmed.load(SeqCst) {
        let _ = DRIVER.on_interrupt();
    }
    DRIVER.check_overdue();
    assert!(
        flag.0.load(SeqCst),
        "the wake at tick {} was lost: not woken at the tick (armed {:?})",
        now_ticks + 2,
        t.armed.load(SeqCst)
    );
    // Nothing left: the timer is disarmed.
    assert_eq!(t.armed.load(SeqCst), NONE);
}
