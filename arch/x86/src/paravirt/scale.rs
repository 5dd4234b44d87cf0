//! The host side of the paravirtual clock ABIs' arithmetic: what a host
//! writes for a given TSC rate (for simulators, benchmarks and tests that
//! play the host). The guest side lives in `clockhal_user::paravirt`.

use super::HV_REFERENCE_HZ;
// For the doc link below.
#[cfg(doc)]
use super::hv_sequence_valid;

/// The pvclock `(mul, shift)` a KVM host publishes for a TSC of `tsc_hz` Hz
/// (Linux's `kvm_get_time_scale(NSEC_PER_SEC, tsc_hz)`): the TSC delta is
/// pre-shifted so that `mul` keeps 31–32 significant bits. `None` for 0 Hz
/// and above ~8.6·10^18 Hz, where the shift would leave the `-32..=32` a
/// guest accepts. For simulators, benchmarks and tests that play the host.
/// Interrupt-safe: yes.
///
/// ```
/// use clockhal_x86::paravirt::pvclock_time_scale;
/// // What this project's KVM host writes for its 2.3 GHz TSC.
/// assert_eq!(pvclock_time_scale(2_300_000_000), Some((3_734_754_170, -1)));
/// assert_eq!(pvclock_time_scale(u64::MAX), None);
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
    // Beyond ~8.6e18 Hz the shift would leave the range a guest accepts.
    if shift < -32 {
        return None;
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
/// Interrupt-safe: yes.
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
/// `hv_sequence_valid` accepts.
/// Interrupt-safe: yes.
pub const fn hv_next_sequence(prev: u32) -> u32 {
    match prev.wrapping_add(1) {
        0 | u32::MAX => 1,
        s => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paravirt::{hv_scale_tsc, hv_tsc_hz_from_scale};

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
