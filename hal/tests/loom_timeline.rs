//! loom models of the one per-CPU read loop (`clockhal_core::timeline`) over
//! the real code: `Timeline::read` (fast path, slow path, floors, clamp,
//! hold) on the real `SlotPool`, whose slots are loom's atomics under
//! `--cfg loom --cfg clockhal_loom_slots` (`src/sync.rs`). The fakes here
//! are the source (a host publishing its map under a seqlock token) and
//! the machine (CPU indices, the TSC, the CPU-local max).
//! `./scripts/deep-checks.sh loom`. Empty without both cfgs.
//!
//! With `--cfg clockhal_loom_mutant` the floor is raised by a plain load
//! and store (`timeline::local_max`): the model of an interrupt on the same
//! CPU must then find a lost raise; the others are `ignore`d there (run
//! them with `--include-ignored`).
#![cfg(all(loom, clockhal_loom_slots))]

use clockhal_core::timeline::{LastMap, MapMiss, MapNow, ReadHw, Timeline, TscSource};
use clockhal_core::{ClampGranule, SlotPool, TscMap};
use loom::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
// Bookkeeping of the model itself (the TSC, what a read saw): plain
// atomics, no state for loom to explore. loom runs one thread at a time,
// so they read in the order the threads ran.
use std::sync::atomic::{AtomicBool as StdBool, AtomicU64 as StdU64, Ordering::SeqCst};

/// `f` under loom with at most `cap` preemptions (fewer if
/// `LOOM_MAX_PREEMPTIONS` says so): a read is some 60 loom operations, and
/// three threads of two reads at the default bound of 3 run for hours.
fn model(cap: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(b.preemption_bound.map_or(cap, |n| n.min(cap)));
    b.check(f);
}

/// The TSC's value when the model starts; the first map gives ns = TSC.
const T0: u64 = 1_000_000;

/// A host's map as its fields: ns = `slope`·TSC + `ns_at_0` (wrapping).
#[derive(Clone, Copy, Debug)]
struct HostMap {
    slope: u64,
    ns_at_0: u64,
    ordered: bool,
}

impl HostMap {
    fn map(self) -> TscMap {
        TscMap::from_slope(self.slope, 0, 0, self.ns_at_0)
    }
}

/// Before the host's update: 1 ns per tick, ns = TSC.
const OLD: HostMap = HostMap {
    slope: 1,
    ns_at_0: 0,
    ordered: false,
};
/// After it, twice as fast, continuous at `T0` (ns = 2·TSC - T0): at every
/// TSC of the model at or above OLD. A torn pair of fields is ns = 2·TSC
/// (far above both) or ns = TSC - T0 (far below both).
const FASTER: HostMap = HostMap {
    slope: 2,
    ns_at_0: T0.wrapping_neg(),
    ordered: false,
};
/// After it, the same rate stepped back by 3 ns (as another CPU's skewed
/// map would be): not ordered across CPUs.
const STEPPED_BACK: HostMap = HostMap {
    slope: 1,
    ns_at_0: 3u64.wrapping_neg(),
    ordered: false,
};

/// The model's machine and its one source, whose map a host thread
/// changes: a pvclock-like seqlock (token odd while it writes).
struct World {
    tsc: StdU64,
    pool: SlotPool,
    timeline: Timeline,
    token: AtomicU32,
    slope: AtomicU64,
    ns_at_0: AtomicU64,
    ordered: AtomicBool,
    /// The two maps a reading may come from, for its bounds.
    maps: [HostMap; 2],
    /// The source gives no map: every read holds (no fallback).
    down: StdBool,
    /// Per CPU: map_now found the host mid-update (the read held).
    busy: [StdU64; 2],
    /// Per CPU: the next TSC read runs a nested read (an interrupt).
    nest: [StdBool; 2],
    /// Per CPU: what that nested read returned.
    nested: [StdU64; 2],
}

impl World {
    fn new(first: HostMap, next: HostMap) -> Arc<World> {
        let pool = SlotPool::new();
        let timeline = Timeline::claim(&pool, ClampGranule::EXACT).expect("a slot set");
        Arc::new(World {
            tsc: StdU64::new(T0),
            pool,
            timeline,
            token: AtomicU32::new(2),
            slope: AtomicU64::new(first.slope),
            ns_at_0: AtomicU64::new(first.ns_at_0),
            ordered: AtomicBool::new(first.ordered),
            maps: [first, next],
            down: StdBool::new(false),
            busy: Default::default(),
            nest: Default::default(),
            nested: Default::default(),
        })
    }

    /// The host's update to `maps[1]`, under the seqlock.
    fn publish(&self) {
        let next = self.maps[1];
        let tag = self.token.load(Ordering::Relaxed);
        self.token.store(tag + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        self.slope.store(next.slope, Ordering::Relaxed);
        self.ns_at_0.store(next.ns_at_0, Ordering::Relaxed);
        self.ordered.store(next.ordered, Ordering::Relaxed);
        self.token.store(tag + 2, Ordering::Release);
    }

    /// CPU `cpu`'s TSC read; runs the nested read if one is armed, after
    /// the sample (so the interrupt's reading is the later one).
    fn rdtsc(&self, cpu: usize) -> u64 {
        let t = self.tsc.fetch_add(1, SeqCst);
        if self.nest[cpu].swap(false, SeqCst) {
            let v = self.read(cpu);
            self.nested[cpu].store(v, SeqCst);
        }
        t
    }

    /// One read on CPU `cpu` through the real loop.
    fn read(&self, cpu: usize) -> u64 {
        self.timeline
            .read(&self.pool, Cpu { w: self, idx: cpu }, self)
    }

    /// A read, checked against the truth: at least the lower map's value at
    /// the TSC before it (unless it held: the host was mid-update), at most
    /// the higher map's after it. A torn map is outside both.
    fn checked_read(&self, cpu: usize) -> u64 {
        let busy = self.busy[cpu].load(SeqCst);
        let t0 = self.tsc.load(SeqCst);
        let v = self.read(cpu);
        let t1 = self.tsc.load(SeqCst);
        let at = |t: u64| self.maps.map(|m| m.map().apply(t));
        let (lo, hi) = (at(t0).into_iter().min(), at(t1).into_iter().max());
        let held = self.busy[cpu].load(SeqCst) != busy;
        assert!(v <= hi.unwrap(), "torn or early: {v} > {hi:?} (cpu {cpu})");
        assert!(
            held || v >= lo.unwrap(),
            "torn or late: {v} < {lo:?} (cpu {cpu})"
        );
        v
    }

    /// A read while the source gives no map: it holds, at the highest value
    /// returned (the floors, the clamp).
    fn held_read(&self, cpu: usize) -> u64 {
        self.down.store(true, SeqCst);
        let v = self.read(cpu);
        self.down.store(false, SeqCst);
        v
    }
}

impl TscSource for World {
    fn token(&self, _: usize) -> Option<u32> {
        // Down: no cached map either (the read holds, not serves).
        if self.down.load(SeqCst) {
            return None;
        }
        Some(self.token.load(Ordering::Acquire))
    }

    fn map_now(&self, cpu: usize, _: Option<LastMap>, _: Option<u64>) -> Result<MapNow, MapMiss> {
        if self.down.load(SeqCst) {
            return Err(MapMiss::Unavailable);
        }
        let tag = self.token.load(Ordering::Acquire);
        let slope = self.slope.load(Ordering::Relaxed);
        let ns_at_0 = self.ns_at_0.load(Ordering::Relaxed);
        let ordered = self.ordered.load(Ordering::Relaxed);
        let tsc = self.rdtsc(cpu);
        fence(Ordering::Acquire);
        if tag & 1 != 0 || self.token.load(Ordering::Relaxed) != tag {
            self.busy[cpu].fetch_add(1, SeqCst);
            return Err(MapMiss::Busy);
        }
        let host = HostMap {
            slope,
            ns_at_0,
            ordered,
        };
        Ok(MapNow {
            tag,
            map: host.map(),
            ordered,
            tsc,
        })
    }
}

/// One CPU of the model (each model thread stays on its CPU).
#[derive(Clone, Copy)]
struct Cpu<'a> {
    w: &'a World,
    idx: usize,
}

impl ReadHw for Cpu<'_> {
    fn cpu_index(&self) -> usize {
        self.idx
    }
    fn cpu_index_is_fixed(&self) -> bool {
        true
    }
    fn rdtsc_ordered(&self) -> u64 {
        self.w.rdtsc(self.idx)
    }
    /// Atomic, and no ordering beyond that: all the contract promises.
    fn fetch_max_local(&self, cell: &AtomicU64, value: u64) -> u64 {
        cell.fetch_max(value, Ordering::Relaxed).max(value)
    }
}

/// Two CPUs read twice each while the host changes the map: each CPU's
/// values never go back, each lies within the truth of its read (no torn
/// map), and afterwards a held read is at or above every value returned.
fn two_cpus_and_a_host_update(ordered: bool) {
    model(1, move || {
        let w = World::new(HostMap { ordered, ..OLD }, HostMap { ordered, ..FASTER });
        let reader = |w: Arc<World>, cpu: usize| {
            move || {
                let a = w.checked_read(cpu);
                let b = w.checked_read(cpu);
                assert!(b >= a, "back on cpu {cpu}: {a} then {b}");
                b
            }
        };
        let cpu1 = thread::spawn(reader(w.clone(), 1));
        let host = {
            let w = w.clone();
            thread::spawn(move || w.publish())
        };
        let mine = reader(w.clone(), 0)();
        let theirs = cpu1.join().unwrap();
        host.join().unwrap();
        let held = w.held_read(0);
        assert!(
            held >= mine.max(theirs),
            "lost raise: held {held} below {mine} / {theirs}"
        );
    });
}

#[test]
#[cfg_attr(clockhal_loom_mutant, ignore = "the mutant's model is the irq one")]
fn two_cpus_and_a_host_update_unordered() {
    two_cpus_and_a_host_update(false);
}

#[test]
#[cfg_attr(clockhal_loom_mutant, ignore = "the mutant's model is the irq one")]
fn two_cpus_and_a_host_update_ordered() {
    two_cpus_and_a_host_update(true);
}

/// A read interrupted at its TSC read by a read on the same CPU (whose
/// TSC is later), while the host changes the map: the outer read returns
/// at least the inner one's value.
#[test]
#[cfg_attr(clockhal_loom_mutant, ignore = "the mutant's model is the irq one")]
fn a_nested_read_is_never_above_the_one_it_interrupted() {
    loom::model(|| {
        let w = World::new(
            OLD,
            HostMap {
                ordered: true,
                ..FASTER
            },
        );
        let host = {
            let w = w.clone();
            thread::spawn(move || w.publish())
        };
        // A cached map first: the outer read takes the fast path (or the
        // slow one, if the host's update came between).
        let warm = w.checked_read(0);
        w.nest[0].store(true, SeqCst);
        let outer = w.checked_read(0);
        let inner = w.nested[0].load(SeqCst);
        assert!(!w.nest[0].load(SeqCst), "the nested read ran");
        assert!(inner >= warm, "back: {warm} then {inner}");
        assert!(outer >= inner, "outer {outer} below the nested {inner}");
        host.join().unwrap();
    });
}

/// An interrupt on CPU 0 anywhere in a read of CPU 0: a second thread with
/// CPU 0's index, which loom runs at every point of the first read (more
/// than an interrupt can: it also interleaves the other way). Both values
/// are true, and a held read afterwards is at or above both: neither
/// raise of the floor was lost. The mutant's model.
#[test]
#[cfg_attr(clockhal_loom_mutant, should_panic(expected = "lost raise"))]
fn an_interrupt_anywhere_loses_no_floor_raise() {
    model(2, || {
        // Ordered: the floor alone holds the values (no clamp behind it).
        let ordered = HostMap {
            ordered: true,
            ..OLD
        };
        let w = World::new(ordered, ordered);
        let irq = {
            let w = w.clone();
            thread::spawn(move || w.checked_read(0))
        };
        let mine = w.checked_read(0);
        let theirs = irq.join().unwrap();
        let held = w.held_read(0);
        assert!(
            held >= mine.max(theirs),
            "lost raise: held {held} below {mine} / {theirs}"
        );
    });
}

/// CPU 1 reads an ordered map (its values on its floor only) while the host
/// withdraws the order with a map stepped back by 3 ns; CPU 0 reads after
/// CPU 1 is done: an unordered reading leaves the floors for the clamp
/// (`absorb_floors`), so CPU 0 never returns less than CPU 1 did.
#[test]
#[cfg_attr(clockhal_loom_mutant, ignore = "the mutant's model is the irq one")]
fn an_absorbed_floor_bounds_later_unordered_reads() {
    loom::model(|| {
        let w = World::new(
            HostMap {
                ordered: true,
                ..OLD
            },
            STEPPED_BACK,
        );
        let cpu1 = {
            let w = w.clone();
            thread::spawn(move || {
                let a = w.checked_read(1);
                let b = w.checked_read(1);
                assert!(b >= a, "back on cpu 1: {a} then {b}");
                b
            })
        };
        let host = {
            let w = w.clone();
            thread::spawn(move || w.publish())
        };
        let theirs = cpu1.join().unwrap();
        let a = w.checked_read(0);
        host.join().unwrap();
        let b = w.checked_read(0);
        assert!(
            a >= theirs && b >= a,
            "cpu 0 read {a}, {b} after cpu 1's {theirs}"
        );
    });
}
