//! Issue 26 §1 and §4: a guest paused during the probe (QEMU `stop`/`cont`:
//! the devices freeze, the TSC runs on). A calibration's stated
//! uncertainty must cover every reference misbehaviour it could not rule
//! out, and a pause is one it can: the interval's halves must agree and
//! each reading must lie on the line within its window. The self-check's
//! interval likewise counts the pacer's gaps. Neither may demote the
//! honest TSC for the rest of the boot.
mod adversarial;

use adversarial::*;
use clockhal::{Frequency, SourceId};
use clockhal_sim::{HpetConfig, PmTimerConfig, SimConfig, SimMachine};

/// A 2 GHz invariant TSC with no stated rate (calibrated against the
/// HPET), and a PM timer where `pm`.
fn machine(pm: bool) -> &'static SimMachine {
    let cfg = SimConfig::cpu(2_000_000_000)
        .with_invariant_tsc(true)
        .with_hpet(HpetConfig::qemu());
    leak(SimMachine::new(if pm {
        cfg.with_pm_timer(PmTimerConfig::default())
    } else {
        cfg
    }))
}

/// Probes `m` with a 10 ms pause of every device after its `k`th rdtsc.
fn probe_paused_at(m: &'static SimMachine, k: u32) -> SimClock {
    let mut n = 0;
    m.set_rdtsc_hook(move |m| {
        n += 1;
        if n == k {
            m.clear_rdtsc_hook();
            m.step_tsc(None, 20_000_000); // 10 ms of TSC, no device time
        }
    });
    let (c, _) = clock(m);
    m.clear_rdtsc_hook();
    c
}

#[test]
fn a_pause_anywhere_in_the_probe_demotes_no_honest_tsc() {
    let truth = Frequency::from_hz(2_000_000_000).unwrap();
    for pm in [false, true] {
        // rdtsc counts that land in the calibration's groups and spin and
        // in the self-check's brackets and pacing.
        for k in (10..200).step_by(10).chain((200..4_000).step_by(200)) {
            let m = machine(pm);
            let c = probe_paused_at(m, k);
            let r = c.report();
            let tsc = r.get(SourceId::Tsc).unwrap();
            assert_eq!(c.source_id(), SourceId::Tsc, "pm {pm} k {k}\n{}", r.table());
            let err_ppb = tsc.frequency().unwrap().ppb_from(&truth).unsigned_abs();
            assert!(
                err_ppb < 100_000,
                "pm {pm} k {k}: {err_ppb} ppb\n{}",
                r.table()
            );
            let (t0, n0) = (c.now().as_nanos(), m.now_ns());
            for _ in 0..20 {
                m.advance(ms(250));
                let e = c.watchdog_tick();
                assert!(!bad(&e), "pm {pm} k {k}: {e:?}\n{}", c.report().table());
            }
            let drift = (c.now().as_nanos() - t0).abs_diff(m.now_ns() - n0);
            assert!(drift < 1_000_000, "pm {pm} k {k}: {drift} ns off in 5 s");
        }
    }
}
