//! The nanosecond timeline: [`Instant`] and [`Duration`].

use core::fmt;
use core::ops::{Add, AddAssign, Sub, SubAssign};

/// A span of time in whole nanoseconds (up to ~584 years).
///
/// Checked and saturating arithmetic; the operators saturate rather than
/// panic, so clock code never panics on hostile inputs.
///
/// ```
/// use clockhal_core::Duration;
/// let d = Duration::from_millis(1500);
/// assert_eq!(d.as_nanos(), 1_500_000_000);
/// assert_eq!(core::time::Duration::from(d), core::time::Duration::from_millis(1500));
/// assert_eq!(Duration::MAX + d, Duration::MAX);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Duration(u64);

impl Duration {
    /// Zero length.
    pub const ZERO: Duration = Duration(0);
    /// The longest representable span.
    pub const MAX: Duration = Duration(u64::MAX);

    /// `ns` nanoseconds.
    /// Interrupt-safe: yes.
    pub const fn from_nanos(ns: u64) -> Self {
        Duration(ns)
    }
    /// `us` microseconds, saturating.
    /// Interrupt-safe: yes.
    pub const fn from_micros(us: u64) -> Self {
        Duration(us.saturating_mul(1_000))
    }
    /// `ms` milliseconds, saturating.
    /// Interrupt-safe: yes.
    pub const fn from_millis(ms: u64) -> Self {
        Duration(ms.saturating_mul(1_000_000))
    }
    /// `s` seconds, saturating.
    /// Interrupt-safe: yes.
    pub const fn from_secs(s: u64) -> Self {
        Duration(s.saturating_mul(1_000_000_000))
    }
    /// Whole nanoseconds.
    /// Interrupt-safe: yes.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    /// Whole microseconds (truncated).
    /// Interrupt-safe: yes.
    pub const fn as_micros(self) -> u64 {
        self.0 / 1_000
    }
    /// Whole milliseconds (truncated).
    /// Interrupt-safe: yes.
    pub const fn as_millis(self) -> u64 {
        self.0 / 1_000_000
    }
    /// Whole seconds (truncated).
    /// Interrupt-safe: yes.
    pub const fn as_secs(self) -> u64 {
        self.0 / 1_000_000_000
    }
    /// `self + rhs`, or `None` on overflow.
    /// Interrupt-safe: yes.
    pub const fn checked_add(self, rhs: Duration) -> Option<Duration> {
        match self.0.checked_add(rhs.0) {
            Some(v) => Some(Duration(v)),
            None => None,
        }
    }
    /// `self - rhs`, or `None` if `rhs` is longer.
    /// Interrupt-safe: yes.
    pub const fn checked_sub(self, rhs: Duration) -> Option<Duration> {
        match self.0.checked_sub(rhs.0) {
            Some(v) => Some(Duration(v)),
            None => None,
        }
    }
    /// `self + rhs`, capped at [`Duration::MAX`].
    /// Interrupt-safe: yes.
    pub const fn saturating_add(self, rhs: Duration) -> Duration {
        Duration(self.0.saturating_add(rhs.0))
    }
    /// `self - rhs`, floored at zero.
    /// Interrupt-safe: yes.
    pub const fn saturating_sub(self, rhs: Duration) -> Duration {
        Duration(self.0.saturating_sub(rhs.0))
    }
    /// `self * n`, or `None` on overflow.
    /// Interrupt-safe: yes.
    pub const fn checked_mul(self, n: u64) -> Option<Duration> {
        match self.0.checked_mul(n) {
            Some(v) => Some(Duration(v)),
            None => None,
        }
    }
}

impl From<Duration> for core::time::Duration {
    fn from(d: Duration) -> Self {
        core::time::Duration::from_nanos(d.0)
    }
}

/// Error converting a `core::time::Duration` longer than ~584 years.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DurationOverflow;

impl fmt::Display for DurationOverflow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("duration does not fit in 64-bit nanoseconds")
    }
}

impl TryFrom<core::time::Duration> for Duration {
    type Error = DurationOverflow;
    fn try_from(d: core::time::Duration) -> Result<Self, Self::Error> {
        u64::try_from(d.as_nanos())
            .map(Duration)
            .map_err(|_| DurationOverflow)
    }
}

impl Add for Duration {
    type Output = Duration;
    fn add(self, rhs: Duration) -> Duration {
        self.saturating_add(rhs)
    }
}
impl Sub for Duration {
    type Output = Duration;
    fn sub(self, rhs: Duration) -> Duration {
        self.saturating_sub(rhs)
    }
}
impl AddAssign for Duration {
    fn add_assign(&mut self, rhs: Duration) {
        *self = *self + rhs;
    }
}
impl SubAssign for Duration {
    fn sub_assign(&mut self, rhs: Duration) {
        *self = *self - rhs;
    }
}

impl fmt::Display for Duration {
    /// Seconds with nanosecond decimals: `1.500000000s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:09}s",
            self.0 / 1_000_000_000,
            self.0 % 1_000_000_000
        )
    }
}

/// A point on a clock's nanosecond timeline (nanoseconds since the clock's
/// epoch, usually its probe).
///
/// Instants from different clocks are not comparable; those from one
/// [`Clock`](https://docs.rs/clockhal) never go backwards.
///
/// ```
/// use clockhal_core::{Duration, Instant};
/// let a = Instant::from_nanos(1_000);
/// let b = a + Duration::from_nanos(500);
/// assert_eq!(b.duration_since(a), Duration::from_nanos(500));
/// assert_eq!(a.duration_since(b), Duration::ZERO); // saturates, no panic
/// assert_eq!(a.checked_duration_since(b), None);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Instant(u64);

impl Instant {
    /// The epoch.
    pub const ZERO: Instant = Instant(0);

    /// The instant `ns` nanoseconds after the epoch.
    /// Interrupt-safe: yes.
    pub const fn from_nanos(ns: u64) -> Self {
        Instant(ns)
    }
    /// Nanoseconds since the epoch.
    /// Interrupt-safe: yes.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    /// `self - earlier`, or `None` if `earlier` is later.
    /// Interrupt-safe: yes.
    pub const fn checked_duration_since(self, earlier: Instant) -> Option<Duration> {
        match self.0.checked_sub(earlier.0) {
            Some(v) => Some(Duration(v)),
            None => None,
        }
    }
    /// `self - earlier`, zero if `earlier` is later.
    /// Interrupt-safe: yes.
    pub const fn duration_since(self, earlier: Instant) -> Duration {
        Duration(self.0.saturating_sub(earlier.0))
    }
    /// `self + d`, or `None` on overflow.
    /// Interrupt-safe: yes.
    pub const fn checked_add(self, d: Duration) -> Option<Instant> {
        match self.0.checked_add(d.0) {
            Some(v) => Some(Instant(v)),
            None => None,
        }
    }
    /// `self - d`, or `None` before the epoch.
    /// Interrupt-safe: yes.
    pub const fn checked_sub(self, d: Duration) -> Option<Instant> {
        match self.0.checked_sub(d.0) {
            Some(v) => Some(Instant(v)),
            None => None,
        }
    }
    /// `self + d`, capped at the end of the timeline.
    /// Interrupt-safe: yes.
    pub const fn saturating_add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d.0))
    }
    /// `self - d`, floored at the epoch.
    /// Interrupt-safe: yes.
    pub const fn saturating_sub(self, d: Duration) -> Instant {
        Instant(self.0.saturating_sub(d.0))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        self.saturating_add(d)
    }
}
impl Sub<Duration> for Instant {
    type Output = Instant;
    fn sub(self, d: Duration) -> Instant {
        self.saturating_sub(d)
    }
}
impl Sub for Instant {
    type Output = Duration;
    fn sub(self, rhs: Instant) -> Duration {
        self.duration_since(rhs)
    }
}
impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", Duration(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions() {
        let big = core::time::Duration::from_secs(u64::MAX);
        assert_eq!(Duration::try_from(big), Err(DurationOverflow));
        let d = Duration::try_from(core::time::Duration::new(2, 5)).unwrap();
        assert_eq!(d.as_nanos(), 2_000_000_005);
        assert_eq!(Duration::from_secs(u64::MAX), Duration::MAX);
    }

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(Duration::ZERO - Duration::from_nanos(1), Duration::ZERO);
        assert_eq!(Duration::MAX.checked_add(Duration::from_nanos(1)), None);
        assert_eq!(Instant::ZERO.checked_sub(Duration::from_nanos(1)), None);
        assert_eq!(
            Instant::from_nanos(u64::MAX) + Duration::MAX,
            Instant::from_nanos(u64::MAX)
        );
        assert_eq!(Duration::from_nanos(3).checked_mul(u64::MAX), None);
    }
}
