//! The one per-CPU read loop over a TSC-based source.
//!
//! Every TSC-based clock (the TSC, kvmclock, the Hyper-V page, and
//! `clockhal`'s `Clock` over any of them) reads the same way: this CPU's
//! slot (one cache line: a validated map under a seqlock and the CPU's
//! floor), the source's token, `rdtsc`, one multiply, and an
//! interrupt-safe raise of the floor. A changed token, a reading past the
//! slot's window or a CPU without a slot of its own takes the slow path:
//! one validated map from the source ([`TscSource::map_now`]), stored in
//! the slot; no map at all holds at the highest value returned. Readings a
//! source does not order across CPUs go through one global clamp.
//!
//! This module is that loop, once. A source implements [`TscSource`] (what
//! it knows: its token, how to validate its parameters); whoever reads it
//! provides a [`ReadHw`] (the CPU index, the TSC, the CPU-local max) and a
//! [`TimelineOwner`] (its timeline: an offset, an epoch its cached entries
//! carry, what it may return). [`Timeline`] is the read state a source
//! used on its own keeps (a set of per-CPU slots from the machine's pool,
//! and its clamp), with the trivial owner.

use crate::sync::slots::{AtomicU64, Ordering::Relaxed};
use crate::{
    ClampGranule, MonotonicClamp, PerCpuSlots, SlotEntry, SlotPool, SlotSet, TscMap, UpdateFault,
    REVALIDATE_NS,
};

/// Readings above this (292 years) are a source reading below the
/// timeline's start, wrapped: treated as "before 0", never as time.
pub const BEFORE_ZERO: u64 = 1 << 63;

/// "Before zero" by more than this (2^60 ns, 36 years) is no real clock's
/// step back: a TSC that crossed 2^64, garbage.
pub const FAR_BEFORE_ZERO_NS: u64 = 1 << 60;

/// Samples retried on the new CPU when the caller migrates during one.
const MIGRATION_RETRIES: usize = 3;

/// A validated map of a TSC-based source now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapNow {
    /// The source's token it is valid for (pvclock version, page sequence).
    pub tag: u32,
    /// TSC ticks to the source's own nanoseconds.
    pub map: TscMap,
    /// The source orders readings across CPUs itself.
    pub ordered: bool,
    /// The TSC value sampled with it.
    pub tsc: u64,
}

/// The reader's last validated map for one CPU, handed to
/// [`TscSource::map_now`]: the continuity baseline of the next host update
/// on that CPU, and the map to reuse while the host is mid-update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LastMap {
    /// The token it was validated for.
    pub tag: u32,
    /// TSC ticks to the source's own nanoseconds.
    pub map: TscMap,
    /// It was ordered across CPUs by the source.
    pub ordered: bool,
    /// It is of the reader's current epoch (else it is a baseline only:
    /// the source's promises changed since, e.g. a revoked stable bit).
    pub current: bool,
}

/// Why a source gave no map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum MapMiss {
    /// The source does not serve this CPU (no area, not registered): not
    /// its fault; a read holds without counting against it.
    Unserved,
    /// The caller is no longer on the CPU it sampled for.
    Migrated,
    /// The host stayed mid-update for too long and there is no earlier map.
    Busy,
    /// The host's parameters were never plausible.
    Rejected(UpdateFault),
    /// The source's counter is unusable now (the Hyper-V page invalid).
    Unavailable,
}

/// A TSC-based clock source as a timeline reads it: implemented by each
/// such backend (and by any OS-supplied one).
pub trait TscSource {
    /// Its map is per CPU (a per-vCPU pvclock area): a read that migrated
    /// between taking the CPU index and its TSC read would pair one CPU's
    /// TSC with another's map, so the loop checks the index again after
    /// the TSC read, unless the cached map is one the source orders across
    /// CPUs ([`MapNow::ordered`]: kvmclock's trusted stable bit, where KVM's
    /// master clock writes the same parameters into every area and
    /// `check_stable_agreement` withdraws the promise where they differ). A source with one map for every CPU (the Hyper-V page,
    /// the TSC) needs no check: its floors are raised with a CPU-local max
    /// that is atomic across CPUs too, and a reading it orders across CPUs
    /// stays above another CPU's floor (an unordered one goes through the
    /// clamp).
    const PER_CPU_MAP: bool = true;

    /// The source's current token for `cpu` (one load, read after the TSC),
    /// `None` if it has none for that CPU. Tokens only move forward while a
    /// map is valid: a cached map is current while its tag equals the token.
    /// Interrupt-safe: yes (NMI too).
    fn token(&self, cpu: usize) -> Option<u32>;

    /// [`token`](Self::token) in two steps: where `cpu`'s token lives is
    /// found by this call, before the TSC read (`None`: it has none, the
    /// read takes the slow path at once), and the closure it returns loads
    /// the token after it.
    /// Interrupt-safe: yes (NMI too).
    #[inline(always)]
    fn token_reader(&self, cpu: usize) -> Option<impl Fn() -> Option<u32> + '_>
    where
        Self: Sized,
    {
        Some(move || self.token(cpu))
    }

    /// The validated map for `cpu` now: one sample of the source and, when
    /// its parameters changed since `last`, a judgement of the new ones.
    /// `returned`: the highest value the reader returned from this source,
    /// in the source's nanoseconds (`None`: nothing, or not known), so that
    /// new parameters are a step back only against it.
    /// Interrupt-safe: yes (lock-free, bounded).
    fn map_now(
        &self,
        cpu: usize,
        last: Option<LastMap>,
        returned: Option<u64>,
    ) -> Result<MapNow, MapMiss>;

    /// The best value without a map, in the source's own nanoseconds (the
    /// Hyper-V page's TIME_REF_COUNT fallback), if any. Such a value is a
    /// global counter's: readings from it go through the clamp.
    /// Interrupt-safe: yes.
    fn fallback_ns(&self, cpu: usize) -> Option<u64> {
        let _ = cpu;
        None
    }

    /// Whether the source serves CPU `cpu` at all (a kvmclock area is
    /// registered there): a CPU it does not serve holds without counting
    /// against the source, and a cross-check skips it there.
    /// Interrupt-safe: yes.
    fn serves(&self, cpu: usize) -> bool {
        let _ = cpu;
        true
    }

    /// A read of this source held by its fault (no map, no fallback), for
    /// the source's own statistics.
    /// Interrupt-safe: yes.
    fn held(&self) {}

    /// Changes (by an even step, never to 0) whenever every cached map of
    /// the source went stale at once (a withdrawn cross-CPU promise, a
    /// resume). 2 for a source whose maps never go stale that way.
    /// Interrupt-safe: yes.
    fn epoch(&self) -> u32 {
        2
    }
}

impl<T: TscSource + ?Sized> TscSource for &T {
    const PER_CPU_MAP: bool = T::PER_CPU_MAP;
    #[inline(always)]
    fn token(&self, cpu: usize) -> Option<u32> {
        (**self).token(cpu)
    }
    fn map_now(
        &self,
        cpu: usize,
        last: Option<LastMap>,
        returned: Option<u64>,
    ) -> Result<MapNow, MapMiss> {
        (**self).map_now(cpu, last, returned)
    }
    fn fallback_ns(&self, cpu: usize) -> Option<u64> {
        (**self).fallback_ns(cpu)
    }
    fn serves(&self, cpu: usize) -> bool {
        (**self).serves(cpu)
    }
    fn held(&self) {
        (**self).held()
    }
    fn epoch(&self) -> u32 {
        (**self).epoch()
    }
}

/// [`TscSource`] as a trait object (`&dyn DynTscSource`), for a source
/// whose type the reader does not know (an OS-supplied one); every
/// `TscSource` is one. Read through it, a source counts as having a map
/// per CPU (the conservative [`TscSource::PER_CPU_MAP`]).
pub trait DynTscSource {
    /// [`TscSource::token`].
    /// Interrupt-safe: yes (NMI too).
    fn dyn_token(&self, cpu: usize) -> Option<u32>;
    /// [`TscSource::map_now`].
    /// Interrupt-safe: yes (lock-free, bounded).
    fn dyn_map_now(
        &self,
        cpu: usize,
        last: Option<LastMap>,
        returned: Option<u64>,
    ) -> Result<MapNow, MapMiss>;
    /// [`TscSource::fallback_ns`].
    /// Interrupt-safe: yes.
    fn dyn_fallback_ns(&self, cpu: usize) -> Option<u64>;
    /// [`TscSource::serves`].
    /// Interrupt-safe: yes.
    fn dyn_serves(&self, cpu: usize) -> bool;
    /// [`TscSource::held`].
    /// Interrupt-safe: yes.
    fn dyn_held(&self);
    /// [`TscSource::epoch`].
    /// Interrupt-safe: yes.
    fn dyn_epoch(&self) -> u32;
}

impl<T: TscSource> DynTscSource for T {
    fn dyn_token(&self, cpu: usize) -> Option<u32> {
        self.token(cpu)
    }
    fn dyn_map_now(
        &self,
        cpu: usize,
        last: Option<LastMap>,
        returned: Option<u64>,
    ) -> Result<MapNow, MapMiss> {
        self.map_now(cpu, last, returned)
    }
    fn dyn_fallback_ns(&self, cpu: usize) -> Option<u64> {
        self.fallback_ns(cpu)
    }
    fn dyn_serves(&self, cpu: usize) -> bool {
        self.serves(cpu)
    }
    fn dyn_held(&self) {
        self.held()
    }
    fn dyn_epoch(&self) -> u32 {
        self.epoch()
    }
}

impl TscSource for dyn DynTscSource + '_ {
    fn token(&self, cpu: usize) -> Option<u32> {
        self.dyn_token(cpu)
    }
    fn map_now(
        &self,
        cpu: usize,
        last: Option<LastMap>,
        returned: Option<u64>,
    ) -> Result<MapNow, MapMiss> {
        self.dyn_map_now(cpu, last, returned)
    }
    fn fallback_ns(&self, cpu: usize) -> Option<u64> {
        self.dyn_fallback_ns(cpu)
    }
    fn serves(&self, cpu: usize) -> bool {
        self.dyn_serves(cpu)
    }
    fn held(&self) {
        self.dyn_held()
    }
    fn epoch(&self) -> u32 {
        self.dyn_epoch()
    }
}

/// What the read loop needs of the machine (`clockhal_x86::Seam` gives it
/// for any `Hardware`).
pub trait ReadHw {
    /// The calling CPU's index.
    /// Interrupt-safe: yes (NMI too).
    fn cpu_index(&self) -> usize;
    /// The index names the calling CPU for a whole read by construction.
    /// Interrupt-safe: yes (NMI too).
    fn cpu_index_is_fixed(&self) -> bool;
    /// The TSC, ordered after earlier loads.
    /// Interrupt-safe: yes (NMI too).
    fn rdtsc_ordered(&self) -> u64;
    /// `max(*cell, value)` stored and returned, atomic against everything
    /// on the calling CPU.
    /// Interrupt-safe: yes (NMI too).
    fn fetch_max_local(&self, cell: &AtomicU64, value: u64) -> u64;
}

/// How a CPU's own floor is raised: [`ReadHw::fetch_max_local`], atomic
/// against an interrupt on the CPU.
#[cfg(not(clockhal_loom_mutant))]
#[inline(always)]
fn local_max<M: ReadHw + Copy>(hw: M) -> impl FnOnce(&AtomicU64, u64) -> u64 {
    move |cell, v| hw.fetch_max_local(cell, v)
}

/// The mutant the read loop's loom model must catch
/// (`tests/loom_timeline.rs`): the floor raised by a plain load and store,
/// so a read on the same CPU between the two loses its raise.
#[cfg(clockhal_loom_mutant)]
#[inline(always)]
fn local_max<M: ReadHw + Copy>(hw: M) -> impl FnOnce(&AtomicU64, u64) -> u64 {
    let _ = hw;
    |cell, v| {
        let m = cell.load(Relaxed).max(v);
        cell.store(m, Relaxed);
        m
    }
}

/// Whoever runs the loop over a source: its timeline and what it allows.
/// [`Standalone`] is a source's own timeline; `clockhal`'s `Clock` is the
/// other owner.
pub trait TimelineOwner {
    /// The epoch (even, non-zero) the owner's slot entries carry now; an
    /// entry of another epoch is no cache (but is still a baseline).
    /// Interrupt-safe: yes.
    fn epoch(&self) -> u32;
    /// Whether the owner still is at `epoch` (checked after the TSC read
    /// and before a slow path's value is returned).
    /// Interrupt-safe: yes.
    fn current(&self, epoch: u32) -> bool;
    /// Whether a read must hold without asking the source (a switch in
    /// progress).
    /// Interrupt-safe: yes.
    fn must_hold(&self, epoch: u32) -> bool {
        let _ = epoch;
        false
    }
    /// Owner ns = source ns + offset (wrapping).
    /// Interrupt-safe: yes.
    fn offset(&self, epoch: u32) -> u64 {
        let _ = epoch;
        0
    }
    /// Whether the fresh reading `v` (owner ns) may be returned;
    /// `fallback`: it came from the source's fallback counter.
    /// Interrupt-safe: yes.
    fn plausible(&self, v: u64, fallback: bool) -> bool {
        let _ = (v, fallback);
        true
    }
    /// The highest reading a map validated at `v` may serve from the cache.
    /// Interrupt-safe: yes.
    fn limit(&self, v: u64) -> u64 {
        v.saturating_add(REVALIDATE_NS)
    }
    /// A fresh reading `v` is about to be returned.
    /// Interrupt-safe: yes.
    fn fresh(&self, v: u64) {
        let _ = v;
    }
    /// A read held (no fresh value); `counted`: the source's fault.
    /// Interrupt-safe: yes.
    fn held(&self, counted: bool) {
        let _ = counted;
    }
}

/// The owner's `high` (owner ns = source ns + `offset`) in the source's
/// nanoseconds; `None` for 0 (nothing returned) or before the source's
/// start.
#[inline]
fn source_ns_of(high: u64, offset: u64) -> Option<u64> {
    let v = high.wrapping_sub(offset);
    (high != 0 && v <= BEFORE_ZERO).then_some(v)
}

/// The read state of one timeline: its per-CPU slots and its clamp.
#[derive(Clone, Copy, Debug)]
pub struct ReadState<'a> {
    /// One slot per CPU; `None`: no per-CPU memory (every read goes
    /// through the clamp, uncached).
    pub slots: Option<&'a PerCpuSlots>,
    /// The global clamp of readings not ordered across CPUs.
    pub clamp: &'a MonotonicClamp,
}

impl ReadState<'_> {
    /// The highest value returned through this state (floors and clamp).
    /// Interrupt-safe: yes.
    #[inline]
    pub fn high_water(self) -> u64 {
        self.slots
            .map_or(0, |s| s.max_floor())
            .max(self.clamp.last())
    }

    /// The highest value returned through this state, in the nanoseconds
    /// of a source whose `offset` the owner adds (owner ns = source ns +
    /// offset); `None` before anything was returned, or when it would lie
    /// before the source's start (not a value it gave).
    /// Interrupt-safe: yes.
    #[inline]
    pub fn returned_by(self, offset: u64) -> Option<u64> {
        source_ns_of(self.high_water(), offset)
    }

    /// Raises `ns` to the floors that apply: this CPU's always, and the
    /// global clamp for a reading the source does not order across CPUs
    /// (or when there are no per-CPU floors).
    /// Interrupt-safe: yes.
    #[inline(always)]
    pub fn raise<M: ReadHw + Copy>(self, hw: M, cpu: usize, ordered: bool, ns: u64) -> u64 {
        match self.slots {
            Some(s) => {
                let v = if ordered { ns } else { self.clamp.clamp(ns) };
                s.raise(cpu, v, local_max(hw))
            }
            None => self.clamp.clamp(ns),
        }
    }

    /// Readings leave the source's order for the clamp's: it starts above
    /// everything any CPU returned in order.
    /// Interrupt-safe: yes.
    #[inline]
    pub fn absorb_floors(self) {
        if let Some(s) = self.slots {
            self.clamp.absorb(s.max_floor());
        }
    }

    /// No fresh value: not earlier than anything this CPU, or through the
    /// clamp any CPU, returned.
    /// Interrupt-safe: yes.
    #[cold]
    pub fn hold<M: ReadHw + Copy>(self, hw: M, cpu: usize) -> u64 {
        self.raise(hw, cpu, true, self.high_water())
    }

    /// The fast read: CPU `cpu`'s cached map of `epoch`, if the source's
    /// token (checked with `check`, after the TSC `t`) still equals its tag
    /// and `t` is inside its window, with the floors raised. `None`: take
    /// [`read_slow`](Self::read_slow).
    /// Interrupt-safe: yes (NMI too).
    #[inline(always)]
    pub fn read_fast<M: ReadHw + Copy>(
        self,
        hw: M,
        cpu: usize,
        epoch: u32,
        token: impl FnOnce(bool) -> Option<u32>,
        t: u64,
    ) -> Option<u64> {
        let slot = self.slots?.cache(cpu)?;
        slot.read_raised(epoch, token, || t, |ns| self.clamp.clamp(ns), local_max(hw))
    }

    /// The slow read of `src` for `owner` at its `epoch`: a validated map
    /// from the source (cached for the fast path), else its fallback, else
    /// the held value. Never blocks; bounded.
    /// Interrupt-safe: yes (NMI too).
    #[cold]
    #[inline(never)]
    pub fn read_slow<S: TscSource + ?Sized, O: TimelineOwner + Copy, M: ReadHw + Copy>(
        self,
        hw: M,
        src: &S,
        owner: O,
        epoch: u32,
        cpu: usize,
    ) -> u64 {
        if owner.must_hold(epoch) {
            owner.held(false);
            return self.hold(hw, cpu);
        }
        let offset = owner.offset(epoch);
        // Everything returned before this sample (taken before it: an
        // ordered source's readings after it are not below it).
        let high = self.high_water();
        let returned = source_ns_of(high, offset);
        let mut cpu = cpu;
        let mut sampled = Err(MapMiss::Busy);
        // A migration mid-sample is retried on the new CPU, a few times.
        for _ in 0..MIGRATION_RETRIES {
            sampled = src.map_now(cpu, self.last_map(cpu, epoch, offset), returned);
            if sampled != Err(MapMiss::Migrated) {
                break;
            }
            cpu = hw.cpu_index();
        }
        let slot = self.slots.and_then(|s| s.cache(cpu));
        let (v, ordered) = match sampled {
            Ok(now) => {
                let map = now.map.offset_by(offset);
                let v = map.apply(now.tsc);
                if v > BEFORE_ZERO {
                    return self.before_zero(hw, owner, cpu, now.ordered, v);
                }
                // An ordered source behind a value returned before this
                // sample (a host's step back that its judge accepted, the
                // Hyper-V page's rounding at a republish): this CPU's floor
                // alone would let another CPU's reading fall below what
                // this one returned, so its readings go through the clamp,
                // above every floor, until a later sample finds it caught up.
                let ordered = now.ordered && v >= high;
                if !ordered {
                    self.absorb_floors();
                }
                if !owner.plausible(v, false) {
                    owner.held(true);
                    return self.hold(hw, cpu);
                }
                if let (true, Some(slot)) = (owner.current(epoch), slot) {
                    let ordered_bit = if ordered { SlotEntry::ORDERED } else { 0 };
                    slot.store(&SlotEntry {
                        tag: now.tag,
                        epoch: epoch | ordered_bit,
                        map,
                        tsc: now.tsc,
                        limit: owner.limit(v),
                    });
                }
                (v, ordered)
            }
            Err(miss) => match src.fallback_ns(cpu) {
                Some(ns) => {
                    let v = ns.wrapping_add(offset);
                    if v > BEFORE_ZERO {
                        return self.before_zero(hw, owner, cpu, false, v);
                    }
                    if !owner.plausible(v, true) {
                        owner.held(true);
                        return self.hold(hw, cpu);
                    }
                    self.absorb_floors();
                    (v, false)
                }
                None => {
                    owner.held(miss != MapMiss::Unserved);
                    return self.hold(hw, cpu);
                }
            },
        };
        if !owner.current(epoch) {
            // The owner moved on meanwhile (its offset read may be the new
            // one): hold, bounded (no retry a stream of changes could
            // repeat without end).
            owner.held(false);
            return self.hold(hw, cpu);
        }
        owner.fresh(v);
        self.raise(hw, cpu, ordered, v)
    }

    /// CPU `cpu`'s entry, in the source's ns: the baseline for the next
    /// update (also across an epoch change; an invalidated entry, epoch 0,
    /// is none; a CPU sharing the overflow slot has none). `offset`: the
    /// owner's for the source (owner ns = source ns + offset).
    /// Interrupt-safe: yes.
    pub fn last_map(self, cpu: usize, epoch: u32, offset: u64) -> Option<LastMap> {
        let slot = self.slots?.cache(cpu)?;
        let (_, e) = slot.load()?;
        (e.epoch != 0).then_some(LastMap {
            tag: e.tag,
            map: e.map.offset_by(offset.wrapping_neg()),
            ordered: e.epoch & SlotEntry::ORDERED != 0,
            current: e.epoch & !SlotEntry::ORDERED == epoch,
        })
    }

    /// A reading `v` below where the owner's timeline started for its
    /// source ("before 0" on the wrapping timeline). Below by anything a
    /// real clock can be (up to [`FAR_BEFORE_ZERO_NS`]): the floors answer,
    /// not counted. Further below only garbage explains it: held, counted.
    #[cold]
    fn before_zero<O: TimelineOwner + Copy, M: ReadHw + Copy>(
        self,
        hw: M,
        owner: O,
        cpu: usize,
        ordered: bool,
        v: u64,
    ) -> u64 {
        if v.wrapping_neg() <= FAR_BEFORE_ZERO_NS {
            self.raise(hw, cpu, ordered, 0)
        } else {
            owner.held(true);
            self.hold(hw, cpu)
        }
    }

    /// The whole loop: [`read_fast`](Self::read_fast), else
    /// [`read_slow`](Self::read_slow).
    /// Interrupt-safe: yes (NMI too).
    #[inline(always)]
    pub fn read<S: TscSource, O: TimelineOwner + Copy, M: ReadHw + Copy>(
        self,
        hw: M,
        src: &S,
        owner: O,
    ) -> u64 {
        let epoch = owner.epoch();
        let cpu = hw.cpu_index();
        let fixed = hw.cpu_index_is_fixed();
        let Some(load) = src.token_reader(cpu) else {
            return self.read_slow(hw, src, owner, epoch, cpu);
        };
        let t = hw.rdtsc_ordered();
        let token = |ordered: bool| {
            if owner.current(epoch) && still_paired::<S, M>(hw, cpu, fixed, ordered) {
                load()
            } else {
                None
            }
        };
        match self.read_fast(hw, cpu, epoch, token, t) {
            Some(v) => v,
            None => self.read_slow(hw, src, owner, epoch, cpu),
        }
    }
}

/// Whether a TSC value read on CPU `cpu` still pairs with the map an
/// entry of source `S` holds, checked after the TSC read. The CPU is
/// re-taken only where a migrated read could pair one CPU's TSC with
/// another's map: a per-CPU map the source does not order across CPUs
/// (an `ordered` entry's map is every CPU's) on an index that is not
/// `fixed` for the whole read. The one copy of the rule: `clockhal`'s
/// `Clock` calls it too.
/// Interrupt-safe: yes (NMI too).
#[inline(always)]
pub fn still_paired<S: TscSource + ?Sized, M: ReadHw>(
    hw: M,
    cpu: usize,
    fixed: bool,
    ordered: bool,
) -> bool {
    !S::PER_CPU_MAP || ordered || fixed || hw.cpu_index() == cpu
}

/// A source's own timeline: its epoch, no offset, everything plausible.
#[derive(Debug)]
pub struct Standalone<'a, S: ?Sized>(pub &'a S);

impl<S: ?Sized> Clone for Standalone<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<S: ?Sized> Copy for Standalone<'_, S> {}

impl<S: TscSource + ?Sized> TimelineOwner for Standalone<'_, S> {
    #[inline(always)]
    fn epoch(&self) -> u32 {
        self.0.epoch()
    }
    /// A source's own epoch is loaded once per read: an entry stored under
    /// an epoch that changed meanwhile carries the old one and is missed.
    #[inline(always)]
    fn current(&self, _: u32) -> bool {
        true
    }
    fn held(&self, counted: bool) {
        if counted {
            self.0.held();
        }
    }
}

/// The read state a source used on its own keeps: a set of per-CPU slots
/// claimed from the machine's [`SlotPool`] when it is made, and a clamp.
/// The set is a plain field: a read finds its slot without an atomic load
/// (and a loop of reads with the set's address hoisted).
#[derive(Debug)]
pub struct Timeline {
    set: SlotSet,
    clamp: MonotonicClamp,
}

impl Timeline {
    /// A timeline with a set claimed from `pool`, that has returned
    /// nothing; `None` when every set of the pool is in use.
    /// Interrupt-safe: yes.
    pub fn claim(pool: &SlotPool, granule: ClampGranule) -> Option<Timeline> {
        Some(Timeline {
            set: pool.claim()?,
            clamp: MonotonicClamp::with_granule(granule),
        })
    }

    /// The read state in `pool` (the pool it was claimed from).
    /// Interrupt-safe: yes.
    #[inline(always)]
    pub fn state<'p>(&'p self, pool: &'p SlotPool) -> ReadState<'p> {
        ReadState {
            slots: Some(pool.get(&self.set)),
            clamp: &self.clamp,
        }
    }

    /// Gives the slots back to `pool` (for the owner's `Drop`); later reads
    /// claim again.
    /// Interrupt-safe: yes.
    pub fn release(&mut self, pool: &SlotPool) {
        pool.release(&mut self.set);
    }

    /// `src`'s reading on its own timeline.
    /// Interrupt-safe: yes (NMI too).
    #[inline(always)]
    pub fn read<S: TscSource, M: ReadHw + Copy>(&self, pool: &SlotPool, hw: M, src: &S) -> u64 {
        self.state(pool).read(hw, src, Standalone(src))
    }

    /// `read()` (of a counter of this CPU's own, such as its TSC) through
    /// this CPU's floor: the slot is found before `read` runs, so nothing
    /// is recomputed after it. Without per-CPU memory, through the clamp.
    /// Interrupt-safe: yes (NMI too).
    #[inline(always)]
    pub fn read_local<M: ReadHw + Copy>(
        &self,
        pool: &SlotPool,
        hw: M,
        read: impl FnOnce(&M) -> u64,
    ) -> u64 {
        let (slot, own) = pool.get(&self.set).get(hw.cpu_index());
        let v = read(&hw);
        PerCpuSlots::raise_in(slot, own, v, local_max(hw))
    }

    /// CPU `cpu`'s last map for a source read on its own (no offset;
    /// `epoch`: the source's, for [`LastMap::current`]).
    /// Interrupt-safe: yes.
    pub fn last_map(&self, pool: &SlotPool, cpu: usize, epoch: u32) -> Option<LastMap> {
        self.state(pool).last_map(cpu, epoch, 0)
    }

    /// The highest value returned (`None`: nothing yet).
    /// Interrupt-safe: yes.
    pub fn returned(&self, pool: &SlotPool) -> Option<u64> {
        Some(self.state(pool).high_water()).filter(|v| *v != 0)
    }

    /// Readings leave the source's cross-CPU order for the clamp's.
    /// Interrupt-safe: yes.
    pub fn absorb_floors(&self, pool: &SlotPool) {
        self.state(pool).absorb_floors();
    }

    /// CPU `cpu`'s cached map goes (its CPU registered anew or left).
    /// Interrupt-safe: yes.
    pub fn invalidate(&self, pool: &SlotPool, cpu: usize) {
        if let Some(slot) = self.state(pool).slots.and_then(|s| s.cache(cpu)) {
            slot.invalidate();
        }
    }

    /// After a resume, on CPU `cpu`: its cached map and its floor go (a
    /// CPU sharing the overflow slot keeps the shared floor: the others
    /// rely on it); `machine`: the first CPU to resume, which also forgets
    /// the clamp and every CPU's cached map (no map from before the resume
    /// is a baseline for the restored host's).
    /// Interrupt-safe: no (a per-CPU lifecycle step).
    pub fn resume_cpu(&self, pool: &SlotPool, cpu: usize, machine: bool) {
        let slots = self.state(pool).slots;
        if let (true, Some(s)) = (machine, slots) {
            s.invalidate_all();
        }
        if let Some(slot) = slots.and_then(|s| s.cache(cpu)) {
            slot.invalidate();
            slot.floor().store(0, Relaxed);
        }
        if machine {
            self.clamp.reset();
        }
    }

    /// Every floor and the clamp forgotten (a restore that moved a
    /// partition-wide counter back).
    /// Interrupt-safe: no (a lifecycle step).
    pub fn reset(&self, pool: &SlotPool) {
        if let Some(s) = self.state(pool).slots {
            s.reset();
        }
        self.clamp.reset();
    }
}
