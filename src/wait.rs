//! Busy-waiting on a clock, bounded even when the clock stops.
//!
//! A wait ends when the clock reaches its end, or, if the clock returns
//! the same instant [`STALL_READS`] times in a row, early with
//! [`Stalled`]: a clock that stopped cannot make a wait hang for ever.
//!
//! When does a clock repeat an instant that long? A source that gives no
//! fresh value makes [`Clock::now`](crate::Clock::now) hold; after
//! [`STUCK_READS`](crate::STUCK_READS) (10,000) such reads the clock
//! switches to another source by itself, and the wait goes on on that one
//! (it lasts at least as long as asked in real time: the held reads do not
//! advance the clock). A counter that stopped but still answers (the
//! same reading every time) is no hold: the watchdog finds it at its next
//! tick and switches; a wait that runs before that (early boot, no timer
//! interrupt yet) ends with [`Stalled`]. Only a clock with nothing to
//! switch to (every source stopped, or a forced one) repeats an instant
//! for good. A legitimate hold (a host parameter update stepping back, by at
//! most 1 ms, while the floor waits) lasts at most ~100,000 reads even at
//! 10 ns per read.

use clockhal_core::{Duration, Instant};
use core::fmt;

/// Identical readings in a row after which a wait gives up on its clock:
/// at least 10 ms of a clock standing still at 10 ns per read, ten times
/// the hold after which the clock itself switches source
/// ([`STUCK_READS`](crate::STUCK_READS)) and ten times the longest
/// legitimate hold (see the module docs).
pub const STALL_READS: u32 = 1_000_000;

/// A wait ended early: its clock returned the same instant
/// [`STALL_READS`] times in a row (it stopped).
///
/// ```
/// # #[cfg(feature = "tsc")] {
/// use clockhal::{Duration, Platform, Stalled};
/// use clockhal_sim::SimMachine;
///
/// let m = SimMachine::bare_metal();
/// let clock = clockhal::probe(&m, Platform::new()).into_clock().unwrap();
/// match clock.spin_for(Duration::from_micros(20)) {
///     Ok(()) => {} // 20 µs passed on the clock
///     Err(Stalled { at, remaining }) => panic!("stood still at {at}, {remaining} short"),
/// }
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Stalled {
    /// The instant the clock stood still at.
    pub at: Instant,
    /// How much of the wait was left.
    pub remaining: Duration,
}

impl fmt::Display for Stalled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the clock stood still at {} for {STALL_READS} reads, {} short of the end",
            self.at, self.remaining
        )
    }
}

impl core::error::Error for Stalled {}

/// Spins until `d` has passed on a clock whose readings may lie up to
/// `resolution` below the true time (rounded down to a tick or a clamp
/// granule), and whose timeline has stepped `stepped()` ns forward in all
/// (a switch starts the new source a margin above every floor): the end
/// is padded by the resolution and by the steps during the wait, so it
/// never ends early.
pub(crate) fn spin_for(
    mut now: impl FnMut() -> Instant,
    d: Duration,
    resolution: Duration,
    mut stepped: impl FnMut() -> u64,
) -> Result<(), Stalled> {
    if d == Duration::ZERO {
        return Ok(());
    }
    let stepped0 = stepped();
    // (Saturating: an OS's `ClockNow` whose count goes back pads nothing.)
    let pad = |total: u64| {
        resolution.saturating_add(Duration::from_nanos(total.saturating_sub(stepped0)))
    };
    let base = now().saturating_add(d);
    let (mut end, mut padded) = (base.saturating_add(resolution), resolution);
    loop {
        // `remaining` is of the wait asked for, not of the pad.
        spin_until(&mut now, end, || true).map_err(|e| Stalled {
            remaining: e.remaining.saturating_sub(padded).min(d),
            ..e
        })?;
        let more = pad(stepped());
        if more <= padded {
            return Ok(());
        }
        (end, padded) = (base.saturating_add(more), more);
    }
}

/// Spins until `now()` reaches `end`, or `more()` says to stop (checked
/// once per read), or the clock stalls.
pub(crate) fn spin_until(
    mut now: impl FnMut() -> Instant,
    end: Instant,
    mut more: impl FnMut() -> bool,
) -> Result<(), Stalled> {
    let mut last = now();
    let mut same = 0u32;
    while last < end && more() {
        core::hint::spin_loop();
        let t = now();
        if t == last {
            same += 1;
            if same >= STALL_READS {
                return Err(Stalled {
                    at: t,
                    remaining: end.duration_since(t),
                });
            }
        } else {
            (last, same) = (t, 0);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::Cell;

    #[test]
    fn ends_at_the_end_on_a_moving_clock() {
        let t = Cell::new(0u64);
        let now = || {
            t.set(t.get() + 7);
            Instant::from_nanos(t.get())
        };
        assert_eq!(spin_until(now, Instant::from_nanos(1_000), || true), Ok(()));
        assert!((1_000..1_007).contains(&t.get()));
    }

    #[test]
    fn a_clock_that_stops_ends_the_wait_after_stall_reads() {
        let reads = Cell::new(0u64);
        let now = || {
            reads.set(reads.get() + 1);
            Instant::from_nanos(reads.get().min(100))
        };
        let e = spin_until(now, Instant::from_nanos(1_000), || true).unwrap_err();
        assert_eq!(e.at, Instant::from_nanos(100));
        assert_eq!(e.remaining, Duration::from_nanos(900));
        assert_eq!(reads.get(), 100 + u64::from(STALL_READS));
    }

    #[test]
    fn long_holds_that_end_do_not_count_as_a_stall() {
        // Holds of STALL_READS - 1 reads, then a step: never a stall.
        let reads = Cell::new(0u64);
        let now = || {
            reads.set(reads.get() + 1);
            Instant::from_nanos(reads.get() / u64::from(STALL_READS))
        };
        assert_eq!(spin_until(now, Instant::from_nanos(3), || true), Ok(()));
    }

    #[test]
    fn more_stops_it() {
        let n = Cell::new(0u32);
        let more = || {
            n.set(n.get() + 1);
            n.get() < 5
        };
        let t = Cell::new(0u64);
        let now = || {
            t.set(t.get() + 1);
            Instant::from_nanos(t.get())
        };
        assert_eq!(spin_until(now, Instant::from_nanos(u64::MAX), more), Ok(()));
        assert_eq!(n.get(), 5);
    }
}
