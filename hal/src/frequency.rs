//! Exact counter rates as reduced rationals.

use core::fmt;

/// Lowest rate clockhal accepts: 1 Hz.
const MIN_HZ: u64 = 1;
/// Highest rate clockhal accepts: 2^40 Hz (~1.1 THz), far above any counter.
const MAX_HZ: u64 = 1 << 40;

/// A counter rate in Hz, stored as a reduced fraction `num / den`.
///
/// Exact where firmware is exact: HPET periods in femtoseconds
/// (69,841,279 fs is 10^15/69,841,279 Hz), the ACPI PM timer's 3,579,545 Hz,
/// Hyper-V's 10 MHz and pvclock-derived TSC rates all round-trip without loss.
///
/// Valid rates lie in 1 Hz ..= 2^40 Hz; constructors reject anything else.
///
/// ```
/// use clockhal_core::Frequency;
/// let pm = Frequency::from_hz(3_579_545).unwrap();
/// let hpet = Frequency::from_period_fs(10_000_000).unwrap(); // QEMU's HPET
/// assert_eq!(hpet, Frequency::from_hz(100_000_000).unwrap());
/// assert_eq!(pm.hz_rounded(), 3_579_545);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Frequency {
    num: u64,
    den: u64,
}

/// Why a rate was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum FrequencyError {
    /// A zero numerator, denominator or period.
    Zero,
    /// The rate is below 1 Hz or above 2^40 Hz.
    OutOfRange,
}

impl fmt::Display for FrequencyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrequencyError::Zero => f.write_str("zero rate or period"),
            FrequencyError::OutOfRange => f.write_str("rate outside 1 Hz ..= 2^40 Hz"),
        }
    }
}

const fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        let t = a % b;
        a = b;
        b = t;
    }
    a
}

impl Frequency {
    /// A whole number of Hz.
    pub const fn from_hz(hz: u64) -> Result<Self, FrequencyError> {
        Self::from_ratio(hz as u128, 1)
    }

    /// The rate of a counter whose period is `fs` femtoseconds (HPET's unit).
    pub const fn from_period_fs(fs: u64) -> Result<Self, FrequencyError> {
        Self::from_ratio(1_000_000_000_000_000, fs as u128)
    }

    /// `num / den` Hz. The fraction is reduced; it must fit in two u64 after
    /// reduction and lie within 1 Hz ..= 2^40 Hz.
    pub const fn from_ratio(num: u128, den: u128) -> Result<Self, FrequencyError> {
        if num == 0 || den == 0 {
            return Err(FrequencyError::Zero);
        }
        let g = gcd(num, den);
        let (mut n, mut d) = (num / g, den / g);
        // Out of range before we worry about representation.
        if n < d * MIN_HZ as u128 || n > d.saturating_mul(MAX_HZ as u128) {
            return Err(FrequencyError::OutOfRange);
        }
        // A fraction that does not fit u64 after reduction: drop low bits of
        // both (keeps > 60 bits of precision, i.e. far below 1 ppb).
        while n > u64::MAX as u128 || d > u64::MAX as u128 {
            n >>= 1;
            d >>= 1;
        }
        if d == 0 {
            return Err(FrequencyError::OutOfRange);
        }
        Ok(Frequency {
            num: n as u64,
            den: d as u64,
        })
    }

    /// Numerator of the reduced fraction (Hz = numerator / denominator).
    pub const fn numerator(&self) -> u64 {
        self.num
    }

    /// Denominator of the reduced fraction.
    pub const fn denominator(&self) -> u64 {
        self.den
    }

    /// The rate rounded to the nearest Hz.
    pub const fn hz_rounded(&self) -> u64 {
        ((self.num as u128 + self.den as u128 / 2) / self.den as u128) as u64
    }

    /// The rate in millihertz, rounded (for displays that want decimals).
    pub const fn millihz_rounded(&self) -> u128 {
        (self.num as u128 * 1000 + self.den as u128 / 2) / self.den as u128
    }

    /// Signed difference of `self` relative to `reference`, in parts per
    /// billion (saturating). Positive means `self` is faster.
    pub fn ppb_from(&self, reference: &Frequency) -> i64 {
        // (a/b - c/d) / (c/d) = (a*d - c*b) / (c*b)
        let ad = self.num as u128 * reference.den as u128;
        let cb = reference.num as u128 * self.den as u128;
        let (diff, neg) = if ad >= cb {
            (ad - cb, false)
        } else {
            (cb - ad, true)
        };
        // diff * 1e9 may overflow u128 only for absurd ratios: saturate.
        let v = diff
            .checked_mul(1_000_000_000)
            .map(|x| x / cb)
            .unwrap_or(u128::MAX);
        let v = if v > i64::MAX as u128 {
            i64::MAX
        } else {
            v as i64
        };
        if neg {
            -v
        } else {
            v
        }
    }
}

impl fmt::Debug for Frequency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self)
    }
}

impl fmt::Display for Frequency {
    /// `14318179.8 Hz`-style: whole Hz plus three decimals when inexact.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mhz = self.millihz_rounded();
        if self.den == 1 {
            write!(f, "{} Hz", self.num)
        } else {
            write!(f, "{}.{:03} Hz", mhz / 1000, mhz % 1000)
        }
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for Frequency {
    fn format(&self, f: defmt::Formatter) {
        defmt::write!(f, "{}/{} Hz", self.num, self.den)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hpet_period_is_exact() {
        let f = Frequency::from_period_fs(69_841_279).unwrap();
        assert_eq!(
            f.numerator() as u128 * 69_841_279,
            10u128.pow(15) * f.denominator() as u128
        );
        assert_eq!(f.hz_rounded(), 14_318_180);
    }

    #[test]
    fn reduces_and_compares() {
        assert_eq!(
            Frequency::from_ratio(20_000_000, 2).unwrap(),
            Frequency::from_hz(10_000_000).unwrap()
        );
    }

    #[test]
    fn rejects_bad_rates() {
        assert_eq!(Frequency::from_hz(0), Err(FrequencyError::Zero));
        assert_eq!(Frequency::from_period_fs(0), Err(FrequencyError::Zero));
        assert_eq!(Frequency::from_ratio(1, 2), Err(FrequencyError::OutOfRange));
        assert_eq!(
            Frequency::from_hz(u64::MAX),
            Err(FrequencyError::OutOfRange)
        );
    }

    #[test]
    fn ppb() {
        let a = Frequency::from_hz(1_000_001_000).unwrap();
        let b = Frequency::from_hz(1_000_000_000).unwrap();
        assert_eq!(a.ppb_from(&b), 1000);
        assert_eq!(b.ppb_from(&a), -999);
    }

    #[test]
    fn display() {
        extern crate alloc;
        use alloc::format;
        assert_eq!(
            format!("{}", Frequency::from_hz(3_579_545).unwrap()),
            "3579545 Hz"
        );
        assert_eq!(
            format!("{}", Frequency::from_period_fs(69_841_279).unwrap()),
            "14318179.941 Hz"
        );
    }
}
