//! Reads from interrupt and NMI context (issue 12): a read that lands in
//! the middle of another read, of `watchdog_tick()` or of a source switch
//! on the same CPU neither deadlocks nor returns less than a read that
//! completed before it. The simulator's rdtsc hook plays the interrupt:
//! it runs a nested `now()` inside whatever clockhal was doing.
#![cfg(all(
    feature = "kvmclock",
    feature = "hyperv",
    feature = "tsc",
    feature = "hpet",
    feature = "acpi-pm"
))]

mod adversarial;

use adversarial::{clock, leak, ms, SimClock};
use clockhal::SourceId;
use clockhal_sim::SimMachine;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Every `every`-th rdtsc on the machine runs a nested `now()` (the
/// "interrupt"); the values, in completion order, go to the returned log
/// with the outer reads' values.
fn interrupt_every(
    m: &'static SimMachine,
    c: &'static SimClock,
    every: u64,
) -> Arc<Mutex<Vec<u64>>> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let n = AtomicU64::new(0);
    let l = log.clone();
    m.set_rdtsc_hook(move |_| {
        if n.fetch_add(1, Ordering::Relaxed) % every == 0 {
            let t = c.now().as_nanos();
            l.lock().unwrap().push(t);
        }
    });
    log
}

fn assert_sorted(log: &[u64]) {
    for w in log.windows(2) {
        assert!(
            w[1] >= w[0],
            "a read completed after another returned less: {w:?}"
        );
    }
}

#[test]
fn interrupts_during_reads_ticks_and_switches_stay_monotonic() {
    for (name, m) in [
        ("kvm", leak(SimMachine::kvm())),
        ("hyperv", leak(SimMachine::hyperv())),
        ("bare metal", leak(SimMachine::bare_metal())),
    ] {
        let (c, _) = clock(m);
        let c: &'static SimClock = Box::leak(Box::new(c));
        let log = interrupt_every(m, c, 3);
        let outer = |log: &Arc<Mutex<Vec<u64>>>| {
            let t = c.now().as_nanos();
            log.lock().unwrap().push(t);
        };
        for i in 0..40 {
            outer(&log);
            m.advance(ms(50));
            let _ = c.watchdog_tick();
            outer(&log);
            if i % 10 == 5 {
                // A switch (and back) with interrupts inside it.
                let other = [SourceId::Hpet, SourceId::AcpiPm]
                    .into_iter()
                    .find(|id| c.source_of(*id).is_some());
                if let Some(id) = other {
                    c.force(id).unwrap();
                    outer(&log);
                    c.unforce();
                }
            }
        }
        m.clear_rdtsc_hook();
        let log = log.lock().unwrap().clone();
        assert!(log.len() > 100, "{name}: {} reads", log.len());
        assert_sorted(&log);
        let t0 = c.now();
        m.advance(ms(10));
        assert!(c.elapsed(t0).as_nanos() >= ms(10), "{name}");
    }
}
