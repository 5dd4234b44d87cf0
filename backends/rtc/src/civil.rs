//! Calendar dates to days since the Unix epoch (proleptic Gregorian).

/// Whether `year` is a Gregorian leap year.
pub(crate) const fn is_leap(year: u32) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

/// Days in `month` (1..=12) of `year`; 0 for a month out of range.
pub(crate) const fn days_in_month(year: u32, month: u8) -> u8 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(year) => 29,
        2 => 28,
        _ => 0,
    }
}

/// Days from 1970-01-01 to `year-month-day`, negative before it. Total:
/// a month or day out of range counts on as if the calendar continued
/// (day 0 is the last day of the month before, month 13 the next January),
/// never an overflow.
///
/// Counts in years that start on March 1 (so the leap day ends the year)
/// and in 400-year eras of 146,097 days; the day of the year follows from
/// the month by the 153-days-per-5-months rule (Mar–Jul, Aug–Dec).
pub(crate) const fn days_from_civil(year: u32, month: u8, day: u8) -> i64 {
    let (y, m, d) = (year as i64, month as i64, day as i64);
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    // 719,468 days from 0000-03-01 to 1970-01-01.
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        // Reference values from Python's datetime (UTC midnight / 86,400).
        for (y, m, d, days) in [
            (1970, 1, 1, 0),
            (1970, 3, 1, 59),
            (1972, 2, 29, 789),
            (2000, 1, 1, 10_957),
            (2000, 2, 29, 11_016),
            (2000, 3, 1, 11_017),
            (2024, 2, 29, 19_782),
            (2038, 1, 19, 24_855),
            (2100, 2, 28, 47_540),
            (2100, 3, 1, 47_541),
            (9999, 12, 31, 2_932_896),
            (1969, 12, 31, -1),
            (1900, 3, 1, -25_508),
            (0, 1, 1, -719_528),
            // Out of range: the calendar continues.
            (2026, 3, 0, 20_512),
            (2026, 13, 1, 20_819),
        ] {
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
        // No overflow anywhere in the domain.
        for (y, m, d) in [(0, 0, 0), (u32::MAX, u8::MAX, u8::MAX), (0, u8::MAX, 0)] {
            let _ = days_from_civil(y, m, d);
        }
    }

    #[test]
    fn consecutive_days_are_consecutive() {
        let mut expected = 0;
        for y in 1970..2400 {
            for m in 1..=12 {
                for d in 1..=days_in_month(y, m) {
                    assert_eq!(days_from_civil(y, m, d), expected, "{y}-{m}-{d}");
                    expected += 1;
                }
            }
        }
    }

    #[test]
    fn leap_years() {
        assert!(is_leap(2000) && is_leap(2024) && is_leap(2400));
        assert!(!is_leap(1900) && !is_leap(2100) && !is_leap(2023));
        assert_eq!(days_in_month(2100, 2), 28);
        assert_eq!(days_in_month(2000, 2), 29);
        assert_eq!(days_in_month(2000, 13), 0);
    }
}
