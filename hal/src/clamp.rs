//! Keeping a source monotonic across CPUs.

use crate::cell::{Cell64, DefaultCell};
#[cfg(test)]
use core::sync::atomic::{AtomicU64, Ordering};

/// The resolution of a [`MonotonicClamp`]'s results: `2^log2` units of
/// the clamped value (ns for every clockhal clock), from 1 ([`EXACT`](
/// Self::EXACT)) to 2^20.
///
/// A coarser clamp writes its shared cell less often: with readers on
/// several CPUs, a new maximum is published at most once per granule
/// instead of by nearly every read, so the cell's cache line stops
/// bouncing between CPUs. The price is resolution: readings through the
/// clamp advance in steps of the granule. The ordering guarantee does not
/// change: a result is never smaller than any result returned before it,
/// on any CPU.
///
/// ```
/// use clockhal_core::ClampGranule;
/// assert_eq!(ClampGranule::from_log2(8).map(|g| g.units()), Some(256));
/// assert_eq!(ClampGranule::from_log2(21), None);
/// assert_eq!(ClampGranule::EXACT.units(), 1);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClampGranule(u8);

impl ClampGranule {
    /// Every value as it is (resolution 1).
    pub const EXACT: ClampGranule = ClampGranule(0);
    /// The largest granule: 2^20 units (~1 ms of ns).
    pub const MAX_LOG2: u8 = 20;

    /// A granule of `2^log2` units; `None` above [`MAX_LOG2`](Self::MAX_LOG2).
    /// Interrupt-safe: yes.
    pub const fn from_log2(log2: u8) -> Option<ClampGranule> {
        if log2 <= Self::MAX_LOG2 {
            Some(ClampGranule(log2))
        } else {
            None
        }
    }

    /// The granule in units.
    /// Interrupt-safe: yes.
    pub const fn units(self) -> u64 {
        1 << self.0
    }

    /// `value` rounded down to the granule.
    const fn floor(self, value: u64) -> u64 {
        value & !(self.units() - 1)
    }

    /// `value` rounded up to the granule (saturating at the largest
    /// multiple).
    const fn ceil(self, value: u64) -> u64 {
        match value.checked_add(self.units() - 1) {
            Some(v) => self.floor(v),
            None => self.floor(u64::MAX),
        }
    }
}

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
/// readers on several CPUs contend only for the values themselves. Where
/// they read so often that they contend for every value, a coarser
/// [`ClampGranule`] ([`with_granule`](Self::with_granule)) publishes less
/// often.
///
/// After a resume (or any legitimate restart of the timeline) call
/// [`reset`](Self::reset), or readings would stick at the pre-suspend value.
///
/// ```
/// use clockhal_core::{ClampGranule, MonotonicClamp};
/// let c: MonotonicClamp = MonotonicClamp::new();
/// assert_eq!(c.clamp(100), 100);
/// assert_eq!(c.clamp(90), 100); // CPU 1 was slightly behind
/// assert_eq!(c.last(), 100);
/// c.reset();
/// assert_eq!(c.clamp(90), 90);
///
/// let coarse: MonotonicClamp = MonotonicClamp::with_granule(ClampGranule::from_log2(4).unwrap());
/// assert_eq!(coarse.clamp(100), 96); // multiples of 16
/// assert_eq!(coarse.clamp(111), 96);
/// assert_eq!(coarse.absorb(97), 112); // a floor handed over: rounded up
/// ```
#[derive(Debug)]
pub struct MonotonicClamp<C: Cell64 = DefaultCell> {
    last: C,
    granule: ClampGranule,
}

impl<C: Cell64> Default for MonotonicClamp<C> {
    fn default() -> Self {
        Self::new()
    }
}

impl<C: Cell64> MonotonicClamp<C> {
    /// An exact clamp that has returned nothing yet.
    /// Interrupt-safe: yes.
    pub fn new() -> Self {
        Self::with_granule(ClampGranule::EXACT)
    }

    /// A clamp whose results are multiples of `granule`.
    /// Interrupt-safe: yes.
    pub fn with_granule(granule: ClampGranule) -> Self {
        MonotonicClamp {
            last: C::new(0),
            granule,
        }
    }

    /// Its granule.
    /// Interrupt-safe: yes.
    pub fn granule(&self) -> ClampGranule {
        self.granule
    }

    /// `max(value, largest value returned so far)`, recording it; `value`
    /// rounded down to the granule first (so that readers inside one
    /// granule find nothing to publish).
    /// Interrupt-safe: yes.
    #[inline]
    pub fn clamp(&self, value: u64) -> u64 {
        let value = self.granule.floor(value);
        self.last
            .update(|last| if value > last { Some(value) } else { None })
    }

    /// Raises the record to `value` rounded *up* to the granule and returns
    /// the record: for a floor handed over from elsewhere (per-CPU floors
    /// when a source stops ordering its own readings), which every later
    /// result must be at least.
    /// Interrupt-safe: yes.
    pub fn absorb(&self, value: u64) -> u64 {
        let value = self.granule.ceil(value);
        self.last
            .update(|last| if value > last { Some(value) } else { None })
    }

    /// The largest value returned so far.
    /// Interrupt-safe: yes.
    pub fn last(&self) -> u64 {
        self.last.get()
    }

    /// Forgets the last value (after resume from suspend).
    /// Interrupt-safe: yes.
    pub fn reset(&self) {
        self.last.set(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::vec::Vec;

    /// Four "CPUs" read a shared true time (advancing `step` per read)
    /// through `clamp`, each off by up to `spread / 2` either way. Every
    /// thread's results never decrease, are multiples of the granule, and
    /// are never ahead of a value some thread produced.
    fn four_cpus(clamp: &Arc<MonotonicClamp>, start: u64, step: u64, spread: u64) {
        let truth = Arc::new(AtomicU64::new(start));
        let threads: Vec<_> = (0..4u64)
            .map(|cpu| {
                let (clamp, truth) = (clamp.clone(), truth.clone());
                std::thread::spawn(move || {
                    let units = clamp.granule().units();
                    let mut prev = 0;
                    for i in 0..if cfg!(miri) { 200 } else { 100_000u64 } {
                        let t = truth.fetch_add(step, Ordering::SeqCst);
                        let skew = (cpu * 37 + i) % (spread + 1);
                        let v = clamp.clamp(t - spread / 2 + skew);
                        assert!(v >= prev && v % units == 0, "{v} after {prev}");
                        assert!(v <= truth.load(Ordering::SeqCst) + spread / 2 + 1);
                        prev = v;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }

    #[test]
    fn concurrent_results_are_ordered() {
        // Clocks that disagree by up to +-50 units.
        four_cpus(&Arc::new(MonotonicClamp::new()), 1000, 1, 100);
    }

    #[test]
    fn a_coarse_clamp_orders_every_result_and_rounds_handovers_up() {
        let g = ClampGranule::from_log2(8).unwrap();
        let clamp: Arc<MonotonicClamp> = Arc::new(MonotonicClamp::with_granule(g));
        four_cpus(&clamp, 1_000_000, 7, 1000);
        let last = clamp.last();
        assert_eq!(clamp.absorb(last + 1), last + 256);
        assert_eq!(clamp.clamp(last + 300), last + 256);
        assert_eq!(clamp.absorb(u64::MAX), !255u64);
    }
}
