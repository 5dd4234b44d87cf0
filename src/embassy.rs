//! An [`embassy_time_driver::Driver`] over the clock and a [`Timer`]: an
//! async executor in a kernel gets `embassy_time::Timer::after(...)`,
//! `Ticker` and `with_timeout` unchanged, on the clock's timeline.
//!
//! ```ignore
//! use clockhal::embassy::ClockhalDriver;
//! embassy_time_driver::time_driver_impl!(static DRIVER: ClockhalDriver = ClockhalDriver::new());
//!
//! // At boot, once the clock and a timer exist (both 'static):
//! DRIVER.install(TIMER).unwrap();
//! // In the timer's interrupt vector (after or before EOI, as the OS does):
//! DRIVER.on_interrupt();
//! ```
//!
//! - `now()` is the clock's [`Instant`] in
//!   [`embassy_time_driver::TICK_HZ`] ticks (rounded down); 0 before
//!   [`ClockhalDriver::install`].
//! - `schedule_wake(at)` puts the waker in `embassy-time-queue-utils`'
//!   queue and arms the timer for the queue's earliest expiry, converted
//!   to clock nanoseconds rounded **up**; the timer never reports a
//!   deadline before `now()` reaches it, so no waker is woken early.
//! - A deadline the timer cannot program (it answers
//!   [`TimerError::InPast`] to every attempt: a device whose shortest
//!   count lies beyond it, nothing moving the clock meanwhile) stays armed
//!   but produces no interrupt: call [`ClockhalDriver::check_overdue`]
//!   from the OS's watchdog tick (as [`Timer::check_overdue`] is), which
//!   wakes what became due and programs the timer again.
//! - The queue is behind a `critical_section::Mutex`. **Who provides
//!   `critical-section`**: the OS, with `critical_section::set_impl!` (on
//!   x86 bare metal: save RFLAGS, `cli`, restore; on SMP also a spin lock),
//!   or `critical-section`'s `std` feature in hosted tests. clockhal
//!   provides none. Because a sound implementation masks interrupts while
//!   held, the interrupt entry never waits for a holder on its own CPU.
//! - The queue: with one of `embassy-time-queue-utils`' `generic-queue-N`
//!   features, any waker works (this crate's host test uses
//!   `generic-queue-16`); without one it is the integrated queue, which
//!   takes only `embassy-executor` task wakers.

use crate::timer::{Timer, TimerError, TimerEvent};
use crate::Instant;
use clockhal_x86::Hardware;
use core::cell::RefCell;
use core::task::Waker;
use critical_section::Mutex;
use embassy_time_driver::TICK_HZ;
use embassy_time_queue_utils::Queue;

/// What the driver needs from a timer: object safe, so the driver's
/// `static` names no hardware type. Implemented by every [`Timer`].
pub trait DriverTimer: Sync {
    /// The clock's now, ns.
    /// Interrupt-safe: yes.
    fn now_ns(&self) -> u64;
    /// Arms the one deadline (clock ns), replacing the previous.
    /// Interrupt-safe: yes.
    fn arm_ns(&self, deadline_ns: u64) -> Result<(), TimerError>;
    /// Disarms.
    /// Interrupt-safe: yes.
    fn cancel(&self);
    /// The timer's interrupt entry.
    /// Interrupt-safe: yes.
    fn on_interrupt(&self) -> TimerEvent;
    /// The timer's distrust check ([`Timer::check_overdue`]): an armed
    /// deadline nothing delivered is programmed again. Default: nothing.
    /// Interrupt-safe: yes.
    fn check_overdue(&self) {}
}

impl<H: Hardware + Clone + Sync> DriverTimer for Timer<'_, H>
where
    Self: Sync,
{
    fn now_ns(&self) -> u64 {
        self.clock().now().as_nanos()
    }
    fn arm_ns(&self, deadline_ns: u64) -> Result<(), TimerError> {
        self.arm(Instant::from_nanos(deadline_ns))
    }
    fn cancel(&self) {
        Timer::cancel(self);
    }
    fn on_interrupt(&self) -> TimerEvent {
        Timer::on_interrupt(self)
    }
    fn check_overdue(&self) {
        let _ = Timer::check_overdue(self);
    }
}

/// Why [`ClockhalDriver::install`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct AlreadyInstalled;

impl core::fmt::Display for AlreadyInstalled {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("an embassy timer is already installed")
    }
}

impl core::error::Error for AlreadyInstalled {}

/// Clock ns -> embassy ticks, rounded down (never ahead of the clock).
const fn ns_to_ticks(ns: u64) -> u64 {
    (ns as u128 * TICK_HZ as u128 / 1_000_000_000) as u64
}

/// Embassy ticks -> clock ns, rounded up (never before the tick), saturating.
const fn ticks_to_ns_ceil(ticks: u64) -> u64 {
    let ns = (ticks as u128 * 1_000_000_000).div_ceil(TICK_HZ as u128);
    if ns > u64::MAX as u128 {
        u64::MAX
    } else {
        ns as u64
    }
}

/// Alarm attempts when the timer takes the earliest expiry as already
/// past: each pass wakes what is due and tries the next.
const ALARM_ATTEMPTS: u32 = 4;

/// The embassy-time driver: put it in a `static` with
/// `embassy_time_driver::time_driver_impl!`, [`install`](Self::install) a
/// timer at boot, call [`on_interrupt`](Self::on_interrupt) from the
/// timer's vector.
pub struct ClockhalDriver {
    timer: spin::Once<&'static dyn DriverTimer>,
    queue: Mutex<RefCell<Queue>>,
}

impl Default for ClockhalDriver {
    fn default() -> Self {
        Self::new()
    }
}

impl ClockhalDriver {
    /// No timer yet: `now()` is 0 and wakes are queued until
    /// [`install`](Self::install).
    /// Interrupt-safe: yes.
    pub const fn new() -> ClockhalDriver {
        ClockhalDriver {
            timer: spin::Once::new(),
            queue: Mutex::new(RefCell::new(Queue::new())),
        }
    }

    /// Installs the timer (once) and arms it for anything queued before.
    /// Interrupt-safe: no (boot-time setup; takes the critical section).
    pub fn install(&self, timer: &'static dyn DriverTimer) -> Result<(), AlreadyInstalled> {
        let mut fresh = false;
        self.timer.call_once(|| {
            fresh = true;
            timer
        });
        if !fresh {
            return Err(AlreadyInstalled);
        }
        critical_section::with(|cs| self.set_alarm(timer, &mut self.queue.borrow_ref_mut(cs)));
        Ok(())
    }

    /// The timer interrupt entry: when the timer says its deadline is
    /// reached, wakes every due waker and arms the next expiry; an early
    /// fire is re-armed by the timer itself. Returns what the timer said.
    /// Interrupt-safe: yes (the critical section masks interrupts; see the
    /// module docs).
    pub fn on_interrupt(&self) -> TimerEvent {
        let Some(t) = self.timer.get() else {
            return TimerEvent::Spurious;
        };
        let ev = t.on_interrupt();
        if let TimerEvent::Fired { .. } = ev {
            critical_section::with(|cs| self.set_alarm(*t, &mut self.queue.borrow_ref_mut(cs)));
        }
        ev
    }

    /// For the OS's watchdog tick: the timer's overdue check, then every
    /// waker that became due is woken and the timer armed for the next
    /// expiry (a deadline the timer could not program, a lost interrupt).
    /// Interrupt-safe: yes (the critical section masks interrupts).
    pub fn check_overdue(&self) {
        let Some(t) = self.timer.get() else {
            return;
        };
        t.check_overdue();
        critical_section::with(|cs| self.set_alarm(*t, &mut self.queue.borrow_ref_mut(cs)));
    }

    /// Wakes what is due and arms the timer for the earliest remaining
    /// expiry (or disarms it when the queue is empty).
    fn set_alarm(&self, t: &dyn DriverTimer, q: &mut Queue) {
        for _ in 0..ALARM_ATTEMPTS {
            let next = q.next_expiration(ns_to_ticks(t.now_ns()));
            if next == u64::MAX {
                t.cancel();
                return;
            }
            match t.arm_ns(ticks_to_ns_ceil(next)) {
                // Due already: the next pass wakes it.
                Err(TimerError::InPast) => continue,
                // Other errors leave it armed in the timer, whose overdue
                // check retries.
                _ => return,
            }
        }
    }
}

impl embassy_time_driver::Driver for ClockhalDriver {
    fn now(&self) -> u64 {
        self.timer.get().map_or(0, |t| ns_to_ticks(t.now_ns()))
    }

    fn schedule_wake(&self, at: u64, waker: &Waker) {
        critical_section::with(|cs| {
            let mut q = self.queue.borrow_ref_mut(cs);
            if q.schedule_wake(at, waker) {
                if let Some(t) = self.timer.get() {
                    self.set_alarm(*t, &mut q);
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_never_wake_early() {
        for ns in [0u64, 1, 999, 1_000, 1_001, 123_456_789, u64::MAX / 2] {
            let t = ns_to_ticks(ns);
            assert!(ticks_to_ns_ceil(t) <= ns, "{ns}");
            assert!(ticks_to_ns_ceil(t + 1) > ns, "{ns}");
        }
        assert_eq!(ticks_to_ns_ceil(u64::MAX), u64::MAX);
    }
}
