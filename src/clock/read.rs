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
use crate::mapped::Mapped;
use crate::{Demotion, SourceId};
use clockhal_core::{Scale, SlotEntry};
use clockhal_x86::Hardware;
use core::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};

/// Clock readings above this (292 years) are a source reading below the
/// timeline's start, wrapped: treated as "before 0", never as time.
pub(crate) const BEFORE_ZERO: u64 = 1 << 63;

/// "Before zero" by more than this (2^60 ns, 36 years) is no real clock's
/// step back: a TSC that crossed 2^64 (2^64 ticks are 225 years at
/// 2.6 GHz, 36 years at 16 GHz), garbage.
pub(crate) const FAR_BEFORE_ZERO_NS: u64 = 1 << 60;

/// The state word's source index bits.
pub(crate) const ID_MASK: u32 = 0x7F;

/// The state word's "switch in progress" bit: from the moment a switch
/// begins until the new source's timeline is set, every read that does not
/// finish on the old state's cached map holds at the high-water mark, so no
/// CPU returns an old-timeline reading taken after the new start was fixed,
/// nor a new-timeline one from before it was set.
pub(crate) const SWITCHING: u32 = 0x80;

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
            _ => self.read_device(st, cpu),
        }
    }

    /// A TSC-based current source: this CPU's cached map, else the slow path.
    #[inline(always)]
    fn read_mapped<M: Mapped>(
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
        // A CPU sharing the overflow slot has no cache (PerCpuSlots::cache).
        let Some(slot) = self.slots().cache(cpu) else {
            return self.mapped_slow(m, st, cpu);
        };
        // After the TSC read: that no switch began, that the reader still
        // runs on `cpu` (a kernel that migrates threads mid-read gets a
        // retry), and the source's token.
        let tag = || {
            if self.state.load(Relaxed) == st && (fixed || self.hw.cpu_index() == cpu) {
                m.tag(cpu)
            } else {
                None
            }
        };
        // The slot is this CPU's own: its CPU-local maximum.
        let read = slot.read_raised(
            st << 1,
            tag,
            || t,
            |ns| self.clamp.clamp(ns),
            |cell, v| self.hw.fetch_max_local(cell, v),
        );
        match read {
            Some(v) => v,
            None => self.mapped_slow(m, st, cpu),
        }
    }

    /// Raises `ns` to the floors that apply: this CPU's always, and the
    /// global clamp for a source that does not order readings across CPUs.
    #[inline(always)]
    pub(crate) fn raise(&self, cpu: usize, ordered: bool, ns: u64) -> u64 {
        let v = if ordered { ns } else { self.clamp.clamp(ns) };
        self.slots()
            .raise(cpu, v, |cell, v| self.hw.fetch_max_local(cell, v))
    }

    #[cold]
    #[inline(never)]
    fn mapped_slow<M: Mapped>(&self, m: &M, st: u32, cpu: usize) -> u64 {
        if st & SWITCHING != 0 {
            return self.hold_uncounted(cpu);
        }
        let id = (st & ID_MASK) as usize;
        let offset = self.offsets[id].load(Acquire);
        let (v, ordered) = match m.map_now(cpu, self.returned_by(offset)) {
            Some(now) => {
                let map = now.map.offset_by(offset);
                let v = map.apply(now.tsc);
                if v > BEFORE_ZERO {
                    return self.before_zero(cpu, now.ordered, v);
                }
                if !now.ordered {
                    // Leaving the source's own order for the clamp's.
                    self.clamp.absorb(self.slots().max_floor());
                }
                if !self.plausible(v) {
                    return self.hold(cpu);
                }
                let limit = v
                    .saturating_add(REVALIDATE_NS)
                    .min(self.ceiling.load(Acquire))
                    .min(self.deadline.load(Acquire));
                if let (true, Some(slot)) =
                    (self.state.load(Acquire) == st, self.slots().cache(cpu))
                {
                    let ordered_bit = if now.ordered { SlotEntry::ORDERED } else { 0 };
                    slot.store(&SlotEntry {
                        tag: now.tag,
                        epoch: (st << 1) | ordered_bit,
                        map,
                        tsc: now.tsc,
                        limit,
                    });
                }
                (v, now.ordered)
            }
            None => match m.fallback_ns(cpu) {
                Some(ns) if ns.wrapping_add(offset) > BEFORE_ZERO => {
                    return self.before_zero(cpu, false, ns.wrapping_add(offset));
                }
                Some(ns) => {
                    let v = ns.wrapping_add(offset);
                    if !self.plausible_from(v, M::FALLBACK_ORIGIN) {
                        return self.hold(cpu);
                    }
                    // Leaving the source's own order for the clamp's (as
                    // for an unordered map above).
                    self.clamp.absorb(self.slots().max_floor());
                    (v, false)
                }
                None if !m.serves(cpu) => return self.hold_uncounted(cpu),
                None => return self.hold(cpu),
            },
        };
        if self.state.load(Acquire) != st {
            // A switch began meanwhile: the offset read may be the new one.
            // Hold (bounded: no retry that a stream of switches could
            // repeat without end).
            return self.hold_uncounted(cpu);
        }
        self.after_fresh(v);
        self.raise(cpu, ordered, v)
    }

    /// The highest instant returned so far, in the nanoseconds of the
    /// current source whose `offset` (clock ns = source ns + offset) is
    /// given; `None` before anything was returned, or when it would lie
    /// before the source's start (not a value it gave).
    #[inline]
    pub(crate) fn returned_by(&self, offset: u64) -> Option<u64> {
        let high = self.high_water();
        let v = high.wrapping_sub(offset);
        (high != 0 && v <= BEFORE_ZERO).then_some(v)
    }

    /// A reading `v` below where the clock's timeline started for its
    /// source ("before 0" on the wrapping timeline, never ~2^64). Below by
    /// anything a real clock can be (a step back soon after the start, an
    /// AP behind the boot CPU, by any amount up to [`FAR_BEFORE_ZERO_NS`]):
    /// this CPU's floor answers, and for a source that does not order
    /// readings across CPUs the clamp too (what any CPU returned), not
    /// counted. Further below, nothing but garbage explains it (a TSC that
    /// crossed 2^64 under an absolute map): a held read, counted against
    /// the source.
    #[cold]
    fn before_zero(&self, cpu: usize, ordered: bool, v: u64) -> u64 {
        if v.wrapping_neg() <= FAR_BEFORE_ZERO_NS {
            self.raise(cpu, ordered, 0)
        } else {
            self.hold(cpu)
        }
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
        let v = self.device_ns(id, scale, src.read());
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
        let held = self.held.fetch_add(1, Relaxed).saturating_add(1);
        if held >= super::STUCK_READS {
            self.held.store(0, Relaxed);
            self.demote_current(Demotion::Stuck { held_reads: held });
        }
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

    /// A fresh value was produced: the run of held reads ends; a supervised
    /// TSC past its deadline (no watchdog tick) is switched away from.
    #[inline]
    fn after_fresh(&self, v: u64) {
        if self.held.load(Relaxed) != 0 {
            self.held.store(0, Relaxed);
        }
        if v > self.deadline.load(Acquire) {
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
