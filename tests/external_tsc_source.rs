//! A TSC-based source defined here, outside the library, with only the
//! public traits (`ClockSource` and core's `TscSource`): it is probed and
//! self-checked, selected, read by `Clock` through the one read loop
//! (cached map, token, floors), and judged by the watchdog, which demotes
//! it when its map runs at a wrong rate. Nothing in `src/` names it.
#![cfg(all(feature = "tsc", feature = "hpet", feature = "acpi-pm"))]

mod adversarial;

use adversarial::{clock_with, leak, ms};
use clockhal::core_api::{
    ClampGranule, CounterDomain, LastMap, MapMiss, MapNow, Scale, Timeline, TscMap, TscSource,
};
use clockhal::x86::{Hardware, Seam};
use clockhal::{
    ClockSource, Demotion, Frequency, Quality, ReadCost, SourceId, Stability, Verdict,
    WatchdogEvent,
};
use clockhal_sim::SimMachine;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

/// A pvclock-like source: the "host" (this test) publishes a TSC rate and
/// an anchor under a token that is odd while it writes.
struct Xenish {
    m: &'static SimMachine,
    token: AtomicU32,
    hz: AtomicU64,
    anchor_tsc: AtomicU64,
    anchor_ns: AtomicU64,
    maps: AtomicU64,
    /// Reads through its own `ClockSource::read` (its own timeline).
    reads: AtomicU64,
    timeline: Timeline,
}

impl Xenish {
    fn new(m: &'static SimMachine) -> Xenish {
        Xenish {
            m,
            token: AtomicU32::new(2),
            hz: AtomicU64::new(m.config().tsc_hz),
            anchor_tsc: AtomicU64::new(0),
            anchor_ns: AtomicU64::new(0),
            maps: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            timeline: Timeline::claim(m.slot_pool(), ClampGranule::EXACT).expect("a slot set"),
        }
    }

    /// Publishes a new rate, continuing the timeline at the current TSC.
    fn publish(&self, hz: u64) {
        let t = self.m.tsc_of(0);
        let old = self.map();
        self.token.fetch_add(1, SeqCst);
        self.anchor_ns.store(old.apply(t), SeqCst);
        self.anchor_tsc.store(t, SeqCst);
        self.hz.store(hz, SeqCst);
        self.token.fetch_add(1, SeqCst);
    }

    fn map(&self) -> TscMap {
        let f = Frequency::from_hz(self.hz.load(SeqCst)).unwrap();
        TscMap::through(
            &Scale::new(f),
            self.anchor_tsc.load(SeqCst),
            self.anchor_ns.load(SeqCst),
        )
    }
}

impl TscSource for Xenish {
    const PER_CPU_MAP: bool = false;
    fn token(&self, _: usize) -> Option<u32> {
        Some(self.token.load(SeqCst))
    }
    fn map_now(&self, _: usize, _: Option<LastMap>, _: Option<u64>) -> Result<MapNow, MapMiss> {
        let tag = self.token.load(SeqCst);
        let map = self.map();
        let tsc = self.m.rdtsc_ordered();
        if tag % 2 != 0 || self.token.load(SeqCst) != tag {
            return Err(MapMiss::Busy);
        }
        self.maps.fetch_add(1, SeqCst);
        Ok(MapNow {
            tag,
            map,
            ordered: true,
            tsc,
        })
    }
}

impl ClockSource for Xenish {
    fn name(&self) -> &'static str {
        "xenish"
    }
    fn read(&self) -> u64 {
        self.reads.fetch_add(1, SeqCst);
        self.timeline.read(self.m.slot_pool(), Seam(&self.m), self)
    }
    fn frequency(&self) -> Frequency {
        Frequency::NANOSECONDS
    }
    fn quality(&self) -> Quality {
        Quality::new(480)
    }
    fn stability(&self) -> Stability {
        Stability::MONOTONIC_PER_CPU | Stability::MONOTONIC_ACROSS_CPUS | Stability::INVARIANT_RATE
    }
    fn read_cost(&self) -> ReadCost {
        ReadCost::NoTrap
    }
    fn counter_domain(&self) -> Option<CounterDomain> {
        Some(CounterDomain::Tsc)
    }
}

fn machine() -> &'static SimMachine {
    leak(SimMachine::qemu_tcg())
}

#[test]
fn an_outside_tsc_source_is_probed_selected_and_read_through_the_loop() {
    let m = machine();
    let x: &'static Xenish = Box::leak(Box::new(Xenish::new(m)));
    let (c, _mem) = clock_with(m, |p| p.extra_tsc_source(x));
    let r = c.report();
    assert!(
        matches!(
            r.get(SourceId::Extra).map(|c| c.verdict),
            Some(Verdict::Usable(_))
        ),
        "{}",
        r.table()
    );
    assert_eq!(c.source_id(), SourceId::Extra, "{}", r.table());
    assert_eq!(c.source_name(), "xenish");

    // Reads come through the cached map: a few map_now samples, not one
    // per read (the loop's fast path checks the token and the window).
    let before = x.maps.load(SeqCst);
    let own_reads = x.reads.load(SeqCst);
    let t0 = c.now();
    let s0 = m.now_ns();
    for _ in 0..1_000 {
        m.advance(1_000);
    }
    let mut last = c.now();
    for _ in 0..10_000 {
        m.advance(10);
        let v = c.now();
        assert!(v >= last);
        last = v;
    }
    // The clock read it through its TSC view, never as a device.
    assert_eq!(x.reads.load(SeqCst), own_reads);
    let samples = x.maps.load(SeqCst) - before;
    assert!(samples < 100, "{samples} map samples for 10,001 reads");
    // The clock's time passed is the machine's (the sim's reads cost time
    // too), to within the reads' own granularity.
    let (passed, truth) = ((last - t0).as_nanos(), m.now_ns() - s0);
    assert!(truth >= 1_100_000);
    assert!(passed.abs_diff(truth) < 1_000, "{passed} ns for {truth} ns");

    // A new token: the loop takes the new map (continuing) at once.
    x.publish(m.config().tsc_hz);
    let samples = x.maps.load(SeqCst);
    m.advance(1_000);
    let after = c.now();
    assert!(after >= last);
    assert!(x.maps.load(SeqCst) > samples, "the changed token was seen");
}

#[test]
fn the_watchdog_demotes_an_outside_tsc_source_whose_rate_is_wrong() {
    let m = machine();
    let x: &'static Xenish = Box::leak(Box::new(Xenish::new(m)));
    let (c, _mem) = clock_with(m, |p| p.extra_tsc_source(x));
    assert_eq!(c.source_id(), SourceId::Extra, "{}", c.report().table());
    // A few honest rounds first.
    for _ in 0..4 {
        m.advance(ms(250));
        let _ = c.now();
        let e = c.watchdog_tick();
        assert!(!adversarial::bad(&e), "{e:?}");
    }
    // The "host" now claims a TSC 5 % slower than it is: the source runs
    // 5 % fast. It votes with the TSC's domain (it says so), so the HPET
    // and the PM timer outvote it.
    x.publish(m.config().tsc_hz / 100 * 95);
    let mut events = Vec::new();
    let last = Arc::new(AtomicU64::new(c.now().as_nanos()));
    for _ in 0..12 {
        m.advance(ms(250));
        let v = c.now().as_nanos();
        assert!(v >= last.swap(v, SeqCst), "time went back");
        events.push(c.watchdog_tick());
    }
    let demoted = events.iter().find_map(|e| match *e {
        WatchdogEvent::Switched {
            from: SourceId::Extra,
            reason,
            ..
        }
        | WatchdogEvent::Demoted {
            source: SourceId::Extra,
            reason,
            ..
        } => Some(reason),
        _ => None,
    });
    assert!(
        matches!(
            demoted,
            Some(Demotion::Watchdog { .. }) | Some(Demotion::Jumped { .. })
        ),
        "{events:?}\n{}",
        c.report().table()
    );
    assert_ne!(c.source_id(), SourceId::Extra);
}
