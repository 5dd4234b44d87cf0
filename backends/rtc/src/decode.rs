//! From raw register bytes to a validated date and time.

use crate::civil;
use crate::error::{Field, RtcError};
use core::fmt;

/// Status B bit 2: registers are binary (else BCD).
pub(crate) const B_BINARY: u8 = 1 << 2;
/// Status B bit 1: 24-hour mode (else 12-hour, PM in the hour's bit 7).
pub(crate) const B_24H: u8 = 1 << 1;
/// Hour bit 7 in 12-hour mode.
const HOUR_PM: u8 = 0x80;

/// Years 70..=99 without a century register are 19xx, 00..=69 are 20xx
/// (the POSIX `%y` convention, also Linux's without a century register).
pub const PIVOT_YEAR: u8 = 70;

/// One consistent set of RTC registers (compared whole between reads).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Raw {
    pub second: u8,
    pub minute: u8,
    pub hour: u8,
    pub day: u8,
    pub month: u8,
    pub year: u8,
    pub century: Option<u8>,
    pub status_b: u8,
}

/// Where the century of [`RtcTime::year`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Century {
    /// The century register at this CMOS index (the FADT's CENTURY).
    Register(u8),
    /// No century register: the [`PIVOT_YEAR`] rule.
    Pivot,
    /// The century register held a byte that is no valid century (not
    /// BCD, outside 19..=99, or before 1970 with this year): the
    /// [`PIVOT_YEAR`] rule was used instead.
    PivotRegisterInvalid {
        /// The register's index.
        index: u8,
        /// The byte it held.
        raw: u8,
    },
}

/// How the RTC encodes its registers (status B).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RtcFormat {
    /// Binary (status B bit 2 set) rather than BCD.
    pub binary: bool,
    /// 24-hour (status B bit 1 set) rather than 12-hour.
    pub hour24: bool,
}

/// A validated RTC reading, taken as UTC.
///
/// The RTC keeps whatever time it was set to; clockhal takes it as UTC
/// (QEMU's default `-rtc base=utc`, Linux's default). An OS whose RTC keeps
/// local time (a PC that also boots Windows) subtracts its own offset.
/// The day-of-week register is not read: firmware often leaves it wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RtcTime {
    /// Full year, 1970..=9999.
    pub year: u16,
    /// 1..=12.
    pub month: u8,
    /// 1..=31 (valid for the month).
    pub day: u8,
    /// 0..=23.
    pub hour: u8,
    /// 0..=59.
    pub minute: u8,
    /// 0..=59.
    pub second: u8,
    /// Where the century came from.
    pub century: Century,
    /// The register encoding found.
    pub format: RtcFormat,
}

impl RtcTime {
    /// Seconds since 1970-01-01 00:00:00 UTC (leap seconds, which the RTC
    /// does not know either, not counted); 0 for a time before 1970. The
    /// fields are public, so any values are taken: a day, month or hour out
    /// of range counts on as if the calendar continued (day 0 is the last
    /// day of the month before), never a panic. [`Rtc`](crate::Rtc) only
    /// returns validated times.
    /// Interrupt-safe: yes.
    pub fn unix_seconds(&self) -> u64 {
        let days = civil::days_from_civil(self.year as u32, self.month, self.day);
        let s =
            days * 86_400 + self.hour as i64 * 3_600 + self.minute as i64 * 60 + self.second as i64;
        if s < 0 {
            0
        } else {
            s as u64
        }
    }
}

impl fmt::Display for RtcTime {
    /// ISO 8601: `2026-12-01T12:34:56Z`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

/// Decodes one register byte: binary as is, BCD digit by digit (each
/// nibble 0..=9), then checks the range.
fn number(
    field: Field,
    raw: u8,
    bcd: bool,
    range: core::ops::RangeInclusive<u8>,
) -> Result<u8, RtcError> {
    let bad = RtcError::BadField { field, raw, bcd };
    let v = if bcd {
        let (hi, lo) = (raw >> 4, raw & 0x0F);
        if hi > 9 || lo > 9 {
            return Err(bad);
        }
        hi * 10 + lo
    } else {
        raw
    };
    if range.contains(&v) {
        Ok(v)
    } else {
        Err(bad)
    }
}

/// The century byte, if it is a usable one for `yy`.
fn century(raw: u8, bcd: bool, yy: u8) -> Option<u16> {
    // Field::Year stands in: the error is not reported, only the fallback.
    let c = number(Field::Year, raw, bcd, 19..=99).ok()? as u16;
    let year = c * 100 + yy as u16;
    (year >= 1970).then_some(year)
}

/// Validates every field of `raw` and assembles the time.
pub(crate) fn decode(raw: &Raw, century_index: Option<u8>) -> Result<RtcTime, RtcError> {
    let format = RtcFormat {
        binary: raw.status_b & B_BINARY != 0,
        hour24: raw.status_b & B_24H != 0,
    };
    let bcd = !format.binary;
    let second = number(Field::Second, raw.second, bcd, 0..=59)?;
    let minute = number(Field::Minute, raw.minute, bcd, 0..=59)?;
    let hour = if format.hour24 {
        number(Field::Hour, raw.hour, bcd, 0..=23)?
    } else {
        let h = number(Field::Hour, raw.hour & !HOUR_PM, bcd, 1..=12).map_err(|_| {
            RtcError::BadField {
                field: Field::Hour,
                raw: raw.hour,
                bcd,
            }
        })?;
        // 12 AM is midnight, 12 PM noon.
        h % 12 + if raw.hour & HOUR_PM != 0 { 12 } else { 0 }
    };
    let month = number(Field::Month, raw.month, bcd, 1..=12)?;
    let yy = number(Field::Year, raw.year, bcd, 0..=99)?;
    let pivot = || 1900 + yy as u16 + if yy < PIVOT_YEAR { 100 } else { 0 };
    let (year, century) = match (century_index, raw.century) {
        (Some(index), Some(c)) => match century(c, bcd, yy) {
            Some(year) => (year, Century::Register(index)),
            None => (pivot(), Century::PivotRegisterInvalid { index, raw: c }),
        },
        _ => (pivot(), Century::Pivot),
    };
    let day = number(
        Field::Day,
        raw.day,
        bcd,
        1..=civil::days_in_month(year as u32, month),
    )?;
    Ok(RtcTime {
        year,
        month,
        day,
        hour,
        minute,
        second,
        century,
        format,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(second: u8, minute: u8, hour: u8, day: u8, month: u8, year: u8) -> Raw {
        Raw {
            second,
            minute,
            hour,
            day,
            month,
            year,
            century: None,
            status_b: B_24H,
        }
    }

    #[test]
    fn bcd_24h_without_century_uses_the_pivot() {
        let t = decode(&raw(0x56, 0x34, 0x12, 0x01, 0x12, 0x26), None).unwrap();
        assert_eq!(t.unix_seconds(), 1_796_128_496);
        assert_eq!(t.century, Century::Pivot);
        let t = decode(&raw(0x59, 0x59, 0x23, 0x31, 0x12, 0x99), None).unwrap();
        assert_eq!((t.year, t.unix_seconds()), (1999, 946_684_799));
        let t = decode(&raw(0x59, 0x59, 0x23, 0x31, 0x12, 0x69), None).unwrap();
        assert_eq!((t.year, t.unix_seconds()), (2069, 3_155_759_999));
        let t = decode(&raw(0, 0, 0, 1, 1, 0x70), None).unwrap();
        assert_eq!(t.unix_seconds(), 0);
    }

    #[test]
    fn twelve_hour_mode() {
        let mut r = raw(0, 0, 0x12, 1, 1, 0x00);
        r.status_b = 0; // BCD, 12 h
        assert_eq!(decode(&r, None).unwrap().hour, 0, "12 AM is midnight");
        r.hour = 0x12 | HOUR_PM;
        assert_eq!(decode(&r, None).unwrap().hour, 12, "12 PM is noon");
        r.hour = 0x01 | HOUR_PM;
        assert_eq!(decode(&r, None).unwrap().hour, 13);
        r.hour = 0x11;
        assert_eq!(decode(&r, None).unwrap().hour, 11);
        for bad in [0x00, 0x13, 0x80, 0x93, 0x1A] {
            r.hour = bad;
            assert_eq!(
                decode(&r, None),
                Err(RtcError::BadField {
                    field: Field::Hour,
                    raw: bad,
                    bcd: true
                }),
                "{bad:#x}"
            );
        }
        // Binary 12 h: PM flag on a binary hour.
        r.status_b = B_BINARY;
        r.hour = 11 | HOUR_PM;
        assert_eq!(decode(&r, None).unwrap().hour, 23);
    }

    #[test]
    fn century_register_and_its_fallback() {
        let mut r = raw(0, 0, 0, 1, 3, 0x00);
        r.century = Some(0x21);
        let t = decode(&r, Some(0x32)).unwrap();
        assert_eq!((t.year, t.century), (2100, Century::Register(0x32)));
        assert_eq!(t.unix_seconds(), 4_107_542_400);
        // A century byte that is no century: the pivot, and the reason.
        for c in [0x00, 0xFF, 0x1A, 0x18, 0x19] {
            r.century = Some(c);
            let t = decode(&r, Some(0x32)).unwrap();
            assert_eq!(t.year, 2000, "{c:#x}");
            assert_eq!(
                t.century,
                Century::PivotRegisterInvalid {
                    index: 0x32,
                    raw: c
                }
            );
        }
        // 19 is fine with a year that makes it 1970 or later.
        r.year = 0x85;
        r.century = Some(0x19);
        assert_eq!(decode(&r, Some(0x32)).unwrap().year, 1985);
    }

    #[test]
    fn every_field_is_validated() {
        let good = raw(0x56, 0x34, 0x12, 0x01, 0x12, 0x26);
        type Case = (fn(&mut Raw) -> &mut u8, Field, &'static [u8]);
        let cases: [Case; 6] = [
            (|r| &mut r.second, Field::Second, &[0x60, 0x5A, 0xFF, 0xA0]),
            (|r| &mut r.minute, Field::Minute, &[0x60, 0x0F, 0xFF]),
            (|r| &mut r.hour, Field::Hour, &[0x24, 0x80, 0xFF, 0x2A]),
            (|r| &mut r.day, Field::Day, &[0x00, 0x32, 0xFF, 0x0A]),
            (|r| &mut r.month, Field::Month, &[0x00, 0x13, 0xFF, 0x1A]),
            (|r| &mut r.year, Field::Year, &[0xA0, 0xFF, 0x9A]),
        ];
        for (at, field, bytes) in cases {
            for &b in bytes {
                let mut r = good;
                *at(&mut r) = b;
                assert_eq!(
                    decode(&r, None),
                    Err(RtcError::BadField {
                        field,
                        raw: b,
                        bcd: true
                    }),
                    "{field} {b:#x}"
                );
            }
        }
    }

    #[test]
    fn days_must_exist_in_their_month() {
        let mut r = raw(0, 0, 0, 0x29, 0x02, 0x24);
        assert_eq!(decode(&r, None).unwrap().day, 29); // 2024 is a leap year
        r.year = 0x23;
        assert!(matches!(
            decode(&r, None),
            Err(RtcError::BadField {
                field: Field::Day,
                ..
            })
        ));
        r.day = 0x31;
        r.month = 0x04;
        assert!(decode(&r, None).is_err());
        // 2100 is not a leap year; 2000 was.
        let mut r = raw(0, 0, 0, 0x29, 0x02, 0x00);
        r.century = Some(0x21);
        assert!(decode(&r, Some(0x32)).is_err());
        r.century = Some(0x20);
        assert!(decode(&r, Some(0x32)).is_ok());
    }

    #[test]
    fn binary_mode() {
        let mut r = raw(56, 34, 12, 1, 12, 26);
        r.status_b = B_BINARY | B_24H;
        r.century = Some(20);
        let t = decode(&r, Some(0x32)).unwrap();
        assert_eq!(t.unix_seconds(), 1_796_128_496);
        assert!(t.format.binary && t.format.hour24);
        r.second = 60;
        assert!(decode(&r, Some(0x32)).is_err());
    }

    #[test]
    fn every_byte_in_every_field_is_handled() {
        // Exhaustive: any byte in any field decodes or errors, never panics,
        // and anything accepted is in range.
        for fmt in [0, B_24H, B_BINARY, B_BINARY | B_24H] {
            for b in 0..=255u8 {
                for i in 0..7 {
                    let mut r = raw(0, 0, 0, 1, 1, 0);
                    r.status_b = fmt;
                    r.century = Some(0x20);
                    match i {
                        0 => r.second = b,
                        1 => r.minute = b,
                        2 => r.hour = b,
                        3 => r.day = b,
                        4 => r.month = b,
                        5 => r.year = b,
                        _ => r.century = Some(b),
                    }
                    if fmt & B_24H == 0 && i != 2 {
                        r.hour = if fmt & B_BINARY != 0 { 12 } else { 0x12 };
                    }
                    if let Ok(t) = decode(&r, Some(0x32)) {
                        assert!(t.second < 60 && t.minute < 60 && t.hour < 24);
                        assert!((1..=12).contains(&t.month) && (1..=31).contains(&t.day));
                        assert!((1970..=9999).contains(&t.year));
                        let _ = t.unix_seconds();
                    }
                }
            }
        }
    }

    #[test]
    fn display_is_iso8601() {
        let t = decode(&raw(0x05, 0x04, 0x03, 0x02, 0x01, 0x26), None).unwrap();
        extern crate std;
        use std::string::ToString;
        assert_eq!(t.to_string(), "2026-01-02T03:04:05Z");
    }
}
