//! An embedded-hal 1.0 [`DelayNs`] over the clock (feature
//! `embedded-hal`): [`Clock::delay`] for drivers written against
//! embedded-hal.
//!
//! A delay spins on [`now`](ClockNow::now) until the time has passed on
//! the clock, so it lasts at least as long as asked (plus one read). It
//! never hangs: if the clock stops (the same instant
//! [`STALL_READS`](crate::STALL_READS) times in a row, see
//! [`Stalled`](crate::Stalled)), the delay ends early and
//! [`Delay::stalls`] counts it. A source that only holds (gives no fresh
//! value) is replaced by the clock itself after
//! [`STUCK_READS`](crate::STUCK_READS) reads, and the delay goes on, on
//! the new source.
//!
//! ```
//! use clockhal::Platform;
//! use clockhal_sim::SimMachine;
//! use embedded_hal::delay::DelayNs;
//!
//! let m = SimMachine::kvm();
//! let platform = Platform::new().pvclock_areas(m.alloc_pvclock_areas(1));
//! let clock = clockhal::probe(&m, platform).into_clock().unwrap();
//!
//! fn settle(delay: &mut impl DelayNs) {
//!     delay.delay_us(1_500); // what a driver does
//! }
//! let t0 = clock.now();
//! let mut delay = clock.delay();
//! settle(&mut delay);
//! assert!(clock.elapsed(t0).as_nanos() >= 1_500_000);
//! assert_eq!(delay.stalls(), 0);
//! ```

use crate::{global::ClockNow, Clock};
use clockhal_core::Duration;
use clockhal_x86::Hardware;
use embedded_hal::delay::DelayNs;

/// A busy-wait delay on a clock (see the module docs).
#[derive(Clone, Copy)]
pub struct Delay<'a> {
    clock: &'a dyn ClockNow,
    stalls: u32,
}

impl core::fmt::Debug for Delay<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Delay")
            .field("stalls", &self.stalls)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for Delay<'_> {
    fn format(&self, f: defmt::Formatter) {
        defmt::write!(f, "Delay({} stalls)", self.stalls)
    }
}

impl<'a> Delay<'a> {
    /// A delay on any clock: a [`Clock`], the
    /// [global clock](crate::global::clock), an OS's own [`ClockNow`].
    /// Interrupt-safe: yes.
    ///
    /// ```
    /// # use clockhal_sim::SimMachine;
    /// # let m = SimMachine::kvm();
    /// # let platform = clockhal::Platform::new().pvclock_areas(m.alloc_pvclock_areas(1));
    /// # let clock = clockhal::probe(&m, platform).into_clock().unwrap();
    /// use embedded_hal::delay::DelayNs;
    /// let mut delay = clockhal::Delay::new(&clock);
    /// delay.delay_ns(250);
    /// ```
    pub fn new(clock: &'a dyn ClockNow) -> Delay<'a> {
        Delay { clock, stalls: 0 }
    }

    /// Delays that ended early because the clock stood still (0 on a
    /// working clock).
    /// Interrupt-safe: yes.
    ///
    /// ```
    /// # use clockhal_sim::SimMachine;
    /// # let m = SimMachine::kvm();
    /// # let platform = clockhal::Platform::new().pvclock_areas(m.alloc_pvclock_areas(1));
    /// # let clock = clockhal::probe(&m, platform).into_clock().unwrap();
    /// use embedded_hal::delay::DelayNs;
    /// let mut delay = clock.delay();
    /// delay.delay_ms(1);
    /// assert_eq!(delay.stalls(), 0);
    /// ```
    pub fn stalls(&self) -> u32 {
        self.stalls
    }

    fn wait(&mut self, d: Duration) {
        let c = self.clock;
        if crate::wait::spin_for(|| c.now(), d, c.resolution(), || c.stepped_ns()).is_err() {
            self.stalls = self.stalls.saturating_add(1);
        }
    }
}

impl DelayNs for Delay<'_> {
    fn delay_ns(&mut self, ns: u32) {
        self.wait(Duration::from_nanos(u64::from(ns)));
    }

    fn delay_us(&mut self, us: u32) {
        self.wait(Duration::from_micros(u64::from(us)));
    }

    fn delay_ms(&mut self, ms: u32) {
        self.wait(Duration::from_millis(u64::from(ms)));
    }
}

impl<H: Hardware + Clone> Clock<H> {
    /// An embedded-hal [`DelayNs`] spinning on this clock (feature
    /// `embedded-hal`; see [`Delay`]).
    /// Interrupt-safe: yes.
    ///
    /// ```
    /// # use clockhal_sim::SimMachine;
    /// # let m = SimMachine::kvm();
    /// # let platform = clockhal::Platform::new().pvclock_areas(m.alloc_pvclock_areas(1));
    /// # let clock = clockhal::probe(&m, platform).into_clock().unwrap();
    /// use embedded_hal::delay::DelayNs;
    /// let t0 = clock.now();
    /// clock.delay().delay_us(20);
    /// assert!(clock.elapsed(t0).as_micros() >= 20);
    /// ```
    pub fn delay(&self) -> Delay<'_> {
        Delay::new(self)
    }
}
