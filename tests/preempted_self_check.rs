//! The probe's self-check on a loaded host (issue 26): a vCPU preempted
//! between two reads of a software-extended counter makes it hold, which
//! is no fault. "Did not advance" is a verdict on time, not on a read count.
#![cfg(all(
    feature = "tsc",
    feature = "hpet",
    feature = "acpi-pm",
    feature = "pit"
))]

use clockhal::tsc::SyncStatus;
use clockhal::{probe, Demotion, Duration, Platform, Report, SelfCheck, SourceId};
use clockhal_sim::{PortAccess, PortTap, SimConfig, SimMachine};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

fn platform(m: &SimMachine) -> Platform<'static> {
    let mut p = Platform::new()
        .tsc_sync(SyncStatus::SingleCpu)
        .self_check(SelfCheck::new().rate_interval(Duration::from_millis(1)));
    if let Some(r) = m.hpet_region() {
        p = p.hpet_region(r);
    }
    if let Some(pm) = &m.config().pm_timer {
        p = p.pm_timer(pm.port, pm.bits32);
    }
    p
}

fn not_advancing(r: &Report, id: SourceId) -> bool {
    matches!(
        r.get(id).and_then(|c| c.demotion()),
        Some(Demotion::NotAdvancing { .. })
    )
}

/// PIT latch commands (a write of 0x80 to port 0x43: one per read).
fn is_latch(a: &PortAccess) -> bool {
    matches!(
        a,
        PortAccess::Write {
            port: 0x43,
            value: 0x80
        }
    )
}

#[test]
fn a_pit_read_preempted_before_its_self_check_is_not_called_stuck() {
    // QEMU TCG microvm: the TSC calibrated against the PIT. The vCPU is
    // descheduled for 40 ms (more than half the PIT's 54.9 ms wrap) just
    // before one of the self-check's PIT reads; before issue 26's fix the
    // PIT held for 15 ms, longer than 2,000 reads, and was demoted.
    let dry = SimMachine::qemu_tcg_microvm();
    let tap = PortTap::new(&dry);
    let p = probe(&tap, platform(&dry));
    assert_eq!(p.report().selected_id(), Some(SourceId::Tsc));
    let latches = tap.log().iter().filter(|a| is_latch(a)).count() as u64;
    drop(p);
    // The self-check's reads are the probe's last (no rate check here).
    for before_end in 1..=24u64 {
        let m = SimMachine::qemu_tcg_microvm();
        let tap = PortTap::new(&m);
        let seen = Arc::new(AtomicU64::new(0));
        let n = seen.clone();
        tap.set_hook(move |m, a| {
            if is_latch(a) && n.fetch_add(1, Ordering::SeqCst) + 1 == latches - before_end {
                m.advance(40_000_000);
            }
            None
        });
        let p = probe(&tap, platform(&m));
        let r = *p.report();
        assert!(
            !not_advancing(&r, SourceId::Pit),
            "preempted {before_end} reads before the end:\n{}",
            r.table()
        );
        assert_eq!(
            r.selected_id(),
            Some(SourceId::Tsc),
            "{before_end}: {}",
            r.table()
        );
    }
}

#[test]
fn a_pm_timer_held_after_a_long_preemption_is_waited_out_not_demoted() {
    // QEMU TCG q35: a 3 s vCPU stall (more than half the 24-bit PM
    // timer's 4.69 s wrap) just before the PM timer's self-check. Its
    // reading holds for 1.7 s, which 2,000 reads (2 ms) did not wait out;
    // the TSC (calibrated against the HPET) times the wait now.
    let config: SimConfig = SimMachine::qemu_tcg_config();
    // Dry run: the PM timer's read count at every rdtsc. Its self-check
    // reads come in one burst without a rdtsc (the first gap of many).
    let dry = config.clone().build();
    let trace = Arc::new(Mutex::new(Vec::new()));
    let t = trace.clone();
    dry.set_rdtsc_hook(move |m| {
        t.lock()
            .unwrap()
            .push(m.with_pm_timer(|p, _| p.reads()).unwrap());
    });
    let p = probe(&dry, platform(&dry));
    dry.clear_rdtsc_hook();
    assert!(!not_advancing(p.report(), SourceId::AcpiPm));
    drop(p);
    let trace = trace.lock().unwrap().clone();
    let at = trace
        .windows(2)
        .position(|w| w[1] - w[0] >= 10)
        .expect("the PM timer's self-check burst") as u64;

    let m = config.build();
    let count = AtomicU64::new(0);
    m.set_rdtsc_hook(move |m| {
        if count.fetch_add(1, Ordering::SeqCst) == at {
            m.advance(3_000_000_000);
        }
    });
    let t0 = m.now_ns();
    let p = probe(&m, platform(&m));
    m.clear_rdtsc_hook();
    let r = *p.report();
    assert!(!not_advancing(&r, SourceId::AcpiPm), "{}", r.table());
    assert!(
        r.get(SourceId::AcpiPm).unwrap().is_eligible(),
        "{}",
        r.table()
    );
    // Bounded: the stall, the hold (under 2.5 s) and the rest of the probe.
    assert!(m.now_ns() - t0 < 3_000_000_000 + 2_500_000_000 + 1_000_000_000);
}

#[test]
fn a_stuck_counter_is_still_demoted_within_its_hold_bound() {
    // The time bound is no excuse for a counter that stopped: the PM
    // timer stuck from the start of the self-check is demoted after at
    // most the 24-bit hold (2.34 s) plus margin of TSC time.
    let m = SimMachine::qemu_tcg();
    let stuck = AtomicU64::new(0);
    let config = platform(&m);
    m.set_rdtsc_hook(move |m| {
        // Stop it once the probe's own PM reads are done (any read count
        // past the probe's start check).
        if m.with_pm_timer(|p, _| p.reads()).unwrap() > 0
            && stuck.fetch_add(1, Ordering::SeqCst) == 0
        {
            m.with_pm_timer(|p, ctx| p.set_stopped(ctx, true));
        }
    });
    let t0 = m.now_ns();
    let p = probe(&m, config);
    m.clear_rdtsc_hook();
    let r = *p.report();
    assert!(not_advancing(&r, SourceId::AcpiPm), "{}", r.table());
    assert!(
        m.now_ns() - t0 < 2_600_000_000 + 1_000_000_000,
        "{} ns",
        m.now_ns() - t0
    );
}
