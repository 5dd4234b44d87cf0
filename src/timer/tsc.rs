//! A clock deadline as a TSC value, through the calling CPU's current map
//! of the clock ([`Clock::stamp_converter`]): the least TSC value whose
//! mapped instant is at or after the deadline, so a TSC-deadline timer
//! and `now()` agree and the timer is never early by the conversion.

use crate::{Clock, Stamp};
use clockhal_x86::Hardware;

/// The clock instant (ns) a TSC value maps to through the calling CPU's
/// current map; `None` without one or beyond its window.
pub(super) fn instant_of<H: Hardware + Clone>(clock: &Clock<H>, tsc: u64) -> Option<u64> {
    let conv = clock.converter(false)?;
    conv.instant(Stamp::from_tsc(tsc)).map(|i| i.as_nanos())
}

/// The least TSC value at or after the current one whose instant on the
/// clock (through the current map) is `>= deadline_ns`; the current TSC
/// when the deadline has passed; the farthest value the map covers when
/// the deadline lies beyond it (a piece: the interrupt re-arms). `None`
/// when the clock has no TSC map on this CPU now.
///
/// Pure arithmetic on a map validated once: a gallop and a bisection,
/// at most 128 multiplies, no lock.
pub(super) fn tsc_for<H: Hardware + Clone>(clock: &Clock<H>, deadline_ns: u64) -> Option<u64> {
    let conv = clock.converter(false)?;
    let now = clock.stamp().tsc();
    let at = |t: u64| conv.instant(Stamp::from_tsc(t)).map(|i| i.as_nanos());
    if at(now)? >= deadline_ns {
        return Some(now);
    }
    // Invariant: at(lo) < deadline; find hi with at(hi) >= deadline.
    let mut lo = now;
    let mut step = 1u64;
    let hi = loop {
        let Some(hi) = now.checked_add(step) else {
            return Some(lo);
        };
        match at(hi) {
            Some(v) if v >= deadline_ns => break hi,
            Some(_) => lo = hi,
            None => return Some(lo), // beyond the map's window
        }
        let Some(next) = step.checked_mul(2) else {
            return Some(lo);
        };
        step = next;
    };
    let mut hi = hi;
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match at(mid) {
            Some(v) if v >= deadline_ns => hi = mid,
            _ => lo = mid,
        }
    }
    Some(hi)
}
