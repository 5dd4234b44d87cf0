//! The Hyper-V page's MSR fallback is untrusted input too (found by a
//! red-team pass): while the page is invalid (sequence 0, the partition's
//! "read TIME_REF_COUNT" state) the MSR's readings are the page's, so a
//! lying or withdrawn MSR must not reach `now()`, freeze it, or outvote
//! the honest counters in the watchdog; a withdrawn reference-TSC MSR must
//! not crash `resume()` or drop.
#![cfg(all(
    feature = "kvmclock",
    feature = "hyperv",
    feature = "tsc",
    feature = "hpet",
    feature = "acpi-pm"
))]

mod adversarial;

use adversarial::{clock, leak, ms, race, ticks};
use clockhal::x86::Msr;
use clockhal::{SourceId, Verdict, WatchdogEvent, STUCK_READS};
use clockhal_sim::{Answer, HypervHost, SimMachine};

const YEAR_NS: u64 = 365 * 24 * 3_600 * 1_000_000_000;

fn reference_100ns(m: &SimMachine) -> u64 {
    m.with_hyperv(|_, ctx| HypervHost::reference_time(ctx))
        .unwrap()
}

/// The host invalidates the page and stops updating it: every read falls
/// back to TIME_REF_COUNT.
fn invalidate_page_for_good(m: &SimMachine) {
    m.with_hyperv(|h, ctx| {
        h.invalidate_page(ctx);
        h.set_page_updates(false);
    });
}

#[test]
fn a_lying_time_ref_count_behind_an_invalid_page_never_reaches_now() {
    let m = leak(SimMachine::hyperv());
    let (c, _) = clock(m);
    assert_eq!(c.source_id(), SourceId::HypervPage);
    let origin = m.now_ns() - c.now().as_nanos();
    let within = |t: u64| t <= m.now_ns() - origin + 10_000_000_000;
    race(&c, m, &[0], false, |readers| {
        readers.wait(100);
        invalidate_page_for_good(m);
        readers.wait(100);
        let r = reference_100ns(m);
        m.override_msr(
            Msr::HV_TIME_REF_COUNT,
            Some(Answer::Value(r + 5 * YEAR_NS / 100)),
        );
        readers.wait(100);
        for _ in 0..4 {
            m.advance(ms(250));
            c.watchdog_tick();
            readers.wait(100);
        }
        m.clear_overrides();
        for _ in 0..4 {
            m.advance(ms(250));
            c.watchdog_tick();
            readers.wait(100);
        }
    });
    let t = c.now().as_nanos();
    assert!(within(t), "now() = {t} ns, far ahead of the machine");
    // And it still measures.
    let (t0, n0) = (c.now(), m.now_ns());
    m.advance(ms(100));
    let d = c.now().duration_since(t0).as_nanos();
    let real = m.now_ns() - n0;
    assert!(
        d <= real && d + 50_000 >= real,
        "{d} ns over {real} ns on {}",
        c.source_name()
    );
}

#[test]
fn an_invalid_page_counts_as_the_msr_in_the_watchdog_vote() {
    let m = leak(SimMachine::hyperv());
    let (c, _) = clock(m);
    let events = race(&c, m, &[0], false, |readers| {
        readers.future_slack(None);
        ticks(&c, m, readers, 2, 50);
        invalidate_page_for_good(m);
        let r0 = reference_100ns(m);
        (0..10)
            .map(|_| {
                readers.wait(50);
                m.advance(ms(250));
                // TIME_REF_COUNT runs 2 % fast.
                let r = reference_100ns(m);
                m.override_msr(
                    Msr::HV_TIME_REF_COUNT,
                    Some(Answer::Value(r0 + (r - r0) * 102 / 100)),
                );
                c.watchdog_tick()
            })
            .collect::<Vec<_>>()
    });
    let report = c.report();
    let demoted = |id| {
        matches!(
            report.get(id).map(|c| c.verdict),
            Some(Verdict::Demoted { .. })
        )
    };
    assert!(
        !demoted(SourceId::Tsc) && !demoted(SourceId::AcpiPm),
        "honest sources demoted ({:?} current):\n{}\n{events:?}",
        c.source_id(),
        report.table()
    );
    assert!(
        demoted(SourceId::HypervMsr) && c.source_id() != SourceId::HypervPage,
        "the lying counter kept:\n{}\n{events:?}",
        report.table()
    );
}

#[test]
fn a_withdrawn_time_ref_count_behind_an_invalid_page_does_not_freeze_now() {
    let m = leak(SimMachine::hyperv());
    let (c, _) = clock(m);
    let t0 = c.now();
    invalidate_page_for_good(m);
    m.override_msr(Msr::HV_TIME_REF_COUNT, Some(Answer::Fault));
    // No watchdog: the held reads alone switch the source.
    let mut last = t0;
    for _ in 0..3 * STUCK_READS {
        m.advance(10_000);
        last = c.now();
    }
    assert!(
        last.as_nanos() > t0.as_nanos() + ms(1),
        "now() stuck at {last:?} on {:?} after {} reads ({} switches)",
        c.source_id(),
        3 * STUCK_READS,
        c.switches()
    );
    assert_ne!(c.source_id(), SourceId::HypervPage);
}

#[test]
fn a_withdrawn_reference_tsc_msr_does_not_crash_resume_or_drop() {
    let m = leak(SimMachine::hyperv());
    let (c, _) = clock(m);
    m.override_msr(Msr::HV_REFERENCE_TSC, Some(Answer::Fault));
    let _ = c.resume();
    let t = c.now();
    m.advance(ms(1));
    assert!(c.now() >= t);
    drop(c);
    // The lease is free again: a new probe owns the machine.
    m.clear_overrides();
    let (again, _) = clock(m);
    assert_eq!(again.source_id(), SourceId::HypervPage);
}

#[test]
fn the_report_keeps_the_reason_the_switch_event_gave() {
    let m = leak(SimMachine::hyperv());
    let (c, _) = clock(m);
    let events = race(&c, m, &[0], false, |readers| {
        readers.future_slack(None);
        ticks(&c, m, readers, 2, 50);
        invalidate_page_for_good(m);
        m.override_msr(Msr::HV_TIME_REF_COUNT, Some(Answer::Fault));
        ticks(&c, m, readers, 3, 100)
    });
    let switched = events.iter().find_map(|e| match e {
        WatchdogEvent::Switched {
            from: SourceId::HypervPage,
            reason,
            ..
        } => Some(*reason),
        _ => None,
    });
    let in_report = match c.report().get(SourceId::HypervPage).map(|c| c.verdict) {
        Some(Verdict::Demoted { reason, .. }) => Some(reason),
        _ => None,
    };
    assert!(switched.is_some(), "no switch away: {events:?}");
    assert_eq!(switched, in_report, "{events:?}\n{}", c.report().table());
}
