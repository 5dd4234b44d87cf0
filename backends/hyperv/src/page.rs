//! The reference TSC page: decoding it, and the "hyperv-page" clock.

use crate::sync::{
    AtomicBool, AtomicU32, AtomicU64,
    Ordering::{AcqRel, Acquire, Relaxed},
};
use crate::{HypervMsrClock, PageError};
use clockhal_core::{
    ClampGranule, ClockSource, Frequency, LastMap, MapMiss, MapNow, Quality, ReadCost, Stability,
    Timeline, TscMap, TscSource, UpdateBounds, UpdateJudge,
};
use clockhal_x86::paravirt::{
    hv_disable_reference_tsc, hv_scale_tsc, HvAttempt, HvReferenceTscPage, HvSample, PhysMapped,
};
use clockhal_x86::{Hardware, Seam};

/// How many times a read samples a page whose sequence changes under it
/// before falling back to TIME_REF_COUNT (or holding).
pub const MAX_READ_ATTEMPTS: u32 = 64;

/// "hyperv-page" rating: no exit per read, migration-safe.
pub const PAGE_RATING: Quality = Quality::new(450);

/// What the page clock guarantees. Reference time is partition-wide and
/// the TSCs under it are synchronised (the hypervisor's promise, which the
/// OS's warp test can revoke: [`HypervPageClock::distrust_order`]). It
/// stops while the partition is saved, so not `COUNTS_WHILE_PAUSED`.
pub const PAGE_STABILITY: Stability = Stability::MONOTONIC_PER_CPU
    .union(Stability::MONOTONIC_ACROSS_CPUS)
    .union(Stability::INVARIANT_RATE)
    .union(Stability::SURVIVES_MIGRATION);

pub use clockhal_core::REVALIDATE_NS;

/// Bounded retry of the page's seqlock (clockhal-user's, shared with the
/// user-space reader).
fn sample(page: &HvReferenceTscPage, mut rdtsc: impl FnMut() -> u64) -> Result<Sample, PageError> {
    for _ in 0..MAX_READ_ATTEMPTS {
        match page.try_sample(&mut rdtsc) {
            HvAttempt::Value(s) => return Ok(s),
            HvAttempt::Invalid => return Err(PageError::Invalid),
            HvAttempt::Changed => core::hint::spin_loop(),
        }
    }
    Err(PageError::Busy)
}

/// One consistent copy of the page and a TSC value read inside its window.
type Sample = HvSample;

/// Reads any reference TSC page: `((tsc * scale) >> 64) + offset` in 100 ns
/// units, under the sequence check (bounded retries). Read-only.
///
/// Errors: [`PageError::Invalid`] (sequence 0 or `0xFFFFFFFF`: read
/// TIME_REF_COUNT instead), [`PageError::ZeroScale`], [`PageError::Busy`].
/// Hostile scales and offsets give a defined (wrapping) value, never a panic.
/// Interrupt-safe: yes.
///
/// ```
/// use clockhal_hyperv::read_reference_page;
/// use clockhal_x86::paravirt::HvReferenceTscPage;
/// use core::sync::atomic::Ordering::Relaxed;
/// let page = HvReferenceTscPage::new();
/// page.scale.store(1 << 63, Relaxed); // half a unit per tick
/// page.offset.store(-10, Relaxed);
/// page.sequence.store(1, Relaxed);
/// assert_eq!(read_reference_page(&page, || 1_000), Ok(490));
/// ```
pub fn read_reference_page(
    page: &HvReferenceTscPage,
    rdtsc: impl FnMut() -> u64,
) -> Result<u64, PageError> {
    let s = scaled_sample(page, rdtsc)?;
    Ok(hv_scale_tsc(s.tsc, s.scale, s.offset))
}

/// [`sample`] with a non-zero scale ([`PageError::ZeroScale`] otherwise).
pub(crate) fn scaled_sample(
    page: &HvReferenceTscPage,
    rdtsc: impl FnMut() -> u64,
) -> Result<Sample, PageError> {
    let s = sample(page, rdtsc)?;
    if s.scale == 0 {
        return Err(PageError::ZeroScale);
    }
    Ok(s)
}

/// Counters of page reads and updates that did not go the normal way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct PageStats {
    /// Reads served by TIME_REF_COUNT (page invalid, or sequence changing
    /// for [`MAX_READ_ATTEMPTS`] samples with no earlier parameters).
    pub msr_fallbacks: u64,
    /// Reads that could use neither page nor MSR and returned the held value.
    pub held_reads: u64,
    /// Host updates whose parameters were implausible (scale 0, rate out of
    /// range): reads kept using the previous ones.
    pub rejected_updates: u64,
    /// Host updates whose time was discontinuous beyond the bounds: their
    /// rate was used, continuing the previous timeline.
    pub reanchored_updates: u64,
}

impl PageStats {
    /// Events that count against the host: the watchdog demotes a source
    /// that has them.
    /// Interrupt-safe: yes.
    pub const fn faults(&self) -> u64 {
        self.rejected_updates + self.reanchored_updates
    }
}

/// A validated map of the page, for a reader that caches it (the facade's
/// `Clock`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageMap {
    /// The page sequence the map is valid for ([`HypervPageClock::sequence`]).
    pub sequence: u32,
    /// TSC ticks to reference nanoseconds.
    pub map: TscMap,
    /// Readings are ordered across CPUs by the hypervisor.
    pub ordered: bool,
    /// The TSC value the page was sampled with.
    pub tsc: u64,
}

#[derive(Debug, Default)]
struct Counters {
    msr_fallbacks: AtomicU64,
    held: AtomicU64,
}

/// The "hyperv-page" clock: Hyper-V reference time in nanoseconds, from the
/// reference TSC page.
///
/// Reads cost `rdtsc`, a few loads of the calling CPU's cached map and one
/// multiply; while the host marks the page invalid (sequence 0, e.g. around
/// a live migration) a read takes TIME_REF_COUNT instead (one exit, counted
/// in [`PageStats::msr_fallbacks`]; a read whose MSR access raises #GP
/// holds). Each host update of scale or offset is judged once per CPU
/// ([`clockhal_core::judge_update`]) before a reading uses it; the MSR's
/// value is the partition's word as the TLFS defines it, and `clockhal`'s
/// `Clock` checks it against an independent counter before returning it
/// (the MSR cannot vouch for itself there, and the watchdog counts this
/// clock as the MSR while it falls back: [`falls_back`](Self::falls_back)).
/// Never earlier than a value returned before on the same CPU; across CPUs
/// ordered by the hypervisor's promise (or, after
/// [`distrust_order`](Self::distrust_order), by a global clamp).
///
/// Dropping it disables the page (partition-wide).
#[derive(Debug)]
pub struct HypervPageClock<H: Hardware> {
    pub(crate) msr: HypervMsrClock<H>,
    page: PhysMapped<HvReferenceTscPage>,
    msr_fallback: bool,
    /// Its own reads' per-CPU state and clamp (the one read loop in core).
    timeline: Timeline,
    /// Judges host updates; holds the last parameters any CPU accepted
    /// (the page is partition-wide).
    judge: UpdateJudge,
    ordered: AtomicBool,
    epoch: AtomicU32,
    counters: Counters,
    /// Reads fell back to TIME_REF_COUNT since the last judged update.
    fell_back: AtomicBool,
}

/// How closely a page update that ends a fallback window must agree with
/// TIME_REF_COUNT to be taken without continuity with the map before it.
const FALLBACK_AGREEMENT_NS: u64 = 1_000_000;

impl<H: Hardware> HypervPageClock<H> {
    /// A clock over an enabled, checked page whose first map is
    /// `probe_map`. `msr_fallback`: whether TIME_REF_COUNT may be read when
    /// the page is invalid. `Err` (the MSR clock back) when the machine's
    /// pool has no free per-CPU set.
    pub(crate) fn new(
        msr: HypervMsrClock<H>,
        page: PhysMapped<HvReferenceTscPage>,
        msr_fallback: bool,
        probe_map: TscMap,
        bounds: UpdateBounds,
    ) -> Result<Self, HypervMsrClock<H>> {
        let Some(timeline) = Timeline::claim(msr.hw.slot_pool(), ClampGranule::EXACT) else {
            return Err(msr);
        };
        let judge = UpdateJudge::new(probe_map, bounds, page.get().sequence.load(Relaxed), 2);
        Ok(HypervPageClock {
            msr,
            page,
            msr_fallback,
            timeline,
            judge,
            ordered: AtomicBool::new(true),
            epoch: AtomicU32::new(2),
            counters: Counters::default(),
            fell_back: AtomicBool::new(false),
        })
    }

    /// Reference time in nanoseconds (see the type docs). Bounded. The
    /// loop is core's ([`clockhal_core::timeline`]) over this page as a
    /// [`TscSource`].
    /// Interrupt-safe: yes.
    #[inline(always)]
    pub fn read_ns(&self) -> u64 {
        self.timeline
            .read(self.msr.hw.slot_pool(), Seam(&self.msr.hw), self)
    }

    /// The validated map of the page now, as CPU `cpu` sees it (one
    /// seqlock sample, and a judgement of the parameters when the host
    /// changed them since that CPU's last one), cached for the read path.
    /// `Err` while the page is invalid, stuck mid-update or never had
    /// plausible parameters.
    ///
    /// Interrupt-safe: yes (lock-free, bounded).
    pub fn page_map(&self, cpu: usize) -> Result<PageMap, PageError> {
        self.page_map_after(cpu, None)
    }

    /// [`page_map`](Self::page_map) for a caller that reads through the
    /// maps with floors of its own (`clockhal`'s `Clock`): `returned` is
    /// the highest value it returned from this page, in page ns. New
    /// parameters are a step back only against what was returned (by the
    /// caller or by this clock's own reads), not against the old
    /// parameters' extrapolation nobody read (a host that stopped the
    /// guest and restores the page's time where it stopped:
    /// [`clockhal_core::judge_update_after`]).
    ///
    /// Interrupt-safe: yes (lock-free, bounded).
    pub fn page_map_after(&self, cpu: usize, returned: Option<u64>) -> Result<PageMap, PageError> {
        let epoch = self.epoch.load(Acquire);
        let last = self.timeline.last_map(self.msr.hw.slot_pool(), cpu, epoch);
        self.sample_map(last, returned).map(|m| PageMap {
            sequence: m.tag,
            map: m.map,
            ordered: m.ordered,
            tsc: m.tsc,
        })
    }

    /// One sample of the page and, for new parameters, their judgement
    /// against `last` (the reader's last map on the calling CPU).
    fn sample_map(
        &self,
        last: Option<LastMap>,
        returned: Option<u64>,
    ) -> Result<MapNow, PageError> {
        let epoch = self.epoch.load(Acquire);
        // Only a map of this epoch is a cache and a baseline (a withdrawn
        // order or a restore drops both).
        let cached = last.filter(|l| l.current);
        let s = sample(self.page.get(), || self.msr.hw.rdtsc_ordered())?;
        // The page is the partition's: an update another CPU judged already
        // is taken as judged (its continuity may have rested on an
        // agreement with TIME_REF_COUNT that this CPU's older map, drifting
        // at a migrated TSC rate, cannot give).
        let judged = || self.judge.accepted_for(s.sequence, epoch);
        let map = match cached
            .filter(|e| e.tag == s.sequence)
            .map(|e| e.map)
            .or_else(judged)
        {
            Some(m) => m,
            None => {
                // Judged against this CPU's last map, else the last one any
                // CPU accepted (the page is partition-wide) — unless reads
                // fell back to TIME_REF_COUNT meanwhile (around a migration,
                // whose TSC rate change makes the old map drift) and the
                // update agrees with TIME_REF_COUNT now: then that is its
                // continuity, and only its plausibility is judged.
                let new = (s.scale != 0).then(|| TscMap::hyperv(s.scale, s.offset));
                let after_fallback = self.fell_back.swap(false, AcqRel)
                    && new.is_some_and(|n| {
                        self.msr.try_raw_100ns().is_some_and(|r| {
                            n.apply(s.tsc).abs_diff(r.saturating_mul(100)) <= FALLBACK_AGREEMENT_NS
                        })
                    });
                let last = if after_fallback {
                    None
                } else {
                    cached.map(|e| e.map).or_else(|| self.last_accepted())
                };
                // A rejected update keeps the previous parameters.
                // `None` is below any value: the larger of the two known.
                let returned = returned.max(self.returned());
                self.judge
                    .judge_after(
                        last,
                        returned,
                        new,
                        s.tsc,
                        s.sequence,
                        self.epoch.load(Acquire),
                    )
                    .map_err(PageError::Implausible)?
            }
        };
        Ok(MapNow {
            tag: s.sequence,
            map,
            ordered: self.ordered.load(Relaxed),
            tsc: s.tsc,
        })
    }

    /// The highest value this clock's own reads returned on any CPU
    /// (`None`: nothing yet).
    fn returned(&self) -> Option<u64> {
        self.timeline.returned(self.msr.hw.slot_pool())
    }

    /// Whether a read on CPU `cpu` now returns the MSR's value (the page is
    /// invalid, stuck or its parameters were rejected, and the partition
    /// offers TIME_REF_COUNT): a cross-check must then count this clock
    /// as the MSR, not as the TSC.
    /// Interrupt-safe: yes.
    pub fn falls_back(&self, cpu: usize) -> bool {
        self.msr_fallback && self.page_map(cpu).is_err()
    }

    /// TIME_REF_COUNT in ns, when the partition offers it: what a read
    /// returns while the page is invalid (one exit). `None` also when the
    /// read raised #GP (no fresh value; counted as a host fault).
    /// Interrupt-safe: yes.
    pub fn fallback_ns(&self) -> Option<u64> {
        if !self.msr_fallback {
            return None;
        }
        let ns = self.msr.try_raw_100ns()?.saturating_mul(100);
        self.fell_back.store(true, Relaxed);
        Some(ns)
    }

    /// The map some CPU accepted last in this epoch (none after a resume:
    /// the restored host's first parameters are taken as they are).
    fn last_accepted(&self) -> Option<TscMap> {
        self.judge.last_accepted(self.epoch.load(Acquire))
    }

    /// Changes whenever readings' validity changes for every CPU (a
    /// withdrawn order, a resume): a reader that caches [`PageMap`]s drops
    /// them when it changes.
    /// Interrupt-safe: yes.
    pub fn epoch(&self) -> u32 {
        self.epoch.load(Acquire)
    }

    /// The page's sequence now (what [`PageMap::sequence`] must equal for a
    /// cached map to be current).
    /// Interrupt-safe: yes.
    #[inline(always)]
    pub fn sequence(&self) -> u32 {
        self.page.get().sequence.load(Relaxed)
    }

    /// Whether readings rely on the hypervisor's cross-CPU order (true
    /// until [`distrust_order`](Self::distrust_order)): what a reader of the
    /// raw page without this clock's clamp, such as a user program, needs.
    /// Interrupt-safe: yes.
    pub fn ordered(&self) -> bool {
        self.ordered.load(Acquire)
    }

    /// Stops trusting the hypervisor's cross-CPU order (the OS's warp test
    /// found the TSCs out of step): reads go through a global clamp from
    /// now on, starting above every value returned so far.
    /// Interrupt-safe: yes.
    pub fn distrust_order(&self) {
        if self.ordered.swap(false, AcqRel) {
            self.timeline.absorb_floors(self.msr.hw.slot_pool());
            self.epoch.fetch_add(2, AcqRel);
        }
    }

    /// After a restore: forgets the continuity of the parameters and every
    /// floor (the restored partition's reference time may lie before the
    /// old one; a `Clock` on top rebases its own timeline).
    /// Interrupt-safe: no (a per-CPU lifecycle step).
    pub fn reset_monotonic(&self) {
        self.epoch.fetch_add(2, AcqRel);
        self.timeline.reset(self.msr.hw.slot_pool());
        self.msr.reset_monotonic();
    }

    /// Counters of reads and updates that did not go the normal way.
    /// Interrupt-safe: yes.
    pub fn stats(&self) -> PageStats {
        let c = &self.counters;
        PageStats {
            msr_fallbacks: c.msr_fallbacks.load(Relaxed),
            held_reads: c.held.load(Relaxed),
            rejected_updates: self.judge.rejected(),
            reanchored_updates: self.judge.reanchored(),
        }
    }

    /// The page's memory.
    /// Interrupt-safe: yes.
    pub fn page(&self) -> &'static HvReferenceTscPage {
        self.page.get()
    }

    /// The page with its physical address.
    pub(crate) fn page_mapping(&self) -> PhysMapped<HvReferenceTscPage> {
        self.page
    }

    /// The hardware access this clock was built with.
    /// Interrupt-safe: yes.
    pub fn hardware(&self) -> &H {
        &self.msr.hw
    }
}

impl<H: Hardware> Drop for HypervPageClock<H> {
    fn drop(&mut self) {
        hv_disable_reference_tsc(&self.msr.hw);
        self.timeline.release(self.msr.hw.slot_pool());
    }
}

impl<H: Hardware> TscSource for HypervPageClock<H> {
    /// One page for the partition.
    const PER_CPU_MAP: bool = false;
    #[inline(always)]
    fn token(&self, _: usize) -> Option<u32> {
        Some(self.sequence())
    }
    #[inline(always)]
    fn token_reader(&self, _: usize) -> Option<impl Fn() -> Option<u32> + '_> {
        let page = self.page.get();
        Some(move || Some(page.sequence.load(Relaxed)))
    }
    fn map_now(
        &self,
        _: usize,
        last: Option<LastMap>,
        returned: Option<u64>,
    ) -> Result<MapNow, MapMiss> {
        self.sample_map(last, returned).map_err(|e| match e {
            PageError::Implausible(f) => MapMiss::Rejected(f),
            PageError::Busy => MapMiss::Busy,
            _ => MapMiss::Unavailable,
        })
    }
    /// TIME_REF_COUNT (counted in [`PageStats::msr_fallbacks`]).
    fn fallback_ns(&self, _: usize) -> Option<u64> {
        let ns = HypervPageClock::fallback_ns(self);
        if ns.is_some() {
            self.counters.msr_fallbacks.fetch_add(1, Relaxed);
        }
        ns
    }
    fn held(&self) {
        self.counters.held.fetch_add(1, Relaxed);
    }
    fn epoch(&self) -> u32 {
        self.epoch.load(Acquire)
    }
}

impl<H: Hardware> ClockSource for HypervPageClock<H> {
    /// The TSC, except while the calling CPU's reads fall back to
    /// TIME_REF_COUNT: then the MSR's counter (one vote with the MSR clock).
    fn counter_domain(&self) -> Option<clockhal_core::CounterDomain> {
        Some(if self.falls_back(self.msr.hw.cpu_index()) {
            clockhal_core::CounterDomain::HypervisorCounter
        } else {
            clockhal_core::CounterDomain::Tsc
        })
    }
    fn name(&self) -> &'static str {
        "hyperv-page"
    }
    #[inline]
    fn read(&self) -> u64 {
        self.read_ns()
    }
    fn frequency(&self) -> Frequency {
        // Nanoseconds: the page's 100 ns units, interpolated by the TSC.
        Frequency::NANOSECONDS
    }
    fn quality(&self) -> Quality {
        PAGE_RATING
    }
    fn stability(&self) -> Stability {
        PAGE_STABILITY
    }
    fn read_cost(&self) -> ReadCost {
        ReadCost::NoTrap
    }
}
