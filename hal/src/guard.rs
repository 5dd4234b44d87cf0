//! Never-backwards filtering for paravirtual clocks.

use core::sync::atomic::{
    AtomicU64,
    Ordering::{AcqRel, Acquire, Relaxed},
};

/// Keeps a paravirtual clock's readings from going backwards, across CPUs
/// and across switches between its paths, without a shared write on the
/// fast path.
///
/// A paravirtual clock has a **fast path** whose cross-CPU order the host
/// vouches for (pvclock with a trusted stable bit, a valid Hyper-V reference
/// TSC page) and **slow paths** that need a global clamp (pvclock without
/// the stable bit, the Hyper-V MSR fallback) or have no fresh value at all
/// (a seqlock that never settles, an invalid area): [`hold`](Self::hold).
///
/// - [`slow`](Self::slow) is the classic clamp (Linux's
///   `pvclock_clocksource_read` last-value cmpxchg, clockhal-core's
///   `MonotonicClamp`): it returns `max(reading, every value returned so far)`.
/// - [`fast`](Self::fast) only *loads* the clamp (a cache line nobody writes
///   while the fast path is in use) and, at most once per `slack` units of
///   time, records its reading in a separate high-water `mark`. Invariant:
///   every value the fast path returned is `<= mark + slack`.
/// - Slow paths therefore start from `mark + slack`: switching from the fast
///   path to a slow one may step time *forward* by up to `slack` (and then
///   hold it until the reading catches up), never backwards.
/// - A fast reading more than `slack` below `mark` (the host stepped back) is
///   repaired like a slow one. A host that breaks its promise by *less* than
///   `slack` is believed, like concurrent readings on other CPUs that
///   legitimately land just below the mark: that is the price of not writing
///   shared memory on every read (Linux's vDSO trusts the host fully). Keep
///   `slack` small.
///
/// Units are the clock's own (ns for kvmclock, 100 ns for Hyper-V).
///
/// ```
/// use clockhal_core::MonotonicGuard;
/// let g = MonotonicGuard::new(10);
/// assert_eq!(g.fast(1000), 1000);   // recorded: 1000 > 0 + 10
/// assert_eq!(g.fast(1005), 1005);   // within slack: not recorded
/// assert_eq!(g.slow(990), 1010);    // a slow path starts at mark + slack
/// assert_eq!(g.fast(1007), 1010);   // the fast path never undercuts it
/// assert_eq!(g.hold(), 1010);       // no fresh value: hold
/// assert_eq!(g.fast(500), 1010);    // the host stepped back: repaired
/// assert_eq!(g.raised_count(), 4);
/// ```
#[derive(Debug)]
pub struct MonotonicGuard {
    /// Largest value a slow path returned (or a hold produced).
    last: AtomicU64,
    /// Sparse high-water mark of fast-path values.
    mark: AtomicU64,
    /// Readings raised to an earlier value.
    raised: AtomicU64,
    slack: u64,
}

impl MonotonicGuard {
    /// A guard whose fast path records its value at most once per `slack`
    /// units (a larger slack means fewer shared writes, a larger possible
    /// forward step at a fast-to-slow switch). `slack` 0 records every
    /// increase.
    pub const fn new(slack: u64) -> MonotonicGuard {
        MonotonicGuard {
            last: AtomicU64::new(0),
            mark: AtomicU64::new(0),
            raised: AtomicU64::new(0),
            slack,
        }
    }

    /// The slack this guard was built with.
    pub const fn slack(&self) -> u64 {
        self.slack
    }

    /// Filters a reading from the fast path: returned as is unless it is
    /// more than `slack` below the recorded mark (the host stepped back, or
    /// this read took its TSC long before it got here, e.g. preempted) or
    /// below the slow paths' last value (the fast path resumes behind a slow
    /// one); then [`slow`](Self::slow) repairs it. Readings up to `slack`
    /// below the mark are normal: a concurrent read on another CPU recorded
    /// the mark after this read took its TSC.
    #[inline(always)]
    pub fn fast(&self, value: u64) -> u64 {
        match self.try_fast(value) {
            Some(v) => v,
            None => self.slow(value),
        }
    }

    /// [`fast`](Self::fast) without the repair: `None` when the reading
    /// would need one, so the caller can first take a fresh reading (a
    /// preempted reader then gets a current value instead of a repaired
    /// one) and pass that to [`fast`](Self::fast).
    #[inline(always)]
    pub fn try_fast(&self, value: u64) -> Option<u64> {
        // Bounds are computed from the loads, off the reading's critical
        // path: the reading itself only meets three compares.
        let mark = self.mark.load(Acquire);
        let low = mark.saturating_sub(self.slack).max(self.last.load(Acquire));
        if value < low {
            return None;
        }
        if value > mark.saturating_add(self.slack) {
            self.mark.fetch_max(value, AcqRel);
        }
        Some(value)
    }

    /// Filters a reading from a slow path: the result is at least every
    /// value returned so far by either path.
    pub fn slow(&self, value: u64) -> u64 {
        let v = value.max(self.fast_ceiling());
        let prev = self.last.fetch_max(v, AcqRel);
        let out = prev.max(v);
        if out != value {
            self.raised.fetch_add(1, Relaxed);
        }
        out
    }

    /// The value to return when no fresh reading is available: the smallest
    /// value that is not earlier than anything returned so far.
    pub fn hold(&self) -> u64 {
        let v = self.fast_ceiling();
        let prev = self.last.fetch_max(v, AcqRel);
        self.raised.fetch_add(1, Relaxed);
        prev.max(v)
    }

    /// Upper bound of every value the fast path has returned.
    fn fast_ceiling(&self) -> u64 {
        match self.mark.load(Acquire) {
            0 => 0,
            m => m.saturating_add(self.slack),
        }
    }

    /// How many readings were raised (held or clamped) so far: frequent
    /// raising means the host's clocks disagree or a path keeps failing.
    pub fn raised_count(&self) -> u64 {
        self.raised.load(Relaxed)
    }

    /// Forgets everything (only when the timeline legitimately restarted,
    /// e.g. after restoring a saved guest whose clock went back).
    pub fn reset(&self) {
        self.last.store(0, Relaxed);
        self.mark.store(0, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::sync::Arc;
    use std::vec::Vec;

    #[test]
    fn fast_then_slow_never_goes_back() {
        let g = MonotonicGuard::new(100);
        let mut prev = 0;
        for i in 0..10_000u64 {
            // Fast path runs ahead of the slow path by up to 80 units.
            let v = if i % 7 == 0 {
                g.slow(i * 10)
            } else {
                g.fast(i * 10 + 80)
            };
            assert!(v >= prev, "step back at {i}: {v} < {prev}");
            prev = v;
        }
    }

    #[test]
    fn concurrent_mixed_paths_are_ordered() {
        let g = Arc::new(MonotonicGuard::new(50));
        let truth = Arc::new(AtomicU64::new(1_000));
        let threads: Vec<_> = (0..4u64)
            .map(|cpu| {
                let (g, truth) = (g.clone(), truth.clone());
                std::thread::spawn(move || {
                    let mut prev = 0;
                    for i in 0..50_000u64 {
                        let t = truth.fetch_add(1, AcqRel);
                        // CPU 0 and 1 on the fast path (ahead by 40), the
                        // others slow (behind by up to 30).
                        let v = if cpu < 2 && i % 5 != 0 {
                            g.fast(t + 40)
                        } else {
                            g.slow(t - (i % 31))
                        };
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
