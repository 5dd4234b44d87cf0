//! Small statistics and unit conversions shared by the checks.

use clockhal_core::{Frequency, Scale};

/// Median of `v` (sorts it). Mean of the two middle values for even lengths;
/// 0 for an empty slice.
pub(crate) fn median_i64(v: &mut [i64]) -> i64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        ((v[n / 2 - 1] as i128 + v[n / 2] as i128) / 2) as i64
    }
}

/// Median of `v` (sorts it), lower middle for even lengths; 0 when empty.
pub(crate) fn median_u64(v: &mut [u64]) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[(v.len() - 1) / 2]
}

/// `ticks` at `freq` in nanoseconds, rounded up (so one tick of a GHz+
/// counter is 1 ns, not 0).
pub(crate) fn ticks_to_ns_ceil(freq: Frequency, ticks: u64) -> u64 {
    let num = freq.numerator() as u128;
    let den = freq.denominator() as u128;
    // Saturates: ticks · 10^9 · den can exceed u128 for a wide denominator.
    let ns = (ticks as u128)
        .checked_mul(1_000_000_000 * den)
        .map_or(u128::MAX, |p| p.div_ceil(num));
    ns.min(u64::MAX as u128) as u64
}

/// Signed ticks from `a` to `b` in ns (negative when the counter went back).
pub(crate) fn signed_elapsed_ns(scale: &Scale, a: u64, b: u64) -> i128 {
    if b >= a {
        scale.ticks_to_ns(b - a) as i128
    } else {
        -(scale.ticks_to_ns(a - b) as i128)
    }
}

/// `(measured - reference) / reference` in ppm, saturating to `i64`;
/// `i64::MAX` when the reference interval is empty (no measurement).
pub(crate) fn error_ppm(measured_ns: i128, reference_ns: u64) -> i64 {
    if reference_ns == 0 {
        return i64::MAX;
    }
    let v = (measured_ns - reference_ns as i128) * 1_000_000 / reference_ns as i128;
    v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

/// `hz * (1 + ppm / 10^6)`, rounded down, saturating.
pub(crate) fn scale_by_ppm(hz: u64, ppm: i64) -> u64 {
    let v = hz as i128 * (1_000_000 + ppm as i128) / 1_000_000;
    v.clamp(0, u64::MAX as i128) as u64
}

/// Whether `|v| <= tol`.
pub(crate) fn within(v: i64, tol: u64) -> bool {
    v.unsigned_abs() <= tol
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median_i64(&mut [5, -3, 9, 1, 2]), 2);
        assert_eq!(median_i64(&mut [4, 1]), 2);
        assert_eq!(median_i64(&mut []), 0);
        assert_eq!(median_u64(&mut [7, 3, 5, 1]), 3);
    }

    #[test]
    fn conversions() {
        let ghz = Frequency::from_hz(2_600_000_000).unwrap();
        assert_eq!(ticks_to_ns_ceil(ghz, 1), 1);
        assert_eq!(
            ticks_to_ns_ceil(Frequency::from_hz(3_579_545).unwrap(), 1),
            280
        );
        assert_eq!(error_ppm(1_020_000, 1_000_000), 20_000);
        assert_eq!(error_ppm(-5, 1_000_000), -1_000_005);
        assert_eq!(error_ppm(1, 0), i64::MAX);
        assert_eq!(scale_by_ppm(1_000_000, 250), 1_000_250);
        let s = Scale::new(Frequency::from_hz(1_000_000_000).unwrap());
        assert_eq!(signed_elapsed_ns(&s, 10, 4), -6);
    }
}
