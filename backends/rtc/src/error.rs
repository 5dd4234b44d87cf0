//! Why the RTC gave no time.

use core::fmt;

/// A date or time register of the RTC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Field {
    /// Seconds (index 0x00).
    Second,
    /// Minutes (0x02).
    Minute,
    /// Hours (0x04).
    Hour,
    /// Day of the month (0x07).
    Day,
    /// Month (0x08).
    Month,
    /// Year within the century (0x09).
    Year,
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Field::Second => "second",
            Field::Minute => "minute",
            Field::Hour => "hour",
            Field::Day => "day",
            Field::Month => "month",
            Field::Year => "year",
        })
    }
}

/// Why [`Rtc`](crate::Rtc) could not produce a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RtcError {
    /// The century index is not a usable CMOS register: it must lie in
    /// 0x0E..=0x7F (above the clock and status registers, addressable
    /// through port 0x70).
    BadCenturyIndex(u8),
    /// Status registers A and B read 0xFF: nothing decodes ports 0x70/0x71
    /// (QEMU microvm under KVM has no RTC by default).
    NoDevice,
    /// Status D's VRT bit is clear: the RTC lost power (battery), its time
    /// is not valid (FreeBSD refuses it too).
    InvalidTime,
    /// Status B's SET bit is on: updates are inhibited (someone is setting
    /// the clock), the time stands still.
    Halted,
    /// Update-in-progress (status A bit 7) did not clear within the poll
    /// bound (an update takes at most 2.2 ms).
    UpdateStuck,
    /// No two consecutive reads of all registers agreed within the bound.
    Unstable,
    /// A register holds a value that is not a valid BCD digit pair or is
    /// out of range for its field (a day that the month does not have
    /// included).
    BadField {
        /// Which register.
        field: Field,
        /// The byte it held.
        raw: u8,
        /// Whether registers are BCD (status B bit 2 clear).
        bcd: bool,
    },
    /// UIP never rose within the wait: no second edge to align to.
    NoUpdateEdge,
    /// The time was read too late after the edge to be sure which second
    /// it shows (a descheduled vCPU); read again.
    EdgeLost,
    /// The RTC's time is valid as a date but not as the time now (outside
    /// the user's plausible range, e.g. `clockhal::PLAUSIBLE_UNIX_SECONDS`:
    /// a year 9999 from a corrupt century register, 1980 after a reset).
    ImplausibleTime {
        /// The year it showed.
        year: u16,
    },
}

impl fmt::Display for RtcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RtcError::BadCenturyIndex(i) => write!(
                f,
                "RTC century index {i:#04x} is not a CMOS RAM register (0x0e..=0x7f)"
            ),
            RtcError::NoDevice => f.write_str("RTC status registers read 0xff: no CMOS RTC"),
            RtcError::InvalidTime => {
                f.write_str("RTC reports invalid RAM and time (status D VRT clear: battery)")
            }
            RtcError::Halted => f.write_str("RTC updates are inhibited (status B SET)"),
            RtcError::UpdateStuck => f.write_str("RTC update-in-progress flag never cleared"),
            RtcError::Unstable => f.write_str("RTC registers kept changing between reads"),
            RtcError::BadField { field, raw, bcd } => write!(
                f,
                "RTC {field} register holds {raw:#04x}, not a valid {} {field}",
                if bcd { "BCD" } else { "binary" }
            ),
            RtcError::NoUpdateEdge => f.write_str("RTC showed no second edge within the wait"),
            RtcError::EdgeLost => f.write_str("RTC read too long after the second edge"),
            RtcError::ImplausibleTime { year } => {
                write!(f, "RTC shows the year {year}: not a plausible time now")
            }
        }
    }
}
