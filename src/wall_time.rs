//! Which wall times the clock believes: a Unix time from any source (the
//! OS's [`Clock::set_unix_time`](crate::Clock::set_unix_time), the CMOS
//! RTC, kvmclock's wall clock) is taken only inside [`PLAUSIBLE_UNIX_SECONDS`].

use core::fmt;
use core::ops::Range;

/// The Unix times (in seconds) a wall-time source may claim:
/// 2000-01-01T00:00:00Z up to, not including, 2200-01-01T00:00:00Z.
///
/// Below: a clock that was reset (an RTC after battery loss shows 1970,
/// 1980 or 2000-01-01; a host that never wrote kvmclock's wall clock, 0);
/// no machine runs clockhal then. Above: a corrupt register (an RTC
/// century of 99 gives 9999; years past 2554 do not fit `u64` ns at all,
/// so [`Clock::unix_time_ns`](crate::Clock::unix_time_ns) would stand still
/// at `u64::MAX`); the bound leaves more than 350 years of uptime before
/// that saturation.
pub const PLAUSIBLE_UNIX_SECONDS: Range<u64> = 946_684_800..7_258_118_400;

const NS_PER_S: u64 = 1_000_000_000;

/// A wall time outside [`PLAUSIBLE_UNIX_SECONDS`] was refused; the wall
/// time is left as it was.
///
/// ```
/// use clockhal::ImplausibleWallTime;
/// let e = ImplausibleWallTime { unix_ns: 0 };
/// assert_eq!(e.to_string(), "wall time 0 s (Unix) is outside 2000..2200: refused");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ImplausibleWallTime {
    /// The Unix time offered, in ns.
    pub unix_ns: u64,
}

impl fmt::Display for ImplausibleWallTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "wall time {} s (Unix) is outside 2000..2200: refused",
            self.unix_ns / NS_PER_S
        )
    }
}

impl core::error::Error for ImplausibleWallTime {}

/// `unix_ns` if it lies inside [`PLAUSIBLE_UNIX_SECONDS`].
pub(crate) fn check(unix_ns: u64) -> Result<u64, ImplausibleWallTime> {
    let range = PLAUSIBLE_UNIX_SECONDS.start * NS_PER_S..PLAUSIBLE_UNIX_SECONDS.end * NS_PER_S;
    if range.contains(&unix_ns) {
        Ok(unix_ns)
    } else {
        Err(ImplausibleWallTime { unix_ns })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_bounds_are_the_stated_dates() {
        // 10,957 and 84,006 days after 1970-01-01.
        assert_eq!(super::PLAUSIBLE_UNIX_SECONDS.start, 10_957 * 86_400);
        assert_eq!(super::PLAUSIBLE_UNIX_SECONDS.end, 84_006 * 86_400);
        assert!(super::check(946_684_800 * 1_000_000_000).is_ok());
        assert!(super::check(946_684_800 * 1_000_000_000 - 1).is_err());
        assert!(super::check(7_258_118_400 * 1_000_000_000 - 1).is_ok());
        assert!(super::check(u64::MAX).is_err());
    }
}
