//! Exact tick <-> nanosecond conversion.
//!
//! A ratio `A/B` is split once into an integer part `I` and a 64-bit binary
//! fraction `F` (`F = floor(frac(A/B) * 2^64)`). Converting `t` is then
//! `t*I + (t*F >> 64)` in 128-bit arithmetic: one 64x64 and one 64x64->128
//! multiply, no division, no overflow for any `u64` input (results above
//! `u64::MAX` saturate), and because `F` is truncated by less than `2^-64`,
//! the result is the exact floor or one below it (error <= 1 unit), and it is
//! monotonic in `t`. That is the read path ([`Scale::ticks_to_ns`]): two
//! multiplies. The `_exact` variants add one exact 128-bit comparison that
//! settles the floor whenever `t * num` fits in 128 bits (always for whole-Hz
//! rates and real HPET periods); they cost ~3 more multiplies, so they are for
//! conversions of durations, not for every clock read.

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

    /// `floor(t * num / den)` or one less; monotonic in `t`.
    #[inline(always)]
    const fn estimate(&self, t: u64) -> u128 {
        let whole = t as u128 * self.int as u128;
        let part = (t as u128 * self.frac as u128) >> 64;
        whole + part
    }

    #[inline(always)]
    const fn apply(&self, t: u64) -> u64 {
        let q = self.estimate(t);
        if q > u64::MAX as u128 {
            u64::MAX
        } else {
            q as u64
        }
    }

    const fn apply_exact(&self, t: u64) -> u64 {
        let q = self.estimate(t);
        if q >= u64::MAX as u128 {
            return u64::MAX;
        }
        // The estimate is floor(exact) or one less: one exact comparison
        // settles it whenever t * num fits in 128 bits (always for whole-Hz
        // rates and real HPET periods).
        if let (Some(lhs), Some(rhs)) = (
            (q + 1).checked_mul(self.den),
            (t as u128).checked_mul(self.num),
        ) {
            if lhs <= rhs {
                return (q + 1) as u64;
            }
        }
        q as u64
    }
}

/// Converts between a counter's ticks and nanoseconds for one [`Frequency`].
///
/// Both directions are within one unit below the exact rational result,
/// monotonic, and never overflow (saturating at `u64::MAX`, i.e. 584 years of
/// nanoseconds); the `_exact` variants give the exact floor.
///
/// ```
/// use clockhal_core::{Frequency, Scale};
/// let s = Scale::new(Frequency::from_hz(3_579_545).unwrap());
/// assert_eq!(s.ticks_to_ns_exact(3_579_545), 1_000_000_000);
/// assert_eq!(s.ns_to_ticks_exact(1_000_000_000), 3_579_545);
/// let fast = s.ticks_to_ns(3_579_545);
/// assert!(fast == 1_000_000_000 || fast == 999_999_999);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scale {
    freq: Frequency,
    to_ns: Ratio,
    to_ticks: Ratio,
}

impl Scale {
    /// Precomputes both directions for `freq` (a few hundred cycles, once).
    /// Interrupt-safe: yes.
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
    /// Interrupt-safe: yes.
    pub const fn frequency(&self) -> Frequency {
        self.freq
    }

    /// Nanoseconds per tick as `(int, frac)`: `int + frac/2^64`, the
    /// fraction truncated (the slope [`TscMap`](crate::TscMap) reads with).
    /// Interrupt-safe: yes.
    pub const fn ns_per_tick_q64(&self) -> (u64, u64) {
        (self.to_ns.int, self.to_ns.frac)
    }

    /// Nanoseconds in `ticks` ticks: `floor(exact)` or one less; saturating.
    /// Interrupt-safe: yes.
    #[inline(always)]
    pub const fn ticks_to_ns(&self, ticks: u64) -> u64 {
        self.to_ns.apply(ticks)
    }

    /// Ticks in `ns` nanoseconds: `floor(exact)` or one less; saturating.
    /// Interrupt-safe: yes.
    #[inline(always)]
    pub const fn ns_to_ticks(&self, ns: u64) -> u64 {
        self.to_ticks.apply(ns)
    }

    /// Nanoseconds in `ticks` ticks, exactly `floor(exact)` for whole-Hz
    /// rates and real HPET periods (otherwise as [`ticks_to_ns`](Self::ticks_to_ns)).
    /// Interrupt-safe: yes.
    pub const fn ticks_to_ns_exact(&self, ticks: u64) -> u64 {
        self.to_ns.apply_exact(ticks)
    }

    /// Ticks in `ns` nanoseconds, exact floor (see
    /// [`ticks_to_ns_exact`](Self::ticks_to_ns_exact)).
    /// Interrupt-safe: yes.
    pub const fn ns_to_ticks_exact(&self, ns: u64) -> u64 {
        self.to_ticks.apply_exact(ns)
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

    fn check_exact(t: u64, got: u64, num: u128, den: u128) {
        let e = exact(t, num, den);
        if e >= BigUint::from(u64::MAX) {
            assert!(got >= u64::MAX - 1);
        } else if (BigUint::from(t) * BigUint::from(num)).bits() <= 128 {
            assert_eq!(BigUint::from(got), e, "t={t}");
        } else {
            check(t, got, num, den);
        }
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
        check_exact(t, s.ticks_to_ns_exact(t), 1_000_000_000 * d, n);
        check_exact(t, s.ns_to_ticks_exact(t), n, 1_000_000_000 * d);
        if t > 0 {
            assert!(s.ticks_to_ns(t - 1) <= s.ticks_to_ns(t), "monotonic");
        }
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

    /// 20,000 cases (a few under Miri) unless `PROPTEST_CASES` says otherwise.
    fn config() -> ProptestConfig {
        let cases = std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(if cfg!(miri) { 32 } else { 20_000 });
        let mut config = ProptestConfig::with_cases(cases);
        if cfg!(miri) {
            // Miri's isolation has no file system for the regressions file.
            config.failure_persistence = None;
        }
        config
    }

    proptest! {
        #![proptest_config(config())]
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
            for t in [
                0,
                1,
                2,
                999,
                1 << 32,
                (1 << 63) - 1,
                1 << 63,
                u64::MAX - 1,
                u64::MAX,
            ] {
                check_freq(f, t);
            }
        }
    }

    #[test]
    fn round_numbers_are_exact() {
        let s = Scale::new(Frequency::from_hz(10_000_000).unwrap());
        assert_eq!(s.ticks_to_ns(10_000_000), 1_000_000_000);
        assert_eq!(s.ns_to_ticks_exact(100), 1);
        let s = Scale::new(Frequency::from_hz(1_000_000_000).unwrap());
        assert_eq!(s.ticks_to_ns(u64::MAX), u64::MAX);
    }
}
