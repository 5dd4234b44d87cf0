//! The probe's report said the TSC is "supervised by the watchdog" where
//! there is no counter to supervise it with, while the clock's own report
//! and `Clock::supervised()` said otherwise (found by red-team round 34,
//! failing before the fix): both reports now say the same.
#![cfg(all(feature = "tsc", feature = "pit", feature = "hpet"))]
mod adversarial;
use adversarial::{leak, platform};
use clockhal::tsc::SyncStatus;
use clockhal::{Platform, SourceId, WatchdogEvent};
use clockhal_sim::SimMachine;

fn check(name: &str, m: &'static SimMachine, p: Platform<'static>) {
    let probed = clockhal::probe(m, p);
    let probe_note = format!("{}", probed.report().get(SourceId::Tsc).unwrap().note);
    let probe_table = format!("{}", probed.report().table());
    let clock = probed.into_clock().unwrap();
    assert_eq!(clock.source_id(), SourceId::Tsc);
    let tick = {
        m.advance(250_000_000);
        clock.watchdog_tick()
    };
    let live_note = format!("{}", clock.report().get(SourceId::Tsc).unwrap().note);
    assert!(
        !probe_note.contains("supervised by the watchdog") || clock.supervised(),
        "{name}: Probed::report() says tsc `{probe_note}`, but Clock::supervised() = false, \
         the first tick is {tick:?} and the clock's report says `{live_note}`\n{probe_table}"
    );
    let _ = WatchdogEvent::Busy;
}

#[test]
fn probe_report_claims_supervision_on_tcg_microvm_kernel_platform() {
    let m = leak(SimMachine::qemu_tcg_microvm());
    let (p, _mem) = platform(m, 1, SyncStatus::SingleCpu);
    check("qemu_tcg_microvm", m, p);
}

#[test]
fn probe_report_claims_supervision_on_tcg_plain_platform() {
    let m = leak(SimMachine::qemu_tcg());
    check("qemu_tcg", m, Platform::new());
}
