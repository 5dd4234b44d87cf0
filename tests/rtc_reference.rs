//! The CMOS RTC's second edges as the TSC's calibration reference of last
//! resort (issue 26): QEMU `-M microvm,pit=off` under TCG has no HPET, no
//! PM timer, no PIT, no kvmclock and no stated TSC rate ("TSC rate
//! unknown": no clock at all before).
#![cfg(all(feature = "rtc", feature = "tsc", feature = "pit"))]

use clockhal::tsc::SyncStatus;
use clockhal::{probe, ClockSource, Frequency, NoClockReason, Platform, SourceId};
use clockhal_sim::{PortAccess, PortTap, SimConfig, SimMachine};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const S: u64 = 1_000_000_000;

/// QEMU TCG microvm with `pit=off`: the RTC is the only timing device.
fn microvm_pit_off() -> SimConfig {
    let mut c = SimMachine::qemu_tcg_microvm_config();
    c.pit = None;
    c
}

fn platform() -> Platform<'static> {
    Platform::new().tsc_sync(SyncStatus::SingleCpu)
}

fn rate_error_ppm(f: Frequency, true_hz: u64) -> i64 {
    f.ppb_from(&Frequency::from_hz(true_hz).unwrap()) / 1000
}

/// The RTC's ports were touched.
fn touched_rtc(tap: &PortTap<'_>) -> bool {
    tap.log().iter().any(|a| match *a {
        PortAccess::Read { port, .. } | PortAccess::Write { port, .. } => {
            port == 0x70 || port == 0x71
        }
    })
}

#[test]
fn microvm_without_a_pit_calibrates_the_tsc_against_the_rtc() {
    let config = microvm_pit_off();
    let true_hz = config.tsc_hz;
    for start_ns in [0, 250_000_000, 999_000_000] {
        let m = config.clone().build();
        m.with_rtc(|r, ctx| r.set_unix_ns(ctx, 1_796_128_496 * S + start_ns));
        let t0 = m.now_ns();
        let p = probe(&m, platform());
        let cost = m.now_ns() - t0;
        let r = *p.report();
        let tsc = r.get(SourceId::Tsc).unwrap();
        assert!(
            tsc.note.to_string().contains("rate calibrated against rtc"),
            "{}",
            r.table()
        );
        assert_eq!(r.selected_id(), Some(SourceId::Tsc), "{}", r.table());
        // Three edges: two to three seconds of boot.
        assert!((2 * S..3 * S + 100_000_000).contains(&cost), "{cost} ns");
        let clock = p.into_clock().unwrap();
        let f = clock.tsc().unwrap().frequency();
        let err = rate_error_ppm(f, true_hz);
        assert!(err.abs() <= 100, "rate off by {err} ppm");
        let t = clock.now();
        m.advance(5 * S);
        let took = clock.elapsed(t).as_nanos();
        assert!(took.abs_diff(5 * S) <= 500_000, "5 s measured as {took} ns");
    }
}

#[test]
fn an_rtc_whose_update_flag_never_rises_calibrates_as_well() {
    // Real QEMU microvm: after two edges its RTC stops raising UIP (status
    // C's flags stay set: clockhal never reads status C). The seconds
    // register's change marks the edges then.
    let config =
        microvm_pit_off().with_rtc(clockhal_sim::RtcConfig::qemu().with_forced(0x0A, 0x26));
    let true_hz = config.tsc_hz;
    let m = config.build();
    let p = probe(&m, platform());
    let r = *p.report();
    assert_eq!(r.selected_id(), Some(SourceId::Tsc), "{}", r.table());
    let f = r.get(SourceId::Tsc).unwrap().frequency().unwrap();
    let err = rate_error_ppm(f, true_hz);
    assert!(err.abs() <= 100, "rate off by {err} ppm");
}

#[test]
fn a_second_misread_after_a_preemption_is_caught_by_the_next_edges() {
    // The vCPU is descheduled for exactly a second right after UIP rose
    // once: the RTC read after that edge shows the next second. The
    // intervals then disagree (1 s of TSC for 2 RTC seconds, and the
    // reverse), and the calibration slides on to edges that agree.
    let m: &'static SimMachine = Box::leak(Box::new(microvm_pit_off().build()));
    let true_hz = m.config().tsc_hz;
    let fired = Arc::new(AtomicBool::new(false));
    let flag = fired.clone();
    m.set_rdtsc_hook(move |m| {
        let into = m.with_rtc(|r, ctx| r.unix_ns(ctx.now_ns)).unwrap() % S;
        if into >= S - clockhal_sim::UIP_LEAD_NS && !flag.swap(true, Ordering::SeqCst) {
            m.advance(S);
        }
    });
    let p = probe(m, platform());
    m.clear_rdtsc_hook();
    assert!(fired.load(Ordering::SeqCst));
    let r = *p.report();
    assert_eq!(r.selected_id(), Some(SourceId::Tsc), "{}", r.table());
    let f = r.get(SourceId::Tsc).unwrap().frequency().unwrap();
    let err = rate_error_ppm(f, true_hz);
    assert!(err.abs() <= 100, "rate off by {err} ppm:\n{}", r.table());
}

#[test]
fn the_rtc_is_touched_only_as_the_last_resort_and_with_consent() {
    // A PIT present: the PIT calibrates, the RTC is left alone.
    let m = SimMachine::qemu_tcg_microvm();
    let tap = PortTap::new(&m);
    let p = probe(&tap, platform());
    assert!(p
        .report()
        .get(SourceId::Tsc)
        .unwrap()
        .note
        .to_string()
        .contains("against pit"));
    assert!(
        !touched_rtc(&tap),
        "the RTC was read though the PIT was there"
    );
    drop(p);
    // No consent: no clock, and no RTC access.
    let m = microvm_pit_off().build();
    let tap = PortTap::new(&m);
    let p = probe(&tap, platform().rtc_reference(false));
    assert!(!touched_rtc(&tap));
    let e = p.into_clock().unwrap_err();
    assert_eq!(
        e.reason,
        NoClockReason::NothingUsable,
        "{}",
        e.report.table()
    );
    // No RTC either: no clock, in bounded time.
    let mut c = microvm_pit_off();
    c.rtc = None;
    let m = c.build();
    let t0 = m.now_ns();
    let p = probe(&m, platform());
    assert!(m.now_ns() - t0 < S);
    assert!(p.into_clock().is_err());
}

#[test]
fn a_tsc_with_nothing_to_supervise_it_is_not_called_supervised() {
    // The RTC calibrates but is no watchdog member: the TSC is not
    // invariant, and nothing can supervise it. The report said "supervised
    // by the watchdog" and `supervised()` was true; it stays current
    // without ticks.
    let m = microvm_pit_off().build();
    let c = probe(&m, platform()).into_clock().unwrap();
    let note = c.report().get(SourceId::Tsc).unwrap().note.to_string();
    assert!(
        note.contains("no counter to supervise it with") && !note.contains("supervised by"),
        "{note}"
    );
    assert!(!c.supervised());
    for _ in 0..4 {
        m.advance(S / 4);
        c.watchdog_tick();
    }
    let t = c.now();
    m.advance(10 * S);
    assert!(c.elapsed(t).as_nanos().abs_diff(10 * S) < 1_000_000);
    assert_eq!(c.source_id(), SourceId::Tsc, "{}", c.report().table());
    assert!(!c.supervised());
}
