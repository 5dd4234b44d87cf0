//! One bad value from a host must never break time (issue 12): garbage
//! pvclock and Hyper-V updates after the probe, leftover bytes in areas
//! nobody registered, hosts that step back by less or more than the
//! guard's slack, updates that never finish. Reader threads race every
//! fault and check `Clock`'s guarantees: per-CPU monotonic, never years
//! ahead of the true time, and after the fault durations measure right.
#![cfg(all(
    feature = "kvmclock",
    feature = "hyperv",
    feature = "tsc",
    feature = "hpet",
    feature = "acpi-pm"
))]

mod adversarial;

use adversarial::{clock, clock_with, leak, ms, race, ticks, SimClock};
use clockhal::x86::paravirt::PVCLOCK_TSC_STABLE_BIT;
use clockhal::{SourceId, Verdict};
use clockhal_sim::{PvclockUpdate, SimMachine};

const YEAR_NS: u64 = 365 * 24 * 3_600 * 1_000_000_000;

/// After the fault: the clock still measures machine time (a 100 ms
/// interval is 100 ms, not 0 and not years), on CPU `cpu`.
fn measures_right(c: &SimClock, m: &SimMachine, cpu: usize, what: &str) {
    m.on_cpu(cpu, || {
        for _ in 0..3 {
            let (n0, t0) = (m.now_ns(), c.now());
            m.advance(ms(100));
            let (t1, n1) = (c.now(), m.now_ns());
            let d = t1.duration_since(t0).as_nanos();
            // The reads' own simulated cost is inside [n0, n1].
            assert!(
                d <= n1 - n0 && d + 20_000 >= n1 - n0,
                "{what}: measured {d} ns over {} ns of machine time on {} ({})",
                n1 - n0,
                c.source_name(),
                c.report()
            );
        }
    });
}

/// Hostile pvclock updates a host might write once after the probe.
fn garbage_updates(truth: PvclockUpdate) -> Vec<(&'static str, PvclockUpdate)> {
    vec![
        (
            "mul = u32::MAX, shift = 32",
            PvclockUpdate {
                mul: u32::MAX,
                shift: 32,
                ..truth
            },
        ),
        (
            "system_time 100 years ahead",
            PvclockUpdate {
                system_time: truth.system_time + 100 * YEAR_NS,
                ..truth
            },
        ),
        (
            "system_time 1 hour back",
            PvclockUpdate {
                system_time: truth.system_time.saturating_sub(3_600_000_000_000),
                ..truth
            },
        ),
        ("mul = 0", PvclockUpdate { mul: 0, ..truth }),
        (
            "shift = -100",
            PvclockUpdate {
                shift: -100,
                ..truth
            },
        ),
        (
            "tsc_timestamp 2^63",
            PvclockUpdate {
                tsc_timestamp: 1 << 63,
                ..truth
            },
        ),
        (
            "rate 1000x",
            PvclockUpdate {
                mul: truth.mul / 1_000 + 1,
                ..truth
            },
        ),
    ]
}

#[test]
fn one_absurd_pvclock_update_after_probe_never_reaches_now() {
    let truth = SimMachine::kvm().with_kvm(|k, c| k.next_update(c, 0));
    for (what, _) in garbage_updates(truth.unwrap()) {
        let m = leak(SimMachine::kvm());
        let (c, _) = clock(m);
        assert_eq!(c.source_id(), SourceId::Kvmclock);
        race(&c, m, &[0], false, |readers| {
            readers.wait(100);
            m.with_kvm(|k, ctx| {
                let bad = garbage_updates(k.next_update(ctx, 0))
                    .into_iter()
                    .find(|(w, _)| *w == what)
                    .map(|(_, u)| u);
                k.publish(ctx, 0, bad.unwrap());
            });
            for _ in 0..4 {
                readers.wait(200);
                m.advance(ms(10));
            }
            // The host corrects the area; the watchdog runs as documented.
            m.with_kvm(|k, ctx| k.update(ctx, 0));
            for _ in 0..6 {
                m.advance(ms(250));
                c.watchdog_tick();
                readers.wait(100);
            }
        });
        measures_right(&c, m, 0, what);
        // A fault of the host counts against kvmclock (rejected or
        // reanchored); the one-time "system_time back" is held instead.
        let stats = c.kvmclock().unwrap().stats();
        assert!(
            stats.faults() >= 1,
            "{what}: the bad update was not counted: {stats:?}"
        );
    }
}

#[test]
fn a_garbage_update_on_another_vcpu_never_reaches_any_reader() {
    let m = leak(SimMachine::kvm_config().with_cpus(2, &[]).build());
    let (c, _) = clock_with(m, |p| p.tsc_sync(clockhal::tsc::SyncStatus::Synchronized));
    race(&c, m, &[0, 1], true, |readers| {
        readers.wait(100);
        m.with_kvm(|k, ctx| {
            let t = k.next_update(ctx, 1);
            k.publish(
                ctx,
                1,
                PvclockUpdate {
                    system_time: t.system_time + 146 * YEAR_NS,
                    ..t
                },
            );
        });
        ticks(&c, m, readers, 6, 200);
    });
    measures_right(&c, m, 0, "cpu 0");
    measures_right(&c, m, 1, "cpu 1");
}

/// A kvm machine with two vCPUs, CPU 1 registered, whose host then writes
/// `system_time` 146 years ahead into CPU 1's area; `ticks` watchdog
/// rounds ran before.
fn garbage_on_cpu1(stable_bit: bool, ticks: usize) -> (&'static SimMachine, SimClock) {
    let m = leak(
        SimMachine::kvm_config()
            .with_cpus(2, &[])
            .with_kvm(clockhal_sim::KvmConfig {
                stable_bit,
                ..clockhal_sim::KvmConfig::default()
            })
            .build(),
    );
    let (c, _) = clock_with(m, |p| p.tsc_sync(clockhal::tsc::SyncStatus::Synchronized));
    for _ in 0..ticks {
        m.advance(ms(250));
        c.watchdog_tick();
    }
    m.on_cpu(1, || c.register_this_cpu()).unwrap();
    m.with_kvm(|k, ctx| {
        let t = k.next_update(ctx, 1);
        k.publish(
            ctx,
            1,
            PvclockUpdate {
                system_time: t.system_time + 146 * YEAR_NS,
                ..t
            },
        );
    });
    (m, c)
}

fn assert_sane(c: &SimClock, m: &SimMachine, cpu: usize, what: &str) {
    let t = m.on_cpu(cpu, || c.now().as_nanos());
    assert!(
        t < ms(10_000),
        "{what}: now() on cpu {cpu} = {t} ns ({})",
        c.report()
    );
}

#[test]
fn a_switch_never_starts_the_new_source_from_the_rejected_reading() {
    // No trusted stable bit: CPU 1's first update is judged for
    // plausibility only, and the jump check (anchored by 3 watchdog
    // rounds) must stop it.
    let (m, c) = garbage_on_cpu1(false, 3);
    assert_sane(&c, m, 1, "CPU 1's first read");
    assert_sane(&c, m, 0, "CPU 0 afterwards");
    measures_right(&c, m, 0, "switch");
}

#[test]
fn a_cpus_first_update_is_checked_before_any_watchdog_round() {
    let (m, c) = garbage_on_cpu1(false, 0);
    assert_sane(&c, m, 1, "CPU 1's first read");
    assert_sane(&c, m, 0, "CPU 0 afterwards");
}

#[test]
fn a_stable_bit_revocation_never_turns_a_reanchored_garbage_update_into_time() {
    // Trusted stable bit: CPU 1 judges the garbage against its own map
    // (reanchored, fine). Then the OS's warp test revokes the trust; a
    // second later every CPU re-validates.
    let (m, c) = garbage_on_cpu1(true, 3);
    assert_sane(&c, m, 1, "CPU 1 after the garbage");
    c.set_tsc_sync(clockhal::tsc::SyncStatus::Unsynchronized {
        worst_backward_ticks: 10,
    });
    m.advance(ms(1_500));
    assert_sane(&c, m, 1, "CPU 1 after the revocation");
    assert_sane(&c, m, 0, "CPU 0 after the revocation");
}

#[test]
fn one_garbage_hyperv_page_after_probe_never_reaches_now() {
    let cases: [(&str, u64, i64); 4] = [
        ("offset + 2^62", 0, 1 << 62),
        ("scale u64::MAX", u64::MAX, 0),
        ("scale 1", 1, 0),
        ("offset - 2^62", 0, -(1 << 62)),
    ];
    for (what, scale, offset) in cases {
        let m = leak(SimMachine::hyperv());
        let (c, _) = clock(m);
        assert_eq!(c.source_id(), SourceId::HypervPage, "{}", c.report());
        race(&c, m, &[0], false, |readers| {
            readers.wait(100);
            m.with_hyperv(|h, ctx| {
                let (s, o) = clockhal_sim::HypervHost::scale_offset(ctx);
                let s = if scale == 0 { s } else { scale };
                h.publish(ctx, s, o.wrapping_add(offset));
            });
            for _ in 0..4 {
                readers.wait(200);
                m.advance(ms(10));
            }
            m.with_hyperv(|h, ctx| h.update_page(ctx));
            for _ in 0..6 {
                m.advance(ms(250));
                c.watchdog_tick();
                readers.wait(100);
            }
        });
        measures_right(&c, m, 0, what);
    }
}

#[test]
fn a_hyperv_page_that_stays_invalid_never_freezes_the_clock() {
    // Sequence 0 for good after the probe (a host stuck in a migration
    // window): reads fall back or hold, and the clock moves on.
    let m = leak(SimMachine::hyperv());
    let (c, _) = clock(m);
    race(&c, m, &[0], false, |readers| {
        m.with_hyperv(|h, ctx| {
            h.invalidate_page(ctx);
            h.set_page_updates(false);
        });
        ticks(&c, m, readers, 8, 500);
    });
    measures_right(&c, m, 0, "page invalid");
}

#[test]
fn leftover_bytes_in_an_unregistered_area_are_never_decoded() {
    // CPU 1 never registered; its area holds what the memory held before
    // (a plausible-looking update 146 years ahead). Reads there hold.
    let m = leak(SimMachine::kvm_config().with_cpus(2, &[]).build());
    let (c, mem) = clock_with(m, |p| p.tsc_sync(clockhal::tsc::SyncStatus::Synchronized));
    let areas = mem.areas.unwrap();
    let stale = m.with_kvm(|k, ctx| k.next_update(ctx, 0)).unwrap();
    let stale = PvclockUpdate {
        system_time: stale.system_time + 146 * YEAR_NS,
        flags: PVCLOCK_TSC_STABLE_BIT,
        ..stale
    };
    stale.write_to(&areas.get()[1]);
    race(&c, m, &[0, 1], false, |readers| {
        for _ in 0..4 {
            readers.wait(500);
            m.advance(ms(10));
        }
    });
    assert!(c.kvmclock().unwrap().stats().unregistered_reads > 0);
    // Registered now, the host's own update replaces the stale bytes.
    m.on_cpu(1, || c.register_this_cpu()).unwrap();
    measures_right(&c, m, 1, "registered");
}

#[test]
fn after_unregister_a_cpu_holds_and_never_extrapolates_the_stale_area() {
    let m = leak(SimMachine::kvm_config().with_cpus(2, &[]).build());
    let (c, mem) = clock_with(m, |p| p.tsc_sync(clockhal::tsc::SyncStatus::Synchronized));
    let areas = mem.areas.unwrap();
    m.on_cpu(1, || c.register_this_cpu()).unwrap();
    m.on_cpu(1, || c.unregister_this_cpu());
    // The memory is the OS's again; it is reused for something else.
    let t = m.with_kvm(|k, ctx| k.next_update(ctx, 1)).unwrap();
    PvclockUpdate {
        system_time: t.system_time + 146 * YEAR_NS,
        ..t
    }
    .write_to(&areas.get()[1]);
    let held = m.on_cpu(1, || {
        let a = c.now();
        m.advance(ms(10));
        let b = c.now();
        (a, b)
    });
    // Nothing else read meanwhile: the held value does not move.
    assert_eq!(held.0, held.1, "an unregistered CPU holds");
    race(&c, m, &[0, 1], false, |readers| {
        for _ in 0..4 {
            readers.wait(500);
            m.advance(ms(10));
        }
    });
}

#[test]
fn a_host_stepping_back_less_than_the_slack_never_moves_now_back() {
    // 3 us, 500 us (within the accepted 1 ms host correction) and 5 ms
    // (beyond): a single vCPU never sees time go back.
    for back_ns in [3_000i64, 500_000, 5_000_000] {
        let m = leak(SimMachine::kvm());
        let (c, _) = clock(m);
        // The clock has run a while (a step back at its very start is
        // `a_backward_step_at_the_clocks_start_never_wraps_to_u64_max`).
        m.advance(ms(2_000));
        race(&c, m, &[0], false, |readers| {
            for _ in 0..5 {
                readers.wait(200);
                m.with_kvm(|k, ctx| {
                    k.set_system_time_skew(None, -back_ns);
                    k.update_all(ctx);
                });
                readers.wait(200);
                m.advance(ms(1));
                m.with_kvm(|k, ctx| {
                    k.set_system_time_skew(None, 0);
                    k.update_all(ctx);
                });
            }
        });
        measures_right(&c, m, 0, &format!("{back_ns} ns back"));
    }
}

#[test]
fn a_raw_tsc_stepping_back_never_moves_now_back() {
    // Bare metal, the TSC selected: a TSC step back of 3 us, 1 ms, 1 s.
    for back_ns in [3_000u64, 1_000_000, 1_000_000_000] {
        let m = leak(SimMachine::bare_metal());
        let (c, _) = clock(m);
        assert_eq!(c.source_id(), SourceId::Tsc, "{}", c.report());
        let back_ticks = (back_ns as u128 * m.config().tsc_hz as u128 / 1_000_000_000) as i64;
        m.advance(ms(2_000));
        race(&c, m, &[0], false, |readers| {
            readers.wait(200);
            m.step_tsc(None, -back_ticks);
            ticks(&c, m, readers, 6, 200);
        });
        measures_right(&c, m, 0, &format!("TSC {back_ns} ns back"));
    }
}

#[test]
fn a_backward_step_at_the_clocks_start_never_wraps_to_u64_max() {
    // The clock's timeline starts at 0 when it is built; a host (or TSC)
    // stepping back by more than the time since then must hold, not wrap.
    let kvm = leak(SimMachine::kvm());
    let (c, _) = clock(kvm);
    kvm.with_kvm(|k, ctx| {
        k.set_system_time_skew(None, -3_000);
        k.update_all(ctx);
    });
    let t = c.now().as_nanos();
    assert!(t < ms(1), "kvmclock 3 us back at start: now() = {t}");

    let bare = leak(SimMachine::bare_metal());
    let (c, _) = clock(bare);
    bare.step_tsc(None, -10_000); // ~4 us
    let t = c.now().as_nanos();
    assert!(t < ms(1), "TSC 4 us back at start: now() = {t}");
}

#[test]
fn a_pvclock_update_that_never_finishes_keeps_the_last_validated_parameters() {
    // The version stays odd for good: reads return in bounded time with
    // the parameters validated last, and time stays right.
    let m = leak(SimMachine::kvm());
    let (c, _) = clock(m);
    c.now();
    m.with_kvm(|k, ctx| k.stall_update(ctx, 0));
    race(&c, m, &[0], false, |readers| {
        ticks(&c, m, readers, 8, 200);
    });
    assert!(c.kvmclock().unwrap().stats().busy_reads > 0);
    measures_right(&c, m, 0, "stalled");
}

#[test]
fn a_cpu_whose_area_never_settles_holds_then_the_clock_moves_on() {
    // CPU 1's area is mid-update from its registration on, so it has no
    // validated parameters: its reads hold, and without any watchdog tick
    // the clock switches away by itself after STUCK_READS held reads.
    let m = leak(SimMachine::kvm_config().with_cpus(2, &[]).build());
    let (c, _) = clock_with(m, |p| p.tsc_sync(clockhal::tsc::SyncStatus::Synchronized));
    m.on_cpu(1, || c.register_this_cpu()).unwrap();
    m.with_kvm(|k, ctx| k.stall_update(ctx, 1));
    race(&c, m, &[1], false, |readers| {
        readers.wait(u64::from(clockhal::STUCK_READS) + 1_000);
    });
    assert_ne!(c.source_id(), SourceId::Kvmclock, "{}", c.report());
    assert!(matches!(
        c.report().get(SourceId::Kvmclock).unwrap().verdict,
        Verdict::Demoted { .. }
    ));
    measures_right(&c, m, 1, "cpu 1 never settled");
}

/// A correct live-migration update (new TSC rate) first read a second
/// after it was written: kvmclock stays, and the time is right.
#[test]
fn a_migration_update_read_late_keeps_kvmclock() {
    let m = leak(SimMachine::kvm());
    let (c, _) = clock(m);
    for _ in 0..4 {
        m.advance(ms(250));
        c.watchdog_tick();
    }
    assert_eq!(c.source_id(), SourceId::Kvmclock);
    let origin = m.now_ns() - c.now().as_nanos();
    m.set_tsc_hz(m.config().tsc_hz * 3 / 2);
    m.with_kvm(|k, ctx| k.update_all(ctx));
    m.advance(ms(1_000));
    let t = c.now().as_nanos();
    let truth = m.now_ns() - origin;
    let events: Vec<_> = (0..4)
        .map(|_| {
            m.advance(ms(250));
            c.watchdog_tick()
        })
        .collect();
    assert!(
        t.abs_diff(truth) < ms(1) && c.source_id() == SourceId::Kvmclock,
        "now() {} ns off; {:?}; {events:?}\n{}",
        t as i128 - truth as i128,
        c.source_id(),
        c.report().table()
    );
}

/// A host update anchored where the old parameters agree (the probe's
/// instant, 400 s back) with a rate 4x off: the backend takes the host's
/// anchor, so the clock's own checks must stop it — the jump ahead is not
/// returned, the rate a quarter of the truth is caught by the watchdog.
#[test]
fn an_old_anchored_update_with_another_rate_is_stopped_by_the_clock() {
    for shift_by in [2i8, -2] {
        let m = leak(SimMachine::kvm());
        let (c, _) = clock(m);
        let origin = m.now_ns() - c.now().as_nanos();
        let t0_tsc = m.tsc_of(0);
        let t0_ns = m
            .with_kvm(|k, ctx| k.next_update(ctx, 0).system_time)
            .unwrap();
        for _ in 0..1_600 {
            m.advance(ms(250));
            c.watchdog_tick();
        }
        m.with_kvm(|k, ctx| {
            let u = k.next_update(ctx, 0);
            let bad = PvclockUpdate {
                tsc_timestamp: t0_tsc,
                system_time: t0_ns,
                shift: u.shift + shift_by,
                ..u
            };
            k.publish(ctx, 0, bad);
        });
        let mut worst = 0u64;
        for _ in 0..12 {
            m.advance(ms(250));
            c.watchdog_tick();
            let t = c.now().as_nanos();
            worst = worst.max(t.saturating_sub(m.now_ns() - origin));
        }
        assert!(
            worst < 11_000_000_000,
            "shift {shift_by:+}: {worst} ns ahead"
        );
        measures_right(&c, m, 0, "after an old-anchored update");
    }
}
