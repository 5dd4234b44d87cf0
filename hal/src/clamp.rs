//! Keeping a source monotonic across CPUs.

use crate::cell::{Cell64, DefaultCell};
#[cfg(test)]
use core::sync::atomic::{AtomicU64, Ordering};

/// Global "never earlier than the last value returned" filter.
///
/// For sources whose per-CPU readings may disagree slightly (kvmclock without
/// a trusted stable bit, Linux's `pvclock_clocksource_read` clamp): every
/// reading passes through [`clamp`](Self::clamp), which returns the larger of
/// the reading and the largest value any CPU has been given so far.
///
/// A reading that is not larger than the last value costs one load and no
/// write (only a new maximum is published, with one compare-exchange), and
/// nothing else is shared: no counter is bumped per clamped reading, so
/// readers on several CPUs contend only for the values themselves.
///
/// After a resume (or any legitimate restart of the timeline) call
/// [`reset`](Self::reset), or readings would stick at the pre-suspend value.
///
/// ```
/// use clockhal_core::MonotonicClamp;
/// let c: MonotonicClamp = MonotonicClamp::new();
/// assert_eq!(c.clamp(100), 100);
/// assert_eq!(c.clamp(90), 100); // CPU 1 was slightly behind
/// assert_eq!(c.last(), 100);
/// c.reset();
/// assert_eq!(c.clamp(90), 90);
/// ```
#[derive(Debug)]
pub struct MonotonicClamp<C: Cell64 = DefaultCell> {
    last: C,
}

impl<C: Cell64> Default for MonotonicClamp<C> {
    fn default() -> Self {
        Self::new()
    }
}

impl<C: Cell64> MonotonicClamp<C> {
    /// A clamp that has returned nothing yet.
    pub fn new() -> Self {
        MonotonicClamp { last: C::new(0) }
    }

    /// `max(value, largest value returned so far)`, recording `value`.
    #[inline]
    pub fn clamp(&self, value: u64) -> u64 {
        self.last
            .update(|last| if value > last { Some(value) } else { None })
    }

    /// The largest value returned so far.
    pub fn last(&self) -> u64 {
        self.last.get()
    }

    /// Forgets the last value (after resume from suspend).
    pub fn reset(&self) {
        self.last.set(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::vec::Vec;

    #[test]
    fn concurrent_results_are_ordered() {
        // Four "CPUs" whose clocks disagree by up to +-50 units; the sequence
        // of values each thread sees must never decrease, and every value must
        // be one some thread actually produced or a later one.
        let clamp: Arc<MonotonicClamp> = Arc::new(MonotonicClamp::new());
        let truth = Arc::new(AtomicU64::new(1000));
        let threads: Vec<_> = (0..4u64)
            .map(|cpu| {
                let (clamp, truth) = (clamp.clone(), truth.clone());
                std::thread::spawn(move || {
                    let mut prev = 0;
                    for i in 0..if cfg!(miri) { 200 } else { 100_000u64 } {
                        let t = truth.fetch_add(1, Ordering::SeqCst);
                        let skew = (cpu * 37 + i) % 101;
                        let v = clamp.clamp(t - 50 + skew);
                        assert!(v >= prev);
                        prev = v;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}
