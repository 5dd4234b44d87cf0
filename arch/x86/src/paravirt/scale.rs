//! The arithmetic of the paravirtual clock ABIs: pure functions of the
//! values a hypervisor publishes, total over every input (hostile values
//! give a defined result, never a panic or an overflow).

/// Nanoseconds in `delta` TSC ticks for a pvclock `(mul, shift)` pair:
/// `((delta << shift, or >> -shift) * mul) >> 32`.
///
/// The right shift truncates first, exactly as the ABI (and the host's own
/// computation) does. The left shift is computed without the silent 64-bit
/// overflow of a C implementation: the result is exact, and saturates at
/// `u64::MAX` when it does not fit. Defined for every `shift` in `i8`.
///
/// ```
/// use clockhal_x86::paravirt::pvclock_scale_delta;
/// // 2.6 GHz as KVM encodes it: shift -1, mul = 2^32 * 1e9 / 1.3e9.
/// let mul = ((1_000_000_000u64 << 32) / 1_300_000_000) as u32;
/// assert_eq!(pvclock_scale_delta(2_600_000_000, mul, -1), 999_999_999);
/// assert_eq!(pvclock_scale_delta(u64::MAX, u32::MAX, 127), u64::MAX);
/// assert_eq!(pvclock_scale_delta(u64::MAX, u32::MAX, -128), 0);
/// ```
#[inline(always)]
pub const fn pvclock_scale_delta(delta: u64, mul: u32, shift: i8) -> u64 {
    if shift <= 0 {
        // The common case (TSCs above ~1 GHz): the product is below 2^96,
        // so `>> 32` always fits and needs no saturation check.
        let s = shift.unsigned_abs() as u32;
        let d = if s >= 64 { 0 } else { delta >> s };
        return ((d as u128 * mul as u128) >> 32) as u64;
    }
    // At most 2^96 before the left shift.
    let p = delta as u128 * mul as u128;
    let up = shift as u32;
    let r = if up <= 32 {
        p >> (32 - up)
    } else {
        let l = up - 32;
        if p != 0 && p.leading_zeros() < l + 64 {
            // p << l would need more than 64 bits: saturate.
            return u64::MAX;
        }
        p << l
    };
    if r > u64::MAX as u128 {
        u64::MAX
    } else {
        r as u64
    }
}

/// Hyper-V reference time runs at 10 MHz (100 ns units).
pub const HV_REFERENCE_HZ: u64 = 10_000_000;

/// Hyper-V reference time from a TSC value and the reference TSC page's
/// `(scale, offset)`: `((tsc * scale) >> 64) + offset` in 100 ns units,
/// wrapping as the TLFS arithmetic does (never overflows or panics).
///
/// ```
/// use clockhal_x86::paravirt::hv_scale_tsc;
/// // 2.4 GHz TSC: scale = 2^64 * 10^7 / 2.4e9.
/// let scale = ((10_000_000u128 << 64) / 2_400_000_000) as u64;
/// assert_eq!(hv_scale_tsc(2_400_000_000, scale, 5), 9_999_999 + 5);
/// ```
#[inline(always)]
pub const fn hv_scale_tsc(tsc: u64, scale: u64, offset: i64) -> u64 {
    (((tsc as u128 * scale as u128) >> 64) as u64).wrapping_add(offset as u64)
}

/// Whether a reference TSC page `sequence` marks the page valid: neither 0
/// (current TLFS and Linux) nor `0xFFFF_FFFF` (older TLFS text).
#[inline(always)]
pub const fn hv_sequence_valid(sequence: u32) -> bool {
    sequence != 0 && sequence != u32::MAX
}

/// The TSC rate a reference TSC page `scale` implies, as an exact fraction
/// `(numerator, denominator)` in Hz: `10^7 * 2^64 / scale`. `None` for a
/// zero scale.
pub const fn hv_tsc_hz_from_scale(scale: u64) -> Option<(u128, u128)> {
    if scale == 0 {
        return None;
    }
    Some(((HV_REFERENCE_HZ as u128) << 64, scale as u128))
}

/// The pvclock `(mul, shift)` a KVM host publishes for a TSC of `tsc_hz` Hz
/// (Linux's `kvm_get_time_scale(NSEC_PER_SEC, tsc_hz)`): the TSC delta is
/// pre-shifted so that `mul` keeps 31–32 significant bits. `None` for 0 Hz.
/// For simulators, benchmarks and tests that play the host.
///
/// ```
/// use clockhal_x86::paravirt::pvclock_time_scale;
/// // What this project's KVM host writes for its 2.3 GHz TSC.
/// assert_eq!(pvclock_time_scale(2_300_000_000), Some((3_734_754_170, -1)));
/// ```
pub const fn pvclock_time_scale(tsc_hz: u64) -> Option<(u32, i8)> {
    if tsc_hz == 0 {
        return None;
    }
    let scaled: u64 = 1_000_000_000;
    let mut tps64 = tsc_hz;
    let mut shift: i8 = 0;
    while tps64 > scaled * 2 || tps64 & 0xffff_ffff_0000_0000 != 0 {
        tps64 >>= 1;
        shift -= 1;
    }
    let mut tps32 = tps64 as u32;
    let mut scaled64 = scaled;
    while tps32 as u64 <= scaled64 || scaled64 & 0xffff_ffff_0000_0000 != 0 {
        if scaled64 & 0xffff_ffff_0000_0000 != 0 || tps32 & 0x8000_0000 != 0 {
            scaled64 >>= 1;
        } else {
            tps32 <<= 1;
            shift += 1;
        }
    }
    Some((((scaled64 << 32) / tps32 as u64) as u32, shift))
}

/// The reference TSC page `scale` a Hyper-V host publishes for a TSC of
/// `tsc_hz` Hz: `floor((10^7 << 64) / tsc_hz)`, so that `(tsc * scale) >> 64`
/// counts 100 ns units (the exact count or one below). At exactly 10 MHz the
/// exact scale, 2^64, does not fit: it saturates to `u64::MAX` (one unit of
/// 2^-64 low, the same floor-or-one-below accuracy). `None` below 10 MHz
/// (the scale would exceed 2^64). Never `Some(0)`, which a page reader takes
/// as "page unusable".
///
/// ```
/// use clockhal_x86::paravirt::{hv_reference_scale, hv_scale_tsc};
/// let s = hv_reference_scale(2_300_000_000).unwrap();
/// assert!((9_999_999..=10_000_000).contains(&hv_scale_tsc(2_300_000_000, s, 0)));
/// assert_eq!(hv_reference_scale(10_000_000), Some(u64::MAX));
/// assert_eq!(hv_reference_scale(1_000_000), None);
/// ```
pub const fn hv_reference_scale(tsc_hz: u64) -> Option<u64> {
    if tsc_hz < HV_REFERENCE_HZ {
        return None;
    }
    let scale = ((HV_REFERENCE_HZ as u128) << 64) / tsc_hz as u128;
    Some(if scale > u64::MAX as u128 {
        u64::MAX
    } else {
        scale as u64
    })
}

/// The sequence a Hyper-V host writes after `prev`: the next value that
/// [`hv_sequence_valid`] accepts.
pub const fn hv_next_sequence(prev: u32) -> u32 {
    match prev.wrapping_add(1) {
        0 | u32::MAX => 1,
        s => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference: the mathematically exact value, in a wide integer
    /// emulated with (hi, lo) u128 pairs where needed.
    fn reference(delta: u64, mul: u32, shift: i8) -> u64 {
        let d: u128 = if shift < 0 {
            let s = -(shift as i32);
            if s >= 64 {
                0
            } else {
                (delta >> s) as u128
            }
        } else {
            delta as u128
        };
        let p = d * mul as u128;
        if shift <= 0 {
            return (p >> 32) as u64;
        }
        // p * 2^shift / 2^32; compare bit lengths to detect overflow.
        let bits = 128 - p.leading_zeros() as i32;
        if p == 0 {
            return 0;
        }
        if bits + shift as i32 - 32 > 64 {
            return u64::MAX;
        }
        if shift as i32 >= 32 {
            (p << (shift as i32 - 32)) as u64
        } else {
            (p >> (32 - shift as i32)) as u64
        }
    }

    #[test]
    fn every_shift_matches_reference() {
        let deltas = [
            0u64,
            1,
            2,
            1000,
            2_600_000_000,
            1 << 32,
            (1 << 40) + 12345,
            u64::MAX >> 1,
            u64::MAX,
        ];
        let muls = [0u32, 1, 3, 1 << 31, 0xC4EC_4EC4, u32::MAX];
        for shift in i8::MIN..=i8::MAX {
            for &d in &deltas {
                for &m in &muls {
                    assert_eq!(
                        pvclock_scale_delta(d, m, shift),
                        reference(d, m, shift),
                        "d={d} m={m} s={shift}"
                    );
                }
            }
        }
    }

    #[test]
    fn hyperv_math_is_total() {
        for (t, s, o) in [
            (u64::MAX, u64::MAX, i64::MIN),
            (0, 0, i64::MAX),
            (u64::MAX, 1, -1),
        ] {
            let _ = hv_scale_tsc(t, s, o);
        }
        assert_eq!(hv_scale_tsc(10, 0, -1), u64::MAX);
        assert!(!hv_sequence_valid(0) && !hv_sequence_valid(u32::MAX) && hv_sequence_valid(7));
        assert_eq!(hv_tsc_hz_from_scale(0), None);
    }

    #[test]
    fn reference_scale_is_never_zero() {
        // Issue 18: 10 MHz gave Some(0) (2^64 truncated), "page unusable".
        assert_eq!(hv_reference_scale(HV_REFERENCE_HZ), Some(u64::MAX));
        assert_eq!(hv_reference_scale(HV_REFERENCE_HZ - 1), None);
        for hz in [
            HV_REFERENCE_HZ,
            HV_REFERENCE_HZ + 1,
            2_300_000_000,
            u64::MAX,
        ] {
            let s = hv_reference_scale(hz).unwrap();
            assert_ne!(s, 0, "{hz}");
            // One second of ticks is 10^7 units, or one below.
            let units = hv_scale_tsc(hz, s, 0);
            assert!((9_999_999..=10_000_000).contains(&units), "{hz}: {units}");
            let (n, d) = hv_tsc_hz_from_scale(s).unwrap();
            // The scale is truncated, so the rate it implies is hz or
            // faster by at most one part in `scale`.
            let implied = n / d;
            assert!(implied >= hz as u128, "{hz}");
            assert!(implied - hz as u128 <= hz as u128 / s as u128 + 1, "{hz}");
        }
    }

    #[test]
    fn host_scales_round_trip_through_the_guest_formulas() {
        for hz in [
            1_000u64,
            3_579_545,
            1_000_000_000,
            2_300_000_000,
            3_999_999_999,
            1 << 40,
        ] {
            let (mul, shift) = pvclock_time_scale(hz).unwrap();
            assert!(mul >= 1 << 31, "{hz}: mul {mul} lost precision");
            let (n, d) = crate::paravirt::pvclock_tsc_hz_ratio(mul, shift).unwrap();
            let back = n as f64 / d as f64;
            assert!((back / hz as f64 - 1.0).abs() < 1e-9, "{hz} -> {back}");
        }
        assert_eq!(pvclock_time_scale(0), None);
        let s = hv_reference_scale(2_300_000_000).unwrap();
        let units = ((2_300_000_000u128 * s as u128) >> 64) as u64;
        assert!((9_999_999..=10_000_000).contains(&units), "{units}");
        assert_eq!(hv_reference_scale(1_000_000), None);
        assert_eq!(hv_next_sequence(0), 1);
        assert_eq!(hv_next_sequence(7), 8);
        assert_eq!(hv_next_sequence(u32::MAX - 1), 1);
        assert_eq!(hv_next_sequence(u32::MAX), 1);
    }
}
