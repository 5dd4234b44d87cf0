//! Hypervisor pages written once from user space.
//!
//! The paravirtual layouts in `clockhal_x86::paravirt` are plain atomics, so
//! a host tool can fill one itself — no MSR, no hypervisor — and time the
//! backends' read paths against it. Written once with the real TSC rate and
//! the stable flag, such a page is exactly what a hypervisor with a stable
//! master clock serves between its (rare) updates.

use clockhal_x86::paravirt::{HvReferenceTscPage, PvclockVcpuTimeInfo};
use core::sync::atomic::Ordering::{Relaxed, Release};

/// The pvclock `(mul, shift)` for a TSC of `hz` Hz: the largest-precision
/// multiplier below 2^32, with `ns = ((d << shift or >> -shift) * mul) >> 32`.
/// `None` for rates outside 1 kHz ..= 2^40 Hz.
pub fn pvclock_scale(hz: u64) -> Option<(u32, i8)> {
    if !(1_000..=1 << 40).contains(&hz) {
        return None;
    }
    // ns per tick in 32.32 fixed point is (10^9 << 32) / hz; each shift step
    // halves it. Take the smallest shift that brings it below 2^32.
    let q32 = 1_000_000_000u128 << 32;
    (-32i8..=32).find_map(|shift| {
        let mul = if shift < 0 {
            (q32 << -shift) / hz as u128
        } else {
            (q32 >> shift) / hz as u128
        };
        (mul < 1 << 32 && mul != 0).then_some((mul as u32, shift))
    })
}

/// Writes `area` as a host with a stable master clock would, once:
/// `tsc_timestamp = tsc_now`, `system_time`, the scale, `flags`, and an
/// even version (odd while writing, as the ABI requires).
pub fn write_pvclock_area(
    area: &PvclockVcpuTimeInfo,
    tsc_now: u64,
    system_time: u64,
    mul: u32,
    shift: i8,
    flags: u8,
) {
    let odd = area.version.load(Relaxed) | 1;
    area.version.store(odd, Release);
    area.tsc_timestamp.store(tsc_now, Release);
    area.system_time.store(system_time, Release);
    area.tsc_to_system_mul.store(mul, Release);
    area.tsc_shift.store(shift, Release);
    area.flags.store(flags, Release);
    area.version.store(odd.wrapping_add(1), Release);
}

/// The Hyper-V reference-page scale for a TSC of `hz` Hz:
/// `(10^7 << 64) / hz`, so that `(tsc * scale) >> 64` counts 100 ns units.
/// `None` below 10 MHz (the scale would not fit 64 bits).
pub fn hv_scale(hz: u64) -> Option<u64> {
    if hz < 10_000_000 {
        return None;
    }
    u64::try_from((10_000_000u128 << 64) / hz as u128).ok()
}

/// Writes a Hyper-V reference TSC page once: `scale`, `offset`, and a
/// valid sequence (invalid, 0, while writing).
pub fn write_hv_page(page: &HvReferenceTscPage, scale: u64, offset: i64) {
    let seq = page.sequence.load(Relaxed);
    page.sequence.store(0, Release);
    page.scale.store(scale, Release);
    page.offset.store(offset, Release);
    page.sequence.store(
        if seq == 0 || seq >= u32::MAX - 1 {
            1
        } else {
            seq + 1
        },
        Release,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use clockhal_x86::paravirt::pvclock_tsc_hz_ratio;

    #[test]
    fn scale_round_trips_through_the_page_rate() {
        for hz in [
            1_000u64,
            3_579_545,
            1_000_000_000,
            2_300_000_000,
            3_999_999_999,
            1 << 40,
        ] {
            let (mul, shift) = pvclock_scale(hz).unwrap();
            assert!(mul >= 1 << 31, "{hz}: mul {mul} lost precision");
            let (n, d) = pvclock_tsc_hz_ratio(mul, shift).unwrap();
            let back = n as f64 / d as f64;
            assert!((back / hz as f64 - 1.0).abs() < 1e-9, "{hz} -> {back}");
        }
        // This machine's host wrote mul 3734754170, shift -1 for 2.3 GHz.
        assert_eq!(pvclock_scale(2_300_000_000), Some((3_734_754_170, -1)));
        assert_eq!(pvclock_scale(0), None);
    }

    #[test]
    fn written_pages_decode_with_the_backends() {
        let area = PvclockVcpuTimeInfo::new();
        let (mul, shift) = pvclock_scale(2_000_000_000).unwrap();
        write_pvclock_area(&area, 1_000, 5_000, mul, shift, 1);
        write_pvclock_area(&area, 1_000, 5_000, mul, shift, 1);
        assert_eq!(area.version.load(Relaxed), 4);
        let t = clockhal_kvmclock::read_area(&area, || 3_000).unwrap();
        assert_eq!((t.ns, t.flags), (5_000 + 1_000, 1));

        let page = HvReferenceTscPage::new();
        write_hv_page(&page, hv_scale(2_000_000_000).unwrap(), 7);
        assert_eq!(page.sequence.load(Relaxed), 1);
        assert_eq!(
            clockhal_hyperv::read_reference_page(&page, || 2_000_000_000),
            Ok(10_000_000 - 1 + 7)
        );
    }

    #[test]
    fn hv_scale_counts_100ns_units() {
        let s = hv_scale(2_300_000_000).unwrap();
        let units = ((2_300_000_000u128 * s as u128) >> 64) as u64;
        assert!((9_999_999..=10_000_000).contains(&units), "{units}");
        assert_eq!(hv_scale(1_000_000), None);
    }
}
