//! A switch run under the watchdog lock (force, unforce) after an idle
//! longer than `max_jump` (10 s by default; found by red-team round 33,
//! all four failing before the fix): the old source's reading is above
//! the jump check's ceiling, the check cannot take the lock the switch
//! holds, the reading held, and the new source started from the last
//! value returned: the whole idle was lost (11 s measured 2 µs). The
//! switch's callers read the clock before taking the lock, so the check
//! runs and the ceiling moves first.
#![cfg(all(
    feature = "kvmclock",
    feature = "tsc",
    feature = "hpet",
    feature = "acpi-pm",
    feature = "hyperv"
))]

mod adversarial;

use adversarial::{leak, ms, platform, SimClock};
use clockhal::tsc::SyncStatus;
use clockhal::SourceId;
use clockhal_sim::{SimConfig, SimMachine};

fn build(cfg: SimConfig, cpus: usize) -> (&'static SimMachine, &'static SimClock) {
    let m = leak(cfg.with_cpus(cpus, &[]).build());
    let sync = if cpus == 1 {
        SyncStatus::SingleCpu
    } else {
        SyncStatus::Synchronized
    };
    let (p, _) = platform(m, cpus, sync);
    let probed = clockhal::probe(m, p);
    let rep = *probed.report();
    let c: &'static SimClock = Box::leak(Box::new(
        probed
            .into_clock()
            .unwrap_or_else(|e| panic!("{e}\n{}", rep.table())),
    ));
    (m, c)
}

fn check(m: &SimMachine, c: &SimClock, t0: clockhal::Instant, m0: u64, sw0: u32, what: &str) {
    let want = m.now_ns() - m0;
    let sw = u64::from(c.switches() - sw0);
    let e = c.elapsed(t0).as_nanos();
    assert!(
        e + 1_000_000 >= want && e <= want + sw * 1_000 + 1_000_000,
        "{what}: {want} ns of true time measure {e} ns ({sw} switches, now on {})\n{}",
        c.source_name(),
        c.report().table()
    );
}

#[test]
fn kvm_force_hpet_after_11s_idle_keeps_time() {
    let (m, c) = build(SimMachine::kvm_config(), 1);
    let (t0, m0, sw0) = (c.now(), m.now_ns(), c.switches());
    m.advance(ms(11_000));
    let r = c.force(SourceId::Hpet);
    check(
        m,
        c,
        t0,
        m0,
        sw0,
        &format!("force(Hpet) after 11 s idle -> {r:?}"),
    );
}

#[test]
fn kvm_unforce_after_11s_idle_keeps_time() {
    let (m, c) = build(SimMachine::kvm_config(), 1);
    c.force(SourceId::Hpet).unwrap();
    let (t0, m0, sw0) = (c.now(), m.now_ns(), c.switches());
    m.advance(ms(11_000));
    c.unforce();
    check(m, c, t0, m0, sw0, "unforce (hpet -> best) after 11 s idle");
}

#[test]
fn hyperv_force_pm_after_11s_idle_keeps_time() {
    let (m, c) = build(SimMachine::hyperv_config(), 1);
    let (t0, m0, sw0) = (c.now(), m.now_ns(), c.switches());
    m.advance(ms(11_000));
    let r = c.force(SourceId::AcpiPm);
    check(
        m,
        c,
        t0,
        m0,
        sw0,
        &format!("force(AcpiPm) after 11 s idle -> {r:?}"),
    );
}

/// The watchdog ticks every second for a while, then the kernel idles
/// 11 s (tickless) and forces a source: the ceiling was set by the last
/// round, 11 s before.
#[test]
fn kvm_force_after_ticks_then_11s_idle_keeps_time() {
    let (m, c) = build(SimMachine::kvm_config(), 2);
    m.on_cpu(1, || c.register_this_cpu()).unwrap();
    let (t0, m0, sw0) = (m.on_cpu(0, || c.now()), m.now_ns(), c.switches());
    for _ in 0..5 {
        m.advance(ms(1_000));
        m.on_cpu(0, || c.watchdog_tick());
    }
    m.advance(ms(11_000));
    let r = m.on_cpu(1, || c.force(SourceId::Tsc));
    m.on_cpu(0, || {
        check(
            m,
            c,
            t0,
            m0,
            sw0,
            &format!("force(Tsc) on cpu 1 after 11 s idle -> {r:?}"),
        )
    });
}
