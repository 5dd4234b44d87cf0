//! Timing one clock's reading by another: the bracketed sample.

/// A reading of an *inner* clock taken between two readings of an *outer*
/// one: the inner reading happened somewhere in `before..=after` on the
/// outer clock's timeline.
///
/// Every comparison of two clocks in clockhal is made of these: the
/// watchdog (reference, source, reference), the probe's self-check (pacer,
/// candidate, pacer), the TSC calibration (TSC, reference, TSC) and the
/// conformance suite. The window's width is the comparison's timing
/// uncertainty: a slow emulated device or a descheduled vCPU widens it, and
/// the [`tightest`](Self::tightest) of a few tries keeps it small.
///
/// ```
/// use clockhal_core::Bracketed;
/// let mut outer = 100u64;
/// let b = Bracketed::take(|| { outer += 10; outer }, || 7);
/// assert_eq!((b.before, b.inner, b.after), (110, 7, 120));
/// assert_eq!((b.width(), b.mid()), (Some(10), 115));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Bracketed {
    /// Outer clock, before.
    pub before: u64,
    /// Inner clock.
    pub inner: u64,
    /// Outer clock, after.
    pub after: u64,
}

impl Bracketed {
    /// Reads `outer`, `inner`, `outer`, in that order.
    /// Interrupt-safe: yes.
    #[inline]
    pub fn take(mut outer: impl FnMut() -> u64, inner: impl FnOnce() -> u64) -> Bracketed {
        let before = outer();
        let inner = inner();
        let after = outer();
        Bracketed {
            before,
            inner,
            after,
        }
    }

    /// The narrowest of up to `tries` (at least one) brackets, stopping at
    /// the first no wider than `good_enough` outer ticks. A bracket whose
    /// outer clock went backwards is discarded. `None` if every try was
    /// discarded.
    /// Interrupt-safe: yes.
    pub fn tightest(
        tries: u32,
        good_enough: u64,
        mut outer: impl FnMut() -> u64,
        mut inner: impl FnMut() -> u64,
    ) -> Option<Bracketed> {
        let mut best: Option<Bracketed> = None;
        for _ in 0..tries.max(1) {
            let b = Bracketed::take(&mut outer, &mut inner);
            let Some(w) = b.width() else { continue };
            if best.is_none_or(|x| x.width().is_some_and(|bw| w < bw)) {
                best = Some(b);
            }
            if w <= good_enough {
                break;
            }
        }
        best
    }

    /// `after - before`, or `None` if the outer clock went backwards.
    /// Interrupt-safe: yes.
    pub const fn width(&self) -> Option<u64> {
        self.after.checked_sub(self.before)
    }

    /// The window's midpoint (rounded down, no overflow): where the inner
    /// reading is placed on the outer timeline.
    /// Interrupt-safe: yes.
    pub const fn mid(&self) -> u64 {
        ((self.before as u128 + self.after as u128) / 2) as u64
    }
}

/// `num / den` in parts per million, truncated toward zero and saturating
/// (`den == 0` counts as 1): how clockhal states a rate difference.
/// Interrupt-safe: yes.
///
/// ```
/// assert_eq!(clockhal_core::ppm(-3, 1_000), -3_000);
/// assert_eq!(clockhal_core::ppm(1, 0), 1_000_000);
/// ```
pub const fn ppm(num: i128, den: u64) -> i64 {
    let den = if den == 0 { 1 } else { den };
    let v = num.saturating_mul(1_000_000) / den as i128;
    if v > i64::MAX as i128 {
        i64::MAX
    } else if v < -(i64::MAX as i128) {
        -i64::MAX
    } else {
        v as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn tightest_keeps_the_narrowest_and_stops_early() {
        // Widths 50, 30, 40, 5, 80: stops at the 5.
        let widths = [50u64, 30, 40, 5, 80];
        let (t, i) = (Cell::new(0u64), Cell::new(0usize));
        let outer = || {
            let now = t.get();
            // Each bracket's second outer read adds its width.
            let k = i.get();
            if k % 2 == 1 {
                t.set(now + widths[k / 2]);
            }
            i.set(k + 1);
            t.get()
        };
        let b = Bracketed::tightest(5, 10, outer, || 0).unwrap();
        assert_eq!(b.width(), Some(5));
        assert_eq!(i.get(), 8, "stopped after the fourth bracket");
        let none = Bracketed::tightest(3, 0, || 5, || 0).unwrap();
        assert_eq!(none.width(), Some(0));
    }

    #[test]
    fn backwards_outer_is_discarded() {
        let v = Cell::new(100u64);
        let b = Bracketed::tightest(
            3,
            0,
            || {
                v.set(v.get() - 1);
                v.get()
            },
            || 1,
        );
        assert_eq!(b, None);
        let b = Bracketed {
            before: 10,
            inner: 0,
            after: 5,
        };
        assert_eq!(b.width(), None);
        assert_eq!(
            Bracketed {
                before: u64::MAX,
                inner: 0,
                after: u64::MAX
            }
            .mid(),
            u64::MAX
        );
    }

    #[test]
    fn ppm_saturates_and_truncates() {
        assert_eq!(ppm(1, 3), 333_333);
        assert_eq!(ppm(-1, 3), -333_333);
        assert_eq!(ppm(i128::MAX, 1), i64::MAX);
        assert_eq!(ppm(i128::MIN, 1), -i64::MAX);
    }
}
