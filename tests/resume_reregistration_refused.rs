//! `Clock::resume()` while the host misbehaves (found by red-team round
//! 28, failing before the fix): a restored host that refuses the boot
//! CPU's re-registration (an unusable first area) left kvmclock current
//! but serving no CPU, so every read held and time stood still for good
//! ("100 ms measure 0 ns"). The source whose re-registration failed is
//! demoted as the host's fault and the next best takes over.
#![cfg(all(
    feature = "kvmclock",
    feature = "hyperv",
    feature = "tsc",
    feature = "hpet",
    feature = "acpi-pm"
))]

mod adversarial;

use adversarial::{clock, leak, ms};
use clockhal_sim::SimMachine;

/// The restored host writes an unusable first update at the boot CPU's
/// re-registration (multiplier 0: `NotWritten`), so `resume()` reports the
/// error and kvmclock is left unregistered on the only CPU. The host is
/// good again right after. Time must not stand still for good: reads on a
/// CPU kvmclock does not serve hold uncounted, and nothing else moves the
/// clock off it.
#[test]
fn a_resume_whose_reregistration_fails_never_freezes_the_clock() {
    let m = leak(SimMachine::kvm());
    let (c, _) = clock(m);
    for _ in 0..4 {
        m.advance(ms(250));
        c.watchdog_tick();
    }
    let before = c.now();
    m.with_kvm(|k, _| k.set_scale_override(Some((0, 0))));
    let r = c.resume();
    m.with_kvm(|k, ctx| {
        k.set_scale_override(None);
        k.update_all(ctx);
    });
    // The OS goes on as documented: reads and watchdog ticks.
    let mut events = Vec::new();
    for _ in 0..20 {
        for _ in 0..1_000 {
            c.now();
        }
        m.advance(ms(250));
        events.push(c.watchdog_tick());
    }
    let t0 = c.now();
    m.advance(ms(100));
    let d = c.elapsed(t0).as_nanos();
    assert!(
        d >= ms(99),
        "resume -> {r:?}; 5 s of ticks later 100 ms measure {d} ns on {} \
         (now {} vs {} before the resume); events {events:?}\n{}",
        c.source_name(),
        c.now().as_nanos(),
        before.as_nanos(),
        c.report().table()
    );
}
