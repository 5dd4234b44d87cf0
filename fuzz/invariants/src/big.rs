//! Exact big-integer references.

use num_bigint::BigUint;

/// `x` as a big integer.
pub fn big(x: impl Into<BigUint>) -> BigUint {
    x.into()
}

/// `min(x, u64::MAX)`.
pub fn saturate(x: &BigUint) -> u64 {
    u64::try_from(x).unwrap_or(u64::MAX)
}

/// `x mod 2^64`.
pub fn low64(x: &BigUint) -> u64 {
    x.iter_u64_digits().next().unwrap_or(0)
}

/// Whether the rational `a / b` lies within `2^-bits` relative of `c / d`
/// (`|a*d - c*b| * 2^bits <= c*b`).
pub fn within_rel(a: &BigUint, b: &BigUint, c: &BigUint, d: &BigUint, bits: u32) -> bool {
    let (l, r) = (a * d, c * b);
    let diff = if l > r { &l - &r } else { &r - &l };
    (diff << bits) <= r
}
