//! CHANGELOG: "a member whose span is too long to place sits the
//! rounds out until its count moves on, never "stopped"; one that gives
//! the rounds no count for longer than a wrap (it stopped in the gap) is
//! demoted as stopped"; and "Where neither the TSC nor a 64-bit counter
//! measures the gap since the last watchdog round (a tick on another CPU
//! than the last with TSCs not known to agree ...), the clock's own
//! timeline does ... a narrow HPET member after a 10-60 s gap was demoted
//! as "Stopped"". An honest PM timer, the current source a 32-bit HPET,
//! two CPUs whose TSCs are not known to agree, watchdog ticks 45 s apart
//! alternating CPUs, nothing read between.
//! (For a while out time was the current source's reading on whichever
//! CPU ticked, a wrap apart here, and the honest PM timer was demoted.)
#![cfg(all(feature = "tsc", feature = "hpet", feature = "acpi-pm"))]

use clockhal::{SourceId, Verdict};
use clockhal_sim::{HpetConfig, SimConfig};

mod adversarial;

use adversarial::{clock, leak, ms};

fn run(cpus: usize, gap: u64, n: usize) {
    let hz = 2_000_000_000i64;
    let m = leak(
        SimConfig::cpu(hz as u64)
            .with_invariant_tsc(true)
            .with_hpet(HpetConfig::qemu().narrow())
            .with_pm_timer(clockhal_sim::PmTimerConfig::default())
            .with_cpus(
                cpus,
                &(0..cpus as i64).map(|i| i * 3 * hz).collect::<Vec<_>>(),
            )
            .build(),
    );
    let (c, _) = clock(m);
    for cpu in 1..cpus {
        m.on_cpu(cpu, || c.register_this_cpu()).unwrap();
    }
    if cpus > 1 {
        assert_eq!(c.source_id(), SourceId::Hpet, "{}", c.report().table());
    }
    for _ in 0..8 {
        m.advance(ms(250));
        c.watchdog_tick();
    }
    let origin = m.now_ns() - c.now().as_nanos();
    let mut evs = vec![];
    let mut log = vec![];
    for k in 1..=n + 20 {
        m.advance(if k <= n { gap } else { ms(250) });
        let e = m.on_cpu(k % cpus, || c.watchdog_tick());
        let truth = (m.now_ns() - origin) as i128;
        let offs: Vec<i128> = (0..cpus)
            .filter(|cpu| *cpu == k % cpus)
            .map(|cpu| m.on_cpu(cpu, || c.now().as_nanos()) as i128 - truth)
            .collect();
        log.push(format!(
            "tick {k} on cpu {}: {e:?}; now()-truth per cpu {offs:?}",
            k % cpus
        ));
        evs.push(e);
    }
    if std::env::var("LOG").is_ok() {
        eprintln!("{}", log.join("\n"));
    }
    let pm = c.report().get(SourceId::AcpiPm).map(|x| x.verdict);
    assert!(
        !matches!(pm, Some(Verdict::Demoted { .. })),
        "cpus {cpus} gap {} ms: honest PM timer {pm:?}; events\n{}\nunmeasured gaps {:?}\n{}",
        gap / 1_000_000,
        log.join("\n"),
        c.unmeasured_gaps(),
        c.report().table()
    );
}

/// Control: one CPU.
#[test]
fn control_one_cpu() {
    run(1, ms(45_000), 4);
}

#[test]
fn two_cpus_ticks_alternate_45_s_apart() {
    run(2, ms(45_000), 3);
}

#[test]
fn two_cpus_ticks_alternate_10_s_apart() {
    run(2, ms(10_000), 8);
}

#[test]
fn two_cpus_ticks_alternate_25_s_apart() {
    run(2, ms(25_000), 6);
}
