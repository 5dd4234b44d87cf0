//! [`Instant`] and [`Duration`] as fugit's nanosecond types (feature
//! `fugit`): conversions both ways, exact (both count `u64` nanoseconds).
//!
//! clockhal's timeline starts at 0 and never wraps (2^64 ns is 584
//! years), so an instant is fugit's [`Monotonic`](fugit::kind::Monotonic)
//! kind: ordered by a plain compare.
//!
//! ```
//! use clockhal_core::{Duration, FugitDuration, FugitInstant, Instant};
//!
//! let t = Instant::from_nanos(1_500_000);
//! let f: FugitInstant = t.into();
//! assert_eq!(f.as_ticks(), 1_500_000);
//! let later = f + FugitDuration::from_millis(2); // fugit arithmetic
//! assert_eq!(Instant::from(later), t + Duration::from_millis(2));
//!
//! let d: FugitDuration = Duration::from_micros(7).into();
//! assert_eq!(d.as_nanos(), 7_000);
//! assert_eq!(Duration::from(d), Duration::from_micros(7));
//! ```

use crate::{Duration, Instant};

/// An [`Instant`] as fugit sees it: `u64` nanoseconds on a timeline that
/// does not wrap.
///
/// ```
/// let t: clockhal_core::FugitInstant = clockhal_core::Instant::from_nanos(5).into();
/// assert_eq!(t.as_ticks(), 5);
/// ```
pub type FugitInstant = fugit::MonotonicTimerInstantU64<1_000_000_000>;

/// A [`Duration`] as fugit sees it: `u64` nanoseconds.
///
/// ```
/// let d: clockhal_core::FugitDuration = clockhal_core::Duration::from_millis(3).into();
/// assert_eq!(d.as_micros(), 3_000);
/// ```
pub type FugitDuration = fugit::NanosDurationU64;

impl From<Instant> for FugitInstant {
    fn from(t: Instant) -> Self {
        FugitInstant::from_ticks(t.as_nanos())
    }
}

impl From<FugitInstant> for Instant {
    fn from(t: FugitInstant) -> Self {
        Instant::from_nanos(t.as_ticks())
    }
}

impl From<Duration> for FugitDuration {
    fn from(d: Duration) -> Self {
        FugitDuration::from_ticks(d.as_nanos())
    }
}

impl From<FugitDuration> for Duration {
    fn from(d: FugitDuration) -> Self {
        Duration::from_nanos(d.as_ticks())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_are_exact_at_the_extremes() {
        for ns in [0, 1, 999_999_999, u64::MAX / 2, u64::MAX] {
            let t = Instant::from_nanos(ns);
            assert_eq!(Instant::from(FugitInstant::from(t)), t);
            let d = Duration::from_nanos(ns);
            assert_eq!(Duration::from(FugitDuration::from(d)), d);
        }
    }

    #[test]
    fn order_and_differences_agree_with_clockhal() {
        let (a, b) = (Instant::from_nanos(10), Instant::from_nanos(1_000_010));
        let (fa, fb) = (FugitInstant::from(a), FugitInstant::from(b));
        assert!(fa < fb);
        assert_eq!(
            Duration::from(fb.checked_duration_since(fa).unwrap()),
            b - a
        );
        assert!(fa.checked_duration_since(fb).is_none());
    }
}
