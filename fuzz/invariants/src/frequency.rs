//! `Frequency` construction and `Scale` conversions.
//!
//! - `from_ratio(n, d)`: `Zero` exactly when a part is 0; `OutOfRange`
//!   exactly when the exact `n / d` lies outside 1 ..= 2^40 Hz; otherwise a
//!   reduced fraction inside the range, equal to `n / d` when the reduced
//!   fraction fits two u64 and within 2^-64 relative of it always.
//! - `from_hz`, `from_period_fs`: the same, for `hz / 1` and `10^15 / fs`.
//! - `Scale`: each direction is the exact floor or one below (saturating at
//!   `u64::MAX`), the `_exact` variants the floor whenever `t * num` and
//!   `(floor + 1) * den` fit 128 bits, all monotonic in `t`.

use crate::big::{big, within_rel};
use arbitrary::Arbitrary;
use clockhal_core::{Frequency, FrequencyError, Scale};
use num_bigint::BigUint;
use std::vec::Vec;

#[derive(Arbitrary, Debug)]
struct Case {
    num: u128,
    den: u128,
    hz: u64,
    fs: u64,
    ticks: Vec<u64>,
}

/// Runs the check on `data`.
pub fn check(data: &[u8]) {
    let Some(case) = crate::decode::<Case>(data) else {
        return;
    };
    let f = check_ratio(case.num, case.den);
    check_ratio(case.hz as u128, 1);
    assert_eq!(
        Frequency::from_hz(case.hz),
        Frequency::from_ratio(case.hz as u128, 1)
    );
    check_ratio(1_000_000_000_000_000, case.fs as u128);
    assert_eq!(
        Frequency::from_period_fs(case.fs),
        Frequency::from_ratio(1_000_000_000_000_000, case.fs as u128)
    );
    if let Some(f) = f {
        check_scale(f, &case.ticks);
    }
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// `from_ratio(n, d)` against the exact rational; the frequency if valid.
fn check_ratio(n: u128, d: u128) -> Option<Frequency> {
    let r = Frequency::from_ratio(n, d);
    if n == 0 || d == 0 {
        assert_eq!(r, Err(FrequencyError::Zero), "{n}/{d}");
        return None;
    }
    let (bn, bd) = (big(n), big(d));
    let in_range = bn >= bd && bn <= &bd << 40u32;
    let f = match r {
        Ok(f) => f,
        Err(e) => {
            assert!(!in_range, "{n}/{d} is in range but was rejected: {e:?}");
            assert_eq!(e, FrequencyError::OutOfRange);
            return None;
        }
    };
    assert!(in_range, "{n}/{d} is out of range but stored as {f:?}");
    let (fnum, fden) = (f.numerator(), f.denominator());
    assert!(fden >= 1 && fnum >= fden, "{f:?} below 1 Hz");
    assert!(fnum as u128 <= (fden as u128) << 40, "{f:?} above 2^40 Hz");
    assert_eq!(gcd(fnum as u128, fden as u128), 1, "{f:?} not reduced");
    let g = gcd(n, d);
    if n / g <= u64::MAX as u128 && d / g <= u64::MAX as u128 {
        assert_eq!(
            (fnum as u128, fden as u128),
            (n / g, d / g),
            "{n}/{d} not exact"
        );
    }
    assert!(
        within_rel(&big(fnum), &big(fden), &bn, &bd, 64),
        "{n}/{d} stored as {f:?}: more than 2^-64 off"
    );
    Some(f)
}

/// One direction `t * num / den` (floor), as the `Scale` computes it.
fn check_direction(t: u64, got: u64, got_exact: u64, num: &BigUint, den: &BigUint) {
    let floor = big(t) * num / den;
    let max = big(u64::MAX);
    if floor >= max {
        assert!(got >= u64::MAX - 1, "t={t}: {got} should saturate");
        assert!(
            got_exact >= u64::MAX - 1,
            "t={t}: {got_exact} should saturate"
        );
        return;
    }
    let floor = u64::try_from(&floor).unwrap();
    assert!(
        got == floor || got + 1 == floor,
        "t={t}: {got}, exact {floor}"
    );
    assert!(
        got_exact == floor || got_exact + 1 == floor,
        "t={t}: exact variant {got_exact}, exact {floor}"
    );
    let fits = |x: BigUint| x.bits() <= 128;
    if fits(big(t) * num) && fits(big(floor) * den + den) {
        assert_eq!(got_exact, floor, "t={t}: exact variant not the floor");
    }
}

fn check_scale(f: Frequency, ticks: &[u64]) {
    let s = Scale::new(f);
    assert_eq!(s.frequency(), f);
    let (num, den) = (big(f.numerator()), big(f.denominator()));
    let ns_per_tick = (big(1_000_000_000u64) * &den, num.clone());
    let ticks_per_ns = (num, big(1_000_000_000u64) * den);
    let mut all: Vec<u64> = ticks.iter().take(16).copied().collect();
    all.extend([0, 1, u64::MAX]);
    for &t in &all {
        check_direction(
            t,
            s.ticks_to_ns(t),
            s.ticks_to_ns_exact(t),
            &ns_per_tick.0,
            &ns_per_tick.1,
        );
        check_direction(
            t,
            s.ns_to_ticks(t),
            s.ns_to_ticks_exact(t),
            &ticks_per_ns.0,
            &ticks_per_ns.1,
        );
    }
    all.sort_unstable();
    for w in all.windows(2) {
        let (a, b) = (w[0], w[1]);
        assert!(
            s.ticks_to_ns(a) <= s.ticks_to_ns(b),
            "ticks_to_ns {a} > {b}"
        );
        assert!(
            s.ns_to_ticks(a) <= s.ns_to_ticks(b),
            "ns_to_ticks {a} > {b}"
        );
        assert!(s.ticks_to_ns_exact(a) <= s.ticks_to_ns_exact(b));
        assert!(s.ns_to_ticks_exact(a) <= s.ns_to_ticks_exact(b));
    }
    for &t in all.iter().filter(|&&t| t < u64::MAX) {
        assert!(
            s.ticks_to_ns(t) <= s.ticks_to_ns(t + 1),
            "ticks_to_ns at {t}"
        );
        assert!(
            s.ns_to_ticks(t) <= s.ns_to_ticks(t + 1),
            "ns_to_ticks at {t}"
        );
    }
}
