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
/// A ratio too wide for two u64 is rounded to within 2^-64 relative
/// ([`from_ratio`](Self::from_ratio)).
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

/// Whether `n / d` Hz lies in `MIN_HZ ..= MAX_HZ` (exact; `d != 0`).
const fn in_range(n: u128, d: u128) -> bool {
    // d * MAX_HZ saturates only when d > 2^88, where n <= u128::MAX is in range.
    n >= d * MIN_HZ as u128 && n <= d.saturating_mul(MAX_HZ as u128)
}

/// `n / d` (reduced, `1 <= n / d <= 2^40`, not fitting two u64) rounded to
/// the nearest `N / 2^j` with `2^63 <= N < 2^64`, reduced: the absolute
/// error is at most half a unit of `N`, so the relative error is at most
/// `2^-64`.
const fn round_to_u64_ratio(n: u128, d: u128) -> (u128, u128) {
    let int = n / d; // 1 ..= 2^40
    let mut rem = n % d;
    // int has e + 1 bits; N = round(n / d * 2^j) with j = 63 - e has 64.
    let e = 127 - int.leading_zeros();
    let j = 63 - e;
    // Long division for j fraction bits plus one rounding bit. Doubling
    // `rem < d` without overflow: 2 * rem >= d exactly when rem >= d - rem.
    let mut q = int;
    let mut i = 0;
    while i <= j {
        let bit = rem >= d - rem;
        rem = if bit { rem - (d - rem) } else { rem << 1 };
        q = (q << 1) | bit as u128;
        i += 1;
    }
    // q = floor(n / d * 2^(j + 1)); round half up on its last bit.
    let mut num = (q >> 1) + (q & 1);
    let mut shift = j;
    if num == 1 << 64 {
        num = 1 << 63;
        shift -= 1;
    }
    // Reduce (the denominator is a power of two).
    let tz = if num.trailing_zeros() < shift {
        num.trailing_zeros()
    } else {
        shift
    };
    (num >> tz, 1u128 << (shift - tz))
}

impl Frequency {
    /// 1 GHz: the rate of a clock that counts nanoseconds (kvmclock, the
    /// Hyper-V page's interpolated reference time).
    pub const NANOSECONDS: Frequency = match Frequency::from_hz(1_000_000_000) {
        Ok(f) => f,
        Err(_) => panic!("1 GHz is a valid rate"),
    };

    /// A whole number of Hz.
    /// Interrupt-safe: yes.
    pub const fn from_hz(hz: u64) -> Result<Self, FrequencyError> {
        Self::from_ratio(hz as u128, 1)
    }

    /// The rate of a counter whose period is `fs` femtoseconds (HPET's unit).
    /// Interrupt-safe: yes.
    pub const fn from_period_fs(fs: u64) -> Result<Self, FrequencyError> {
        Self::from_ratio(1_000_000_000_000_000, fs as u128)
    }

    /// `num / den` Hz, reduced.
    ///
    /// Exact whenever the reduced fraction fits in two u64 (every rate
    /// firmware or a host states in Hz, fs or pvclock `mul`/`shift` units of
    /// real hardware). Otherwise it is rounded to the nearest `N / 2^j` with
    /// a 64-bit `N`: the stored rate is within **2^-64 relative** (5.4e-20,
    /// 64 significant bits) of `num / den`. The range check (1 Hz ..=
    /// 2^40 Hz) applies to the exact value and to the stored one, so a rate
    /// just inside the range is never stored just outside it.
    /// Interrupt-safe: yes.
    pub const fn from_ratio(num: u128, den: u128) -> Result<Self, FrequencyError> {
        if num == 0 || den == 0 {
            return Err(FrequencyError::Zero);
        }
        let g = gcd(num, den);
        let (n, d) = (num / g, den / g);
        if !in_range(n, d) {
            return Err(FrequencyError::OutOfRange);
        }
        let (n, d) = if n > u64::MAX as u128 || d > u64::MAX as u128 {
            round_to_u64_ratio(n, d)
        } else {
            (n, d)
        };
        // The stored value is what every conversion uses: check it too.
        if !in_range(n, d) {
            return Err(FrequencyError::OutOfRange);
        }
        Ok(Frequency {
            num: n as u64,
            den: d as u64,
        })
    }

    /// Numerator of the reduced fraction (Hz = numerator / denominator).
    /// Interrupt-safe: yes.
    pub const fn numerator(&self) -> u64 {
        self.num
    }

    /// Denominator of the reduced fraction.
    /// Interrupt-safe: yes.
    pub const fn denominator(&self) -> u64 {
        self.den
    }

    /// The rate rounded to the nearest Hz.
    /// Interrupt-safe: yes.
    pub const fn hz_rounded(&self) -> u64 {
        ((self.num as u128 + self.den as u128 / 2) / self.den as u128) as u64
    }

    /// The rate in millihertz, rounded (for displays that want decimals).
    /// Interrupt-safe: yes.
    pub const fn millihz_rounded(&self) -> u128 {
        (self.num as u128 * 1000 + self.den as u128 / 2) / self.den as u128
    }

    /// Signed difference of `self` relative to `reference`, in parts per
    /// billion (saturating). Positive means `self` is faster.
    /// Interrupt-safe: yes.
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

    /// Relative error of the stored rate against `num / den`, as
    /// `|stored - exact| * 2^64 <= exact` (the documented bound).
    fn assert_within_bound(f: Frequency, num: u128, den: u128) {
        use num_bigint::BigUint;
        let (n, d) = (BigUint::from(f.numerator()), BigUint::from(f.denominator()));
        let (a, b) = (n * BigUint::from(den), BigUint::from(num) * d);
        let diff = if a > b { &a - &b } else { &b - &a };
        assert!(diff << 64u32 <= b, "{num}/{den} stored as {f:?}");
    }

    #[test]
    fn wide_ratio_keeps_64_bits() {
        // Issue 18: the old shift loop left the denominator 23 bits (59 ppb).
        let (n, d) = ((1u128 << 70) + 1, (1u128 << 31) - 1);
        let f = Frequency::from_ratio(n, d).unwrap();
        assert_within_bound(f, n, d);
        for (n, d) in [
            (u128::MAX, u128::MAX - 1),
            (u128::MAX, (u128::MAX >> 40) + 1),
            ((1 << 64) + 3, 1 << 30),
            (10u128.pow(9) << 64, 0xFFFF_FFFF_FFFF_FFC5),
        ] {
            assert_within_bound(Frequency::from_ratio(n, d).unwrap(), n, d);
        }
    }

    #[test]
    fn range_is_checked_on_the_stored_rate() {
        // Issue 18: 2^40 - 1/d Hz was stored as slightly above 2^40 Hz.
        let (n, d) = ((1u128 << 65) - (1 << 40) - 1, (1u128 << 25) - 1);
        let f = Frequency::from_ratio(n, d).unwrap();
        assert!(f.numerator() as u128 <= (f.denominator() as u128) << 40);
        assert_within_bound(f, n, d);
        // Just above the range, with a denominator too wide for u64.
        let d = (1u128 << 80) + 1;
        assert_eq!(
            Frequency::from_ratio((d << 40) + 1, d),
            Err(FrequencyError::OutOfRange)
        );
        assert!(Frequency::from_ratio(d << 40, d).is_ok());
        assert_eq!(
            Frequency::from_ratio(d - 1, d),
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
