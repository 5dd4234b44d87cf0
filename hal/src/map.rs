//! TSC-based time as one affine map: the read path of every clock that is
//! the TSC under a rate and an offset (the TSC itself, kvmclock, the
//! Hyper-V reference page).

use crate::Scale;

/// `ns(tsc) = tsc·int + ⌊(tsc·frac + add) / 2^64⌋`, all wrapping: an affine
/// map from TSC ticks to nanoseconds whose slope (`int + frac/2^64` ns per
/// tick) keeps 64 fraction bits.
///
/// One multiply (two below 1 GHz), one 128-bit add and no shift: the
/// cheapest exact form of "a rate and an offset" for a read path, and the
/// one every TSC-based clock is reduced to once its parameters are
/// validated. Because the arithmetic is modular, [`apply`](Self::apply) is
/// exact (`ns0 + ⌊(tsc - tsc0)·slope⌋`) for every `tsc` whose true result
/// lies in `0..2^64`, also for `tsc` somewhat below the anchor `tsc0`; a
/// result outside that range wraps, which callers catch by bounding the
/// result ([`MapSlot`](crate::MapSlot) keeps a limit).
///
/// ```
/// use clockhal_core::{Frequency, Scale, TscMap};
/// // A 2 GHz TSC that read 1_000 at 5 us.
/// let scale = Scale::new(Frequency::from_hz(2_000_000_000).unwrap());
/// let map = TscMap::through(&scale, 1_000, 5_000);
/// assert_eq!(map.apply(1_000), 5_000);
/// assert_eq!(map.apply(3_000), 6_000);
/// assert_eq!(map.apply(999), 4_999); // just below the anchor
/// assert_eq!(map.offset_by(10).apply(3_000), 6_010);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct TscMap {
    int: u64,
    frac: u64,
    add: u128,
}

impl TscMap {
    /// The map of slope `int + frac/2^64` ns per tick that gives `ns0` at
    /// `tsc0`.
    /// Interrupt-safe: yes.
    pub const fn from_slope(int: u64, frac: u64, tsc0: u64, ns0: u64) -> TscMap {
        // add ≡ (ns0 - tsc0·int)·2^64 - tsc0·frac (mod 2^128), so that
        // apply(tsc0) = tsc0·int + (ns0 - tsc0·int) = ns0.
        let base = (ns0.wrapping_sub(tsc0.wrapping_mul(int)) as u128) << 64;
        let add = base.wrapping_sub(tsc0 as u128 * frac as u128);
        TscMap { int, frac, add }
    }

    /// The map with `scale`'s rate through `(tsc0, ns0)`.
    /// Interrupt-safe: yes.
    pub const fn through(scale: &Scale, tsc0: u64, ns0: u64) -> TscMap {
        let (int, frac) = scale.ns_per_tick_q64();
        TscMap::from_slope(int, frac, tsc0, ns0)
    }

    /// The map of a pvclock `(mul, shift)` pair through `(tsc_timestamp,
    /// system_time)`: slope `mul·2^shift / 2^32` ns per tick, exactly (the
    /// ABI's own arithmetic truncates a right-shifted delta first; this map
    /// is within 1 ns of it and, unlike it, strictly monotonic in the
    /// delta). `None` for `mul == 0` or `|shift| > 32`, which no host
    /// writes.
    /// Interrupt-safe: yes.
    pub const fn pvclock(
        mul: u32,
        shift: i8,
        tsc_timestamp: u64,
        system_time: u64,
    ) -> Option<TscMap> {
        if mul == 0 || shift < -32 || shift > 32 {
            return None;
        }
        // mul·2^(32+shift) ns per tick in Q64.64; 32 + shift is 0..=64.
        let slope = (mul as u128) << (32 + shift) as u32;
        Some(TscMap::from_slope(
            (slope >> 64) as u64,
            slope as u64,
            tsc_timestamp,
            system_time,
        ))
    }

    /// The map of a Hyper-V reference TSC page `(scale, offset)`: the page
    /// counts `⌊tsc·scale / 2^64⌋ + offset` units of 100 ns; this map counts
    /// nanoseconds on the same line (100 times the slope, so a reading is
    /// finer than, and within 100 ns of, 100 × the page's value).
    /// Interrupt-safe: yes.
    pub const fn hyperv(scale: u64, offset: i64) -> TscMap {
        let slope = scale as u128 * 100;
        TscMap {
            int: (slope >> 64) as u64,
            frac: slope as u64,
            add: ((offset as i128 * 100) as u128) << 64,
        }
    }

    /// Nanoseconds at `tsc` (see the type docs for the exact range).
    /// Interrupt-safe: yes.
    #[inline(always)]
    pub const fn apply(&self, tsc: u64) -> u64 {
        let hi = ((tsc as u128 * self.frac as u128).wrapping_add(self.add) >> 64) as u64;
        if self.int == 0 {
            hi
        } else {
            hi.wrapping_add(tsc.wrapping_mul(self.int))
        }
    }

    /// How many ticks past `tsc0` the map stays at or below `ns_limit`
    /// (rounded down; 0 if `apply(tsc0)` is already above it; `u64::MAX`
    /// for a flat map): turns a nanosecond limit into a TSC window, so a
    /// reader compares TSC values instead of waiting for the multiply.
    /// Interrupt-safe: yes.
    ///
    /// ```
    /// use clockhal_core::{Frequency, Scale, TscMap};
    /// let m = TscMap::through(&Scale::new(Frequency::from_hz(2_000_000_000).unwrap()), 1_000, 0);
    /// assert_eq!(m.ticks_until(1_000, 1_000), 1_999); // 1 us at 2 GHz, less a tick of rounding
    /// assert!(m.apply(1_000 + 2_000) <= 1_000);
    /// assert_eq!(m.ticks_until(5_000, 1_000), 0);
    /// ```
    pub fn ticks_until(&self, tsc0: u64, ns_limit: u64) -> u64 {
        let Some(dns) = ns_limit.checked_sub(self.apply(tsc0)) else {
            return 0;
        };
        let slope = self.slope_q64();
        if slope == 0 {
            return u64::MAX;
        }
        // Rounded down, and one tick less for the map's own rounding.
        let d = ((dns as u128) << 64) / slope;
        u64::try_from(d).unwrap_or(u64::MAX).saturating_sub(1)
    }

    /// The same map shifted by `ns` (wrapping): `apply(t) + ns`.
    /// Interrupt-safe: yes.
    pub const fn offset_by(self, ns: u64) -> TscMap {
        TscMap {
            add: self.add.wrapping_add((ns as u128) << 64),
            ..self
        }
    }

    /// The same slope through `(tsc0, ns0)`.
    /// Interrupt-safe: yes.
    pub const fn rebased(self, tsc0: u64, ns0: u64) -> TscMap {
        TscMap::from_slope(self.int, self.frac, tsc0, ns0)
    }

    /// The slope as `(int, frac)`: `int + frac/2^64` ns per tick.
    /// Interrupt-safe: yes.
    pub const fn slope(&self) -> (u64, u64) {
        (self.int, self.frac)
    }

    /// The slope as one Q64.64 number of ns per tick.
    pub(crate) const fn slope_q64(&self) -> u128 {
        (self.int as u128) << 64 | self.frac as u128
    }

    /// `self`'s slope relative to `other`'s, in parts per million
    /// (positive: `self` runs faster), saturating; `None` if `other`'s
    /// slope is zero.
    /// Interrupt-safe: yes.
    pub fn slope_ppm_from(&self, other: &TscMap) -> Option<i64> {
        let (a, b) = (self.slope_q64(), other.slope_q64());
        if b == 0 {
            return None;
        }
        // (a - b) / b in ppm, without overflow: compare in 64-bit steps.
        let (diff, neg) = if a >= b {
            (a - b, false)
        } else {
            (b - a, true)
        };
        let ppm = if diff <= u128::MAX / 1_000_000 {
            diff * 1_000_000 / b
        } else {
            (diff / b).saturating_mul(1_000_000)
        };
        let ppm = ppm.min(i64::MAX as u128) as i64;
        Some(if neg { -ppm } else { ppm })
    }

    /// The fraction a read path must be able to represent: the slope is
    /// zero only for a map nobody should read with.
    /// Interrupt-safe: yes.
    pub const fn is_flat(&self) -> bool {
        self.int == 0 && self.frac == 0
    }

    /// The raw `(int, frac, add)` words, for storing the map in atomics
    /// ([`MapSlot`](crate::MapSlot)) or a shared page.
    /// Interrupt-safe: yes.
    pub const fn to_words(&self) -> (u64, u64, u128) {
        (self.int, self.frac, self.add)
    }

    /// A map from the raw words of [`to_words`](Self::to_words).
    /// Interrupt-safe: yes.
    pub const fn from_words(int: u64, frac: u64, add: u128) -> TscMap {
        TscMap { int, frac, add }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Frequency;

    #[test]
    fn through_matches_scale_on_both_sides_of_the_anchor() {
        for hz in [
            1_000_000u64,
            999_999_937,
            1_000_000_000,
            2_300_000_000,
            3_999_999_999,
        ] {
            let s = Scale::new(Frequency::from_hz(hz).unwrap());
            let (t0, n0) = (0x1234_5678_9abc_u64, 77_000_000_000u64);
            let m = TscMap::through(&s, t0, n0);
            for d in [0u64, 1, 2, 1_000, 1 << 20, 1 << 40, 1 << 50] {
                let exp = n0 + s.ticks_to_ns(d);
                let got = m.apply(t0 + d);
                assert!(got == exp || got == exp + 1, "{hz} +{d}: {got} vs {exp}");
            }
            // Below the anchor: within one unit of the exact line.
            let below = m.apply(t0 - 1_000_000);
            let exp = n0 - s.ticks_to_ns(1_000_000);
            assert!(below.abs_diff(exp) <= 1, "{hz}: {below} vs {exp}");
        }
    }

    #[test]
    fn pvclock_map_is_within_a_nanosecond_of_the_abi() {
        // 2.3 GHz as this project's KVM host encodes it.
        let (mul, shift) = (3_734_754_170u32, -1i8);
        let m = TscMap::pvclock(mul, shift, 1_000, 5_000_000_000).unwrap();
        for d in [0u64, 1, 2, 3, 1_000, 2_300_000_000, 1 << 40] {
            let abi = 5_000_000_000 + (((d >> 1) as u128 * mul as u128) >> 32) as u64;
            let got = m.apply(1_000 + d);
            assert!(got >= abi && got - abi <= 1, "+{d}: {got} vs {abi}");
        }
        for shift in -32i8..=32 {
            assert!(TscMap::pvclock(1 << 31, shift, 0, 0).is_some());
        }
        assert_eq!(TscMap::pvclock(0, 0, 0, 0), None);
        assert_eq!(TscMap::pvclock(1, 33, 0, 0), None);
        assert_eq!(TscMap::pvclock(1, -33, 0, 0), None);
        // shift 32: mul·2^64 / 2^32 = mul ns per tick (a 1 Hz-ish counter).
        let slow = TscMap::pvclock(3, 32, 0, 0).unwrap();
        assert_eq!(slow.apply(10), 30);
    }

    #[test]
    fn hyperv_map_is_100_times_the_page() {
        let scale = ((10_000_000u128 << 64) / 2_400_000_000) as u64;
        let m = TscMap::hyperv(scale, -5);
        for tsc in [0u64, 2_400_000_000, 1 << 45] {
            let page = (((tsc as u128 * scale as u128) >> 64) as i128 - 5) * 100;
            let got = m.apply(tsc) as i128;
            assert!(
                (0..100).contains(&(got - page)) || tsc == 0,
                "{tsc}: {got} vs {page}"
            );
        }
    }

    #[test]
    fn offsets_slopes_and_words() {
        let s = Scale::new(Frequency::from_hz(1_000_000_000).unwrap());
        let m = TscMap::through(&s, 100, 200);
        assert_eq!(m.offset_by(5).apply(100), 205);
        assert_eq!(m.rebased(0, 0).apply(100), 100);
        let fast = TscMap::through(&Scale::new(Frequency::from_hz(999_000_000).unwrap()), 0, 0);
        // A 999 MHz counter's tick is 1001 ppm longer than a 1 GHz one.
        assert_eq!(fast.slope_ppm_from(&m), Some(1001));
        assert_eq!(m.slope_ppm_from(&TscMap::from_words(0, 0, 0)), None);
        let (i, f, a) = m.to_words();
        assert_eq!(TscMap::from_words(i, f, a), m);
        assert!(TscMap::from_words(0, 0, 7).is_flat());
    }
}
