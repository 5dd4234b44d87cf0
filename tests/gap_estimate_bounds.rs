//! The TSC's estimate of the current software-extended device's count
//! after a gap (issue 26 §4: wraps a gap hid are recovered from the TSC,
//! or their loss is reported). An estimate is taken only within its
//! error, and one whose error could hide a whole wrap (a stale pair, a
//! rate a few hundred ppm off over hours) places none: before, such
//! estimates put `now()` a whole wrap ahead (4.7 s on the PM timer, 43 s
//! on a 32-bit HPET) and counted nothing. A TSC demoted for its own rate
//! measures no gaps at all.
#![cfg(all(feature = "tsc", feature = "hpet", feature = "acpi-pm"))]

use clockhal::SourceId;
use clockhal_sim::{HpetConfig, SimConfig};

mod adversarial;

use adversarial::{clock, leak, ms};

const PM_WRAP_NS: u64 = (1u64 << 24) * 1_000_000_000 / 3_579_545; // 4.687 s

/// Two CPUs (TSCs not known to agree), the PM timer current. CPU 1 reads
/// once and then idles; CPU 0 reads every second (well within the PM
/// timer's 2.34 s read interval), so the extender is always up to date.
/// The TSC's rate then differs from the clock's scale by `ppm` (a
/// non-invariant TSC after a migration without TSC scaling; within the
/// 1,000 ppm `estimate_within` claims to cover). After `idle` on CPU 1 its
/// old pair's estimate is off by ppm * idle: when that is about a whole
/// wrap, a placement at the nearest wrap would add one that never
/// happened; the estimate's error bound is then past an eighth of a wrap
/// and it places none.
fn idle_cpu_after_rate_change(ppm: i64, idle_s: u64) -> (u64, u64, u32) {
    let hz = 2_000_000_000u64;
    let m = leak(
        SimConfig::cpu(hz)
            .with_invariant_tsc(false)
            .with_pm_timer(clockhal_sim::PmTimerConfig::default())
            .with_hpet(HpetConfig::qemu().narrow())
            .with_cpus(2, &[0, 0])
            .build(),
    );
    let (c, _) = clock(m);
    c.force(SourceId::AcpiPm).unwrap();
    let origin = m.now_ns() - c.now().as_nanos();
    m.on_cpu(1, || c.now());
    m.on_cpu(0, || c.now());
    m.set_tsc_hz((hz as i64 + hz as i64 * ppm / 1_000_000) as u64);
    let mut last = 0;
    for i in 0..idle_s {
        m.advance(ms(1_000));
        let t = m.on_cpu(0, || c.now().as_nanos());
        let truth = m.now_ns() - origin;
        assert!(t >= last, "read {i}: back");
        assert!(t.abs_diff(truth) < ms(5), "cpu 0 read {i}: {t} vs {truth}");
        last = t;
    }
    m.advance(ms(1));
    let t = m.on_cpu(1, || c.now().as_nanos());
    let truth = m.now_ns() - origin;
    (t, truth, c.unmeasured_gaps())
}

#[test]
fn an_idle_cpu_s_stale_pair_adds_no_wrap_after_a_small_rate_change() {
    // 500 ppm over 9,375 s: the estimate is one PM timer wrap (4.687 s) ahead.
    let idle = PM_WRAP_NS * 1_000_000 / 500 / 1_000_000_000;
    let (t, truth, gaps) = idle_cpu_after_rate_change(500, idle);
    assert!(
        t <= truth + ms(5),
        "cpu 1 after {idle} s idle: now() {} ms ahead of the truth (unmeasured_gaps {gaps})",
        (t as i128 - truth as i128) / 1_000_000
    );
}

/// One CPU. A supervised (non-invariant) TSC is current; its rate changes
/// by 2 % (a P-state change: why it is supervised). The watchdog finds it
/// out and the clock leaves it for the 32-bit HPET or the PM timer. The
/// machine then idles (no read, no tick) for as long as the demoted
/// TSC's error makes one wrap of the new current device. A TSC demoted
/// for its rate measures no gap: the next reading is not a whole wrap
/// ahead of the truth.
#[test]
fn a_tsc_demoted_for_its_rate_places_none_of_the_current_device_s_wraps() {
    let hz = 2_000_000_000u64;
    let m = leak(
        SimConfig::cpu(hz)
            .with_invariant_tsc(false)
            .with_pm_timer(clockhal_sim::PmTimerConfig::default())
            .with_hpet(HpetConfig::qemu().narrow())
            .build(),
    );
    let (c, _) = clock(m);
    assert_eq!(c.source_id(), SourceId::Tsc, "{}", c.report().table());
    for _ in 0..8 {
        m.advance(ms(250));
        c.watchdog_tick();
    }
    let origin = m.now_ns() - c.now().as_nanos();
    m.set_tsc_hz(hz + hz / 50);
    let mut evs = vec![];
    for _ in 0..20 {
        m.advance(ms(250));
        evs.push(c.watchdog_tick());
        c.now();
    }
    let cur = c.source_id();
    assert_ne!(cur, SourceId::Tsc, "{evs:?}\n{}", c.report().table());
    let wrap_ns = match cur {
        SourceId::AcpiPm => PM_WRAP_NS,
        SourceId::Hpet => (1u64 << 32) * 10,
        other => panic!("on {other:?}"),
    };
    let before = c.now().as_nanos();
    let gaps = c.unmeasured_gaps();
    // 2 % of the idle is one wrap of the current device.
    m.advance(wrap_ns * 50);
    let t = c.now().as_nanos();
    let truth = m.now_ns() - origin;
    assert!(
        t <= truth + ms(5),
        "on {cur:?} after {} s idle: now() {} ms ahead of the truth (before the gap {} ns; unmeasured_gaps {} -> {})\n{}",
        wrap_ns * 50 / 1_000_000_000,
        (t as i128 - truth as i128) / 1_000_000,
        before,
        gaps,
        c.unmeasured_gaps(),
        c.report().table()
    );
}

/// The same without any rate change: an invariant TSC whose rate CPUID
/// 0x15 states 200 ppm high (a crystal claim the probe's cross-check
/// accepts: within 490 ppm + the calibration's uncertainty; well within
/// the 1,000 ppm `estimate_within` claims to cover). Two CPUs, the PM
/// timer current (the OS's choice), CPU 1 reads once and then not for
/// 6.5 h while CPU 0 reads every second: CPU 1's first reading must not
/// be a whole PM timer wrap ahead of the truth.
#[test]
fn a_stated_rate_200_ppm_off_adds_no_wrap_on_a_cpu_idle_for_hours() {
    let m = leak(
        SimConfig::cpu(2_000_000_000)
            .with_invariant_tsc(true)
            .with_tsc_leaf(1, 80, 24_995_000)
            .with_pm_timer(clockhal_sim::PmTimerConfig::default())
            .with_hpet(HpetConfig::qemu().narrow())
            .with_cpus(2, &[0, 0])
            .build(),
    );
    let (c, _) = clock(m);
    let rate = c
        .report()
        .get(SourceId::Tsc)
        .unwrap()
        .descriptor()
        .map(|d| d.frequency);
    c.force(SourceId::AcpiPm).unwrap();
    let origin = m.now_ns() - c.now().as_nanos();
    m.on_cpu(1, || c.now());
    // 200 ppm of 23,435 s is one PM timer wrap.
    let idle = PM_WRAP_NS / 200 * 1_000_000 / 1_000_000_000;
    for _ in 0..idle {
        m.advance(ms(1_000));
        m.on_cpu(0, || c.now());
    }
    let t = m.on_cpu(1, || c.now().as_nanos());
    let truth = m.now_ns() - origin;
    assert!(
        t <= truth + ms(5),
        "TSC rate in use {rate:?}; cpu 1 after {idle} s: now() {} ms ahead of the truth (unmeasured_gaps {})\n{}",
        (t as i128 - truth as i128) / 1_000_000,
        c.unmeasured_gaps(),
        c.report().table()
    );
}

/// The same with nothing forced: the probe itself selects the 32-bit
/// HPET (the TSC's CPUs undecided), CPU 1 idles for 2.5 days (200 ppm
/// of it is one 42.9 s HPET wrap) while CPU 0 reads every 10 s.
#[test]
fn a_stated_rate_200_ppm_off_adds_no_hpet_wrap_on_a_cpu_idle_for_days() {
    let m = leak(
        SimConfig::cpu(2_000_000_000)
            .with_invariant_tsc(true)
            .with_tsc_leaf(1, 80, 24_995_000)
            .with_pm_timer(clockhal_sim::PmTimerConfig::default())
            .with_hpet(HpetConfig::qemu().narrow())
            .with_cpus(2, &[0, 0])
            .build(),
    );
    let (c, _) = clock(m);
    assert_eq!(c.source_id(), SourceId::Hpet, "{}", c.report().table());
    let origin = m.now_ns() - c.now().as_nanos();
    m.on_cpu(1, || c.now());
    let hpet_wrap_ns = (1u64 << 32) * 10;
    let idle_10s = hpet_wrap_ns / 200 * 1_000_000 / 10_000_000_000;
    for _ in 0..idle_10s {
        m.advance(ms(10_000));
        m.on_cpu(0, || c.now());
    }
    let t = m.on_cpu(1, || c.now().as_nanos());
    let truth = m.now_ns() - origin;
    assert!(
        t <= truth + ms(5),
        "cpu 1 after {} s: now() {} ms ahead of the truth (unmeasured_gaps {})\n{}",
        idle_10s * 10,
        (t as i128 - truth as i128) / 1_000_000,
        c.unmeasured_gaps(),
        c.report().table()
    );
}
