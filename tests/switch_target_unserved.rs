//! A switch target is re-read for 100 µs on the calling CPU. kvmclock on
//! a CPU whose area is not registered (an AP before `register_this_cpu`,
//! or after `unregister_this_cpu`) holds its value there: "the source
//! still serves the other CPUs" (Clock::unregister_this_cpu). A switch
//! decided on such a CPU does not demote the honest kvmclock (for a
//! while it did, as `Watchdog { Stopped }`).
#![cfg(all(feature = "kvmclock", feature = "tsc", feature = "hpet"))]

use clockhal::tsc::SyncStatus;
use clockhal::{Migration, Policy, SourceId, Verdict};
use clockhal_sim::SimMachine;

mod adversarial;

use adversarial::{clock_with, leak, ms};

#[test]
fn a_switch_decided_on_a_cpu_kvmclock_does_not_serve_does_not_demote_kvmclock() {
    let m = leak(
        SimMachine::qemu_kvm_invtsc_config()
            .with_cpus(2, &[0, 0])
            .build(),
    );
    let (c, _) = clock_with(m, |p| {
        p.tsc_sync(SyncStatus::Synchronized)
            .policy(Policy::new().migration(Migration::WillNot))
    });
    assert_eq!(c.source_id(), SourceId::Tsc, "{}", c.report().table());
    m.on_cpu(1, || c.register_this_cpu()).unwrap();
    for _ in 0..8 {
        m.advance(ms(250));
        m.on_cpu(0, || c.watchdog_tick());
    }
    // CPU 1 goes offline (kexec path): its kvmclock area is unregistered.
    m.on_cpu(1, || c.unregister_this_cpu());
    // The hypervisor steps CPU 1's TSC an hour ahead: CPU 1's next read
    // jumps, the jump check demotes the TSC and switches from CPU 1.
    m.step_tsc(Some(1), 3_600 * m.config().tsc_hz as i64);
    m.advance(ms(1));
    m.on_cpu(1, || c.now());
    let kvm = c.report().get(SourceId::Kvmclock).map(|x| x.verdict);
    assert!(
        matches!(kvm, Some(Verdict::Usable(_))),
        "on {:?}; the honest kvmclock is {kvm:?}\n{}",
        c.source_id(),
        c.report().table()
    );
}
