//! `Clock::now()`: the read paths.
//!
//! The current source is dispatched statically. A TSC-based source (the
//! TSC, kvmclock, the Hyper-V page) is read through the calling CPU's
//! cached [`TscMap`] — the backend's validated map shifted onto the clock's
//! timeline — so a read is: this CPU's slot (one cache line), the source's
//! token (the pvclock version, the page sequence), `rdtsc`, one multiply,
//! and an interrupt-safe raise of this CPU's floor. Everything else (a
//! changed token, a reading past the slot's limit, a trapping device) takes
//! the slow path, which never blocks: a read from an interrupt handler that
//! preempted a writer on the same CPU computes its value without the cache.

use super::{Clock, REVALIDATE_NS};
use crate::{Demotion, SourceId};
use clockhal_core::timeline::still_paired;
use clockhal_core::{
    Estimate, LastMap, MapMiss, MapNow, ReadState, Scale, TimelineOwner, TscSource,
};
use clockhal_x86::{Hardware, Seam};
use core::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};

pub(crate) use clockhal_core::timeline::BEFORE_ZERO;

/// The state word's source index bits.
pub(crate) const ID_MASK: u32 = 0x7F;

/// The state word's "switch in progress" bit: from the moment a switch
/// begins until the new source's timeline is set, every read that does not
/// finish on the old state's cached map holds at the high-water mark, so no
/// CPU returns an old-timeline reading taken after the new start was fixed,
/// nor a new-timeline one from before it was set.
pub(crate) const SWITCHING: u32 = 0x80;

/// The time a device read after a gap may take (its count lying that
/// much after its TSC) beyond what the pair's own read took, before a
/// reading the estimate did not place is retried rather than taken as
/// the TSC's fault. Trapping reads take µs; a nested hypervisor's ~250 µs.
pub(crate) const READ_SKEW_NS: u64 = 2_000_000;

/// How far from the TSC's estimate of a device's count after a gap of
/// `gap_ns` its reading may be placed: the TSC rate's error over the gap
/// (1,000 ppm, four times the most a supervised TSC's calibration may be
/// off), the skew of the pair's read (`pair_skew_ns`) and that of this
/// read (as the pair's, or [`READ_SKEW_NS`]).
pub(crate) const fn estimate_within(gap_ns: u64, pair_skew_ns: u64) -> u64 {
    let read_skew = if pair_skew_ns > READ_SKEW_NS {
        pair_skew_ns
    } else {
        READ_SKEW_NS
    };
    (gap_ns / 1_000)
        .saturating_add(pair_skew_ns)
        .saturating_add(read_skew)
}

/// Why [`Clock::read_current_device`] gives no count now: a hold that
/// passes (a pair being written, a gap nothing measured), or one that may
/// last (a host whose reads are all slower than the gap's bound allows),
/// which counts towards [`STUCK_READS`](crate::STUCK_READS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hold {
    Uncounted,
    Counted,
}

/// Ticks from `base` to `ticks` of a forward-moving extended count, also
/// across 2^64 (a 64-bit HPET left near it); a count below the base (a
/// device that went back or was reset) is no time, not 2^64 of it.
pub(crate) const fn ticks_since(ticks: u64, base: u64) -> u64 {
    let d = ticks.wrapping_sub(base);
    if d > BEFORE_ZERO {
        0
    } else {
        d
    }
}

impl<H: Hardware + Clone> Clock<H> {
    /// The clock's nanoseconds now (see [`Clock::now`]).
    #[inline(always)]
    pub(crate) fn now_ns(&self) -> u64 {
        let st = self.state.load(Acquire);
        let cpu = self.hw.cpu_index();
        let fixed = self.hw.cpu_index_is_fixed();
        // The TSC right after the two loads everything else is checked
        // against (the source generation and the CPU): the ordered read
        // waits only for them, and the slot's loads overlap with it.
        let t = self.hw.rdtsc_ordered();
        let b = &self.backends;
        // On the index itself: a compare per TSC-based source, no table.
        const KVMCLOCK: u32 = SourceId::Kvmclock.index() as u32;
        const HYPERV_PAGE: u32 = SourceId::HypervPage.index() as u32;
        const TSC: u32 = SourceId::Tsc.index() as u32;
        match st & ID_MASK {
            KVMCLOCK => self.read_mapped(b.kvmclock_mapped(), st, cpu, fixed, t),
            HYPERV_PAGE => self.read_mapped(b.hyperv_page_mapped(), st, cpu, fixed, t),
            TSC => self.read_mapped(b.tsc_mapped(), st, cpu, fixed, t),
            _ => self.read_other(st, cpu, fixed, t),
        }
    }

    /// Any other source: through the read loop if it is TSC-based (an
    /// OS-supplied one, [`Platform::extra_tsc_source`](crate::Platform::extra_tsc_source)),
    /// else a device read.
    #[inline(never)]
    fn read_other(&self, st: u32, cpu: usize, fixed: bool, t: u64) -> u64 {
        let i = (st & ID_MASK) as usize;
        if !self.mapped.get(i).copied().unwrap_or(false) {
            return self.read_device(st, cpu);
        }
        match SourceId::from_index(i).and_then(|id| self.backends.tsc_source(id)) {
            Some(m) => self.read_mapped(Some(&m), st, cpu, fixed, t),
            None => self.read_device(st, cpu),
        }
    }

    /// A TSC-based current source: core's one read loop
    /// ([`clockhal_core::timeline`]) with the clock as its owner.
    #[inline(always)]
    fn read_mapped<M: TscSource>(
        &self,
        m: Option<&M>,
        st: u32,
        cpu: usize,
        fixed: bool,
        t: u64,
    ) -> u64 {
        let Some(m) = m else {
            return self.read_device(st, cpu);
        };
        let rs = self.read_state();
        let hw = Seam(&self.hw);
        // After the TSC read: that no switch began, that the value still
        // pairs with the entry's map (a kernel that migrates threads
        // mid-read gets a retry), and the source's token.
        let token = |ordered: bool| {
            if self.state.load(Relaxed) == st && still_paired::<M, _>(hw, cpu, fixed, ordered) {
                m.token(cpu)
            } else {
                None
            }
        };
        match rs.read_fast(hw, cpu, st << 1, token, t) {
            Some(v) => v,
            None => rs.read_slow(hw, m, Owner(self), st << 1, cpu),
        }
    }

    /// The clock's per-CPU slots and clamp, as core's loop reads them.
    #[inline(always)]
    pub(crate) fn read_state(&self) -> ReadState<'_> {
        ReadState {
            slots: Some(self.slots()),
            clamp: &self.clamp,
        }
    }

    /// `m`'s validated map now for CPU `cpu`, judged against the clock's
    /// own last map there (outside the read loop: stamps, the user page,
    /// a new offset). `returned` as for [`TscSource::map_now`].
    pub(crate) fn map_now_of<M: TscSource + ?Sized>(
        &self,
        m: &M,
        id: SourceId,
        cpu: usize,
        returned: Option<u64>,
    ) -> Result<MapNow, MapMiss> {
        let st = self.state.load(Acquire);
        let last = if st & ID_MASK == id.index() as u32 {
            let offset = self.offsets[id.index()].load(Acquire);
            self.read_state().last_map(cpu, st << 1, offset)
        } else {
            None
        };
        m.map_now(cpu, last.filter(|l: &LastMap| l.current), returned)
    }

    /// Raises `ns` to the floors that apply: this CPU's always, and the
    /// global clamp for a source that does not order readings across CPUs.
    #[inline(always)]
    pub(crate) fn raise(&self, cpu: usize, ordered: bool, ns: u64) -> u64 {
        self.read_state().raise(Seam(&self.hw), cpu, ordered, ns)
    }

    /// The highest instant returned so far, in the nanoseconds of the
    /// current source whose `offset` (clock ns = source ns + offset) is
    /// given; `None` before anything was returned, or when it would lie
    /// before the source's start (not a value it gave).
    #[inline]
    pub(crate) fn returned_by(&self, offset: u64) -> Option<u64> {
        self.read_state().returned_by(offset)
    }

    /// A device (HPET, PM timer, Hyper-V MSR, an OS-supplied source): one
    /// read, scaled onto the timeline from the base set when it became
    /// current.
    #[inline(never)]
    fn read_device(&self, st: u32, cpu: usize) -> u64 {
        if st & SWITCHING != 0 {
            return self.hold_uncounted(cpu);
        }
        let id = (st & ID_MASK) as usize;
        let (Some(src), Some(scale)) = (
            SourceId::from_index(id).and_then(|i| self.backends.source(i)),
            self.scale_of(id),
        ) else {
            return self.hold(cpu);
        };
        let ticks = match self.read_current_device(id, src) {
            Ok(ticks) => ticks,
            Err(Hold::Uncounted) => return self.hold_uncounted(cpu),
            Err(Hold::Counted) => return self.hold(cpu),
        };
        let v = self.device_ns(id, scale, ticks);
        if self.state.load(Acquire) != st {
            // A switch raced this read (its bases may be torn): hold.
            return self.hold_uncounted(cpu);
        }
        if !self.plausible(v) {
            return self.hold(cpu);
        }
        self.after_fresh(v);
        self.raise(cpu, self.ordered[id], v)
    }

    /// The current device `i`'s count. A software-extended counter (a
    /// 32-bit HPET, the PM timer) that the clock left unread for more than
    /// half a wrap would lose its wraps: where the TSC's rate is known, the
    /// pair (TSC, count) of this CPU's last reading (any CPU's, where the
    /// TSCs agree across CPUs) estimates the count after the gap, and the
    /// extension places the reading at the wrap nearest it
    /// ([`ClockSource::read_near`]), if within the measure's error
    /// ([`estimate_within`]): a TSC its hypervisor stepped lands a phantom
    /// wrap only where the step is that close to whole wraps, and a gap so
    /// long that the error could hide a wrap (more than an eighth of one)
    /// is not measured at all. Readings that are the device's count then
    /// become pairs, with the time their read took; `Err` (hold) for one
    /// held across a gap nothing measured, for a slow read the estimate
    /// did not place (counted towards [`STUCK_READS`](crate::STUCK_READS):
    /// on a host where every read is that slow the clock moves on), and
    /// while the pair stays busy. Where no TSC spans the gap, or its
    /// measure disagrees with the count, wraps a gap hid may be lost:
    /// counted in [`Clock::unmeasured_gaps`], as `max_read_interval`
    /// warns.
    ///
    /// [`ClockSource::read_near`]: clockhal_core::ClockSource::read_near
    pub(crate) fn read_current_device(
        &self,
        i: usize,
        src: &dyn clockhal_core::ClockSource,
    ) -> Result<u64, Hold> {
        let (Some(interval), Some(tsc_scale), Some(scale)) = (
            src.max_read_interval(),
            self.gap_tsc_scale(),
            self.scale_of(i),
        ) else {
            // No witness: a gap is at most found, and counted.
            let r = src.read_near(None);
            self.note_unmeasured_gap(!r.current);
            return Ok(r.ticks);
        };
        let state = self.state.load(Acquire);
        let (cpu, shared) = (self.hw.cpu_index(), self.tscs_agree());
        let tsc = self.hw.rdtsc();
        // A pair being written (by another CPU sharing it) may be the one
        // that measures a gap: hold rather than read without it.
        let pair = self
            .gap_witness
            .get(cpu, shared, state)
            .map_err(|_| Hold::Uncounted)?;
        // A TSC behind the pair's measures nothing: just behind, another
        // CPU sharing it recorded a newer one; further (a TSC stepped
        // back, or so far ahead that it wrapped), a gap may have passed
        // that nothing measures.
        let mut tsc_broken = false;
        let estimate = pair.and_then(|p| {
            let Some(d) = tsc.checked_sub(p.tsc) else {
                let back = scale.ns_to_ticks(tsc_scale.ticks_to_ns(p.tsc - tsc));
                tsc_broken = back >= interval / 4;
                return None;
            };
            let gap_ns = tsc_scale.ticks_to_ns(d);
            // (A "gap" of decades: a TSC stepped back across zero.)
            tsc_broken = gap_ns > clockhal_core::timeline::FAR_BEFORE_ZERO_NS;
            let gap = scale.ns_to_ticks(gap_ns);
            if gap < interval {
                return None;
            }
            let within = scale.ns_to_ticks(estimate_within(gap_ns, p.skew_ns));
            // An error that could hide a whole wrap (more than an eighth
            // of one: a quarter of `interval`) measures no wraps: as
            // without an estimate (another CPU may have read since).
            (within <= interval / 4).then_some(Estimate {
                ticks: p.ticks.saturating_add(gap),
                within,
            })
        });
        let r = src.read_near(estimate);
        let took_ns = tsc_scale.ticks_to_ns(self.hw.rdtsc().saturating_sub(tsc));
        // The estimate did not place it: the TSC's measure was not the
        // count's (a stepped TSC, or one whose rate changed), or this
        // read was slower than the bound allowed.
        let unplaced = estimate.is_some_and(|e| r.ticks.abs_diff(e.ticks) > e.within);
        // A read that took more than an eighth of a wrap (a vCPU preempted
        // or paused inside it; `took_a_pause`), or one the estimate did not
        // place and slower than its bound allowed, may have been placed
        // without the gap that passed meanwhile: not returned, not a pair.
        // Its count is at most the truth, so the next reading, estimated
        // from the pair before, moves on past it.
        if super::gap_witness::took_a_pause(took_ns, scale.ticks_to_ns(interval)) {
            self.note_unmeasured_gap(!r.current && estimate.is_none());
            return Err(Hold::Uncounted);
        }
        if unplaced && took_ns > pair.map_or(0, |p| p.skew_ns).max(READ_SKEW_NS) {
            return Err(Hold::Counted);
        }
        if !r.current {
            self.note_unmeasured_gap(estimate.is_none());
            return Err(Hold::Uncounted);
        }
        if (unplaced || tsc_broken) && !self.in_unmeasured_gap.load(Relaxed) {
            // Placed by the count alone where the TSC said a gap passed,
            // or could not say: any whole wraps it held are lost.
            self.unmeasured_gaps.fetch_add(1, Relaxed);
        }
        self.note_unmeasured_gap(false);
        // The pair that estimates best from now on: this one, unless the
        // one it would replace is still tighter (its read's skew against
        // this one's, plus the TSC rate's error over its age).
        let tighter = pair.is_some_and(|p| {
            let age_ns = tsc_scale.ticks_to_ns(tsc.saturating_sub(p.tsc));
            took_ns > p.skew_ns.saturating_add(age_ns / 1_000)
        });
        if !tighter {
            let w = super::gap_witness::Witnessed {
                tsc,
                ticks: r.ticks,
                skew_ns: took_ns,
            };
            self.gap_witness.record(cpu, shared, state, w);
        }
        Ok(r.ticks)
    }

    /// Counts a gap nothing measured once, at its first held reading.
    #[inline]
    fn note_unmeasured_gap(&self, held: bool) {
        if self.in_unmeasured_gap.load(Relaxed) != held
            && self.in_unmeasured_gap.swap(held, Relaxed) != held
            && held
        {
            self.unmeasured_gaps.fetch_add(1, Relaxed);
        }
    }

    /// Whether the TSCs of all CPUs agree (one CPU's TSC measures a gap
    /// that began on another): warp-tested, and not found out of step
    /// since.
    /// Interrupt-safe: yes.
    pub(crate) fn tscs_agree(&self) -> bool {
        self.ordered[SourceId::Tsc.index()] && !self.backends.tsc_out_of_step()
    }

    /// Device `i`'s reading `ticks` on the clock's timeline: from the base
    /// set when it became current ([`Clock::start_source`]).
    #[inline]
    pub(crate) fn device_ns(&self, i: usize, scale: Scale, ticks: u64) -> u64 {
        let base_ticks = self.base_ticks[i].load(Acquire);
        self.base_ns[i]
            .load(Acquire)
            .saturating_add(scale.ticks_to_ns(ticks_since(ticks, base_ticks)))
    }

    /// No fresh value: not earlier than anything this CPU, or through the
    /// clamp any CPU, returned. Counted; after
    /// [`STUCK_READS`](super::STUCK_READS) in a row the clock switches
    /// away from the source on its own (without waiting for a watchdog
    /// tick), so it never freezes for good.
    #[cold]
    pub(crate) fn hold(&self, cpu: usize) -> u64 {
        self.count_held();
        let v = self.high_water();
        self.raise(cpu, true, v)
    }

    /// No fresh value, and not the source's fault: it does not serve this
    /// CPU (an unregistered kvmclock CPU), or a switch is in progress or
    /// raced the read. Not earlier than anything returned, and not counted
    /// towards [`STUCK_READS`](super::STUCK_READS).
    #[cold]
    fn hold_uncounted(&self, cpu: usize) -> u64 {
        let v = self.high_water();
        self.raise(cpu, true, v)
    }

    /// A run of held reads that counts against the source (see
    /// [`hold`](Self::hold)), without the read.
    #[cold]
    fn count_held(&self) {
        let held = self.held.fetch_add(1, Relaxed).saturating_add(1);
        if held >= super::STUCK_READS {
            self.held.store(0, Relaxed);
            self.demote_current(Demotion::Stuck { held_reads: held });
        }
    }

    /// A fresh value was produced: the run of held reads ends; a supervised
    /// TSC past its deadline (no watchdog tick) is switched away from.
    #[inline]
    fn after_fresh(&self, v: u64) {
        if self.held.load(Relaxed) != 0 {
            self.held.store(0, Relaxed);
        }
        if v > self.deadline.load(Acquire) && self.deadline_passed(v) {
            self.demote_current(Demotion::Unsupervised);
        }
    }

    /// Whether `v` may be returned: at most the ceiling (the last instant
    /// the watchdog verified, plus [`Settings::max_jump`](super::Settings)),
    /// or further, when an independent 64-bit reference confirms that the
    /// time really passed (then the ceiling moves). A reading that jumps
    /// beyond what the reference explains is a fault of the source: it is
    /// not returned, and the source is demoted.
    pub(super) fn plausible(&self, v: u64) -> bool {
        self.plausible_from(v, None)
    }

    /// [`plausible`](Self::plausible) for a reading of `origin`'s counter
    /// (a fallback): `origin` cannot be the reference that confirms it.
    fn plausible_from(&self, v: u64, origin: Option<SourceId>) -> bool {
        if v <= self.ceiling.load(Acquire) {
            return true;
        }
        match self.verify_jump(v, origin) {
            Ok(()) => true,
            Err(Some(excess_ns)) => {
                self.demote_current(Demotion::Jumped { excess_ns });
                false
            }
            Err(None) => false,
        }
    }

    /// Raises the ceiling (never lowers it).
    pub(crate) fn raise_ceiling(&self, to: u64) {
        self.ceiling.fetch_max(to, AcqRel);
    }
}

/// The clock as the owner of core's read loop over its current TSC-based
/// source: its epoch is its state word (a switch or a backend's changed
/// promises start a new one), its offset the source's, and a reading is
/// returned only through the clock's own checks (the jump check, the
/// supervision deadline, the stuck-read count).
struct Owner<'a, H: Hardware + Clone>(&'a Clock<H>);

impl<H: Hardware + Clone> Clone for Owner<'_, H> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<H: Hardware + Clone> Copy for Owner<'_, H> {}

impl<H: Hardware + Clone> TimelineOwner for Owner<'_, H> {
    #[inline(always)]
    fn epoch(&self) -> u32 {
        self.0.state.load(Acquire) << 1
    }
    #[inline(always)]
    fn current(&self, epoch: u32) -> bool {
        self.0.state.load(Acquire) << 1 == epoch
    }
    fn must_hold(&self, epoch: u32) -> bool {
        (epoch >> 1) & SWITCHING != 0
    }
    fn offset(&self, epoch: u32) -> u64 {
        let id = ((epoch >> 1) & ID_MASK) as usize;
        self.0.offsets[id].load(Acquire)
    }
    fn plausible(&self, v: u64, fallback: bool) -> bool {
        let id = SourceId::from_index(((self.epoch() >> 1) & ID_MASK) as usize);
        // A fallback counter cannot vouch for its own readings.
        let origin = if fallback {
            id.and_then(SourceId::fallback_counter)
        } else {
            None
        };
        self.0.plausible_from(v, origin)
    }
    fn limit(&self, v: u64) -> u64 {
        v.saturating_add(REVALIDATE_NS)
            .min(self.0.ceiling.load(Acquire))
            .min(self.0.deadline.load(Acquire))
    }
    fn fresh(&self, v: u64) {
        self.0.after_fresh(v);
    }
    fn held(&self, counted: bool) {
        if counted {
            self.0.count_held();
        }
    }
}
