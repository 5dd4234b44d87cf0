//! Counters over a long life (found by red-team round 9, each failing
//! before its fix): a 64-bit HPET that crosses 2^64 froze `now()` for good
//! (the device's base was subtracted saturating); after an S3 resume the
//! restarted TSC held at its pre-suspend floor and was demoted as stopped;
//! a TSC that crosses 2^64 made `now()` jump ~359 years ahead on the TSC
//! and on kvmclock (TSC maps are absolute in the TSC: the cached window ran
//! across the wrap and its map gave garbage). The last is now a fault of
//! the source: never a jump, time holds and the clock switches away (at
//! the watchdog's next rounds, or `STUCK_READS` held reads later without
//! one). Only a hostile or
//! broken host sets a TSC that high: 2^64 ticks are 225 years at 2.6 GHz.
#![cfg(all(
    feature = "kvmclock",
    feature = "tsc",
    feature = "hpet",
    feature = "acpi-pm"
))]

use clockhal::x86::Hardware;
use clockhal::SourceId;
use clockhal_sim::{HpetConfig, SimConfig, SimMachine};

mod adversarial;

use adversarial::{bad, clock, clock_with, leak, ms, race, CrossCpu, SimClock};

/// A 2 GHz machine with a 32-bit HPET at 100 MHz (a wrap every 42.9 s)
/// and the PM timer (24 bits, 4.7 s): the software-extended counters whose
/// wraps a gap can hide.
fn narrow_hpet_and_pm(invariant_tsc: bool) -> SimConfig {
    SimConfig::cpu(2_000_000_000)
        .with_invariant_tsc(invariant_tsc)
        .with_pm_timer(clockhal_sim::PmTimerConfig::default())
        .with_hpet(HpetConfig::qemu().narrow())
}

/// [`narrow_hpet_and_pm`] with two CPUs whose TSCs differ by two PM timer
/// wraps (2^25 ticks at 3.579545 MHz, 9.37 s), not known to agree.
fn two_cpus_two_pm_wraps_apart() -> &'static SimMachine {
    let two_wraps = (2u128 << 24) * 2_000_000_000 / 3_579_545;
    leak(
        narrow_hpet_and_pm(false)
            .with_cpus(2, &[0, two_wraps as i64])
            .build(),
    )
}

/// Moves the machine on by `gap_ns` right after its `k`-th `rdtsc` from
/// now, once: a vCPU paused at that point of whatever runs next.
fn pause_after_rdtsc(m: &SimMachine, k: u32, gap_ns: u64) {
    let mut n = 0;
    m.set_rdtsc_hook(move |m| {
        n += 1;
        if n == k {
            m.clear_rdtsc_hook();
            m.advance(gap_ns);
        }
    });
}

/// The PM timer counted the time since its reading `p0` at machine time
/// `n0` (within 1 ms), and the next tick still judges.
fn pm_counted_the_truth_and_is_judged(c: &SimClock, m: &SimMachine, p0: u64, n0: u64) {
    let pm = c.source_of(SourceId::AcpiPm).unwrap();
    let counted = (pm.read() - p0) as u128 * 1_000_000_000 / 3_579_545;
    let truth = (m.now_ns() - n0) as u128;
    assert!(
        counted.abs_diff(truth) < 1_000_000,
        "{counted} of {truth}\n{}",
        c.report().table()
    );
    assert!(
        matches!(
            m.on_cpu(0, || c.watchdog_tick()),
            clockhal::WatchdogEvent::Judged { .. }
        ),
        "{}",
        c.report().table()
    );
}

/// Reads every `step_ns`, `n` times; each reading must be within `tol_ns`
/// of the machine's true elapsed time and never go back.
fn reads_track_truth(
    c: &SimClock,
    m: &SimMachine,
    n: usize,
    step_ns: u64,
    tol_ns: u64,
    tick: bool,
) {
    let origin = m.now_ns() - c.now().as_nanos();
    let mut last = 0;
    let mut evs = vec![];
    for i in 0..n {
        m.advance(step_ns);
        if tick {
            let e = c.watchdog_tick();
            if bad(&e) {
                evs.push((i, e));
            }
        }
        let t = c.now().as_nanos();
        let truth = m.now_ns() - origin;
        assert!(t >= last, "read {i}: back {last} -> {t}");
        assert!(
            t.abs_diff(truth) <= tol_ns,
            "read {i}: now {t} ns, true elapsed {truth} ns (off by {} ns), source {:?}, TSC {}, events {evs:?}",
            t as i128 - truth as i128,
            c.source_id(),
            m.tsc_of(0)
        );
        last = t;
    }
    assert!(evs.is_empty(), "{evs:?}\n{}", c.report());
}

/// Reads every ms across a TSC wrap, a watchdog tick every 250 ms: never
/// back, never ahead of the truth, behind it by at most the hold before
/// the switch; the clock leaves the wrapped source.
fn across_the_wrap(c: &SimClock, m: &SimMachine, wrapped: SourceId) {
    let origin = m.now_ns() - c.now().as_nanos();
    let mut last = 0;
    for i in 0..5_000 {
        m.advance(ms(1));
        if i % 250 == 249 {
            c.watchdog_tick();
        }
        let t = c.now().as_nanos();
        let truth = m.now_ns() - origin;
        assert!(t >= last, "read {i}: back {last} -> {t}");
        assert!(
            t <= truth + ms(2),
            "read {i}: {t} ns ahead of the truth {truth} ns"
        );
        last = t;
    }
    let truth = m.now_ns() - origin;
    assert!(truth - last < ms(1_500), "{last} ns for {truth} ns");
    assert_ne!(c.source_id(), wrapped, "{}", c.report());
}

#[test]
fn a_tsc_crossing_2_64_never_jumps_now_ahead() {
    let hz = 2_592_000_000u64;
    let m = leak(
        SimMachine::bare_metal_config()
            .with_cpus(1, &[(u64::MAX - 2 * hz) as i64])
            .build(),
    );
    let (c, _) = clock(m);
    assert_eq!(c.source_id(), SourceId::Tsc);
    across_the_wrap(&c, m, SourceId::Tsc);
}

#[test]
fn kvmclock_across_a_tsc_wrap_never_jumps_now_ahead() {
    let hz = 2_600_000_000u64;
    let m = leak(
        SimMachine::kvm_config()
            .with_cpus(1, &[(u64::MAX - 2 * hz) as i64])
            .build(),
    );
    let (c, _) = clock(m);
    assert_eq!(c.source_id(), SourceId::Kvmclock);
    across_the_wrap(&c, m, SourceId::Kvmclock);
}

#[test]
fn s3_with_a_tsc_reset_keeps_the_honest_tsc() {
    let m = leak(SimMachine::bare_metal_config().build());
    let (c, _) = clock(m);
    assert_eq!(c.source_id(), SourceId::Tsc);
    for _ in 0..20 {
        m.advance(ms(250));
        c.watchdog_tick();
    }
    let before = c.now();
    // S3 for 60 s: the TSC restarts near 0, the HPET is halted and reset,
    // the PM timer restarts.
    m.advance(60_000_000_000);
    let t = m.tsc_of(0);
    m.step_tsc(Some(0), (t as i64).wrapping_neg().wrapping_add(1_000_000));
    let region = m.hpet_region().unwrap();
    m.mmio_write64(region, 0x10, 0);
    m.mmio_write64(region, 0xF0, 0);
    m.with_pm_timer(|p, ctx| {
        let v = p.value(ctx) as u64;
        p.jump(ctx, (1u64 << 24) - v)
    });
    c.resume().unwrap();
    assert!(c.now() >= before);
    let mut evs = vec![];
    for _ in 0..20 {
        m.advance(ms(250));
        let e = c.watchdog_tick();
        if bad(&e) {
            evs.push(e);
        }
    }
    assert!(evs.is_empty(), "{evs:?}\n{}", c.report());
    assert_eq!(c.source_id(), SourceId::Tsc, "{}", c.report());
}

#[test]
fn a_64_bit_hpet_crossing_2_64_keeps_counting() {
    let mut cfg = SimMachine::bare_metal_config();
    let mut h = HpetConfig::classic();
    h.initial_counter = u64::MAX - 14_318_180 * 10; // firmware left it 10 s before 2^64
    cfg.hpet = Some(h);
    let m = leak(cfg.build());
    let (c, _) = clock(m);
    c.force(SourceId::Hpet).unwrap(); // or a machine where the HPET is the best source
    reads_track_truth(&c, m, 200, ms(250), ms(2), true);
}

/// Issue 26: ticks stop for `gap_ms` (interrupts off), longer than the
/// 24-bit PM timer's read interval (2.34 s). The PM timer is not demoted
/// ("Stopped"), and its count lost no wrap: the TSC spans the gap.
fn pm_timer_across_a_tick_gap(gap_ms: u64) {
    let m = leak(SimMachine::kvm_config().build());
    let (c, _) = clock(m);
    assert_eq!(c.source_id(), SourceId::Kvmclock);
    for _ in 0..8 {
        m.advance(ms(250));
        assert!(!bad(&c.watchdog_tick()));
    }
    let pm = c.source_of(SourceId::AcpiPm).unwrap();
    let (p0, n0) = (pm.read(), m.now_ns());
    m.advance(ms(gap_ms));
    let mut evs = vec![];
    for _ in 0..12 {
        m.advance(ms(250));
        let e = c.watchdog_tick();
        if bad(&e) {
            evs.push(e);
        }
    }
    assert!(evs.is_empty(), "{evs:?}\n{}", c.report().table());
    let counted = (pm.read() - p0) as u128 * 1_000_000_000 / 3_579_545;
    let truth = (m.now_ns() - n0) as u128;
    assert!(
        counted.abs_diff(truth) < 1_000_000,
        "PM timer counted {counted} ns of {truth} ns"
    );
}

#[test]
fn a_tick_gap_longer_than_the_pm_timer_s_wrap_loses_nothing() {
    pm_timer_across_a_tick_gap(3_000);
    pm_timer_across_a_tick_gap(30_000);
}

#[test]
fn without_a_tsc_the_clock_s_own_counter_spans_the_gap() {
    // No TSC: the 64-bit HPET is current, the 24-bit PM timer a member;
    // ticks stop for 3 s. The HPET spans the gap: no PM wrap is lost.
    let m = leak(
        SimConfig::cpu(2_000_000_000)
            .with_cpuid(1, 0, clockhal_sim::regs(0x000906EA, 0, 0, 0))
            .with_hpet(HpetConfig::qemu())
            .with_pm_timer(clockhal_sim::PmTimerConfig::default())
            .build(),
    );
    let (c, _) = clock(m);
    assert_eq!(c.source_id(), SourceId::Hpet, "{}", c.report().table());
    for _ in 0..8 {
        m.advance(ms(250));
        assert!(!bad(&c.watchdog_tick()));
    }
    let pm = c.source_of(SourceId::AcpiPm).unwrap();
    let (p0, n0) = (pm.read(), m.now_ns());
    m.advance(ms(3_000));
    let evs: Vec<_> = (0..12)
        .map(|_| {
            m.advance(ms(250));
            c.watchdog_tick()
        })
        .filter(bad)
        .collect();
    assert!(evs.is_empty(), "{evs:?}\n{}", c.report().table());
    pm_counted_the_truth_and_is_judged(&c, m, p0, n0);
}

#[test]
fn a_tsc_that_jumps_an_hour_adds_no_wrap_to_an_honest_pm_timer() {
    // The gap measure is the smaller of the TSC's and the 64-bit HPET's:
    // a TSC an hour ahead cannot put 768 false wraps into the PM timer.
    let m = leak(SimMachine::bare_metal_config().build());
    let (c, _) = clock(m);
    for _ in 0..8 {
        m.advance(ms(250));
        c.watchdog_tick();
    }
    let pm = c.source_of(SourceId::AcpiPm).unwrap();
    let (p0, n0) = (pm.read(), m.now_ns());
    m.step_tsc(None, 3_600 * m.config().tsc_hz as i64);
    for _ in 0..12 {
        m.advance(ms(250));
        c.watchdog_tick();
    }
    let counted = (pm.read() - p0) as u128 * 1_000_000_000 / 3_579_545;
    let truth = (m.now_ns() - n0) as u128;
    assert!(counted.abs_diff(truth) < 1_000_000, "{counted} of {truth}");
    assert!(
        !matches!(
            c.report().get(SourceId::AcpiPm).unwrap().verdict,
            clockhal::Verdict::Demoted { .. }
        ),
        "{}",
        c.report().table()
    );
}

/// The PM timer current on two CPUs whose TSCs are not known to agree;
/// CPU 0's TSC steps 5 s ahead (a hypervisor's TSC offset change), 1.07
/// PM timer wraps: the reads that follow on either CPU, 100 ms and more
/// later, see 100 ms and more, not a wrap that never happened. Held
/// readings are allowed (until the gap measure settles), time ahead of
/// the truth is not.
fn a_stepped_tsc_and_the_current_pm_timer(readers: &[usize]) {
    let m = leak(
        SimConfig::cpu(2_000_000_000)
            .with_invariant_tsc(false)
            .with_pm_timer(clockhal_sim::PmTimerConfig::default())
            .with_cpus(2, &[0, 0])
            .build(),
    );
    let (c, _) = clock(m);
    c.force(SourceId::AcpiPm).unwrap();
    let origin = m.now_ns() - c.now().as_nanos();
    for &cpu in readers {
        m.on_cpu(cpu, || c.now());
    }
    m.step_tsc(Some(0), 5 * m.config().tsc_hz as i64);
    let mut last = 0;
    for i in 0..100 {
        m.advance(ms(100));
        for &cpu in readers {
            let t = m.on_cpu(cpu, || c.now().as_nanos());
            let truth = m.now_ns() - origin;
            assert!(t >= last, "read {i} on CPU {cpu}: back {last} -> {t}");
            assert!(
                t <= truth + ms(1),
                "read {i} on CPU {cpu}: {} ms ahead of the truth\n{}",
                (t - truth) / 1_000_000,
                c.report().table()
            );
            last = t;
        }
    }
    let truth = m.now_ns() - origin;
    assert!(
        truth - last < ms(1_000),
        "{last} ns for {truth} ns\n{}",
        c.report().table()
    );
}

#[test]
fn a_stepped_tsc_puts_no_phantom_wrap_into_the_current_pm_timer() {
    a_stepped_tsc_and_the_current_pm_timer(&[0]);
    a_stepped_tsc_and_the_current_pm_timer(&[1, 0]);
}

#[test]
fn a_stepped_tsc_puts_no_phantom_wrap_under_racing_readers() {
    // The same with reader threads on both CPUs while CPU 0's TSC steps:
    // no reading on either is ever more than 10 ms ahead of the truth.
    let m = leak(
        SimConfig::cpu(2_000_000_000)
            .with_invariant_tsc(false)
            .with_pm_timer(clockhal_sim::PmTimerConfig::default())
            .with_cpus(2, &[0, 0])
            .build(),
    );
    let (c, _) = clock(m);
    c.force(SourceId::AcpiPm).unwrap();
    let origin = m.now_ns() - c.now().as_nanos();
    race(&c, m, &[0, 1], true, |readers| {
        readers.cross_cpu(CrossCpu::Unchecked);
        readers.future_slack(Some(ms(10)));
        readers.wait(20);
        m.step_tsc(Some(0), 5 * m.config().tsc_hz as i64);
        for _ in 0..100 {
            m.advance(ms(100));
            readers.wait(20);
        }
    });
    let truth = m.now_ns() - origin;
    let t = c.now().as_nanos();
    assert!(
        t <= truth + ms(1) && truth.saturating_sub(t) < ms(1_000),
        "{t} ns for {truth} ns\n{}",
        c.report().table()
    );
}

/// Issue 26 §4, the current source's member of the class: a 32-bit
/// 100 MHz HPET (a wrap every 42.9 s) is the clock; nothing reads it and
/// no tick comes for `idle_s`. Its next reading must still count the
/// whole gap (the TSC spans it), never hold it as "more than half a wrap".
fn idle_narrow_hpet(idle_s: u64) {
    let m = leak(narrow_hpet_and_pm(false).build());
    let (c, _) = clock(m);
    // The supervised TSC would be chosen; the OS prefers the HPET.
    c.force(SourceId::Hpet).unwrap();
    for _ in 0..8 {
        m.advance(ms(250));
        assert!(!bad(&c.watchdog_tick()));
    }
    let (t0, n0) = (c.now().as_nanos(), m.now_ns());
    m.advance(ms(idle_s * 1_000));
    let t1 = c.now().as_nanos();
    let truth = m.now_ns() - n0;
    assert!(
        (t1 - t0).abs_diff(truth) < ms(5),
        "idle {idle_s} s: now advanced {} ns of {truth} ns\n{}",
        t1 - t0,
        c.report().table()
    );
    // Ticks resume: nothing is demoted for the gap.
    for _ in 0..8 {
        m.advance(ms(250));
        let e = c.watchdog_tick();
        assert!(!bad(&e), "{e:?}\n{}", c.report().table());
    }
    assert_eq!(c.source_id(), SourceId::Hpet, "{}", c.report().table());
}

#[test]
fn an_idle_current_narrow_hpet_loses_no_wrap() {
    idle_narrow_hpet(30);
    idle_narrow_hpet(100);
}

#[test]
fn another_cpu_s_tsc_offset_adds_no_wrap_to_the_current_pm_timer() {
    // The current PM timer read from both CPUs in turn must track the
    // truth. A gap measured across the two TSCs would look like two
    // missed wraps and fit the counter's phase exactly.
    let m = two_cpus_two_pm_wraps_apart();
    let (c, _) = clock(m);
    c.force(SourceId::AcpiPm).unwrap();
    let origin = m.now_ns() - c.now().as_nanos();
    let mut last = 0;
    for i in 0..2_000u64 {
        m.advance(ms(1));
        let t = m.on_cpu((i % 2) as usize, || c.now().as_nanos());
        let truth = m.now_ns() - origin;
        assert!(t >= last, "read {i}: back {last} -> {t}");
        assert!(
            t <= truth + ms(2),
            "read {i}: {t} ns, truth {truth} ns\n{}",
            c.report().table()
        );
        last = t;
    }
}

#[test]
fn two_cpus_reading_at_once_after_an_idle_gap_lose_no_wrap() {
    // The idle 32-bit HPET of `idle_narrow_hpet`, read by two CPUs at once
    // right after the gap (one recovers the wraps, the other holds
    // meanwhile), with time moving on under them: every reading after the
    // gap counts it, and neither CPU ever goes back.
    let m = leak(narrow_hpet_and_pm(true).with_cpus(2, &[0, 0]).build());
    let (c, _) = clock(m);
    c.force(SourceId::Hpet).unwrap();
    for _ in 0..4 {
        m.advance(ms(250));
        c.watchdog_tick();
    }
    // Each CPU reads once before the first gap: its TSC is the witness of
    // the gap on that CPU (these TSCs are not known to agree across CPUs,
    // so one CPU's pair says nothing about the other's gap).
    for cpu in 0..2 {
        m.on_cpu(cpu, || c.now());
    }
    for round in 0..3 {
        let (t0, n0) = (c.now().as_nanos(), m.now_ns());
        m.advance(ms(30_000));
        let gap = m.now_ns() - n0;
        let go = std::sync::Barrier::new(3);
        std::thread::scope(|s| {
            for cpu in 0..2 {
                let (c, go) = (&c, &go);
                s.spawn(move || {
                    m.set_cpu(cpu);
                    go.wait();
                    let mut last = 0;
                    let mut fresh = 0;
                    for _ in 0..2_000 {
                        let t = c.now().as_nanos();
                        assert!(t >= last, "round {round} cpu {cpu}: back {last} -> {t}");
                        fresh += usize::from(t > last);
                        last = t;
                    }
                    // Held reads while the other CPU recovered are fine;
                    // the readings end past the gap.
                    assert!(fresh > 0, "round {round} cpu {cpu}: never moved");
                    assert!(
                        last - t0 >= gap - ms(5),
                        "round {round} cpu {cpu}: {} ns after a {gap} ns gap",
                        last - t0
                    );
                });
            }
            go.wait();
            for _ in 0..200 {
                m.advance(10_000);
                std::thread::yield_now();
            }
        });
    }
}

/// The other members of the SMP class: on CPUs whose TSCs differ (not
/// known to agree), the CPU that reads first after an idle gap is not the
/// one that read last before it; each CPU's own TSC measures its gap, and
/// the CPUs keep taking turns over several gaps. The PM timer (24 bits, a
/// wrap every 4.7 s) and the narrow HPET (32 bits at 100 MHz, 42.9 s).
#[test]
fn the_first_reader_after_a_gap_counts_it_whoever_read_last() {
    for id in [SourceId::AcpiPm, SourceId::Hpet] {
        let m = leak(
            narrow_hpet_and_pm(false)
                .with_cpus(3, &[0, 7_777_777_777, -3_333_333_333])
                .build(),
        );
        let (c, _) = clock(m);
        c.force(id).unwrap();
        let origin = m.now_ns() - c.now().as_nanos();
        let mut last = 0;
        let mut read = |cpu: usize, what: &str| {
            let t = m.on_cpu(cpu, || c.now().as_nanos());
            let truth = m.now_ns() - origin;
            assert!(t >= last, "{id:?} {what} cpu {cpu}: back {last} -> {t}");
            assert!(
                t.abs_diff(truth) < ms(5),
                "{id:?} {what} cpu {cpu}: {t} ns, truth {truth} ns\n{}",
                c.report().table()
            );
            last = t;
        };
        for cpu in 0..3 {
            read(cpu, "before");
        }
        // Gaps of 30 s and 100 s (6 to 21 PM timer wraps, up to two HPET
        // wraps); after each, a different CPU reads first.
        for (k, gap_s) in [30u64, 100, 30, 100, 30, 100].into_iter().enumerate() {
            let first = (k + 1) % 3;
            read(k % 3, "last before the gap");
            m.advance(ms(gap_s * 1_000));
            read(first, "first after the gap");
            for cpu in 0..3 {
                m.advance(ms(1));
                read(cpu, "after the gap");
            }
        }
    }
}

/// The watchdog's member of the class: ticks taken on CPUs whose TSCs
/// differ by two PM timer wraps (not known to agree). The gap between two
/// ticks measured across the two TSCs would look like two missed wraps of
/// the PM timer (a member, not current) and fit its phase exactly.
#[test]
fn watchdog_ticks_on_cpus_with_offset_tscs_add_no_wrap_to_a_member() {
    let m = two_cpus_two_pm_wraps_apart();
    let (c, _) = clock(m);
    c.force(SourceId::Hpet).unwrap();
    let pm = c.source_of(SourceId::AcpiPm).unwrap();
    let (p0, n0) = (pm.read(), m.now_ns());
    for i in 0..40 {
        m.advance(ms(250));
        let e = m.on_cpu(i % 2, || c.watchdog_tick());
        assert!(!bad(&e), "tick {i}: {e:?}\n{}", c.report().table());
    }
    pm_counted_the_truth_and_is_judged(&c, m, p0, n0);
}

/// The jump check's member of the class: its anchor (an independent
/// 64-bit counter's reading at a tick) must be a counter that compares
/// across CPUs. A TSC anchor taken on CPU 1, whose TSC runs 10 s ahead,
/// and read again on CPU 0 says 20 s passed in a 30 s idle gap: the honest
/// HPET reading after the gap was refused as a jump and the HPET demoted.
#[test]
fn a_reading_after_a_gap_on_another_cpu_is_no_jump() {
    let m = leak(
        narrow_hpet_and_pm(false)
            .with_cpus(2, &[0, 20_000_000_000])
            .build(),
    );
    let (c, _) = clock(m);
    c.force(SourceId::Hpet).unwrap();
    let origin = m.now_ns() - c.now().as_nanos();
    for _ in 0..8 {
        m.advance(ms(250));
        let e = m.on_cpu(1, || c.watchdog_tick());
        assert!(!bad(&e), "{e:?}\n{}", c.report().table());
        c.now();
    }
    m.advance(ms(30_000));
    let t = c.now().as_nanos();
    let truth = m.now_ns() - origin;
    assert!(
        t.abs_diff(truth) < ms(5),
        "{t} ns of {truth} ns\n{}",
        c.report().table()
    );
    assert_eq!(c.source_id(), SourceId::Hpet, "{}", c.report().table());
}

/// All of the class at once, at run time: four CPUs with TSCs seconds
/// apart read the current PM timer or narrow HPET while the main thread
/// moves time in small steps and idle gaps of 10-60 s and ticks the
/// watchdog from any CPU. Per CPU, readings never go back; across CPUs a
/// device is one counter, so a reading is never earlier than one returned
/// before on any CPU; after every gap, every reading counts it.
#[test]
fn four_cpus_reading_through_idle_gaps_and_ticks_from_any_cpu() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
    // TSCs seconds apart, or in step and warp-tested (one pair for all).
    let offsets: [(&[i64], bool); 2] = [
        (&[0, 7_777_777_777, 3_141_592_653, 12_000_000_000], false),
        (&[0, 0, 0, 0], true),
    ];
    for ((offsets, synced), id) in offsets
        .into_iter()
        .flat_map(|o| [(o, SourceId::AcpiPm), (o, SourceId::Hpet)])
    {
        let m = leak(narrow_hpet_and_pm(synced).with_cpus(4, offsets).build());
        let (c, _) = if synced {
            clock_with(m, |p| p.tsc_sync(clockhal::tsc::SyncStatus::Synchronized))
        } else {
            clock(m)
        };
        c.force(id).unwrap();
        let origin = m.now_ns() - c.now().as_nanos();
        // The highest value returned on any CPU, and the truth at the
        // last gap's end (every reading from then on must be past it).
        let high = AtomicU64::new(0);
        let after_gap = AtomicU64::new(0);
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            for cpu in 0..4 {
                let (c, high, after_gap, stop) = (&c, &high, &after_gap, &stop);
                s.spawn(move || {
                    m.set_cpu(cpu);
                    let mut last = 0;
                    while !stop.load(SeqCst) {
                        let seen = high.load(SeqCst);
                        let floor = after_gap.load(SeqCst);
                        let t = c.now().as_nanos();
                        assert!(t >= last, "{id:?} cpu {cpu}: back {last} -> {t}");
                        assert!(
                            t >= seen,
                            "{id:?} cpu {cpu}: {t} before {seen} returned elsewhere"
                        );
                        // Behind the gap only as a hold (a value returned
                        // before, while another reader recovers), never as
                        // a fresh reading that lost the gap's wraps.
                        assert!(
                            t + ms(5) >= floor || t <= seen,
                            "{id:?} synced {synced} cpu {cpu}: {t} ns after a gap that ended at {floor} ns"
                        );
                        high.fetch_max(t, SeqCst);
                        last = t;
                        std::thread::yield_now();
                    }
                    // Once time stands still, every CPU gets past the last
                    // gap within a few reads.
                    let floor = after_gap.load(SeqCst);
                    let past = (0..100).any(|_| c.now().as_nanos() + ms(5) >= floor);
                    assert!(past, "{id:?} synced {synced} cpu {cpu}: held before {floor} ns");
                });
            }
            // Readers stop also when the main thread's checks panic.
            struct Stop<'a>(&'a AtomicBool);
            impl Drop for Stop<'_> {
                fn drop(&mut self) {
                    self.0.store(true, SeqCst);
                }
            }
            let _stop = Stop(&stop);
            let mut seed = 0x2545_f491_4f6c_dd1du64;
            for step in 0..3_000u64 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                if step % 500 == 499 {
                    m.advance(ms(10_000 + seed % 50_000));
                    after_gap.store(m.now_ns() - origin, SeqCst);
                } else {
                    m.advance(100_000 + seed % 900_000);
                }
                if step % 50 == 0 {
                    let e = m.on_cpu((seed % 4) as usize, || c.watchdog_tick());
                    assert!(
                        !bad(&e),
                        "{id:?} step {step}: {e:?}\n{}",
                        c.report().table()
                    );
                }
                std::thread::yield_now();
            }
        });
        assert_eq!(c.source_id(), id, "{}", c.report().table());
    }
}

/// A vCPU preempted (or paused) inside a read of the current device,
/// between the TSC that dates the read and the device's count: the count
/// comes from after a gap the TSC did not see, so without a second TSC
/// reading the plain rule placed it as if no wrap had passed (a fresh
/// reading whole wraps behind the truth, and a pair that kept the loss).
/// Such a read now holds, and the next one counts the gap.
#[test]
fn a_read_preempted_between_its_tsc_and_its_count_loses_no_wrap() {
    // The gap comes right after the k-th rdtsc of one `now()` (whichever
    // of its TSC readings that is).
    // Gaps whose phase the plain rule accepts: 5.3 PM timer wraps, 1.17
    // HPET wraps.
    for ((id, gap), k) in [(SourceId::AcpiPm, ms(25_000)), (SourceId::Hpet, ms(50_000))]
        .into_iter()
        .flat_map(|g| (1..=4).map(move |k| (g, k)))
    {
        let m = leak(narrow_hpet_and_pm(false).build());
        let (c, _) = clock(m);
        c.force(id).unwrap();
        let origin = m.now_ns() - c.now().as_nanos();
        m.advance(ms(1));
        let before = c.now().as_nanos();
        pause_after_rdtsc(m, k, gap);
        let t = c.now().as_nanos();
        m.clear_rdtsc_hook();
        let truth = m.now_ns() - origin;
        // Dated before the gap (held, or read before it), or counting it.
        assert!(
            t <= before + ms(1) || t.abs_diff(truth) < ms(5),
            "{id:?} gap after rdtsc {k}: {t} ns, before {before} ns, truth {truth} ns"
        );
        m.advance(ms(1));
        let t = c.now().as_nanos();
        let truth = m.now_ns() - origin;
        assert!(
            t.abs_diff(truth) < ms(5),
            "{id:?} gap after rdtsc {k}, next: {t} ns, truth {truth} ns"
        );
    }
}

/// An "interrupt" that reads the clock inside every TSC reading of a read
/// of the current device (between its TSC and its count, inside the pair's
/// update, ...), across idle gaps: it never waits for the interrupted
/// read, never goes back, and both get past each gap.
#[test]
fn reads_nested_inside_a_device_read_neither_wait_nor_lose_a_gap() {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    for id in [SourceId::AcpiPm, SourceId::Hpet] {
        let m = leak(narrow_hpet_and_pm(false).build());
        let c: &'static SimClock = Box::leak(Box::new(clock(m).0));
        c.force(id).unwrap();
        let origin = m.now_ns() - c.now().as_nanos();
        static INSIDE: AtomicBool = AtomicBool::new(false);
        let nested_last = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let seen = nested_last.clone();
        m.set_rdtsc_hook(move |_| {
            if !INSIDE.swap(true, SeqCst) {
                let t = c.now().as_nanos();
                assert!(t >= seen.fetch_max(t, SeqCst), "nested read went back");
                INSIDE.store(false, SeqCst);
            }
        });
        let mut last = 0;
        for gap_s in [25u64, 50, 10, 100] {
            m.advance(ms(gap_s * 1_000));
            let truth = m.now_ns() - origin;
            let mut t = 0;
            for _ in 0..4 {
                t = c.now().as_nanos();
                assert!(t >= last, "{id:?}: back {last} -> {t}");
                last = t;
                if t + ms(5) >= truth {
                    break;
                }
            }
            assert!(
                t + ms(5) >= truth,
                "{id:?} after {gap_s} s: {t} ns, truth {truth} ns"
            );
        }
        m.clear_rdtsc_hook();
    }
}

/// Where nothing spans a gap (a CPU without a TSC), the wraps it hid
/// cannot be recovered; a gap the counter's own phase gives away (the
/// reading lands more than an eighth of a wrap behind the last) is
/// reported once by `Clock::unmeasured_gaps`, and the clock goes on.
#[test]
fn a_gap_nothing_measured_is_reported() {
    let m = leak(
        SimConfig::cpu(2_000_000_000)
            .with_cpuid(1, 0, clockhal_sim::regs(0x000906EA, 0, 0, 0))
            .with_pm_timer(clockhal_sim::PmTimerConfig::default())
            .build(),
    );
    let (c, _) = clock(m);
    assert_eq!(c.source_id(), SourceId::AcpiPm, "{}", c.report().table());
    assert_eq!(c.unmeasured_gaps(), 0);
    // 0.75 of a 4.69 s wrap: behind the last reading by a quarter wrap.
    let before = c.now().as_nanos();
    m.advance(3_515_000_000);
    for _ in 0..5 {
        assert_eq!(c.now().as_nanos(), before);
    }
    assert_eq!(c.unmeasured_gaps(), 1, "one gap, counted once");
    // The clock moves on once the counter comes round (the gap's time is lost).
    m.advance(ms(1_500));
    assert!(c.now().as_nanos() > before);
    assert_eq!(c.unmeasured_gaps(), 1);
    m.advance(ms(3_515));
    c.now();
    assert_eq!(c.unmeasured_gaps(), 2);
}

/// The watchdog's member of the preemption class: a vCPU paused inside a
/// tick, after the TSC that measures the tick's gap and before the
/// members are read. A member's extension then meets a gap the tick did
/// not measure; the interval must be judged as one with a pause (nothing
/// at fault at once), never a demotion of an honest member.
#[test]
fn a_tick_paused_inside_demotes_no_member() {
    for (cur, k) in [SourceId::Hpet, SourceId::AcpiPm, SourceId::Tsc]
        .into_iter()
        .flat_map(|id| (1..=6).map(move |k| (id, k)))
    {
        let m = leak(narrow_hpet_and_pm(true).build());
        let (c, _) = clock(m);
        c.force(cur).unwrap();
        ticks_around_a_paused_tick(&c, m, k, &format!("{cur:?}"));
    }
}

/// Four ticks, one tick paused for 25 s (5.3 PM timer wraps, the plain
/// rule's phase; 0.58 of the narrow HPET's) after its `k`-th rdtsc, twelve
/// more: none demotes or switches. How many of the twelve were judged.
fn ticks_around_a_paused_tick(c: &SimClock, m: &SimMachine, k: u32, what: &str) -> usize {
    for _ in 0..4 {
        m.advance(ms(250));
        assert!(!bad(&c.watchdog_tick()));
    }
    pause_after_rdtsc(m, k, ms(25_000));
    m.advance(ms(250));
    let e = c.watchdog_tick();
    m.clear_rdtsc_hook();
    assert!(
        !bad(&e),
        "{what} pause after rdtsc {k}: {e:?}\n{}",
        c.report().table()
    );
    let mut judged = 0;
    for i in 0..12 {
        m.advance(ms(250));
        let e = c.watchdog_tick();
        assert!(
            !bad(&e),
            "{what} pause after rdtsc {k}, tick {i}: {e:?}\n{}",
            c.report().table()
        );
        judged += usize::from(matches!(
            e,
            clockhal::WatchdogEvent::Judged {
                outcome: clockhal::Outcome::Judged,
                ..
            }
        ));
    }
    judged
}

/// The same pause inside a tick on a KVM guest (kvmclock current; a
/// narrow HPET and the PM timer as members), with QEMU's stop/cont
/// semantics available to the backend: nothing honest is demoted, and
/// judging resumes.
#[test]
fn a_tick_paused_inside_on_kvm_demotes_no_member() {
    for k in 1..=8 {
        let m = leak(
            SimMachine::kvm_config()
                .with_pm_timer(clockhal_sim::PmTimerConfig::default())
                .with_hpet(HpetConfig::qemu().narrow())
                .build(),
        );
        let (c, _) = clock(m);
        assert_eq!(c.source_id(), SourceId::Kvmclock, "{}", c.report().table());
        let judged = ticks_around_a_paused_tick(&c, m, k, "kvmclock");
        assert!(
            judged >= 8,
            "pause after rdtsc {k}: {judged} of 12 ticks judged"
        );
        assert_eq!(c.source_id(), SourceId::Kvmclock, "{}", c.report().table());
    }
}
