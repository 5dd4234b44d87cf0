//! Per-CPU read state: each CPU's validated [`TscMap`] and its monotonic
//! floor, one cache line per CPU.

use crate::sync::slots::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use crate::sync::slots_const_fn;
use crate::TscMap;

/// A reading served from a [`PerCpuSlots`] cache by
/// [`MapSlot::read_cached`], before any floor is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CachedRead {
    /// Nanoseconds from the cached map.
    pub ns: u64,
    /// The entry carried [`SlotEntry::ORDERED`].
    pub ordered: bool,
}

/// How many CPUs get a slot of their own. CPU indices at or above
/// `PER_CPU_SLOTS - 1` share the last slot's floor, raised with locked
/// instructions (correct, but its cache line is shared), and read without
/// a cached map (every read takes the slow path: see
/// [`PerCpuSlots::cache`]).
#[cfg(not(all(loom, clockhal_loom_slots)))]
pub const PER_CPU_SLOTS: usize = 64;
/// The loom model's machine: CPUs 0 and 1 with slots of their own, the
/// rest sharing the third (every loom atomic is a state to explore).
#[cfg(all(loom, clockhal_loom_slots))]
pub const PER_CPU_SLOTS: usize = 3;

/// A cached, validated map and what it is valid for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotEntry {
    /// The source's token the map was derived from (pvclock version,
    /// Hyper-V sequence, ...): the read path compares it with the source.
    pub tag: u32,
    /// The owner's epoch (e.g. the clock's source generation); 0 never
    /// matches a live owner, so it marks an invalidated slot.
    pub epoch: u32,
    /// TSC ticks to nanoseconds.
    pub map: TscMap,
    /// The TSC value the map was validated at: readings of an earlier TSC
    /// (a TSC that stepped back) are not served from the cache.
    pub tsc: u64,
    /// Readings above this are not returned from the cache: the slow path
    /// decides about them (wrap-around of the map, an implausible jump, a
    /// supervision deadline). Kept as a TSC window from `tsc` (see
    /// [`TscMap::ticks_until`]).
    pub limit: u64,
}

/// One CPU's read state: a [`SlotEntry`] under a seqlock, and the largest
/// value the CPU has returned (its floor). Exactly one cache line, so the
/// read path of one CPU never shares a written line with another.
///
/// The entry is written rarely (when the source's parameters change) with
/// [`store`](Self::store), read on every clock read with
/// [`load`](Self::load) and [`unchanged`](Self::unchanged). A writer that
/// finds another writer active gives up rather than wait, so a reader in an
/// interrupt handler that preempted a writer on the same CPU never blocks:
/// it computes its value without the cache.
///
/// ```
/// use clockhal_core::{Frequency, MapSlot, Scale, SlotEntry, TscMap};
/// let slot = MapSlot::new();
/// assert!(slot.load().is_none()); // never filled
/// let map = TscMap::through(&Scale::new(Frequency::from_hz(1_000_000_000).unwrap()), 0, 0);
/// assert!(slot.store(&SlotEntry { tag: 2, epoch: 1, map, tsc: 0, limit: u64::MAX }));
/// let (seq, e) = slot.load().unwrap();
/// let ns = e.map.apply(1_234);
/// assert!(slot.unchanged(seq));
/// assert_eq!(ns, 1_234);
/// ```
#[repr(C, align(64))]
#[derive(Debug)]
pub struct MapSlot {
    seq: AtomicU32,
    tag: AtomicU32,
    epoch: AtomicU32,
    /// The map's integer ns per tick (below 2^32: a TSC above 0.25 Hz).
    int: AtomicU32,
    frac: AtomicU64,
    add_lo: AtomicU64,
    add_hi: AtomicU64,
    /// The TSC window the entry serves: `tsc0 ..= tsc0 + span`.
    tsc0: AtomicU64,
    span: AtomicU64,
    floor: AtomicU64,
}

#[cfg(not(all(loom, clockhal_loom_slots)))]
const _: () = assert!(core::mem::size_of::<MapSlot>() == 64);

impl Default for MapSlot {
    fn default() -> Self {
        MapSlot::new()
    }
}

impl SlotEntry {
    /// Epoch bit of an entry whose readings the source orders across CPUs
    /// itself; owners use even epochs and set this bit per entry.
    pub const ORDERED: u32 = 1;
}

/// A cached map serves readings up to this many ns past its validation;
/// the next reading re-validates it (one sample of the source). Bounds how
/// long a map wrapped by a hostile TSC could be believed, at one slow read
/// per CPU per second.
pub const REVALIDATE_NS: u64 = 1_000_000_000;

impl MapSlot {
    slots_const_fn! {
    /// An empty slot (no entry, floor 0).
    /// Interrupt-safe: yes.
    pub const fn new() -> MapSlot {
        MapSlot {
            seq: AtomicU32::new(0),
            tag: AtomicU32::new(0),
            epoch: AtomicU32::new(0),
            int: AtomicU32::new(0),
            frac: AtomicU64::new(0),
            add_lo: AtomicU64::new(0),
            add_hi: AtomicU64::new(0),
            tsc0: AtomicU64::new(0),
            span: AtomicU64::new(0),
            floor: AtomicU64::new(0),
        }
    }
    }

    /// The cached entry and the sequence it was read under, or `None` if
    /// the slot was never filled or a writer is active. Pair with
    /// [`unchanged`](Self::unchanged) after using the entry.
    /// Interrupt-safe: yes.
    #[inline(always)]
    pub fn load(&self) -> Option<(u32, SlotEntry)> {
        let seq = self.begin()?;
        let r = Ordering::Relaxed;
        let map = self.map_words();
        let tsc = self.tsc0.load(r);
        Some((
            seq,
            SlotEntry {
                tag: self.tag.load(r),
                epoch: self.epoch.load(r),
                map,
                tsc,
                limit: map.apply(tsc.saturating_add(self.span.load(r))),
            },
        ))
    }

    /// Starts a read of the entry: the sequence to re-check with
    /// [`unchanged`](Self::unchanged), or `None` if the slot was never
    /// filled or a writer is active.
    #[inline(always)]
    fn begin(&self) -> Option<u32> {
        let seq = self.seq.load(Ordering::Acquire);
        if seq & 1 != 0 || seq == 0 {
            return None;
        }
        Some(seq)
    }

    /// The entry's map, from its words (relaxed loads: valid only between
    /// [`begin`](Self::begin) and a successful [`unchanged`](Self::unchanged)).
    #[inline(always)]
    fn map_words(&self) -> TscMap {
        let r = Ordering::Relaxed;
        TscMap::from_words(
            self.int.load(r) as u64,
            self.frac.load(r),
            (self.add_hi.load(r) as u128) << 64 | self.add_lo.load(r) as u128,
        )
    }

    /// Whether the entry [`load`](Self::load) returned under `seq` is still
    /// the slot's: every load made since (the entry's fields, and whatever
    /// the caller read in between) is ordered before this check.
    /// Interrupt-safe: yes.
    #[inline(always)]
    pub fn unchanged(&self, seq: u32) -> bool {
        fence(Ordering::Acquire);
        self.seq.load(Ordering::Relaxed) == seq
    }

    /// Replaces the entry. `false`, changing nothing, when another writer is
    /// active (the caller uses its value uncached; it never waits), or when
    /// the map's slope does not fit the slot (1 ns per tick or more beyond
    /// 2^32: no TSC is that slow).
    /// Interrupt-safe: yes.
    pub fn store(&self, e: &SlotEntry) -> bool {
        let (int, frac, add) = e.map.to_words();
        let Ok(int) = u32::try_from(int) else {
            return false;
        };
        // The window never crosses 2^64: the map is absolute in the TSC,
        // so a TSC that wrapped is the slow path's to judge.
        let span = e.map.ticks_until(e.tsc, e.limit).min(u64::MAX - e.tsc);
        let seq = self.seq.load(Ordering::Relaxed);
        if seq & 1 != 0
            || self
                .seq
                .compare_exchange(
                    seq,
                    seq.wrapping_add(1),
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_err()
        {
            return false;
        }
        fence(Ordering::Release);
        let r = Ordering::Relaxed;
        self.tag.store(e.tag, r);
        self.epoch.store(e.epoch, r);
        self.int.store(int, r);
        self.frac.store(frac, r);
        self.add_lo.store(add as u64, r);
        self.add_hi.store((add >> 64) as u64, r);
        self.tsc0.store(e.tsc, r);
        self.span.store(span, r);
        // Skip 0 ("never filled") when the counter wraps.
        let next = match seq.wrapping_add(2) {
            0 => 2,
            n => n,
        };
        self.seq.store(next, Ordering::Release);
        true
    }

    /// The entry's map if the slot holds one of `epoch` (read consistently),
    /// for a slot used as a shared "last accepted parameters" record.
    /// Interrupt-safe: yes.
    pub fn map_of_epoch(&self, epoch: u32) -> Option<TscMap> {
        self.tagged_map_of_epoch(epoch).map(|(_, m)| m)
    }

    /// [`map_of_epoch`](Self::map_of_epoch) with the tag it was recorded for.
    /// Interrupt-safe: yes.
    pub fn tagged_map_of_epoch(&self, epoch: u32) -> Option<(u32, TscMap)> {
        match self.load() {
            Some((seq, e)) if e.epoch == epoch && self.unchanged(seq) => Some((e.tag, e.map)),
            _ => None,
        }
    }

    /// Records `map` (for the source's token `tag`) under `epoch`, for
    /// [`map_of_epoch`](Self::map_of_epoch). `false` if a writer was active.
    /// Interrupt-safe: yes.
    pub fn store_map(&self, tag: u32, epoch: u32, map: TscMap) -> bool {
        self.store(&SlotEntry {
            tag,
            epoch,
            map,
            tsc: 0,
            limit: 0,
        })
    }

    /// Makes the next [`load`](Self::load) return an entry with epoch 0
    /// (which matches no live owner). `false` if a writer was active.
    /// Interrupt-safe: yes.
    pub fn invalidate(&self) -> bool {
        self.store(&SlotEntry {
            tag: 0,
            epoch: 0,
            map: TscMap::from_words(0, 0, 0),
            tsc: 0,
            limit: 0,
        })
    }

    /// The cached half of every TSC-based source's read path (see
    /// [`read_raised`](Self::read_raised) for the whole): this slot's map,
    /// if it is of `epoch`, its tag equals the source's current token
    /// (`tag(ordered)`, e.g. the pvclock version, read once *after* the
    /// TSC; `ordered`: the entry carries [`SlotEntry::ORDERED`]) and
    /// the reading is within the entry's limit. `None` sends the caller to
    /// its slow path (a CPU without a slot of its own never gets here:
    /// [`PerCpuSlots::cache`]). No write, no shared line: one cache line of
    /// this CPU's, plus what `tag` loads.
    ///
    /// Only the slot's sequence is loaded before the TSC (`tsc()`, an
    /// ordered read, waits for earlier loads: the fewer, the sooner); the
    /// entry and the token are loaded after it. That the token is checked
    /// once, after the TSC read, is enough because tokens only move
    /// forward: the entry was validated for `tag` before this read began,
    /// so at the TSC read the source's token was at least `tag`, and the
    /// check shows it was at most `tag`. (As in Linux's vDSO, the CPU may
    /// execute the token load before the TSC read completes; the pairing
    /// that allows — a TSC value from just after a host update with the
    /// parameters from just before — is bounded by the update's continuity
    /// and by the entry's limit.)
    /// Interrupt-safe: yes.
    #[inline(always)]
    pub fn read_cached(
        &self,
        epoch: u32,
        tag: impl FnOnce(bool) -> Option<u32>,
        tsc: impl FnOnce() -> u64,
    ) -> Option<CachedRead> {
        let seq = self.begin()?;
        let t = tsc();
        let r = Ordering::Relaxed;
        // Checks first, map after: fewer values live at once (no spills on
        // the multiply's path); all loads still precede the re-check.
        let e_epoch = self.epoch.load(r);
        let ordered = e_epoch & SlotEntry::ORDERED != 0;
        if e_epoch & !SlotEntry::ORDERED != epoch
            || t.wrapping_sub(self.tsc0.load(r)) > self.span.load(r)
            || tag(ordered)? != self.tag.load(r)
        {
            return None;
        }
        // The window check is on the TSC itself (one subtract, off the
        // multiply's path): a TSC before the validation point or past the
        // limit goes to the slow path.
        let map = self.map_words();
        if !self.unchanged(seq) {
            return None;
        }
        let ns = map.apply(t);
        Some(CachedRead { ns, ordered })
    }

    /// The whole fast read on this slot, the CPU's own:
    /// [`read_cached`](Self::read_cached), `unordered` applied to a reading
    /// the source does not order across CPUs (a global clamp), and this
    /// slot's floor raised with `local` (the OS's CPU-local max). The slot
    /// address is computed once, before the TSC read, so nothing is
    /// recomputed on the path after it. `None`: take the slow path.
    /// Interrupt-safe: yes.
    #[inline(always)]
    pub fn read_raised(
        &self,
        epoch: u32,
        tag: impl FnOnce(bool) -> Option<u32>,
        tsc: impl FnOnce() -> u64,
        unordered: impl FnOnce(u64) -> u64,
        local: impl FnOnce(&AtomicU64, u64) -> u64,
    ) -> Option<u64> {
        let r = self.read_cached(epoch, tag, tsc)?;
        let v = if r.ordered { r.ns } else { unordered(r.ns) };
        Some(local(&self.floor, v))
    }

    /// The largest value this CPU returned; raise it with the OS's
    /// CPU-local max (`Hardware::fetch_max_local` in clockhal-x86), or with
    /// `fetch_max` when the slot is shared.
    /// Interrupt-safe: yes.
    #[inline(always)]
    pub fn floor(&self) -> &AtomicU64 {
        &self.floor
    }
}

/// One [`MapSlot`] per CPU (see [`PER_CPU_SLOTS`] for CPUs beyond that).
#[derive(Debug)]
pub struct PerCpuSlots {
    slots: [MapSlot; PER_CPU_SLOTS],
}

impl Default for PerCpuSlots {
    fn default() -> Self {
        PerCpuSlots::new()
    }
}

impl PerCpuSlots {
    /// All slots empty.
    /// Interrupt-safe: yes.
    #[cfg(not(all(loom, clockhal_loom_slots)))]
    pub const fn new() -> PerCpuSlots {
        PerCpuSlots {
            slots: [const { MapSlot::new() }; PER_CPU_SLOTS],
        }
    }

    /// All slots empty (loom's atomics: no `const`).
    /// Interrupt-safe: yes.
    #[cfg(all(loom, clockhal_loom_slots))]
    pub fn new() -> PerCpuSlots {
        PerCpuSlots {
            slots: core::array::from_fn(|_| MapSlot::new()),
        }
    }

    /// The slot of CPU `cpu`, and whether it is that CPU's alone (`false`
    /// for the shared overflow slot: update its floor with locked
    /// instructions).
    /// Interrupt-safe: yes.
    #[inline(always)]
    pub fn get(&self, cpu: usize) -> (&MapSlot, bool) {
        let last = PER_CPU_SLOTS - 1;
        if cpu < last {
            (&self.slots[cpu], true)
        } else {
            (&self.slots[last], false)
        }
    }

    /// The slot that caches CPU `cpu`'s map: its own, or `None` for a CPU
    /// that shares the overflow slot (it shares only that slot's floor: a
    /// map cached there could be another CPU's, so such CPUs never use or
    /// fill the cache).
    /// Interrupt-safe: yes.
    #[inline(always)]
    pub fn cache(&self, cpu: usize) -> Option<&MapSlot> {
        match self.get(cpu) {
            (slot, true) => Some(slot),
            (_, false) => None,
        }
    }

    /// [`MapSlot::read_raised`] on CPU `cpu`'s slot; `None` (the slow
    /// path) for a CPU without a slot of its own.
    /// Interrupt-safe: yes.
    #[inline(always)]
    pub fn read_raised(
        &self,
        cpu: usize,
        epoch: u32,
        tag: impl FnOnce(bool) -> Option<u32>,
        tsc: impl FnOnce() -> u64,
        unordered: impl FnOnce(u64) -> u64,
        local: impl FnOnce(&AtomicU64, u64) -> u64,
    ) -> Option<u64> {
        self.cache(cpu)?
            .read_raised(epoch, tag, tsc, unordered, local)
    }

    /// Raises `slot`'s floor (CPU `cpu`'s, from [`get`](Self::get), `own`
    /// as it returned) to `value` and returns the result: with `local` on a
    /// slot of its own, with a locked `fetch_max` on the shared one. For a
    /// read path that already holds the slot.
    /// Interrupt-safe: yes.
    #[inline(always)]
    pub fn raise_in(
        slot: &MapSlot,
        own: bool,
        value: u64,
        local: impl FnOnce(&AtomicU64, u64) -> u64,
    ) -> u64 {
        if own {
            local(slot.floor(), value)
        } else {
            slot.floor().fetch_max(value, Ordering::AcqRel).max(value)
        }
    }

    /// Raises CPU `cpu`'s floor to `value` and returns the result: with
    /// `local` (the OS's interrupt-safe CPU-local max) on a slot of its own,
    /// with a locked `fetch_max` on the shared overflow slot.
    /// Interrupt-safe: yes.
    #[inline(always)]
    pub fn raise(&self, cpu: usize, value: u64, local: impl FnOnce(&AtomicU64, u64) -> u64) -> u64 {
        let (slot, own) = self.get(cpu);
        Self::raise_in(slot, own, value, local)
    }

    /// CPU `cpu`'s floor (the largest value it returned).
    /// Interrupt-safe: yes.
    #[inline(always)]
    pub fn floor_of(&self, cpu: usize) -> u64 {
        self.get(cpu).0.floor().load(Ordering::Acquire)
    }

    /// Every slot, e.g. to find the largest floor or invalidate all.
    /// Interrupt-safe: yes.
    pub fn iter(&self) -> impl Iterator<Item = &MapSlot> {
        self.slots.iter()
    }

    /// The largest floor of any CPU: an upper bound of every value
    /// returned so far (as far as the floors recorded them).
    /// Interrupt-safe: yes.
    pub fn max_floor(&self) -> u64 {
        self.slots
            .iter()
            .map(|s| s.floor.load(Ordering::Acquire))
            .max()
            .unwrap_or(0)
    }

    /// Every slot empty and every floor 0 (for a new owner).
    /// Interrupt-safe: yes.
    pub fn reset(&self) {
        for s in &self.slots {
            s.invalidate();
            s.floor.store(0, Ordering::Release);
        }
    }

    /// Invalidates every slot's entry (floors stay). A slot whose writer is
    /// active is skipped: its writer's entry carries the old epoch anyway.
    /// Interrupt-safe: yes.
    pub fn invalidate_all(&self) {
        for s in &self.slots {
            s.invalidate();
        }
    }
}

/// How many [`PerCpuSlots`] sets one [`SlotPool`] holds: enough for every
/// per-CPU user of one probe (kvmclock, the Hyper-V page, the TSC and the
/// facade's clock) twice over.
#[cfg(not(all(loom, clockhal_loom_slots)))]
pub const SLOT_SETS: usize = 8;
/// One set in the loom model (one timeline).
#[cfg(all(loom, clockhal_loom_slots))]
pub const SLOT_SETS: usize = 1;

/// The per-CPU read state of one machine: [`SLOT_SETS`] sets of
/// [`PerCpuSlots`] (4 KiB each), claimed by the clock objects that read on
/// every CPU.
///
/// Why a pool and not a field: a kernel builds its clock objects on the
/// boot stack and moves them into a `static`. Per-CPU state held inline
/// would make each of them several KiB and the probe need well over
/// 100 KiB of stack; held here (a `static` of the machine, see
/// `Hardware::slot_pool` in clockhal-x86) the objects stay small.
///
/// ```
/// use clockhal_core::SlotPool;
/// static POOL: SlotPool = SlotPool::new();
/// let set = POOL.claim().expect("a free set");
/// let slots = POOL.get(&set);
/// assert_eq!(slots.floor_of(0), 0);
/// let mut set = set;
/// POOL.release(&mut set);
/// assert_eq!(POOL.free(), clockhal_core::SLOT_SETS);
/// ```
#[derive(Debug)]
pub struct SlotPool {
    sets: [PerCpuSlots; SLOT_SETS],
    claimed: [AtomicBool; SLOT_SETS],
}

/// A set of a [`SlotPool`] claimed by one owner; give it back with
/// [`SlotPool::release`] (owners do so when dropped). Not `Clone`: one
/// owner per set.
#[derive(Debug, PartialEq, Eq)]
pub struct SlotSet(u8);

impl SlotSet {
    const RELEASED: u8 = u8::MAX;

    /// Which set of the pool.
    /// Interrupt-safe: yes.
    pub const fn index(&self) -> usize {
        self.0 as usize
    }
}

impl Default for SlotPool {
    fn default() -> Self {
        SlotPool::new()
    }
}

impl SlotPool {
    /// Every set free.
    /// Interrupt-safe: yes.
    #[cfg(not(all(loom, clockhal_loom_slots)))]
    pub const fn new() -> SlotPool {
        SlotPool {
            sets: [const { PerCpuSlots::new() }; SLOT_SETS],
            claimed: [const { AtomicBool::new(false) }; SLOT_SETS],
        }
    }

    /// Every set free (loom's atomics: no `const`).
    /// Interrupt-safe: yes.
    #[cfg(all(loom, clockhal_loom_slots))]
    pub fn new() -> SlotPool {
        SlotPool {
            sets: core::array::from_fn(|_| PerCpuSlots::new()),
            claimed: core::array::from_fn(|_| AtomicBool::new(false)),
        }
    }

    /// Claims a free set, reset (no cached entries, every floor 0), or
    /// `None` when all [`SLOT_SETS`] are in use.
    /// Interrupt-safe: yes.
    pub fn claim(&self) -> Option<SlotSet> {
        let i = self.claimed.iter().position(|c| {
            c.compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })?;
        self.sets[i].reset();
        Some(SlotSet(i as u8))
    }

    /// The slots of a claimed set (of this pool: a set of another pool, or
    /// one released already, names some set of this one — a logic error,
    /// never a panic).
    /// Interrupt-safe: yes.
    #[inline(always)]
    pub fn get(&self, set: &SlotSet) -> &PerCpuSlots {
        &self.sets[set.index() % SLOT_SETS]
    }

    /// Gives a set back (once: `set` is marked released, a second call does
    /// nothing). For owners' `Drop`.
    /// Interrupt-safe: yes.
    pub fn release(&self, set: &mut SlotSet) {
        if let Some(c) = self.claimed.get(set.index()) {
            c.store(false, Ordering::Release);
        }
        set.0 = SlotSet::RELEASED;
    }

    /// How many sets are free now.
    /// Interrupt-safe: yes.
    pub fn free(&self) -> usize {
        self.claimed
            .iter()
            .filter(|c| !c.load(Ordering::Acquire))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Frequency, Scale};
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    fn entry(tag: u32, ns0: u64) -> SlotEntry {
        let s = Scale::new(Frequency::from_hz(1_000_000_000).unwrap());
        SlotEntry {
            tag,
            epoch: 1,
            map: TscMap::through(&s, 0, ns0),
            tsc: 0,
            limit: u64::MAX,
        }
    }

    #[test]
    fn store_load_invalidate() {
        let s = MapSlot::new();
        assert!(s.load().is_none());
        assert!(s.store(&entry(4, 10)));
        let (seq, e) = s.load().unwrap();
        let want = entry(4, 10);
        assert_eq!(
            (e.tag, e.epoch, e.map, e.tsc),
            (want.tag, want.epoch, want.map, want.tsc)
        );
        // The limit is kept as a TSC window: at most the one given.
        assert!(e.limit <= want.limit && e.limit > want.limit - 2_000_000_000);
        assert!(s.unchanged(seq));
        assert!(s.store(&entry(6, 20)));
        assert!(!s.unchanged(seq));
        assert!(s.invalidate());
        assert_eq!(s.load().unwrap().1.epoch, 0);
        let slots = PerCpuSlots::new();
        assert!(slots.get(0).1 && !slots.get(PER_CPU_SLOTS - 1).1 && !slots.get(1000).1);
        // CPUs sharing the overflow slot never see a cached map there.
        let last = PER_CPU_SLOTS - 1;
        assert!(slots.get(last).0.store(&entry(8, 0)));
        assert!(slots.cache(last).is_none() && slots.cache(0).is_some());
        for cpu in [last, last + 1] {
            let read = slots.read_raised(cpu, 1, |_| Some(8), || 5, |v| v, |_, v| v);
            assert!(read.is_none(), "cpu {cpu}");
        }
        slots.get(3).0.floor().store(99, Ordering::Relaxed);
        assert_eq!(slots.max_floor(), 99);
    }

    #[test]
    fn readers_never_see_a_torn_entry() {
        // Writer alternates two entries whose fields all differ; a reader
        // that passes `unchanged` must see one of them whole.
        let slot = Arc::new(MapSlot::new());
        let (a, b) = (entry(2, 1_000), entry(4, 2_000_000_000_000));
        slot.store(&a);
        let stop = Arc::new(AtomicBool::new(false));
        let w = {
            let (slot, stop) = (slot.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    slot.store(if i % 2 == 0 { &b } else { &a });
                    i += 1;
                    // Gaps between stores, so a reader on a loaded machine
                    // also completes reads (stores back to back could
                    // starve it; the torn check runs either way).
                    for _ in 0..(i % 64) {
                        std::hint::spin_loop();
                    }
                }
            })
        };
        let reads = if cfg!(miri) { 200 } else { 200_000 };
        let mut ok = 0;
        for _ in 0..reads {
            if let Some((seq, e)) = slot.load() {
                if slot.unchanged(seq) {
                    let whole = |x: &SlotEntry| {
                        (x.tag, x.epoch, x.map, x.tsc) == (e.tag, e.epoch, e.map, e.tsc)
                    };
                    assert!(whole(&a) || whole(&b), "torn: {e:?}");
                    ok += 1;
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        w.join().unwrap();
        assert!(ok > 0);
    }
}
