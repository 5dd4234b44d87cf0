//! A vCPU preempted right after reading a software-extended counter while
//! another CPU keeps reading (issue 26): the count it read is stale by the
//! time it places it. Placed against the newer last value, a stale count
//! more than half a wrap old landed up to a wrap ahead: `now()` ran 1.4 s
//! ahead of true time on the PM timer (a 0.7-wrap pause) and stayed there.
//! The hardware is now read inside the extension's update and read again
//! when another reader moved it meanwhile: `now()` is never ahead of the
//! machine's time, on any CPU, and keeps counting.
#![cfg(feature = "acpi-pm")]

use clockhal::x86::Hardware;
use clockhal::{probe, Clock, Platform, SourceId};
use clockhal_sim::{PortTap, SimConfig, SimMachine};
use std::sync::mpsc::channel;
use std::sync::Mutex;

/// The PM timer's wrap: 2^24 ticks at 3.579545 MHz, in ns.
const PM_WRAP_NS: u64 = (1u64 << 24) * 1_000_000_000 / 3_579_545;
/// Ahead of the machine's time by at most a PM timer tick and rounding.
const AHEAD_TOLERANCE_NS: u64 = 1_000;

fn leak<T>(t: T) -> &'static T {
    Box::leak(Box::new(t))
}

/// Two CPUs, no TSC in CPUID, no HPET: the 24-bit PM timer is the clock.
fn pm_only() -> &'static SimMachine {
    leak(
        SimConfig::cpu(2_000_000_000)
            .with_cpuid(1, 0, clockhal_sim::regs(0x000906EA, 0, 0, 0))
            .with_pm_timer(clockhal_sim::PmTimerConfig::default())
            .with_cpus(2, &[0, 0])
            .build(),
    )
}

fn pm_clock(
    m: &'static SimMachine,
    tap: &'static PortTap<'static>,
) -> Clock<&'static PortTap<'static>> {
    let pm = m.config().pm_timer.clone().expect("a PM timer");
    let p = probe(tap, Platform::new().pm_timer(pm.port, pm.bits32));
    let report = *p.report();
    let table = report.table();
    let c = p
        .into_clock()
        .unwrap_or_else(|e| panic!("no clock: {e}\n{table}"));
    assert_eq!(c.source_id(), SourceId::AcpiPm, "{table}");
    c
}

/// `now()` since `t0` against the machine's time since `n0`: never ahead.
fn not_ahead(what: &str, c: &Clock<&PortTap>, m: &SimMachine, (t0, n0): (u64, u64)) -> u64 {
    let t = c.now().as_nanos() - t0;
    let truth = m.now_ns() - n0;
    assert!(
        t <= truth + AHEAD_TOLERANCE_NS,
        "{what}: now() {t} ns, {} ms ahead of the machine's {truth} ns",
        (t - truth) / 1_000_000
    );
    t
}

#[test]
fn a_reader_preempted_after_its_pm_read_never_puts_now_ahead() {
    // CPU 0 is preempted right after a PM timer read (after the second
    // read of its pair) for 0.7 of a wrap, during which CPU 1 reads every
    // 0.1 s (within the read-interval rule).
    for pause_tenths in [5u64, 7, 9] {
        let m = pm_only();
        let tap: &'static PortTap<'static> = leak(PortTap::new(m));
        let c = pm_clock(m, tap);
        let origin = (c.now().as_nanos(), m.now_ns());
        let (read_tx, read_rx) = channel();
        let (go_tx, go_rx) = channel::<()>();
        let go_rx = Mutex::new(go_rx);
        let mut inls = 0u32;
        tap.set_inl_hook(move |m, _, _| {
            // The second inl on CPU 0 ends the pair of its first read.
            if m.cpu_index() == 0 {
                inls += 1;
                if inls == 2 {
                    read_tx.send(()).unwrap();
                    go_rx.lock().unwrap().recv().unwrap();
                }
            }
            None
        });
        std::thread::scope(|s| {
            let c = &c;
            let paused = s.spawn(move || {
                m.set_cpu(0);
                not_ahead("the preempted read", c, m, origin)
            });
            m.set_cpu(1);
            read_rx.recv().unwrap();
            for _ in 0..pause_tenths {
                m.advance(PM_WRAP_NS / 10);
                not_ahead("CPU 1 during the pause", c, m, origin);
            }
            go_tx.send(()).unwrap();
            paused.join().unwrap();
        });
        // After it, on both CPUs, for two more wraps.
        for i in 0..40 {
            m.advance(PM_WRAP_NS / 20);
            let cpu = i % 2;
            m.set_cpu(cpu);
            not_ahead(
                &format!("CPU {cpu} after the pause ({pause_tenths}/10 wrap)"),
                &c,
                m,
                origin,
            );
        }
        // And still counting the time.
        m.set_cpu(0);
        let (t, truth) = (c.now().as_nanos() - origin.0, m.now_ns() - origin.1);
        assert!(
            truth.saturating_sub(t) < 1_000_000,
            "{pause_tenths}/10 wrap: now() {t} ns behind the machine's {truth} ns"
        );
    }
}
