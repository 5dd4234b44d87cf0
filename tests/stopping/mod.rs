//! Shared by the facade tests of bounded waits (`tests/delay.rs`,
//! `tests/lapic.rs`): a clock on a source the test can stop, forced so
//! that nothing switches away from it.

use clockhal::{
    Clock, ClockSource, Frequency, Platform, Policy, Quality, ReadCost, SourceId, Stability,
};
use clockhal_sim::SimMachine;
use std::sync::atomic::{AtomicBool, Ordering};

/// A 1 GHz device on machine time that stops when told to.
pub struct Stoppable {
    m: &'static SimMachine,
    stopped: AtomicBool,
}

impl Stoppable {
    /// From now on every read returns the same count.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
    }
}

impl ClockSource for Stoppable {
    fn name(&self) -> &'static str {
        "stoppable"
    }
    fn read(&self) -> u64 {
        if self.stopped.load(Ordering::SeqCst) {
            return 1_000;
        }
        self.m.advance(20);
        self.m.now_ns()
    }
    fn frequency(&self) -> Frequency {
        Frequency::from_hz(1_000_000_000).unwrap()
    }
    fn quality(&self) -> Quality {
        Quality::new(100)
    }
    fn stability(&self) -> Stability {
        Stability::MONOTONIC_PER_CPU | Stability::MONOTONIC_ACROSS_CPUS
    }
    fn read_cost(&self) -> ReadCost {
        ReadCost::NoTrap
    }
}

/// A QEMU TCG machine whose clock is forced onto a [`Stoppable`] source
/// (a forced source is never switched away from: nothing but the caller's
/// own bound ends a wait once it stops).
pub fn forced_stoppable() -> (
    &'static SimMachine,
    &'static Stoppable,
    Clock<&'static SimMachine>,
) {
    let m: &'static SimMachine = Box::leak(Box::new(SimMachine::qemu_tcg()));
    let source: &'static Stoppable = Box::leak(Box::new(Stoppable {
        m,
        stopped: AtomicBool::new(false),
    }));
    let platform = Platform::new()
        .extra(source)
        .policy(Policy::new().force("stoppable"));
    let clock = clockhal::probe(m, platform).into_clock().unwrap();
    assert_eq!(clock.source_id(), SourceId::Extra);
    clock.now();
    (m, source, clock)
}
