//! The RTC as the TSC's calibration reference of last resort (QEMU
//! `microvm,pit=off`) on a loaded host, and a broken RTC
//! (`Platform::rtc_reference`): the rate is within its stated
//! uncertainty however the host preempts the vCPU, an RTC that never
//! ticks costs two edge waits, not three (before: 16.5 s of boot), and
//! one host pause across the first edge is survived.
#![cfg(all(feature = "rtc", feature = "tsc", feature = "pit"))]

use clockhal::tsc::SyncStatus;
use clockhal::{probe, Frequency, Platform, SourceId};
use clockhal_sim::{RtcConfig, SimConfig, SimMachine};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const S: u64 = 1_000_000_000;

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

/// A loaded host (deterministic): after one `rdtsc` in `every` (on
/// average), the vCPU is descheduled for up to `max_ns`.
fn loaded(m: &'static SimMachine, seed: u64, every: u64, max_ns: u64) {
    let s = Arc::new(AtomicU64::new(seed | 1));
    m.set_rdtsc_hook(move |m| {
        let mut x = s.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.store(x, Ordering::Relaxed);
        if x % every == 0 {
            m.advance((x >> 20) % max_ns);
        }
    });
}

#[test]
fn a_loaded_host_gets_a_rate_within_its_stated_uncertainty() {
    // Preemptions of up to 1 ms, about one per 200 polls of the RTC.
    let seed = 8_316_709_377_436_687_885u64;
    let m: &'static SimMachine = Box::leak(Box::new(microvm_pit_off().build()));
    let true_hz = m.config().tsc_hz;
    m.with_rtc(|r, ctx| r.set_unix_ns(ctx, 1_796_128_496 * S + (seed % S)));
    loaded(m, seed, 200, 1_000_000);
    let p = probe(m, platform());
    m.clear_rdtsc_hook();
    let r = *p.report();
    assert_eq!(r.selected_id(), Some(SourceId::Tsc), "{}", r.table());
    let tsc = r.get(SourceId::Tsc).unwrap();
    let err = rate_error_ppm(tsc.frequency().unwrap(), true_hz);
    let clockhal::Note::Tsc {
        rate: clockhal::tsc::RateProvenance::Calibrated {
            uncertainty_ppm, ..
        },
        ..
    } = tsc.note
    else {
        panic!("not calibrated:\n{}", r.table());
    };
    assert!(
        err.unsigned_abs() <= u64::from(uncertainty_ppm),
        "rate off by {err} ppm, stated ±{uncertainty_ppm}:\n{}",
        r.table()
    );
}

fn probe_time_with(rtc: RtcConfig) -> (u64, String) {
    let mut cfg = microvm_pit_off();
    cfg.rtc = Some(rtc);
    let m = cfg.build();
    let t0 = m.now_ns();
    let p = probe(&m, platform());
    (m.now_ns() - t0, p.report().table().to_string())
}

#[test]
fn an_rtc_whose_update_flag_is_stuck_costs_two_edge_waits() {
    let (took, table) = probe_time_with(RtcConfig {
        uip_stuck: true,
        ..RtcConfig::qemu()
    });
    assert!(took <= 12 * S, "probe took {took} ns\n{table}");
}

#[test]
fn an_rtc_whose_seconds_never_change_costs_two_edge_waits() {
    let (took, table) = probe_time_with(RtcConfig::qemu().with_forced(0x00, 0x07));
    assert!(took <= 12 * S, "probe took {took} ns\n{table}");
}
