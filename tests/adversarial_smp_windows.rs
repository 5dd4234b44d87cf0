//! Found by red-team round 8, each failing before its fix: a Hyper-V page
//! update after a migration window (the page invalid, the TSC 20 % faster)
//! taken by one CPU and re-anchored 6 ms ahead by the others, who judged it
//! against their own old-rate maps; a watchdog tick on a CPU kvmclock does
//! not serve reading its held value as "drift -999,975 ppm" and demoting
//! it for every CPU; a `StampConverter` built from a map that `now()`
//! refuses (30 s ahead, beyond the jump check). Round 9: a tick on such
//! a CPU swallowed the restart request of `resume()` / `restart_watchdog()`
//! (and the guest-stopped latches), so the next served tick judged the
//! restore's step and demoted kvmclock.
#![cfg(all(
    feature = "kvmclock",
    feature = "hyperv",
    feature = "tsc",
    feature = "hpet",
    feature = "acpi-pm"
))]
use clockhal::tsc::SyncStatus;
use clockhal::{Demotion, SourceId, Verdict, WatchdogEvent};
use clockhal_sim::{HpetConfig, PvclockUpdate, SimMachine};

mod adversarial;

use adversarial::{leak, SimClock};

const MS: u64 = 1_000_000;

/// What a kernel passes on `m`, warp test "synchronised".
fn clock(m: &'static SimMachine) -> SimClock {
    let (p, _) = adversarial::platform(m, m.cpu_count(), SyncStatus::Synchronized);
    clockhal::probe(m, p).into_clock().unwrap()
}

fn demoted(c: &SimClock) -> Vec<(SourceId, Option<Demotion>)> {
    c.report()
        .candidates()
        .filter_map(|x| match x.verdict {
            Verdict::Demoted { reason, .. } => Some((x.id, Some(reason))),
            _ => None,
        })
        .collect()
}

// ---- 1 -------------------------------------------------------------------

/// A live migration to a 20% faster TSC, done the TLFS way: the page is
/// invalid (sequence 0) across it, then the new host publishes correct
/// parameters. Only the first CPU to judge the new page takes it by its
/// agreement with TIME_REF_COUNT; the others judge it against their own
/// old-rate map, re-anchor it (6 ms ahead) and count host faults.
#[test]
fn hyperv_page_after_a_migration_window_is_the_same_time_on_every_cpu() {
    let m = leak(
        SimMachine::hyperv_config()
            .with_cpus(3, &[])
            .with_hpet(HpetConfig::classic())
            .build(),
    );
    let c = clock(m);
    for cpu in 1..3 {
        m.on_cpu(cpu, || c.register_this_cpu()).unwrap();
    }
    assert_eq!(c.source_id(), SourceId::HypervPage);
    for _ in 0..3 {
        m.advance(250 * MS);
        c.watchdog_tick();
    }
    for cpu in 0..3 {
        let _ = m.on_cpu(cpu, || c.now());
    }
    m.with_hyperv(|h, ctx| h.invalidate_page(ctx));
    for cpu in 0..3 {
        let _ = m.on_cpu(cpu, || c.now()); // TIME_REF_COUNT
    }
    m.set_tsc_hz(m.config().tsc_hz / 5 * 6);
    m.advance(30 * MS);
    m.with_hyperv(|h, ctx| h.update_page(ctx)); // the new host: correct page
    let a = m.on_cpu(0, || c.now().as_nanos());
    let b = m.on_cpu(1, || c.now().as_nanos());
    let a2 = m.on_cpu(0, || c.now().as_nanos());
    assert!(
        a2 >= b,
        "hyperv-page (MONOTONIC_ACROSS_CPUS): cpu1 read {b}, then cpu0 read {a2}: {} ns back (cpu0 before: {a})",
        b - a2
    );
    m.advance(250 * MS);
    let e = c.watchdog_tick();
    // The page stays (no host fault, no re-anchoring); only the TSC, whose
    // rate really changed with the migration, may be demoted.
    assert!(
        demoted(&c).iter().all(|(id, _)| *id == SourceId::Tsc),
        "honest page demoted: {e:?}\n{}",
        c.report().table()
    );
    assert_eq!(
        c.source_id(),
        SourceId::HypervPage,
        "{}",
        c.report().table()
    );
}

// ---- 2 -------------------------------------------------------------------

/// The timer that drives watchdog_tick fires on a CPU that has called
/// unregister_this_cpu (going offline). kvmclock "still serves the other
/// CPUs" (Clock docs), but the tick reads its held value as kvmclock
/// standing still and demotes it for everyone: Drift -999975 ppm.
#[test]
fn a_tick_on_a_cpu_kvmclock_does_not_serve_never_demotes_it() {
    let m = leak(SimMachine::kvm_config().with_cpus(2, &[]).build());
    let c = clock(m);
    m.on_cpu(1, || c.register_this_cpu()).unwrap();
    m.advance(5 * MS);
    m.on_cpu(1, || c.unregister_this_cpu());
    let mut events = vec![];
    for i in 0..8 {
        m.advance(250 * MS);
        events.push(m.on_cpu(i % 2, || c.watchdog_tick()));
    }
    assert!(demoted(&c).is_empty(), "{:?}\n{events:?}", demoted(&c));
    assert_eq!(c.source_id(), SourceId::Kvmclock);
}

// ---- 3 -------------------------------------------------------------------

/// A kvmclock update 30 s ahead (inside the judge's 60 s, beyond the
/// clock's 10 s max_jump, which the HPET refutes). now() refuses it and
/// demotes kvmclock; a converter built just before converts 30 s ahead,
/// though it "converts exactly as Clock::now would have".
#[test]
fn a_stamp_converter_never_converts_what_now_refuses() {
    let m = leak(SimMachine::kvm());
    let c = clock(m);
    for _ in 0..3 {
        m.advance(250 * MS);
        c.watchdog_tick();
    }
    let zero = m.now_ns() - c.now().as_nanos();
    m.with_kvm(|k, ctx| {
        let u = k.next_update(ctx, 0);
        let system_time = u.system_time + 30_000_000_000;
        k.publish(ctx, 0, PvclockUpdate { system_time, ..u });
    });
    m.advance(5 * MS);
    let conv = c.stamp_converter();
    let got = conv
        .and_then(|cv| cv.instant(c.stamp()))
        .map(|i| i.as_nanos());
    let now = c.now().as_nanos();
    let truth = m.now_ns() - zero;
    assert!(
        got.is_none_or(|g| g.abs_diff(truth) < MS),
        "converted {got:?}, now() {now}, machine {truth}\n{}",
        c.report().table()
    );
}

/// kvmclock on two CPUs, both registered, `age_ns` old, after three
/// watchdog rounds; then CPU 1 goes offline (its timer may still fire once).
fn settled_with_cpu1_offline(m: &'static SimMachine, age_ns: u64) -> SimClock {
    let c = clock(m);
    m.on_cpu(1, || c.register_this_cpu()).unwrap();
    m.advance(age_ns);
    for _ in 0..3 {
        m.advance(250 * MS);
        c.watchdog_tick();
    }
    assert_eq!(c.source_id(), SourceId::Kvmclock);
    m.on_cpu(1, || c.unregister_this_cpu());
    c
}

/// resume() asks the next tick to restart the watchdog's baseline (the
/// restored host's kvmclock lies 10 s before the old timeline). The next
/// tick happens to run on a CPU kvmclock does not serve (an AP that has
/// not called resume_this_cpu yet, or one going offline): NotServed. It
/// had consumed the restart request; the first served tick then judged
/// the interval spanning the restore and demoted the honest kvmclock.
/// Also without that tick (the control).
#[test]
fn a_not_served_tick_does_not_swallow_resumes_restart() {
    for unserved_tick in [true, false] {
        let m = leak(SimMachine::kvm_config().with_cpus(2, &[]).build());
        let c = settled_with_cpu1_offline(m, 20_000 * MS);
        // Restore onto a host whose timeline is 10 s earlier; the OS resumes.
        m.with_kvm(|k, ctx| {
            k.set_system_time_skew(None, -10_000_000_000);
            k.update_all(ctx);
        });
        c.resume().unwrap();
        m.advance(250 * MS);
        let e1 = unserved_tick.then(|| m.on_cpu(1, || c.watchdog_tick()));
        m.advance(250 * MS);
        let e2 = m.on_cpu(0, || c.watchdog_tick());
        m.advance(250 * MS);
        let e3 = m.on_cpu(0, || c.watchdog_tick());
        assert!(
            demoted(&c).is_empty() && c.source_id() == SourceId::Kvmclock,
            "events {e1:?} / {e2:?} / {e3:?}; demoted {:?}\n{}",
            demoted(&c),
            c.report().table()
        );
    }
}

/// Same, with the OS's own restart_watchdog() (documented: "Asks the next
/// watchdog_tick to restart its baseline").
#[test]
fn a_not_served_tick_does_not_swallow_restart_watchdog() {
    // Observed: the served tick judges the announced jump as drift and
    // switches away from the honest kvmclock.
    let m = leak(
        SimMachine::kvm_config()
            .with_cpus(2, &[])
            .with_hpet(HpetConfig::qemu())
            .build(),
    );
    let c = settled_with_cpu1_offline(m, 0);
    // A legitimate jump of kvmclock the clock cannot see (host clock step
    // the OS learned of), announced with restart_watchdog().
    m.with_kvm(|k, ctx| {
        k.set_system_time_skew(None, 3_000_000_000);
        k.update_all(ctx);
    });
    let _ = c.now();
    c.restart_watchdog();
    m.advance(250 * MS);
    let e1 = m.on_cpu(1, || c.watchdog_tick());
    assert!(matches!(e1, WatchdogEvent::NotServed { .. }), "{e1:?}");
    m.advance(250 * MS);
    let e2 = m.on_cpu(0, || c.watchdog_tick());
    assert_eq!(
        e2,
        WatchdogEvent::Restarted,
        "the restart request was consumed by the NotServed tick"
    );
}
