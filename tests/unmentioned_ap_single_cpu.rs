//! An AP the kernel never mentioned (it said `SyncStatus::SingleCpu`, one
//! CPU, then brought up a second) whose TSC is 1 s behind the boot CPU's
//! (found by red-team round 34, failing before the fix): the TSC stayed in
//! step with the `smp` flag and 1 s measured 0 on the AP. "Single CPU"
//! stops being evidence once another CPU registers.
#![cfg(all(feature = "tsc", feature = "hpet"))]
mod adversarial;
use adversarial::{leak, SimClock};
use clockhal::tsc::SyncStatus;
use clockhal::{Duration, Platform, SelfCheck};
use clockhal_sim::SimMachine;

fn guarded<R: Send + 'static>(secs: u64, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let _ = tx.send(r);
    });
    match rx.recv_timeout(std::time::Duration::from_secs(secs)) {
        Ok(Ok(r)) => r,
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => panic!("hung for {secs} s (deadlock?)"),
    }
}

/// `elapsed` over 1 s of machine time on the calling CPU.
fn one_second(c: &SimClock, m: &SimMachine) -> i128 {
    let t0 = c.now();
    let m0 = m.now_ns();
    m.advance(1_000_000_000);
    let t1 = c.now();
    (t1.as_nanos() as i128 - t0.as_nanos() as i128) - (m.now_ns() - m0) as i128
}

/// Reads on CPU 0, then on CPU 1 (whose TSC is 1 s behind), after CPU 1
/// registered: the cross-CPU order the report's `smp` flag claims.
fn unmentioned_ap_behind(
    f: impl FnOnce(Platform<'static>) -> Platform<'static>,
) -> Result<(), String> {
    let m = leak(
        SimMachine::bare_metal_config()
            .with_cpus(2, &[0, -2_592_000_000])
            .build(),
    );
    let mut p =
        Platform::new().self_check(SelfCheck::new().rate_interval(Duration::from_millis(1)));
    if let Some(r) = m.hpet_region() {
        p = p.hpet_region(r);
    }
    if let Some(pm) = &m.config().pm_timer {
        p = p.pm_timer(pm.port, pm.bits32);
    }
    let c = clockhal::probe(m, f(p)).into_clock().unwrap();
    m.set_cpu(1);
    let reg = c.register_this_cpu();
    m.set_cpu(0);
    for _ in 0..8 {
        m.advance(250_000_000);
        c.watchdog_tick();
    }
    let a = c.now();
    m.set_cpu(1);
    let b = c.now();
    m.set_cpu(0);
    let r = c.report();
    if b < a {
        return Err(format!("CPU 1 read {} ns before CPU 0's earlier reading (register: {reg:?}); source {:?} smp flag claimed\n{}", a.as_nanos() - b.as_nanos(), c.source_id(), r.table()));
    }
    m.set_cpu(1);
    let e1 = one_second(&c, m);
    m.set_cpu(0);
    let e0 = one_second(&c, m);
    if e1.abs() > 1_000_000 || e0.abs() > 1_000_000 {
        return Err(format!("1 s of machine time measured with error {e1} ns on CPU 1, {e0} ns on CPU 0 (register: {reg:?}); source {:?}\n{}", c.source_id(), c.report().table()));
    }
    Ok(())
}

#[test]
fn unmentioned_ap_cpus1_singlecpu_sync() {
    guarded(20, || {
        unmentioned_ap_behind(|p| p.cpus(1).tsc_sync(SyncStatus::SingleCpu)).unwrap()
    });
}

#[test]
fn unmentioned_ap_singlecpu_sync_only() {
    guarded(20, || {
        unmentioned_ap_behind(|p| p.tsc_sync(SyncStatus::SingleCpu)).unwrap()
    });
}
