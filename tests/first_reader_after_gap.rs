//! A 32-bit HPET (100 MHz: a 42.9 s wrap) is the clock's current source
//! on two CPUs whose TSCs are not known to agree; CPU 1 registers and
//! then reads first after a 45 s gap in which only CPU 0 ticked. Its
//! gap measure starts at its registration (a reading there is its first
//! pair), so the wrap is recovered (before, with no pair of its own, it
//! lost the wrap: `now()` 42.9 s behind, then 42.9 s forward on CPU 0).
#![cfg(all(feature = "tsc", feature = "hpet", feature = "acpi-pm"))]

use clockhal::SourceId;
use clockhal_sim::{HpetConfig, SimConfig};

mod adversarial;

use adversarial::{clock, leak, ms};

#[test]
fn the_other_cpu_reading_first_after_a_45_s_gap() {
    let hz = 2_000_000_000i64;
    let m = leak(
        SimConfig::cpu(hz as u64)
            .with_invariant_tsc(true)
            .with_hpet(HpetConfig::qemu().narrow())
            .with_pm_timer(clockhal_sim::PmTimerConfig::default())
            .with_cpus(2, &[0, 3 * hz])
            .build(),
    );
    let (c, _) = clock(m);
    m.on_cpu(1, || c.register_this_cpu()).unwrap();
    assert_eq!(c.source_id(), SourceId::Hpet, "{}", c.report().table());
    let origin = m.now_ns() - c.now().as_nanos();
    let mut log = vec![];
    let mut worst = 0i128;
    let mut read = |cpu: usize, log: &mut Vec<String>| {
        let t = m.on_cpu(cpu, || c.now().as_nanos());
        let d = t as i128 - (m.now_ns() - origin) as i128;
        worst = worst.max(d.abs());
        log.push(format!("cpu {cpu}: now()-truth {} ms", d / 1_000_000));
    };
    for _ in 0..8 {
        m.advance(ms(250));
        c.watchdog_tick();
        read(0, &mut log);
    }
    m.advance(ms(45_000));
    read(1, &mut log);
    read(0, &mut log);
    for _ in 0..10 {
        m.advance(ms(100));
        read(1, &mut log);
    }
    assert!(
        worst < ms(10) as i128,
        "now() off the truth by up to {} ms; unmeasured gaps {:?}\n{}",
        worst / 1_000_000,
        c.unmeasured_gaps(),
        log.join("\n")
    );
}
