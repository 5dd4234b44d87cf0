//! Extending an N-bit hardware counter to a 64-bit one.

use crate::cell::{Cell64, DefaultCell};

/// A reading placed by [`WrapExtender::extend_near`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extended {
    /// The extended count returned.
    pub ticks: u64,
    /// `ticks` is the counter's count now, not a value held across a gap
    /// that nothing measured.
    pub current: bool,
}

/// Where an independent counter puts a software-extended counter's count
/// now ([`WrapExtender::extend_near`]): `ticks`, on the scale of the
/// extended values, within `within` ticks either way (the measure's own
/// error: its rate's uncertainty over the gap, and the skew of the
/// readings it pairs). A placement further from it than `within` is not
/// taken, and an estimate whose bound is wider than an eighth of a wrap
/// places nothing (its error could hide a whole wrap): the wider the
/// bound, the likelier a measure that is wrong by about a whole wrap (a
/// TSC stepped by its hypervisor) lands a phantom wrap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Estimate {
    /// The estimated extended count.
    pub ticks: u64,
    /// How far from `ticks` a placement may be.
    pub within: u64,
}

/// How [`WrapExtender::place`] puts a reading on the 64-bit timeline: the
/// rule of the method of the same name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// [`WrapExtender::extend`]: at most half a wrap after the last value.
    Plain,
    /// [`WrapExtender::extend_after`]: read between `min` and `max` ticks
    /// after the previous read.
    After {
        /// The fewest ticks since the previous read.
        min: u64,
        /// The most ticks since the previous read.
        max: u64,
    },
    /// [`WrapExtender::extend_spanning`]: about `span` ticks after the last
    /// value, within `within`.
    Spanning {
        /// The ticks an independent counter measured since the last value.
        span: u64,
        /// How far from `span` the placement may be.
        within: u64,
    },
    /// [`WrapExtender::extend_forward`]: the first value of its phase after
    /// the last one.
    Forward,
    /// [`WrapExtender::extend_near`]: at the wrap nearest the estimate.
    Near(Option<Estimate>),
}

/// Widens a free-running N-bit counter (1..=64 bits) to 64 bits.
///
/// Keeps the last extended value; each raw reading is placed at most half a
/// wrap period after it.
///
/// **Read-interval rule:** successive reads (by any CPU) must be less than
/// `2^(N-1)` ticks apart ([`max_read_interval`](Self::max_read_interval)),
/// e.g. 2.34 s for a 24-bit ACPI PM timer, 21.4 s for a 32-bit HPET at
/// 100 MHz. A raw value that lands *behind* the last extended value (another
/// CPU extended further in the meantime) returns that last value, so results
/// never go backwards across concurrent readers.
///
/// Read the hardware through [`place`](Self::place): it reads inside the
/// update, after loading the last value, and again if another reader moved
/// it meanwhile, so a reader paused between its hardware read and its
/// update cannot place a stale count against a newer last value (a pause
/// of more than half a wrap there would put the count up to a wrap
/// ahead). The methods that take a raw value (`extend`, ...) need it taken
/// after every reading already extended, or within half a wrap of being
/// placed (do not hold one across a long preemption).
///
/// Lock-free where the target has 64-bit atomics, otherwise a
/// `critical-section` (choose the cell with the `C` parameter).
///
/// ```
/// use clockhal_core::WrapExtender;
/// let ext: WrapExtender = WrapExtender::new(24, 0xFF_FFF0);
/// assert_eq!(ext.extend(0xFF_FFF0), 0xFF_FFF0);
/// assert_eq!(ext.extend(0x10), 0x100_0010); // wrapped once
/// assert_eq!(ext.extend(0x0F), 0x100_0010); // slightly behind: held
/// ```
#[derive(Debug)]
pub struct WrapExtender<C: Cell64 = DefaultCell> {
    mask: u64,
    half: u64,
    last: C,
}

impl<C: Cell64> WrapExtender<C> {
    /// An extender for a `bits`-wide counter (clamped to 1..=64) whose first
    /// reading is `initial_raw`.
    /// Interrupt-safe: yes.
    pub fn new(bits: u32, initial_raw: u64) -> Self {
        let bits = bits.clamp(1, 64);
        let mask = if bits == 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        };
        WrapExtender {
            mask,
            half: 1u64 << (bits - 1),
            last: C::new(initial_raw & mask),
        }
    }

    /// Counter width in bits.
    /// Interrupt-safe: yes.
    pub fn bits(&self) -> u32 {
        self.mask.count_ones()
    }

    /// The longest allowed interval between reads, in ticks (`2^(N-1)`).
    /// Interrupt-safe: yes.
    pub fn max_read_interval(&self) -> u64 {
        self.half
    }

    /// Places `raw` (a fresh N-bit reading) on the 64-bit timeline.
    ///
    /// Interrupt-safe: yes with atomic cells (lock-free); with a
    /// critical-section cell, as safe as the OS's critical section.
    #[inline]
    pub fn extend(&self, raw: u64) -> u64 {
        self.place(|| Some(raw), Placement::Plain).ticks
    }

    /// Places `raw`, read between `min` and `max` ticks (by an independent
    /// counter, e.g. the TSC bracketing both reads) after the previous
    /// read, on the 64-bit timeline: at the one wrap count that puts it in
    /// that range (widened by an eighth of a wrap each way for the other
    /// counter's rate error), so a read more than half a wrap late moves on
    /// instead of holding and whole wraps missed are counted. Where no
    /// placement or more than one fits, or `max` is at most half a wrap:
    /// as [`extend`](Self::extend). Never behind the last value.
    ///
    /// ```
    /// use clockhal_core::WrapExtender;
    /// let ext: WrapExtender = WrapExtender::new(16, 0);
    /// // 40,000 ticks later (more than half of 65,536): not held.
    /// assert_eq!(ext.extend_after(40_000, 40_000, 40_100), 40_000);
    /// // Two wraps and 100 ticks later.
    /// assert_eq!(ext.extend_after(40_100, 131_000, 131_200), 40_000 + 131_172);
    /// ```
    ///
    /// Interrupt-safe: as [`extend`](Self::extend).
    pub fn extend_after(&self, raw: u64, min: u64, max: u64) -> u64 {
        self.place(|| Some(raw), Placement::After { min, max })
            .ticks
    }

    /// Places `raw` on the 64-bit timeline when about `span` ticks passed
    /// since the last extended value, within `within` ticks either way, as
    /// an independent counter measured (the TSC over a gap in the reads
    /// longer than [`max_read_interval`](Self::max_read_interval)): the
    /// whole wraps the span covers are recovered, to the nearest. A span
    /// below half a wrap is [`extend`](Self::extend), and so is one whose
    /// bound is wider than an eighth of a wrap (its error could hide a
    /// wrap), or that disagrees with the counter's own phase by more than
    /// its bound (`span` less the wraps it claims is not the ticks the
    /// counter moved): a witness that ran ahead, or a span measured from
    /// an older read than the last one, adds no wrap; nor does a raw count
    /// that has not moved at all (a stopped counter).
    ///
    /// ```
    /// use clockhal_core::WrapExtender;
    /// let ext: WrapExtender = WrapExtender::new(24, 0x10);
    /// // Three wraps and 0x20 ticks later, measured as about that.
    /// assert_eq!(ext.extend_spanning(0x30, 3 << 24, 0x1000), 0x300_0030);
    /// ```
    ///
    /// Interrupt-safe: yes (lock-free where the target has 64-bit atomics,
    /// else a critical section).
    pub fn extend_spanning(&self, raw: u64, span: u64, within: u64) -> u64 {
        self.place(|| Some(raw), Placement::Spanning { span, within })
            .ticks
    }

    /// Places `raw` at the first value of its phase after the last one,
    /// however far: for a count whose wraps over a gap nothing could place
    /// (they are lost, not held for), so that its extension counts on from
    /// the raw count now.
    ///
    /// ```
    /// use clockhal_core::WrapExtender;
    /// let ext: WrapExtender = WrapExtender::new(16, 0);
    /// // 60,000 ticks on (more than half a wrap): taken, not held.
    /// assert_eq!(ext.extend_forward(60_000), 60_000);
    /// ```
    ///
    /// Interrupt-safe: as [`extend`](Self::extend).
    pub fn extend_forward(&self, raw: u64) -> u64 {
        self.place(|| Some(raw), Placement::Forward).ticks
    }

    /// Places `raw` where an independent counter estimates this counter's
    /// extended count now (`estimate`, on the scale of the values
    /// returned, e.g. the TSC since a reading of this counter on the same
    /// CPU): at the wrap nearest the estimate when the two agree within
    /// the estimate's bound (one wider than an eighth of a wrap places
    /// nothing), so the wraps a
    /// gap in the reads hid are counted whoever read last. Without an
    /// estimate, or one that disagrees with `raw`'s phase, as
    /// [`extend`](Self::extend). Never behind the last value; a placement
    /// behind it (another reader placed a later reading) gives that value.
    ///
    /// [`Extended::current`] says whether the result is the counter's
    /// count now rather than a value held across a gap: `false` when `raw`
    /// lies more than an eighth of a wrap behind the last value and no
    /// estimate placed it (a gap of more than half a wrap that nothing
    /// measured). A caller that keeps (TSC, count) pairs for later
    /// estimates keeps only current ones.
    ///
    /// ```
    /// use clockhal_core::{Estimate, WrapExtender};
    /// let ext: WrapExtender = WrapExtender::new(24, 0);
    /// // Three and 5/8 wraps later: held without an estimate...
    /// let held = ext.extend_near(0xA0_0000, None);
    /// assert_eq!((held.ticks, held.current), (0, false));
    /// // ...placed with one (the TSC said about that long, within 0x2000).
    /// let e = Estimate { ticks: 0x3A0_1000, within: 0x2000 };
    /// let placed = ext.extend_near(0xA0_0000, Some(e));
    /// assert_eq!((placed.ticks, placed.current), (0x3A0_0000, true));
    /// ```
    ///
    /// Interrupt-safe: as [`extend`](Self::extend).
    pub fn extend_near(&self, raw: u64, estimate: Option<Estimate>) -> Extended {
        self.place(|| Some(raw), Placement::Near(estimate))
    }

    /// Reads the counter with `read` and places the reading by `how`:
    /// `read` runs inside the update, after the last value is loaded, and
    /// again whenever another reader moved the last value before this one
    /// could store its own, so the reading placed is never older than the
    /// last value it is placed against (a reader paused between reading the
    /// hardware and placing the count cannot push the timeline ahead).
    /// `read` returning `None` (no trustworthy reading) keeps the last
    /// value, [`Extended::current`] `false`. `current` is otherwise as
    /// [`extend_near`](Self::extend_near) says, and `true` for the other
    /// placements.
    ///
    /// ```
    /// use clockhal_core::{Placement, WrapExtender};
    /// let ext: WrapExtender = WrapExtender::new(24, 0xFF_FFF0);
    /// let r = ext.place(|| Some(0x10), Placement::Plain);
    /// assert_eq!((r.ticks, r.current), (0x100_0010, true));
    /// assert!(!ext.place(|| None, Placement::Plain).current);
    /// ```
    ///
    /// Interrupt-safe: as [`extend`](Self::extend) (with a critical-section
    /// cell, `read` runs inside the critical section), if `read` is.
    #[inline]
    pub fn place(&self, mut read: impl FnMut() -> Option<u64>, how: Placement) -> Extended {
        let mut current = true;
        let ticks = self.last.update(|last| {
            let Some(raw) = read() else {
                current = false;
                return None;
            };
            let raw = raw & self.mask;
            current = true;
            match how {
                Placement::Plain => self.plain(last, raw),
                Placement::After { min, max } => self.after(last, raw, min, max),
                Placement::Spanning { span, within } => self.spanning(last, raw, span, within),
                Placement::Forward => {
                    let delta = raw.wrapping_sub(last) & self.mask;
                    (delta != 0).then(|| last.wrapping_add(delta))
                }
                Placement::Near(estimate) => self.near(last, raw, estimate, &mut current),
            }
        });
        Extended { ticks, current }
    }

    /// At most half a wrap after `last`; `None` (hold) for no progress or
    /// a reading behind it.
    #[inline(always)]
    fn plain(&self, last: u64, raw: u64) -> Option<u64> {
        let delta = raw.wrapping_sub(last) & self.mask;
        (delta != 0 && delta <= self.half).then(|| last.wrapping_add(delta))
    }

    fn after(&self, last: u64, raw: u64, min: u64, max: u64) -> Option<u64> {
        if self.mask == u64::MAX || max <= self.half {
            return self.plain(last, raw);
        }
        let wrap = self.mask + 1;
        let slack = wrap / 8;
        let (lo, hi) = (min.saturating_sub(slack), max.saturating_add(slack));
        let delta = raw.wrapping_sub(last) & self.mask;
        // The first placement at or above `lo`, and whether it is the only
        // one up to `hi`.
        let wraps = lo.saturating_sub(delta).div_ceil(wrap);
        let step = wraps.checked_mul(wrap)?.checked_add(delta)?;
        let unique = step <= hi && step.saturating_add(wrap) > hi;
        if step == 0 || !unique {
            return self.plain(last, raw); // unclear: the plain rule
        }
        Some(last.wrapping_add(step))
    }

    fn spanning(&self, last: u64, raw: u64, span: u64, within: u64) -> Option<u64> {
        let period = self.mask.wrapping_add(1);
        if span < self.half || self.mask == u64::MAX || within > period / 8 {
            return self.plain(last, raw);
        }
        let delta = raw.wrapping_sub(last) & self.mask;
        if delta == 0 {
            // Not one tick in half a wrap or more: a counter that stopped,
            // not whole wraps to the tick.
            return None;
        }
        // Whole periods in the span beyond `delta`, to the nearest.
        let wraps = span.saturating_sub(delta).saturating_add(self.half) / period;
        let claimed = delta as u128 + wraps as u128 * period as u128;
        if (span as u128).abs_diff(claimed) > within as u128 {
            return self.plain(last, raw);
        }
        let v = last
            .wrapping_add(delta)
            .wrapping_add(wraps.wrapping_mul(period));
        (v != last).then_some(v)
    }

    fn near(
        &self,
        last: u64,
        raw: u64,
        estimate: Option<Estimate>,
        current: &mut bool,
    ) -> Option<u64> {
        let (mask, half) = (self.mask, self.half);
        if mask == u64::MAX {
            return self.plain(last, raw);
        }
        let wrap = mask + 1;
        let slack = wrap / 8;
        if let Some(Estimate { ticks: e, within }) = estimate {
            // The value of `raw`'s phase nearest the estimate.
            let ahead = raw.wrapping_sub(e) & mask;
            // (None past either end of u64: no placement.)
            let (v, off) = if ahead <= half {
                (e.checked_add(ahead), ahead)
            } else {
                (e.checked_sub(wrap - ahead), wrap - ahead)
            };
            if let Some(v) = v.filter(|_| within <= slack && off <= within) {
                return (v > last).then_some(v);
            }
        }
        let delta = raw.wrapping_sub(last) & mask;
        if delta == 0 {
            None
        } else if delta <= half {
            Some(last.wrapping_add(delta))
        } else {
            // Just behind: another reader placed a later reading. Further
            // behind: a gap nothing placed.
            *current = wrap - delta <= slack;
            None
        }
    }

    /// The last extended value, without reading hardware.
    /// Interrupt-safe: yes.
    pub fn last(&self) -> u64 {
        self.last.get()
    }

    /// Restarts the timeline at `raw` (e.g. after resume, when the hardware
    /// counter was reset and any interval may have passed).
    /// Interrupt-safe: yes.
    pub fn reset(&self, raw: u64) {
        self.last.set(raw & self.mask)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::CriticalSectionCell;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    use std::vec::Vec;

    /// Deterministic xorshift for irregular intervals.
    fn rng(seed: &mut u64) -> u64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    }

    fn thousands_of_wraps<C: Cell64>() {
        for bits in [1u32, 2, 3, 8, 24, 32, 48, 63, 64] {
            let mask = if bits == 64 {
                u64::MAX
            } else {
                (1 << bits) - 1
            };
            let half = 1u64 << (bits - 1);
            let mut truth: u64 = 0x1234_5678_9abc & mask;
            let ext: WrapExtender<C> = WrapExtender::new(bits, truth);
            let mut seed = 0x9e37_79b9_7f4a_7c15 ^ bits as u64;
            let mut wraps = 0u64;
            // Miri interprets ~10^4 times slower: a few thousand steps there.
            let steps = if cfg!(miri) { 2_000 } else { 200_000 };
            for _ in 0..steps {
                // Rule-abiding: step in 0..=half (half included is still legal).
                let step = rng(&mut seed) % (half.min(1 << 40) + 1);
                let before = truth;
                truth = truth.wrapping_add(step);
                if (truth & mask) < (before & mask) {
                    wraps += 1;
                }
                assert_eq!(ext.extend(truth & mask), truth, "bits={bits}");
            }
            if bits <= 32 {
                assert!(wraps > steps / 200, "bits={bits} only {wraps} wraps");
            }
        }
    }

    #[test]
    fn an_estimate_places_a_reading_after_a_gap_and_never_behind() {
        let wrap = 1u64 << 24;
        let ext: WrapExtender = WrapExtender::new(24, 0);
        let mut seed = 0x51_7cc1_b727_220a;
        let mut truth = 0u64;
        for _ in 0..20_000 {
            // Gaps up to 40 wraps; estimates off by up to a ninth of a wrap.
            truth += rng(&mut seed) % (40 * wrap);
            let err =
                (rng(&mut seed) % (wrap / 9)) as i64 * if rng(&mut seed) & 1 == 0 { 1 } else { -1 };
            let e = truth.saturating_add_signed(err);
            let r = ext.extend_near(
                truth,
                Some(Estimate {
                    ticks: e,
                    within: wrap / 8,
                }),
            );
            assert_eq!((r.ticks, r.current), (truth, true));
        }
        // A placement behind the last value (another reader is ahead): the
        // last value, current.
        let last = ext.last();
        let r = ext.extend_near(
            last - 1_000,
            Some(Estimate {
                ticks: last - 1_000,
                within: 0,
            }),
        );
        assert_eq!((r.ticks, r.current), (last, true));
        // Just behind without an estimate: the same.
        let r = ext.extend_near(last - 1_000, None);
        assert_eq!((r.ticks, r.current), (last, true));
    }

    #[test]
    fn an_estimate_that_disagrees_with_the_phase_adds_no_wrap() {
        let wrap = 1u64 << 24;
        let ext: WrapExtender = WrapExtender::new(24, 0);
        // Two wraps and 1,000 ticks, estimated a quarter wrap off: the
        // plain rule (1,000 ticks on).
        let r = ext.extend_near(
            1_000,
            Some(Estimate {
                ticks: 2 * wrap + 1_000 + wrap / 4,
                within: wrap / 8,
            }),
        );
        assert_eq!((r.ticks, r.current), (1_000, true));
        // 5/8 of a wrap behind in phase, the estimate half a wrap off:
        // held, and said to be no current count.
        let r = ext.extend_near(
            1_000 + wrap * 5 / 8,
            Some(Estimate {
                ticks: 7 * wrap,
                within: wrap / 8,
            }),
        );
        assert_eq!((r.ticks, r.current), (1_000, false));
        // An estimate at the top of u64 places nothing (the plain rule).
        let ext2: WrapExtender = WrapExtender::new(24, 0);
        let r = ext2.extend_near(
            5,
            Some(Estimate {
                ticks: u64::MAX - 2,
                within: wrap / 8,
            }),
        );
        assert_eq!((r.ticks, r.current), (5, true));
        // A 64-bit counter needs no estimate.
        let wide: WrapExtender = WrapExtender::new(64, 5);
        let r = wide.extend_near(
            9,
            Some(Estimate {
                ticks: 1 << 60,
                within: 0,
            }),
        );
        assert_eq!((r.ticks, r.current), (9, true));
    }

    #[test]
    fn an_estimate_is_taken_only_within_its_bound() {
        let wrap = 1u64 << 24;
        let ext: WrapExtender = WrapExtender::new(24, 0);
        // One wrap and 1,000 ticks by a measure 0x1000 off: taken within
        // 0x1000, not within 0xFFF (the plain rule, 1,000 ticks on).
        let near = |within| Estimate {
            ticks: wrap + 1_000 + 0x1000,
            within,
        };
        assert_eq!(ext.extend_near(1_000, Some(near(0xFFF))).ticks, 1_000);
        let ext: WrapExtender = WrapExtender::new(24, 0);
        assert_eq!(
            ext.extend_near(1_000, Some(near(0x1000))).ticks,
            wrap + 1_000
        );
        // A bound wider than an eighth of a wrap places nothing, however
        // near the estimate.
        let ext: WrapExtender = WrapExtender::new(24, 0);
        let wide = Estimate {
            ticks: wrap + 1_000,
            within: wrap / 8 + 1,
        };
        assert_eq!(ext.extend_near(1_000, Some(wide)).ticks, 1_000);
    }

    #[test]
    fn a_span_that_disagrees_with_the_counter_s_phase_adds_no_wrap() {
        let period = 1u64 << 24;
        let ext: WrapExtender = WrapExtender::new(24, 0);
        // Two wraps and 1,000 ticks, measured 5,000 ticks long: recovered.
        assert_eq!(
            ext.extend_spanning(1_000, 2 * period + 5_000, period / 8),
            2 * period + 1_000
        );
        // A span measured from an older read (the counter moved 2,000
        // ticks since the last one, the witness says 0.4 of a wrap more):
        // no wrap is added, the counter's own delta stands.
        let last = ext.last();
        let span = period * 2 / 5 + 2_000;
        assert_eq!(ext.extend_spanning(3_000, span, period / 8), last + 2_000);
        // A witness an hour ahead whose phase happens not to fit: nothing.
        let last = ext.last();
        assert_eq!(
            ext.extend_spanning(
                3_000 + period / 2 + 1,
                768 * period + period / 4,
                period / 8
            ),
            last
        );
        // A span whose bound is wider than an eighth of a wrap (a witness
        // whose error could be a whole wrap) adds none, however it fits.
        let last = ext.last();
        assert_eq!(
            ext.extend_spanning(3_000 + 100, 5 * period + 100, period / 8 + 1),
            last + 100
        );
    }

    #[test]
    fn thousands_of_wraps_atomic() {
        thousands_of_wraps::<crate::cell::DefaultCell>();
    }

    #[test]
    fn thousands_of_wraps_critical_section() {
        thousands_of_wraps::<CriticalSectionCell>();
    }

    fn concurrent<C: Cell64 + Send + 'static>() {
        // A 16-bit "hardware" counter advanced by a writer; four readers
        // extend it and check they stay between the truth before and after.
        // The writer honours the read-interval rule as a real system must:
        // no raw reading may be extended more than half a wrap after it was
        // taken, so it never runs more than a quarter wrap ahead of the
        // oldest reading still in flight (readers pin it in `inflight`).
        const BITS: u32 = 16;
        const READERS: usize = 4;
        let truth = Arc::new(AtomicU64::new(5));
        let ext = Arc::new(WrapExtender::<C>::new(BITS, 5));
        let stop = Arc::new(AtomicBool::new(false));
        let inflight: Arc<Vec<AtomicU64>> =
            Arc::new((0..READERS).map(|_| AtomicU64::new(u64::MAX)).collect());
        let writer = {
            let (truth, stop, ext, inflight) =
                (truth.clone(), stop.clone(), ext.clone(), inflight.clone());
            std::thread::spawn(move || {
                let mut seed = 77u64;
                while !stop.load(Ordering::SeqCst) {
                    let t = truth.load(Ordering::SeqCst);
                    let oldest = inflight
                        .iter()
                        .map(|p| p.load(Ordering::SeqCst))
                        .min()
                        .unwrap()
                        .min(ext.last());
                    if t.saturating_sub(oldest) < 1 << (BITS - 2) {
                        truth.fetch_add(rng(&mut seed) % 1024 + 1, Ordering::SeqCst);
                    } else {
                        std::thread::yield_now();
                    }
                }
            })
        };
        let readers: Vec<_> = (0..READERS)
            .map(|id| {
                let (truth, ext, inflight) = (truth.clone(), ext.clone(), inflight.clone());
                std::thread::spawn(move || {
                    let mut prev = 0;
                    // Run until the counter has wrapped several times.
                    for _ in 0..5_000_000 {
                        if truth.load(Ordering::SeqCst) > 8 << BITS {
                            break;
                        }
                        inflight[id].store(truth.load(Ordering::SeqCst), Ordering::SeqCst);
                        let raw = truth.load(Ordering::SeqCst);
                        let v = ext.extend(raw & 0xFFFF);
                        inflight[id].store(u64::MAX, Ordering::SeqCst);
                        let after = truth.load(Ordering::SeqCst);
                        assert!(v >= raw && v <= after, "raw={raw} v={v} after={after}");
                        assert!(v >= prev);
                        prev = v;
                    }
                })
            })
            .collect();
        for r in readers {
            r.join().unwrap();
        }
        stop.store(true, Ordering::SeqCst);
        writer.join().unwrap();
        assert!(
            truth.load(Ordering::SeqCst) > 8 << BITS,
            "counter wrapped too rarely"
        );
    }

    #[test]
    fn concurrent_readers_atomic() {
        concurrent::<crate::cell::DefaultCell>();
    }

    #[test]
    fn concurrent_readers_critical_section() {
        concurrent::<CriticalSectionCell>();
    }

    #[test]
    fn a_late_read_is_placed_by_the_elapsed_time() {
        // Gaps from just over half a wrap to 5 wraps, known to within a
        // window of up to half a wrap that is itself off by up to 1/16
        // wrap: every reading lands on the truth (the plain rule holds
        // those between half and one wrap, and loses every whole wrap).
        let wrap = 1u64 << 16;
        let mut truth = 7u64;
        let e: WrapExtender = WrapExtender::new(16, truth);
        let mut seed = 5u64;
        for _ in 0..10_000 {
            let gap = wrap / 2 + wrap / 16 + 1 + rng(&mut seed) % (4 * wrap);
            let width = rng(&mut seed) % (wrap / 2);
            let below = rng(&mut seed) % (width + 1);
            let err = (rng(&mut seed) % (wrap / 8)) as i64 - (wrap / 16) as i64;
            truth += gap;
            let min = (gap - below) as i64 + err;
            let max = min as u64 + width;
            let v = e.extend_after(truth & 0xFFFF, min as u64, max);
            assert_eq!(v, truth, "gap {gap} in {min}..={max}");
        }
        // Short gaps follow the plain rule.
        truth += 1_000;
        assert_eq!(e.extend_after(truth & 0xFFFF, 990, 1_010), truth);
    }

    #[test]
    fn an_unclear_range_falls_back_to_the_plain_rule() {
        let e: WrapExtender = WrapExtender::new(16, 0);
        // The range says about 1.5 wraps, the reading says +100: nothing fits.
        assert_eq!(e.extend_after(100, 98_000, 98_600), 100);
        // Behind, and a range wider than a wrap: two placements fit, held.
        assert_eq!(e.extend_after(50, 40_000, 140_000), 100);
        // Behind and nothing fits: held.
        assert_eq!(e.extend_after(60, 100_000, 101_000), 100);
    }

    /// A reader paused between its hardware read and its update while
    /// another reader moves the timeline on by more than half a wrap: a
    /// raw value handed in late lands up to a wrap ahead (the rule the
    /// raw-value methods state); read through `place`, the paused reader
    /// reads again and nothing runs ahead of the counter.
    #[test]
    fn a_reader_paused_after_its_read_does_not_run_ahead() {
        use std::sync::mpsc::channel;
        const WRAP: u64 = 1 << 16;
        for through_place in [false, true] {
            // 100 ticks on from the last value when the paused reader reads.
            let truth = Arc::new(AtomicU64::new(100));
            let ext = Arc::new(WrapExtender::<crate::cell::DefaultCell>::new(16, 0));
            let (read_tx, read_rx) = channel();
            let (go_tx, go_rx) = channel::<()>();
            let paused = {
                let (truth, ext) = (truth.clone(), ext.clone());
                std::thread::spawn(move || {
                    let mut first = true;
                    let mut read = || {
                        let raw = truth.load(Ordering::SeqCst);
                        if core::mem::take(&mut first) {
                            read_tx.send(()).unwrap();
                            go_rx.recv().unwrap(); // preempted here
                        }
                        Some(raw)
                    };
                    if through_place {
                        ext.place(read, Placement::Plain).ticks
                    } else {
                        let raw = read().unwrap();
                        ext.extend(raw)
                    }
                })
            };
            read_rx.recv().unwrap();
            // 0.7 of a wrap in three reads, each well inside the rule.
            for _ in 0..3 {
                let t = truth.fetch_add(WRAP * 7 / 30, Ordering::SeqCst) + WRAP * 7 / 30;
                assert_eq!(ext.extend(t & 0xFFFF), t);
            }
            go_tx.send(()).unwrap();
            let v = paused.join().unwrap();
            let now = truth.load(Ordering::SeqCst);
            if through_place {
                // Its store failed (the last value moved): read again.
                assert_eq!(v, now, "placed {v}, the counter is at {now}");
            } else {
                // The stated hazard: a wrap ahead of where the stale read
                // was taken, 0.3 of a wrap ahead of the counter.
                assert_eq!(v, WRAP + 100);
                assert!(v > now);
            }
            assert_eq!(ext.last(), v);
        }
    }

    #[test]
    fn a_read_that_fails_keeps_the_last_value() {
        let e: WrapExtender = WrapExtender::new(24, 100);
        let r = e.place(|| None, Placement::Near(None));
        assert_eq!((r.ticks, r.current), (100, false));
        let r = e.place(|| Some(150), Placement::Forward);
        assert_eq!((r.ticks, r.current), (150, true));
    }

    #[test]
    fn behind_is_held_and_reset_restarts() {
        let e: WrapExtender = WrapExtender::new(8, 250);
        assert_eq!(e.extend(10), 266);
        assert_eq!(e.extend(5), 266);
        e.reset(3);
        assert_eq!(e.extend(4), 4);
        assert_eq!(e.max_read_interval(), 128);
        assert_eq!(e.bits(), 8);
    }
}
