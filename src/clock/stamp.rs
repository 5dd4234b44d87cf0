//! Stamps for tracing: a raw, unordered TSC reading now (what minstant and
//! quanta sell), turned into an [`Instant`] later, off the hot path,
//! through the current source's validated map.

use super::read::{BEFORE_ZERO, ID_MASK, SWITCHING};
use super::Clock;
use crate::SourceId;
use clockhal_core::TscSource;
use clockhal_core::{Instant, TscMap};
use clockhal_x86::Hardware;
use core::sync::atomic::Ordering::Acquire;

/// A raw TSC value taken by [`Clock::stamp`]: one unordered `rdtsc`, no
/// check, no floor. Turn it into an [`Instant`] with a
/// [`StampConverter`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Stamp(u64);

impl Stamp {
    /// A stamp of TSC value `tsc` (e.g. one a trace buffer stored).
    /// Interrupt-safe: yes.
    pub const fn from_tsc(tsc: u64) -> Stamp {
        Stamp(tsc)
    }

    /// The TSC value.
    /// Interrupt-safe: yes.
    pub const fn tsc(self) -> u64 {
        self.0
    }
}

/// The current TSC-based source's validated map on the clock's timeline,
/// frozen when [`Clock::stamp_converter`] built it: pure arithmetic from
/// then on (one multiply per stamp, no load from a hypervisor page).
///
/// It converts exactly as [`Clock::now`] would have at the moment it was
/// built. Stamps taken long before or after are extrapolated with that
/// one map: a later host update of kvmclock or the Hyper-V page (a rate
/// correction, a migration) is not in it, nor a later source switch (which
/// moves the source's place on the timeline), so build a fresh converter
/// per trace buffer, say every second. Stamps whose instant would lie before
/// the clock's 0 (or past 2^63 ns) give `None`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct StampConverter {
    source: SourceId,
    map: TscMap,
    /// The TSC value the map was taken at, and the window around it in
    /// which the map's result lies in `0..=BEFORE_ZERO`.
    tsc: u64,
    back: u64,
    ahead: u64,
}

impl StampConverter {
    fn new(source: SourceId, map: TscMap, tsc: u64) -> Option<StampConverter> {
        let ns = map.apply(tsc);
        if ns > BEFORE_ZERO || map.is_flat() {
            return None;
        }
        Some(StampConverter {
            source,
            map,
            tsc,
            back: map.rebased(0, 0).ticks_until(0, ns),
            ahead: map.ticks_until(tsc, BEFORE_ZERO),
        })
    }

    /// `stamp` on the clock's timeline, or `None` outside the range above.
    /// Interrupt-safe: yes.
    #[inline]
    pub fn instant(&self, stamp: Stamp) -> Option<Instant> {
        let t = stamp.0;
        let inside = if t >= self.tsc {
            t - self.tsc <= self.ahead
        } else {
            self.tsc - t <= self.back
        };
        // Inside the window the map's modular arithmetic is exact.
        inside.then(|| Instant::from_nanos(self.map.apply(t)))
    }

    /// The source whose map this is.
    /// Interrupt-safe: yes.
    pub fn source_id(&self) -> SourceId {
        self.source
    }
}

/// How far an ordered source's map may read below what the clock returned
/// and still convert stamps: the cross-CPU agreement such a source is held
/// to (`kvmclock::STABLE_AGREEMENT_NS`), so that CPUs whose TSCs differ by
/// that much still get converters.
pub const STAMP_AGREEMENT_NS: u64 = 1_000;

impl<H: Hardware + Clone> Clock<H> {
    /// A raw TSC reading for tracing: one *unordered* `rdtsc`, about a
    /// third of [`now`](Self::now)'s cost (`cargo run -p clockhal-bench
    /// --release`); turn stamps into instants later with
    /// [`stamp_converter`](Self::stamp_converter).
    ///
    /// What it gives up, and why [`now`](Self::now) stays the clock:
    /// - **Order**: the CPU may execute the `rdtsc` before earlier loads
    ///   complete and after later ones start, so a stamp can be a few
    ///   dozen cycles off its place in program order; two stamps on one
    ///   CPU are in order (the TSC itself never goes back on a CPU unless
    ///   a host steps it).
    /// - **Checks**: nothing is validated when the stamp is taken (no
    ///   floor, no host-update check, no cross-CPU clamp); the converter
    ///   applies the map validated when it was built.
    /// - **Source**: a stamp is a TSC value; it converts only while the
    ///   current source is TSC-based (the TSC, kvmclock, the Hyper-V page).
    ///   On the HPET or the PM timer there is no cheap stamp: use `now()`.
    ///
    /// Interrupt-safe: yes (NMI too).
    ///
    /// ```
    /// # use clockhal::Clock;
    /// # fn trace<H: clockhal::x86::Hardware + Clone>(clock: &Clock<H>) {
    /// let start = clock.stamp(); // in the hot path
    /// // ... work ...
    /// let end = clock.stamp();
    /// // Later, off the hot path:
    /// if let Some(conv) = clock.stamp_converter() {
    ///     if let (Some(a), Some(b)) = (conv.instant(start), conv.instant(end)) {
    ///         let _took = b.duration_since(a);
    ///     }
    /// }
    /// # }
    /// ```
    #[inline(always)]
    pub fn stamp(&self) -> Stamp {
        Stamp(self.hw.rdtsc())
    }

    /// A [`StampConverter`] for stamps of this CPU (or of any CPU, when
    /// the report says the source orders readings across CPUs): the
    /// current source's map as validated now. `None` when the current
    /// source is not TSC-based, this CPU has no valid map (an unregistered
    /// kvmclock CPU, a Hyper-V page the host disabled, a rejected update),
    /// the source reads below the clock's timeline here (before its start,
    /// or, for a source ordered across CPUs, more than [`STAMP_AGREEMENT_NS`]
    /// below what the clock already returned: a host's step back that
    /// `now()` holds at its floors until the source catches up, up to
    /// `UpdateBounds::max_backward_ns`; a stamp taken after a `now()` would
    /// convert below it), a switch is in progress, or the map's reading
    /// now jumps further than the clock's reference explains (then the
    /// source is demoted, as `now()` would demote it).
    /// Interrupt-safe: yes.
    pub fn stamp_converter(&self) -> Option<StampConverter> {
        self.converter(true)
    }

    /// [`stamp_converter`](Self::stamp_converter); with `not_behind`
    /// false also while the source reads below what the clock returned
    /// (a TSC-deadline conversion: `now()`'s floors can make such a timer
    /// only late, never early).
    pub(crate) fn converter(&self, not_behind: bool) -> Option<StampConverter> {
        // A switch racing the build is retried a few times (bounded).
        for _ in 0..3 {
            let st = self.state.load(Acquire);
            if st & SWITCHING != 0 {
                // `now()` holds during a switch: no map is the clock's.
                core::hint::spin_loop();
                continue;
            }
            let id = SourceId::from_index((st & ID_MASK) as usize)?;
            let cpu = self.hw.cpu_index();
            let src = self.backends.tsc_source(id)?;
            let built = self.converter_of(Some(src), id, cpu, not_behind);
            if self.state.load(Acquire) == st {
                return built;
            }
        }
        None
    }

    /// `stamp` on the clock's timeline through a fresh
    /// [`stamp_converter`](Self::stamp_converter) (convert many stamps
    /// with one converter instead).
    /// Interrupt-safe: yes.
    pub fn stamp_to_instant(&self, stamp: Stamp) -> Option<Instant> {
        self.stamp_converter()?.instant(stamp)
    }

    fn converter_of<M: TscSource + ?Sized>(
        &self,
        m: Option<&M>,
        id: SourceId,
        cpu: usize,
        not_behind: bool,
    ) -> Option<StampConverter> {
        let offset = self.offsets[id.index()].load(Acquire);
        // Everything returned before the sample (as the read loop takes it).
        let high = self.read_state().high_water();
        let now = self
            .map_now_of(m?, id, cpu, self.returned_by(offset))
            .ok()?;
        let map = now.map.offset_by(offset);
        // What `now()` would return with this map passes the clock's own
        // checks first: the backend's judgement alone lets through an
        // update that jumps further than the reference explains (`now()`
        // refuses it and demotes the source; so does this).
        let v = map.apply(now.tsc);
        // Behind: an ordered source more than the CPUs' agreement below what
        // any CPU returned. (An unordered one is read through the clamp,
        // which another CPU's lead may keep above this CPU's map for good:
        // its stamps carry no floor, as `stamp` says.)
        let behind = now.ordered && v.saturating_add(STAMP_AGREEMENT_NS) < high;
        if v > BEFORE_ZERO || (not_behind && behind) || !self.plausible(v) {
            return None;
        }
        StampConverter::new(id, map, now.tsc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clockhal_core::{Frequency, Scale};

    fn conv(hz: u64, tsc0: u64, ns0: u64) -> StampConverter {
        let s = Scale::new(Frequency::from_hz(hz).unwrap());
        StampConverter::new(SourceId::Tsc, TscMap::through(&s, tsc0, ns0), tsc0).unwrap()
    }

    #[test]
    fn converts_inside_the_window_and_refuses_outside() {
        let c = conv(2_000_000_000, 10_000, 1_000);
        let at = |t| c.instant(Stamp::from_tsc(t)).map(Instant::as_nanos);
        assert_eq!(at(10_000), Some(1_000));
        assert_eq!(at(12_000), Some(2_000));
        // Back to the timeline's 0 (within a tick of rounding).
        assert_eq!(at(8_002), Some(1));
        // Before the timeline's 0, and far past it: refused, not wrapped.
        assert_eq!(at(7_000), None);
        assert_eq!(at(0), None);
        // At 2 GHz every later TSC value stays below 2^63 ns.
        assert!(at(u64::MAX).is_some_and(|ns| ns < BEFORE_ZERO));
        // At 500 MHz (2 ns per tick) the window ends near 2^63 ns.
        let slow = conv(500_000_000, 10_000, 1_000);
        let at = |t| slow.instant(Stamp::from_tsc(t)).map(Instant::as_nanos);
        let far = 10_000 + (BEFORE_ZERO - 1_000) / 2;
        assert!(at(far - 4).is_some_and(|ns| ns <= BEFORE_ZERO));
        assert_eq!(at(far + 4), None);
        assert_eq!(at(u64::MAX), None);
    }

    #[test]
    fn a_map_below_zero_or_flat_gives_no_converter() {
        let s = Scale::new(Frequency::from_hz(2_000_000_000).unwrap());
        let below = TscMap::through(&s, 10_000, 0).offset_by(u64::MAX - 5);
        assert!(StampConverter::new(SourceId::Tsc, below, 10_000).is_none());
        let flat = TscMap::from_words(0, 0, 0);
        assert!(StampConverter::new(SourceId::Tsc, flat, 10_000).is_none());
    }
}
