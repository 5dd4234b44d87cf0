//! The clock in fugit's types (feature `fugit`): [`Clock::now_fugit`], and
//! `From` conversions both ways between [`Instant`](crate::Instant) /
//! [`Duration`](crate::Duration) and [`FugitInstant`] / [`FugitDuration`]
//! (`u64` nanoseconds, exact).
//!
//! ```
//! use clockhal::{Duration, FugitDuration, FugitInstant, Instant, Platform};
//! use clockhal_sim::SimMachine;
//!
//! let m = SimMachine::kvm();
//! let platform = Platform::new().pvclock_areas(m.alloc_pvclock_areas(1));
//! let clock = clockhal::probe(&m, platform).into_clock().unwrap();
//!
//! let t0: FugitInstant = clock.now_fugit();
//! let deadline = t0 + FugitDuration::from_micros(50);
//! while clock.now_fugit() < deadline {}
//! let took: FugitDuration = clock.now_fugit() - t0;
//! assert!(took >= FugitDuration::from_micros(50));
//! // Back to clockhal's types:
//! assert!(Duration::from(took) >= Duration::from_micros(50));
//! assert!(Instant::from(deadline) <= clock.now());
//! ```

pub use clockhal_core::{FugitDuration, FugitInstant};

use crate::Clock;
use clockhal_x86::Hardware;

impl<H: Hardware + Clone> Clock<H> {
    /// [`now`](Self::now) as a fugit instant (feature `fugit`).
    /// Interrupt-safe: yes.
    ///
    /// ```
    /// # use clockhal_sim::SimMachine;
    /// # let m = SimMachine::kvm();
    /// # let platform = clockhal::Platform::new().pvclock_areas(m.alloc_pvclock_areas(1));
    /// # let clock = clockhal::probe(&m, platform).into_clock().unwrap();
    /// let t = clock.now_fugit();
    /// assert!(t.as_ticks() <= clock.now().as_nanos());
    /// ```
    #[inline]
    pub fn now_fugit(&self) -> FugitInstant {
        self.now().into()
    }
}
