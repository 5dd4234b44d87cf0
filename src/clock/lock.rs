//! The watchdog lock: who may wait for it, and the work deferred while it
//! is held.
//!
//! One lock serialises everything that changes the clock's selection or
//! publishes the user page (ticks, switches, lifecycle calls, page
//! publications); the report's own lock is taken only with it held, so it
//! is never contended by anyone but the lock's holder.
//!
//! An interrupt or NMI can arrive while the code it interrupted holds the
//! lock, on the same CPU: waiting for it there never ends. So the calls a
//! handler may make only *try* it ([`Clock::try_locked`]): a tick returns
//! [`WatchdogEvent::Busy`](super::WatchdogEvent::Busy), a read holds, and
//! a page publication is left for the holder, which catches up when it
//! lets go ([`Clock::catch_up`]). Only the lifecycle calls wait for it
//! ([`Clock::locked`]): they are not for interrupt handlers.

use super::watchdog::State;
use super::Clock;
use clockhal_x86::Hardware;
use core::sync::atomic::{fence, Ordering};

/// Publications [`Clock::catch_up`] makes at most: a request that arrives
/// while it publishes is taken by the next one, or the next tick.
const CATCH_UP_ROUNDS: u32 = 3;

impl<H: Hardware + Clone> Clock<H> {
    /// Runs `f` with the watchdog lock, waiting for it (another CPU's
    /// holder finishes), then does the work deferred meanwhile. Never from
    /// a path an interrupt-safe call takes.
    pub(crate) fn locked<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let mut st = self.watchdog.lock();
        let r = f(&mut st);
        drop(st);
        self.catch_up();
        r
    }

    /// Runs `f` if the watchdog lock is free now (`None` if not), then
    /// does the work deferred meanwhile. Never waits: for interrupt-safe
    /// calls.
    pub(crate) fn try_locked<R>(&self, f: impl FnOnce(&mut State) -> R) -> Option<R> {
        let mut st = self.watchdog.try_lock()?;
        let r = f(&mut st);
        drop(st);
        self.catch_up();
        Some(r)
    }

    /// Asks for a user page publication: now if the lock is free, else by
    /// its holder when it lets go (or the next tick). Never waits.
    pub(crate) fn request_publication(&self) {
        self.publish_requested.store(true, Ordering::SeqCst);
        // Pairs with the fence in `catch_up`: either this sees the lock
        // free, or its holder sees the request after letting go.
        fence(Ordering::SeqCst);
        self.catch_up();
    }

    /// The work deferred while the lock was held: a requested publication
    /// of the user page (not one a backend's withdrawn promise asks for:
    /// the tick or the lifecycle call that saw it publishes that at its
    /// right moment, e.g. after a resume's rebase). Takes the lock only if it is free (an interrupt
    /// inside a holder leaves it to that holder).
    pub(crate) fn catch_up(&self) {
        if self.clock_page.is_none() {
            return;
        }
        for _ in 0..CATCH_UP_ROUNDS {
            fence(Ordering::SeqCst);
            if !self.publish_requested.load(Ordering::SeqCst) {
                return;
            }
            let Some(_st) = self.watchdog.try_lock() else {
                return;
            };
            if self.publish_requested.load(Ordering::Acquire) {
                self.publish_page();
            }
        }
    }
}
