//! Monotonic means monotonic (issues 12 and 13): on one CPU `now()` never
//! goes back whatever the host does; across CPUs the guarantee is the one
//! `Clock`'s docs state per source. Readers on two simulated CPUs race a
//! host whose vCPUs disagree, a stable flag that lies, and TSCs out of
//! step that the OS did or did not notice.
#![cfg(all(
    feature = "kvmclock",
    feature = "hyperv",
    feature = "tsc",
    feature = "hpet",
    feature = "acpi-pm"
))]

mod adversarial;

use adversarial::{clock_with, leak, ms, race, CrossCpu, SimClock};
use clockhal::kvmclock::STABLE_AGREEMENT_NS;
use clockhal::tsc::SyncStatus;
use clockhal::{ClampGranule, CpuError, SourceId};
use clockhal_sim::{regs, KvmConfig, SimMachine};

/// A two-vCPU KVM guest (`stable_bit`: CPUID grants the stable flag).
fn kvm2(stable_bit: bool) -> (&'static SimMachine, SimClock) {
    kvm2_with(stable_bit, ClampGranule::EXACT)
}

/// The same with the clamp's resolution `granule`.
fn kvm2_with(stable_bit: bool, granule: ClampGranule) -> (&'static SimMachine, SimClock) {
    let m = leak(
        SimMachine::kvm_config()
            .with_cpus(2, &[])
            .with_kvm(KvmConfig {
                stable_bit,
                ..KvmConfig::default()
            })
            .build(),
    );
    let (c, _) = clock_with(m, |p| {
        p.tsc_sync(SyncStatus::Synchronized).clamp_granule(granule)
    });
    (m, c)
}

/// `ns` of the machine's TSC in ticks.
fn ticks(m: &SimMachine, ns: u64) -> i64 {
    (ns as u128 * m.config().tsc_hz as u128 / 1_000_000_000) as i64
}

/// Host updates of every area and watchdog ticks while readers run.
fn host_keeps_updating(
    m: &SimMachine,
    c: &SimClock,
    readers: &adversarial::Readers,
    rounds: usize,
) {
    for _ in 0..rounds {
        readers.wait(300);
        m.with_kvm(|k, ctx| k.update_all(ctx));
        m.advance(ms(50));
        c.watchdog_tick();
    }
}

#[test]
fn an_honest_stable_kvmclock_orders_readings_across_cpus() {
    let (m, c) = kvm2(true);
    race(&c, m, &[0, 1], true, |readers| {
        readers.cross_cpu(CrossCpu::Within(0));
        host_keeps_updating(m, &c, readers, 10);
        assert!(c.kvmclock().unwrap().stable());
    });
    assert_eq!(c.source_id(), SourceId::Kvmclock);
}

#[test]
fn a_stable_flag_that_lies_by_3us_is_caught_and_readings_are_then_ordered() {
    // Issue 12: two vCPUs 3 us apart under the stable flag. Per CPU time
    // never goes back; once the areas are compared (the next watchdog
    // tick) the flag is no longer trusted and readings are clamped.
    for skew in [-3_000i64, 3_000] {
        let (m, c) = kvm2(true);
        race(&c, m, &[0, 1], true, |readers| {
            readers.cross_cpu(CrossCpu::Within(0));
            host_keeps_updating(m, &c, readers, 2);
            readers.cross_cpu(CrossCpu::Unchecked);
            m.with_kvm(|k, ctx| {
                k.set_system_time_skew(Some(1), skew);
                k.update_all(ctx);
            });
            readers.wait(300);
            m.advance(ms(250));
            c.watchdog_tick();
            assert!(!c.kvmclock().unwrap().stable(), "the lie was not caught");
            // A read in flight at the revocation may finish on the old
            // promise; the next tick's clamp covers it (documented).
            readers.wait(50);
            m.advance(ms(250));
            c.watchdog_tick();
            readers.cross_cpu(CrossCpu::Within(0));
            host_keeps_updating(m, &c, readers, 8);
        });
    }
}

#[test]
fn a_lie_below_the_agreement_bound_stays_within_it() {
    // 500 ns apart: too little to revoke the flag; readings across CPUs
    // stay within STABLE_AGREEMENT_NS of each other.
    let (m, c) = kvm2(true);
    race(&c, m, &[0, 1], true, |readers| {
        readers.cross_cpu(CrossCpu::Within(STABLE_AGREEMENT_NS));
        m.with_kvm(|k, ctx| {
            k.set_system_time_skew(Some(1), -500);
            k.update_all(ctx);
        });
        host_keeps_updating(m, &c, readers, 10);
    });
}

#[test]
fn an_unstable_kvmclock_is_clamped_across_cpus_whatever_the_vcpus_say() {
    // No stable bit in CPUID: the flag in the areas is not trusted, and
    // vCPUs 50 us apart in either direction never order readings wrong.
    let (m, c) = kvm2(false);
    race(&c, m, &[0, 1], true, |readers| {
        readers.cross_cpu(CrossCpu::Within(0));
        for skew in [-50_000i64, 50_000, -50_000] {
            m.with_kvm(|k, ctx| {
                k.set_system_time_skew(Some(1), skew);
                k.update_all(ctx);
            });
            host_keeps_updating(m, &c, readers, 3);
        }
    });
}

#[test]
fn a_coarse_clamp_orders_an_unstable_kvmclock_across_cpus_on_its_grid() {
    // Platform::clamp_granule(256 ns): the clamp publishes at most once per
    // granule; readings stay ordered across CPUs and advance on the grid.
    let g = ClampGranule::from_log2(8).unwrap();
    let (m, c) = kvm2_with(false, g);
    race(&c, m, &[0, 1], true, |readers| {
        readers.cross_cpu(CrossCpu::Within(0));
        for skew in [-50_000i64, 50_000] {
            m.with_kvm(|k, ctx| {
                k.set_system_time_skew(Some(1), skew);
                k.update_all(ctx);
            });
            host_keeps_updating(m, &c, readers, 3);
        }
    });
    assert_eq!(c.source_id(), SourceId::Kvmclock);
    // The vCPUs agree again; once this CPU's reading passes what the other
    // (50 us ahead) returned, the clamp follows it in granule steps.
    m.with_kvm(|k, ctx| {
        k.set_system_time_skew(Some(1), 0);
        k.update_all(ctx);
    });
    m.advance(ms(1));
    let before = c.now().as_nanos();
    m.advance(1_000);
    let after = c.now().as_nanos();
    assert_eq!((before % 256, after % 256), (0, 0), "{before} {after}");
    assert!(after > before, "1 us passed: {before} -> {after}");
}

#[test]
fn several_cpus_without_a_warp_test_never_auto_select_the_tsc() {
    // Issue 13: CPU 1's TSC 5 ms ahead and the OS skipped the warp test.
    // The TSC is not selected, and time on CPU 0 does not stand still
    // after a read on CPU 1.
    let mut config = SimMachine::bare_metal().config().clone();
    config = config.with_cpus(2, &[]);
    let m = leak(config.build());
    m.set_tsc_offset(1, ticks(m, ms(5)));
    let (c, _) = clock_with(m, |p| p.tsc_sync(SyncStatus::Unknown));
    assert_ne!(c.source_id(), SourceId::Tsc, "{}", c.report());
    race(&c, m, &[0, 1], true, |readers| {
        readers.cross_cpu(CrossCpu::Within(0));
        for _ in 0..5 {
            readers.wait(100);
            m.advance(ms(100));
            c.watchdog_tick();
        }
    });
    m.on_cpu(1, || c.now());
    let t0 = c.now();
    m.advance(ms(1));
    assert!(c.elapsed(t0).as_nanos() >= ms(1), "CPU 0 stood still");
}

#[test]
fn an_unsynchronised_tsc_the_os_called_synchronised_stays_monotonic_per_cpu() {
    // The OS's warp test was wrong: CPU 1's TSC is 5 ms behind, invisibly
    // (a hypervisor offset, TSC_ADJUST equal). The TSC is then ordered
    // across CPUs by nothing but that wrong promise (the docs say so); on
    // each CPU time still never goes back, and each CPU measures right.
    let mut config = SimMachine::bare_metal().config().clone();
    config = config.with_cpus(2, &[]);
    let m = leak(config.build());
    m.set_tsc_offset(1, -ticks(m, ms(5)));
    let (c, _) = clock_with(m, |p| p.tsc_sync(SyncStatus::Synchronized));
    assert_eq!(c.source_id(), SourceId::Tsc, "{}", c.report());
    // The AP comes up once the clock is older than the offset (earlier:
    // `an_ap_behind_the_boot_cpu_by_more_than_the_clocks_age_never_wraps`).
    m.advance(ms(1_000));
    race(&c, m, &[0, 1], true, |readers| {
        for _ in 0..5 {
            readers.wait(300);
            m.advance(ms(100));
            c.watchdog_tick();
        }
    });
    for cpu in 0..2 {
        m.on_cpu(cpu, || {
            let t0 = c.now();
            m.advance(ms(10));
            let d = c.elapsed(t0).as_nanos();
            assert!(d >= ms(10) && d < ms(11), "cpu {cpu}: {d}");
        });
    }
}

#[test]
fn a_tsc_adjust_mismatch_withdraws_the_tsc_and_readings_are_ordered() {
    // Firmware wrote CPU 1's TSC (TSC_ADJUST differs) and the OS's warp
    // test missed it: the AP's registration finds it and the clock leaves
    // the TSC for a source it can order across CPUs.
    let mut config = SimMachine::bare_metal().config().clone();
    config = config
        .with_cpus(2, &[])
        .with_cpuid(7, 0, regs(0, 1 << 1, 0, 0)); // IA32_TSC_ADJUST exists
    let m = leak(config.build());
    let five_ms = ticks(m, ms(5));
    m.set_tsc_adjust(1, five_ms);
    let (c, _) = clock_with(m, |p| p.tsc_sync(SyncStatus::Synchronized));
    assert_eq!(c.source_id(), SourceId::Tsc, "{}", c.report());
    let r = m.on_cpu(1, || c.register_this_cpu());
    assert_eq!(
        r,
        Err(CpuError::TscAdjust {
            difference: five_ms as u64
        })
    );
    assert_ne!(c.source_id(), SourceId::Tsc, "{}", c.report());
    race(&c, m, &[0, 1], false, |readers| {
        readers.cross_cpu(CrossCpu::Within(0));
        for _ in 0..5 {
            readers.wait(100);
            m.advance(ms(100));
            c.watchdog_tick();
        }
    });
}

/// A Hyper-V guest with two vCPUs, CPU 1's TSC 5 ms behind (one page
/// for every vCPU, so CPU 1 reads 5 ms behind), the OS's warp test saying
/// so before the probe (`early`) or after it.
fn hyperv_out_of_step(early: bool) -> (&'static SimMachine, SimClock) {
    let m = leak(SimMachine::hyperv_config().with_cpus(2, &[]).build());
    m.set_tsc_offset(1, -ticks(m, ms(5)));
    let out_of_step = SyncStatus::Unsynchronized {
        worst_backward_ticks: ticks(m, ms(5)) as u64,
    };
    let (c, _) = clock_with(m, |p| {
        p.tsc_sync(if early {
            out_of_step
        } else {
            SyncStatus::Unknown
        })
    });
    if !early {
        c.set_tsc_sync(out_of_step);
    }
    assert_eq!(c.source_id(), SourceId::HypervPage);
    m.advance(ms(1_000));
    (m, c)
}

/// The page's readings stay ordered across CPUs while the host updates it.
fn page_readings_are_ordered(m: &'static SimMachine, c: &SimClock) {
    race(c, m, &[0, 1], true, |readers| {
        readers.cross_cpu(CrossCpu::Within(0));
        for _ in 0..5 {
            readers.wait(300);
            m.with_hyperv(|h, ctx| h.update_page(ctx));
            m.advance(ms(100));
            c.watchdog_tick();
        }
    });
}

#[test]
fn a_hyperv_page_on_cpus_out_of_step_is_clamped_once_the_os_says_so() {
    // The page's cross-CPU order is a host promise resting on synchronised
    // TSCs: the OS's out-of-step result withdraws it, readings are clamped.
    let (m, c) = hyperv_out_of_step(false);
    page_readings_are_ordered(m, &c);
}

#[test]
fn an_out_of_step_result_given_before_the_probe_withdraws_the_pages_order() {
    let (m, c) = hyperv_out_of_step(true);
    page_readings_are_ordered(m, &c);
}

#[test]
fn an_ap_behind_the_boot_cpu_by_more_than_the_clocks_age_never_wraps() {
    // The clock is built on the boot CPU; an AP 5 ms behind reads 1 ms
    // later. Its reading is before the timeline's 0: it must hold at 0 (or
    // the other CPUs' floor), not wrap.
    let bare = leak(
        SimMachine::bare_metal()
            .config()
            .clone()
            .with_cpus(2, &[])
            .build(),
    );
    bare.set_tsc_offset(1, -ticks(bare, ms(5)));
    let (c, _) = clock_with(bare, |p| p.tsc_sync(SyncStatus::Synchronized));
    assert_eq!(c.source_id(), SourceId::Tsc);
    bare.advance(ms(1));
    let t = bare.on_cpu(1, || c.now().as_nanos());
    assert!(t < ms(10), "TSC: now() on the AP = {t}");
    assert!(c.now().as_nanos() < ms(10), "TSC: now() on the boot CPU");

    let hv = leak(SimMachine::hyperv_config().with_cpus(2, &[]).build());
    hv.set_tsc_offset(1, -ticks(hv, ms(5)));
    let (c, _) = clock_with(hv, |p| p.tsc_sync(SyncStatus::Synchronized));
    assert_eq!(c.source_id(), SourceId::HypervPage);
    hv.advance(ms(1));
    let t = hv.on_cpu(1, || c.now().as_nanos());
    assert!(t < ms(10), "Hyper-V page: now() on the AP = {t}");

    let (kvm, c) = kvm2(false);
    kvm.with_kvm(|k, _| k.set_system_time_skew(Some(1), -(ms(5) as i64)));
    kvm.advance(ms(1));
    kvm.on_cpu(1, || c.register_this_cpu()).unwrap();
    let t = kvm.on_cpu(1, || c.now().as_nanos());
    assert!(t < ms(10), "kvmclock: now() on the AP = {t}");
}

/// Source switches racing readers on four other CPUs, every host promise
/// honest: no CPU may return less than another already returned (a switch
/// published the new timeline before the readers of the old one were done,
/// and a device's base pair could be read torn: 10 ns to 10 ms back).
#[test]
fn switches_racing_readers_keep_the_cross_cpu_order() {
    let orders: [&[SourceId]; 4] = [
        &[SourceId::Tsc],
        &[SourceId::Kvmclock],
        &[SourceId::Hpet],
        &[SourceId::Tsc, SourceId::Hpet],
    ];
    for order in orders {
        let m = leak(SimMachine::kvm_config().with_cpus(5, &[]).build());
        let (c, _) = clock_with(m, |p| p.tsc_sync(SyncStatus::Synchronized));
        race(&c, m, &[1, 2, 3, 4], true, |r| {
            r.cross_cpu(CrossCpu::Within(0));
            let t0 = std::time::Instant::now();
            let mut i = 0;
            while i < 2_000 && t0.elapsed() < std::time::Duration::from_secs(3) {
                c.force(order[i % order.len()]).unwrap();
                i += 1;
                m.advance(20_000);
                r.check();
            }
            r.wait(50);
        });
    }
}
