//! The selected clock as an [`embedded_time::Clock`] (feature
//! `embedded-time`): nanosecond `u64` ticks, so embedded-time's durations,
//! instants and timers work on top of clockhal.
//!
//! ```no_run
//! # fn get() -> &'static clockhal::Clock<clockhal::x86::Native> { unimplemented!() }
//! use embedded_time::{duration::Milliseconds, Clock as _};
//! let clock = get();
//! let start = clock.try_now().unwrap();
//! let timer = clock.new_timer(Milliseconds(5u32)).start().unwrap();
//! timer.wait().unwrap();
//! let _ = clock.try_now().unwrap().checked_duration_since(&start);
//! ```

use crate::Clock;
use embedded_time::{clock::Error, fraction::Fraction, Instant};

impl<H: clockhal_x86::Hardware + Clone> embedded_time::Clock for Clock<H> {
    type T = u64;

    /// One tick is one nanosecond.
    const SCALING_FACTOR: Fraction = Fraction::new(1, 1_000_000_000);

    /// [`Clock::now`]; never fails.
    fn try_now(&self) -> Result<Instant<Self>, Error> {
        Ok(Instant::new(self.now().as_nanos()))
    }
}
