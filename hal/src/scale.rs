//! Exact tick <-> nanosecond conversion.
//!
//! A ratio `A/B` is split once into an integer part `I` and a 64-bit binary
//! fraction `F` (`F = floor(frac(A/B) * 2^64)`). Converting `t` is then
//! `t*I + (t*F >> 64)` in 128-bit arithmetic: one 64x64 and one 64x64->128
//! multiply, no division, no overflow for any `u64` input (results above
//! `u64::MAX` saturate), and because `F` is truncated by less than `2^-64`,
//! the estimate is the exact floor or one below it. One exact 128-bit
//! comparison then corrects it to the exact floor whenever `t * num` fits in
//! 128 bits (always for whole-Hz rates and real HPET periods); otherwise the
//! error bound stays <= 1 unit.

use crate::Frequency;

/// Fixed-point `I + F/2^64` of the exact ratio `num / den`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ratio {
    int: u64,
    frac: u64,
    num: u128,
    den: u128,
}

impl Ratio {
    /// `num / den`, both up to 2^95, `den != 0`, quotient below 2^64.
    const fn new(num: u128, den: u128) -> Ratio {
        let int = num / den;
        let mut rem = num % den;
        // Long division for 64 fraction bits; rem < den <= 2^95 so the
        // shifted remainder always fits in u128.
        let mut frac: u64 = 0;
        let mut i = 0;
        while i < 64 {
            rem <<= 1;
            frac <<= 1;
            if rem >= den {
                rem -= den;
                frac |= 1;
            }
            i += 1;
        }
        Ratio {
            int: int as u64,
            frac,
            num,
            den,
        }
    }

    #[inline(always)]
    const fn apply(&self, t: u64) -> u64 {
        let whole = t as u128 * self.int as u128;
        let part = (t as u128 * self.frac as u128) >> 64;
        let q = whole + part;
        if q >= u64::MAX as u128 {
            return u64::MAX;
        }
        // The estimate is floor(exact) or one less: one exact comparison
        // settles it whenever t * num fits in 128 bits (always for whole-Hz
        // rates and real HPET periods).
        if let (Some(lhs), Some(rhs)) = ((q + 1).checked_mul(self.den), (t as u128).checked_mul(self.num)) {
            if lhs <= rhs {
                return (q + 1) as u64;
            }
        }
        q as u64
    }
}

/// Converts between a counter's ticks and nanoseconds for one [`Frequency`].
///
/// Both directions give the exact floor of the rational result (at worst one
/// unit below it for exotic fractional rates), and never overflow (saturating at `u64::MAX`, i.e. 584 years
/// of nanoseconds).
///
/// ```
/// use clockhal_core::{Frequency, Scale};
/// let s = Scale::new(Frequency::from_hz(3_579_545).unwrap());
/// assert_eq!(s.ticks_to_ns(3_579_545), 1_000_000_000);
/// assert_eq!(s.ns_to_ticks(1_000_000_000), 3_579_545);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scale {
    freq: Frequency,
    to_ns: Ratio,
    to_ticks: Ratio,
}

impl Scale {
    /// Precomputes both directions for `freq` (a few hundred cycles, once).
    pub const fn new(freq: Frequency) -> Scale {
        let num = freq.numerator() as u128;
        let den = freq.denominator() as u128;
        // ns per tick = 1e9 * den / num, at most 1e9 since freq >= 1 Hz.
        let to_ns = Ratio::new(1_000_000_000 * den, num);
        // ticks per ns = num / (1e9 * den), at most 2^40 / 1e9.
        let to_ticks = Ratio::new(num, 1_000_000_000 * den);
        Scale {
            freq,
            to_ns,
            to_ticks,
        }
    }

    /// The rate this scale converts for.
    pub const fn frequency(&self) -> Frequency {
        self.freq
    }

    /// Nanoseconds in `ticks` ticks: `floor(exact)` or one less; saturating.
    #[inline(always)]
    pub const fn ticks_to_ns(&self, ticks: u64) -> u64 {
        self.to_ns.apply(ticks)
    }

    /// Ticks in `ns` nanoseconds: `floor(exact)` or one less; saturating.
    #[inline(always)]
    pub const fn ns_to_ticks(&self, ns: u64) -> u64 {
        self.to_ticks.apply(ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use num_bigint::BigUint;
    use proptest::prelude::*;

    fn exact(t: u64, num: u128, den: u128) -> BigUint {
        BigUint::from(t) * BigUint::from(num) / BigUint::from(den)
    }

    fn check(t: u64, got: u64, num: u128, den: u128) {
        let e = exact(t, num, den);
        let max = BigUint::from(u64::MAX);
        if e >= max {
            // Saturation: the only allowed answers are MAX or (MAX - 1 from rounding).
            assert!(got >= u64::MAX - 1, "t={t} got={got} expected saturation");
        } else {
            let e: u64 = e.try_into().unwrap();
            assert!(got == e || got + 1 == e, "t={t} got={got} exact={e}");
        }
    }

    fn check_freq(f: Frequency, t: u64) {
        let s = Scale::new(f);
        let (n, d) = (f.numerator() as u128, f.denominator() as u128);
        check(t, s.ticks_to_ns(t), 1_000_000_000 * d, n);
        check(t, s.ns_to_ticks(t), n, 1_000_000_000 * d);
    }

    fn any_freq() -> impl Strategy<Value = Frequency> {
        prop_oneof![
            (1u64..=(1 << 40)).prop_map(|hz| Frequency::from_hz(hz).unwrap()),
            (100_000u64..=100_000_000).prop_map(|fs| Frequency::from_period_fs(fs).unwrap()),
            (1u128..=u64::MAX as u128, 1u128..=u64::MAX as u128)
                .prop_filter_map("in range", |(n, d)| Frequency::from_ratio(n, d).ok()),
        ]
    }

    fn any_ticks() -> impl Strategy<Value = u64> {
        prop_oneof![
            any::<u64>(),
            0u64..1_000_000,
            (0u32..64).prop_flat_map(|b| (1u64 << b)..=(1u64 << b).saturating_mul(2)),
            (u64::MAX - 1_000_000)..=u64::MAX,
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]
        #[test]
        fn within_one_unit_over_whole_range(f in any_freq(), t in any_ticks()) {
            check_freq(f, t);
        }
    }

    #[test]
    fn named_rates_at_extremes() {
        let rates = [
            Frequency::from_period_fs(69_841_279).unwrap(),
            Frequency::from_period_fs(10_000_000).unwrap(),
            Frequency::from_hz(3_579_545).unwrap(),
            Frequency::from_hz(10_000_000).unwrap(),
            Frequency::from_hz(2_600_000_000).unwrap(),
            Frequency::from_hz(1).unwrap(),
            Frequency::from_hz(1 << 40).unwrap(),
        ];
        for f in rates {
            for t in [0, 1, 2, 999, 1 << 32, (1 << 63) - 1, 1 << 63, u64::MAX - 1, u64::MAX] {
                check_freq(f, t);
            }
        }
    }

    #[test]
    fn round_numbers_are_exact() {
        let s = Scale::new(Frequency::from_hz(10_000_000).unwrap());
        assert_eq!(s.ticks_to_ns(10_000_000), 1_000_000_000);
        assert_eq!(s.ns_to_ticks(100), 1);
        let s = Scale::new(Frequency::from_hz(1_000_000_000).unwrap());
        assert_eq!(s.ticks_to_ns(u64::MAX), u64::MAX);
    }
}
