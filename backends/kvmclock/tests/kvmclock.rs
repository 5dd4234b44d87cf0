//! kvmclock on the simulated machine: stable and unstable hosts, SMP,
//! hostile areas, events, and every probe failure.

use clockhal_core::{ClockSource, Frequency, Policy, ReadCost, Stability};
use clockhal_kvmclock::{read_area, Kvmclock, KvmclockConfig, KvmclockError, PvclockError};
use clockhal_sim::{KvmConfig, SimConfig, SimMachine};
use clockhal_x86::paravirt::RegisterError;
use clockhal_x86::paravirt::{pvclock_tsc_hz_ratio, PvclockVcpuTimeInfo};
use clockhal_x86::Hardware;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::Arc;

const TSC_HZ: u64 = 2_600_000_000;

fn machine(kvm: KvmConfig, cpus: usize, offsets: &[i64]) -> SimMachine {
    SimConfig::cpu(TSC_HZ)
        .with_kvm(kvm)
        .with_cpus(cpus, offsets)
        .build()
}

fn probe(m: &SimMachine) -> Result<Kvmclock<&SimMachine>, KvmclockError> {
    let areas = m.alloc_pvclock_areas(m.cpu_count());
    Kvmclock::probe(m, KvmclockConfig::new(areas), &Policy::new())
}

/// Reads and checks the result against the machine's time around the read.
fn read_checked(clock: &Kvmclock<&SimMachine>, m: &SimMachine, slack: u64) -> u64 {
    let before = m.now_ns();
    let v = clock.read_ns();
    let after = m.now_ns();
    assert!(v + 2 >= before, "{v} is {} ns behind true time", before - v);
    assert!(
        v <= after + slack,
        "{v} is {} ns ahead of true time",
        v - after
    );
    v
}

#[test]
fn stable_host_reads_true_time_without_exits() {
    let m = SimMachine::kvm();
    m.reset_traps();
    let clock = probe(&m).unwrap();
    let t = m.traps();
    assert_eq!(t.msr_writes, 1, "probe registers with one MSR write");
    assert_eq!(t.msr_reads, 0);

    assert!(clock.stable());
    assert_eq!(clock.name(), "kvmclock");
    assert_eq!(
        clock.frequency(),
        Frequency::from_hz(1_000_000_000).unwrap()
    );
    assert_eq!(clock.quality().get(), 400);
    assert_eq!(clock.read_cost(), ReadCost::NoTrap);
    let s = clock.stability();
    assert!(s.contains(
        Stability::MONOTONIC_ACROSS_CPUS | Stability::SURVIVES_MIGRATION | Stability::PER_CPU_SETUP
    ));
    assert!(!s.contains(Stability::TRAPS_EVERY_READ));

    m.reset_traps();
    let mut prev = 0;
    for i in 0..1_000u64 {
        m.advance(i * 997);
        let v = read_checked(&clock, &m, 0);
        assert!(v >= prev);
        prev = v;
    }
    assert_eq!(m.traps().exits(), 0, "no exit per read");
    assert_eq!(
        clock.stats().busy_reads + clock.stats().unregistered_reads,
        0
    );
}

#[test]
fn tsc_frequency_is_exact_from_mul_and_shift() {
    let m = SimMachine::kvm();
    let clock = probe(&m).unwrap();
    let (mul, shift) = clockhal_x86::paravirt::pvclock_time_scale(TSC_HZ).unwrap();
    let (n, d) = pvclock_tsc_hz_ratio(mul, shift).unwrap();
    let f = clock.tsc_frequency().unwrap();
    assert_eq!(f, Frequency::from_ratio(n, d).unwrap());
    // mul is truncated by the host: the implied rate is within 1 ppb above.
    let ppb = f.ppb_from(&Frequency::from_hz(TSC_HZ).unwrap());
    assert!((0..=1).contains(&ppb), "{ppb} ppb");
}

#[test]
fn unstable_hosts_are_clamped_across_cpus() {
    // Flag set but no CPUID permission, and flag off: both untrusted.
    for kvm in [
        KvmConfig {
            stable_bit: false,
            ..KvmConfig::default()
        },
        KvmConfig {
            stable_flag: false,
            ..KvmConfig::default()
        },
    ] {
        let m = machine(kvm, 2, &[0, 0]);
        let clock = probe(&m).unwrap();
        m.on_cpu(1, || clock.register_this_cpu()).unwrap();
        assert!(!clock.stable());
        // CPU 1's host clock runs 50 us behind CPU 0's.
        m.with_kvm(|k, ctx| {
            k.set_system_time_skew(Some(1), -50_000);
            k.update_all(ctx);
        });
        let a = clock.read_ns();
        let b = m.on_cpu(1, || clock.read_ns());
        assert!(b >= a, "cross-CPU step back {a} -> {b}");
    }
}

#[test]
fn four_vcpus_with_different_tsc_offsets() {
    let offsets = [0, 7_000_000_000, -3_000_000_000, 987_654_321];
    let m = machine(KvmConfig::default(), 4, &offsets);
    let clock = probe(&m).unwrap();
    for cpu in 1..4 {
        m.on_cpu(cpu, || clock.register_this_cpu()).unwrap();
    }
    let mut prev = 0;
    for round in 0..200u64 {
        m.advance(round * 1_111);
        let cpu = (round % 4) as usize;
        let v = m.on_cpu(cpu, || read_checked(&clock, &m, 0));
        assert!(v >= prev);
        prev = v;
    }
    // A "stable" host whose vCPUs disagree at one TSC value (offsets no real
    // master clock has) is not believed: reads go through the clamp.
    assert!(!clock.stable());
    assert_eq!(clock.stats().stable_revocations, 1);
}

#[test]
fn unregistered_cpu_reads_are_held_and_counted() {
    let m = machine(KvmConfig::default(), 2, &[0, 1_000]);
    let areas = m.alloc_pvclock_areas(2);
    let clock = Kvmclock::probe(&m, KvmclockConfig::new(areas), &Policy::new()).unwrap();
    let a = clock.read_ns();
    m.advance(1_000_000);
    // CPU 1's area holds leftover bytes from before (never registered):
    // they must not be decoded.
    areas.get()[1].publish(0, u64::MAX / 2, 3_000_000_000, -1, 1);
    let b = m.on_cpu(1, || clock.read_ns());
    assert_eq!(b, a, "held value, never a decode of the leftovers");
    assert_eq!(clock.stats().unregistered_reads, 1);
    // After an unregister, reads on that CPU are held too.
    m.on_cpu(1, || clock.register_this_cpu()).unwrap();
    let c = m.on_cpu(1, || read_checked(&clock, &m, 0));
    m.on_cpu(1, || clock.unregister_this_cpu());
    m.advance(5_000_000);
    let d = m.on_cpu(1, || clock.read_ns());
    assert!(d >= c && d < c + 1_000_000, "held {d} after {c}");
    assert_eq!(clock.stats().unregistered_reads, 2);
}

#[test]
fn more_cpus_than_areas_is_an_error() {
    let m = machine(KvmConfig::default(), 4, &[]);
    let areas = m.alloc_pvclock_areas(2);
    let clock = Kvmclock::probe(&m, KvmclockConfig::new(areas), &Policy::new()).unwrap();
    let e = m.on_cpu(3, || clock.register_this_cpu()).unwrap_err();
    assert_eq!(e, KvmclockError::CpuIndexOutOfRange { cpu: 3, areas: 2 });
    assert_eq!(m.with_kvm(|k, _| k.registered(3)).unwrap(), None);
    // The probing CPU may be the one without an area, too.
    let e = m
        .on_cpu(2, || probe_with(&m, m.alloc_pvclock_areas(2)))
        .unwrap_err();
    assert_eq!(e, KvmclockError::CpuIndexOutOfRange { cpu: 2, areas: 2 });
}

fn probe_with(
    m: &SimMachine,
    areas: clockhal_x86::paravirt::PhysMapped<[PvclockVcpuTimeInfo]>,
) -> Result<Kvmclock<&SimMachine>, KvmclockError> {
    Kvmclock::probe(m, KvmclockConfig::new(areas), &Policy::new())
}

#[test]
fn migration_mid_read_retries_on_the_new_cpu() {
    let m = machine(KvmConfig::default(), 2, &[0, 4_000_000_000]);
    let clock = probe(&m).unwrap();
    m.on_cpu(1, || clock.register_this_cpu()).unwrap();
    let fired = Arc::new(AtomicU32::new(0));
    let f = fired.clone();
    // The first rdtsc of the read happens on CPU 0; the thread then "moves"
    // to CPU 1, whose TSC is 4e9 ticks ahead: using it with CPU 0's area
    // would be 1.5 s off.
    m.set_rdtsc_hook(move |m| {
        if f.fetch_add(1, SeqCst) == 0 {
            m.set_cpu(1);
        }
    });
    let v = read_checked(&clock, &m, 0);
    m.clear_rdtsc_hook();
    m.set_cpu(0);
    assert!(v > 0);
}

#[test]
fn version_storms_retry_then_succeed() {
    let m = SimMachine::kvm();
    let clock = probe(&m).unwrap();
    let left = Arc::new(AtomicU32::new(40));
    let l = left.clone();
    // The host rewrites the area during each of the next 40 reads' windows.
    m.set_rdtsc_hook(move |m| {
        if l.fetch_sub(1, SeqCst) > 0 {
            m.with_kvm(|k, ctx| k.update(ctx, 0));
        }
    });
    let v = read_checked(&clock, &m, 0);
    m.clear_rdtsc_hook();
    assert!(v > 0);
    assert_eq!(clock.stats().busy_reads, 0);
}

#[test]
fn endless_version_storm_is_bounded_and_reported() {
    let m = SimMachine::kvm();
    let clock = probe(&m).unwrap();
    let a = clock.read_ns();
    m.set_rdtsc_hook(|m| {
        m.with_kvm(|k, ctx| k.update(ctx, 0));
    });
    let b = clock.read_ns();
    m.clear_rdtsc_hook();
    assert!(b >= a);
    assert_eq!(clock.stats().busy_reads, 1);
}

#[test]
fn version_stuck_odd_is_bounded_and_keeps_the_last_valid_parameters() {
    let m = SimMachine::kvm();
    let clock = probe(&m).unwrap();
    let a = clock.read_ns();
    m.with_kvm(|k, ctx| k.stall_update(ctx, 0));
    m.advance(5_000_000);
    let rdtscs = m.traps().rdtsc;
    let held: Vec<u64> = (0..3).map(|_| read_checked(&clock, &m, 0)).collect();
    // Bounded: the sample sees the odd version before its rdtsc and gives
    // up after MAX_READ_ATTEMPTS loads; each read issues at most three
    // TSC reads (the fast path's, a retry's, the held value's from the
    // last valid parameters, which still describe the TSC).
    assert!(
        m.traps().rdtsc <= rdtscs + 3 * 3,
        "{}",
        m.traps().rdtsc - rdtscs
    );
    assert!(held[0] >= a + 5_000_000, "{held:?} after {a}");
    assert!(held.windows(2).all(|w| w[1] >= w[0]));
    assert_eq!(clock.stats().busy_reads, 3);
    // The host finishes its update: time resumes, still never backwards.
    m.with_kvm(|k, ctx| k.update(ctx, 0));
    let b = read_checked(&clock, &m, 0);
    assert!(b >= held[2]);
}

#[test]
fn guest_stopped_is_latched_and_acknowledged() {
    let m = SimMachine::kvm();
    let clock = probe(&m).unwrap();
    assert!(!clock.take_guest_stopped());
    m.with_kvm(|k, ctx| {
        k.pause_guest();
        k.update(ctx, 0);
    });
    m.advance(2_000_000_000); // the pause
    let _ = clock.read_ns();
    let area_flags = m
        .with_kvm(|k, ctx| k.area(ctx, 0).unwrap().flags.load(SeqCst))
        .unwrap();
    assert_eq!(
        area_flags & 0b10,
        0,
        "the read cleared GUEST_STOPPED in the area"
    );
    assert!(clock.take_guest_stopped(), "latched until taken");
    assert!(!clock.take_guest_stopped(), "taken once");

    // Also found without a read in between.
    m.with_kvm(|k, ctx| {
        k.pause_guest();
        k.update(ctx, 0);
    });
    assert!(clock.take_guest_stopped());
    assert!(!clock.take_guest_stopped());
}

#[test]
fn read_area_is_read_only_and_reports_flags() {
    let m = SimMachine::kvm();
    let clock = probe(&m).unwrap();
    m.with_kvm(|k, ctx| {
        k.pause_guest();
        k.update(ctx, 0);
    });
    let area = m.with_kvm(|k, ctx| k.area(ctx, 0).unwrap()).unwrap();
    let before = m.now_ns();
    let t = read_area(area, || m.rdtsc_ordered()).unwrap();
    assert!(t.ns + 2 >= before && t.ns <= m.now_ns());
    assert!(t.guest_stopped() && t.tsc_stable_flag());
    assert_eq!(
        area.flags.load(SeqCst) & 0b10,
        0b10,
        "read_area never writes"
    );
    drop(clock);
}

#[test]
fn zero_multiplier_is_rejected_at_probe_and_held_at_run_time() {
    let m = SimMachine::kvm();
    m.with_kvm(|k, _| k.set_scale_override(Some((0, -1))));
    m.reset_traps();
    assert_eq!(probe(&m).unwrap_err(), KvmclockError::NotWritten);
    assert_eq!(m.traps().msr_writes, 2, "registered, then unregistered");
    assert_eq!(m.with_kvm(|k, _| k.registered(0)).unwrap(), None);

    let m = SimMachine::kvm();
    let clock = probe(&m).unwrap();
    let a = clock.read_ns();
    m.with_kvm(|k, ctx| {
        k.set_scale_override(Some((0, -1)));
        k.update(ctx, 0);
    });
    // The implausible update is not used: reads go on with the previous
    // parameters, counted as a rejected update.
    m.advance(1_000_000);
    let b = read_checked(&clock, &m, 0);
    assert!(b >= a + 1_000_000);
    assert_eq!(clock.stats().rejected_updates, 1);
    assert_eq!(clock.tsc_frequency(), None);
}

/// The pvclock decode in plain 128-bit arithmetic, for shifts -63..=32.
fn reference_ns(sys: u64, ts: u64, tsc: u64, mul: u32, shift: i8) -> u64 {
    let d = tsc.saturating_sub(ts) as u128;
    let d = if shift >= 0 {
        d << shift
    } else {
        d >> -(shift as i32)
    };
    (sys as u128 + ((d * mul as u128) >> 32)).min(u64::MAX as u128) as u64
}

#[test]
fn every_shift_is_decoded_correctly_or_rejected() {
    for shift in i8::MIN..=i8::MAX {
        // The multiplier that makes (mul, shift) describe the real TSC, if
        // one fits in 32 bits; otherwise the extreme it saturates to.
        let exact = (1_000_000_000u128 << 32) as f64 / (TSC_HZ as f64 * 2f64.powi(shift as i32));
        let mul = exact.round().clamp(1.0, u32::MAX as f64) as u32;
        let m = SimMachine::kvm();
        m.with_kvm(|k, _| k.set_scale_override(Some((mul, shift))));
        let result = probe(&m);
        if !(-32..=32).contains(&shift) {
            assert_eq!(
                result.unwrap_err(),
                KvmclockError::ShiftOutOfRange(shift),
                "shift {shift}"
            );
            continue;
        }
        let clock = match result {
            Ok(c) => c,
            Err(e) => {
                assert_eq!(e, KvmclockError::FrequencyOutOfRange, "shift {shift}");
                let (n, d) = pvclock_tsc_hz_ratio(mul, shift).unwrap();
                assert!(Frequency::from_ratio(n, d).is_err());
                continue;
            }
        };
        let area = m.with_kvm(|k, ctx| k.area(ctx, 0).unwrap()).unwrap();
        m.advance(1_000_000);
        let tsc = m.tsc_of(0);
        let t = read_area(area, || tsc).unwrap();
        let (sys, ts) = (
            area.system_time.load(SeqCst),
            area.tsc_timestamp.load(SeqCst),
        );
        assert_eq!(
            t.ns,
            reference_ns(sys, ts, tsc, mul, shift),
            "shift {shift}"
        );
        // Where the pair can describe the TSC to 1 ppm, it tells true time.
        if (exact - mul as f64).abs() / exact < 1e-6 {
            let v = clock.read_ns();
            assert!(
                v.abs_diff(m.now_ns()) < 1_000,
                "shift {shift}: {v} vs {}",
                m.now_ns()
            );
        }
        let (n, d) = pvclock_tsc_hz_ratio(mul, shift).unwrap();
        assert_eq!(clock.tsc_frequency(), Frequency::from_ratio(n, d).ok());
    }
}

#[test]
fn read_area_rejects_every_out_of_range_shift() {
    let area = PvclockVcpuTimeInfo::new();
    area.tsc_to_system_mul.store(0x8000_0000, SeqCst);
    for shift in i8::MIN..=i8::MAX {
        area.tsc_shift.store(shift, SeqCst);
        let r = read_area(&area, || u64::MAX);
        if (-32..=32).contains(&shift) {
            assert!(r.is_ok(), "shift {shift}");
        } else {
            assert_eq!(r, Err(PvclockError::ShiftOutOfRange(shift)));
        }
    }
    area.tsc_to_system_mul.store(0, SeqCst);
    assert_eq!(read_area(&area, || 0), Err(PvclockError::NotWritten));
    area.version.store(1, SeqCst);
    assert_eq!(read_area(&area, || 0), Err(PvclockError::Busy));
}

#[test]
fn host_stepping_system_time_backwards_never_steps_reads_back() {
    for stable in [true, false] {
        let m = machine(
            KvmConfig {
                stable_flag: stable,
                ..KvmConfig::default()
            },
            1,
            &[],
        );
        let clock = probe(&m).unwrap();
        m.advance(10_000_000);
        let a = clock.read_ns();
        // The host's clock steps back 1 ms (more than the guard's slack).
        m.with_kvm(|k, ctx| {
            k.set_system_time_skew(None, -1_000_000);
            k.update_all(ctx);
        });
        let mut prev = a;
        for _ in 0..100 {
            m.advance(20_000);
            let v = clock.read_ns();
            assert!(v >= prev, "stable={stable}: {prev} -> {v}");
            prev = v;
        }
        assert!(prev <= a + 2_000_000, "time resumes from the held value");
    }
}

#[test]
fn stable_flag_dropping_mid_run_never_steps_back() {
    let m = machine(KvmConfig::default(), 2, &[0, 0]);
    let clock = probe(&m).unwrap();
    m.on_cpu(1, || clock.register_this_cpu()).unwrap();
    m.advance(1_000_000);
    let a = clock.read_ns();
    // The host loses its stable clock: flag off, CPU 1 now 3 us behind.
    m.with_kvm(|k, ctx| {
        k.set_stable_flag(false);
        k.set_system_time_skew(Some(1), -3_000);
        k.update_all(ctx);
    });
    let b = m.on_cpu(1, || clock.read_ns());
    assert!(b >= a, "{a} -> {b}");
    assert!(!clock.stable());
}

#[test]
fn wall_clock_is_refreshed_on_demand() {
    let m = SimMachine::kvm();
    let wall = m.alloc_wall_clock();
    let areas = m.alloc_pvclock_areas(1);
    let clock = Kvmclock::probe(
        &m,
        KvmclockConfig::new(areas).with_wall_clock(wall),
        &Policy::new(),
    )
    .unwrap();
    m.reset_traps();
    let w = clock.wall_clock().unwrap();
    assert_eq!(
        m.traps().msr_writes,
        1,
        "one wall-clock MSR write per request"
    );
    assert_eq!(w.sec, KvmConfig::default().wall_epoch_sec);
    assert_eq!(w.nsec, 0);
    let now = clock.read_ns();
    assert_eq!(
        w.unix_ns(now),
        KvmConfig::default().wall_epoch_sec as u64 * 1_000_000_000 + now
    );
    // Without a structure there is no wall clock.
    assert_eq!(probe(&m).unwrap().wall_clock(), None);
}

#[test]
fn old_msrs_are_used_without_clocksource2() {
    let m = machine(
        KvmConfig {
            clocksource2: false,
            ..KvmConfig::default()
        },
        1,
        &[],
    );
    let clock = probe(&m).unwrap();
    assert!(m.with_kvm(|k, _| k.registered(0)).unwrap().is_some());
    read_checked(&clock, &m, 0);
}

#[test]
fn kvm_behind_hyperv_enlightenments_is_found_at_0x40000100() {
    let kvm = KvmConfig {
        cpuid_base: 0x4000_0100,
        ..KvmConfig::default()
    };
    let m = SimConfig::cpu(TSC_HZ)
        .with_hyperv(clockhal_sim::HypervConfig::default())
        .with_kvm(kvm)
        .build();
    let clock = probe(&m).unwrap();
    read_checked(&clock, &m, 0);
}

#[test]
fn shutdown_and_drop_unregister_the_calling_cpu() {
    let m = machine(KvmConfig::default(), 2, &[]);
    let clock = probe(&m).unwrap();
    m.on_cpu(1, || clock.register_this_cpu()).unwrap();
    m.on_cpu(1, || clock.unregister_this_cpu());
    assert_eq!(m.with_kvm(|k, _| k.registered(1)).unwrap(), None);
    assert!(m.with_kvm(|k, _| k.registered(0)).unwrap().is_some());
    clock.shutdown();
    assert_eq!(m.with_kvm(|k, _| k.registered(0)).unwrap(), None);

    let clock = probe(&m).unwrap();
    drop(clock);
    assert_eq!(m.with_kvm(|k, _| k.registered(0)).unwrap(), None);
}

#[test]
fn every_probe_failure_returns_its_error() {
    let p = Policy::new();
    // Bare metal: no hypervisor.
    let m = SimMachine::bare_metal();
    assert_eq!(probe(&m).unwrap_err(), KvmclockError::NoHypervisor);
    // A hypervisor that is not KVM (TCG, Hyper-V alone).
    assert_eq!(
        probe(&SimMachine::qemu_tcg()).unwrap_err(),
        KvmclockError::NoKvmSignature
    );
    assert_eq!(
        probe(&SimMachine::hyperv()).unwrap_err(),
        KvmclockError::NoKvmSignature
    );
    // KVM without any clocksource feature.
    let m = machine(
        KvmConfig {
            clocksource: false,
            clocksource2: false,
            ..KvmConfig::default()
        },
        1,
        &[],
    );
    assert_eq!(probe(&m).unwrap_err(), KvmclockError::NoClocksource);
    // No memory.
    let m = SimMachine::kvm();
    assert_eq!(
        probe_with(&m, m.alloc_pvclock_areas(0)).unwrap_err(),
        KvmclockError::NoMemory
    );
    // A stuck area at probe time: the host leaves every update open.
    let m = SimMachine::kvm();
    m.set_rdtsc_hook(|m| {
        m.with_kvm(|k, ctx| k.update(ctx, 0));
    });
    assert_eq!(probe(&m).unwrap_err(), KvmclockError::AreaBusy);
    m.clear_rdtsc_hook();
    assert_eq!(m.with_kvm(|k, _| k.registered(0)).unwrap(), None);
    // Misaligned wall clock.
    let m = SimMachine::kvm();
    let wall = m.alloc_wall_clock();
    let bad = m.misaligned(wall, 2);
    let e = Kvmclock::probe(
        &m,
        KvmclockConfig::new(m.alloc_pvclock_areas(1)).with_wall_clock(bad),
        &p,
    )
    .unwrap_err();
    assert_eq!(e, KvmclockError::WallClockMisaligned);
    // Misaligned areas: nothing is registered.
    let m = SimMachine::kvm();
    let areas = m.misaligned(m.alloc_pvclock_areas(1), 8);
    m.reset_traps();
    assert_eq!(
        probe_with(&m, areas).unwrap_err(),
        KvmclockError::Register(RegisterError::Misaligned)
    );
    assert_eq!(m.traps().msr_writes, 0);
    // Every error has a message.
    for e in [
        KvmclockError::NoHypervisor,
        KvmclockError::NoKvmSignature,
        KvmclockError::NoClocksource,
        KvmclockError::NoMemory,
        KvmclockError::CpuIndexOutOfRange { cpu: 1, areas: 1 },
        KvmclockError::Register(RegisterError::Simulated),
        KvmclockError::IndexTaken {
            cpu: 0,
            holder_apic: 0,
            this_apic: 1,
        },
        KvmclockError::WallClockMisaligned,
        KvmclockError::NotWritten,
        KvmclockError::ShiftOutOfRange(-40),
        KvmclockError::FrequencyOutOfRange,
        KvmclockError::AreaBusy,
    ] {
        assert!(!e.to_string().is_empty());
    }
}

/// A live migration to a host with another TSC rate, the new parameters
/// first read by a vCPU that idled for a second or two: a correct update,
/// judged where the host anchored it, is no host fault and gives the
/// right time (judged at the late read's TSC it looked discontinuous).
#[test]
fn a_migration_update_read_late_is_accepted() {
    for (new_hz, idle_ms) in [(3_600_000_000u64, 1_000u64), (1_600_000_000, 2_000)] {
        let m = SimMachine::kvm();
        let clock = probe(&m).unwrap();
        m.advance(1_000_000_000);
        let _ = clock.read_ns();
        m.set_tsc_hz(new_hz);
        m.with_kvm(|k, ctx| k.update_all(ctx));
        m.advance(idle_ms * 1_000_000);
        let before = m.now_ns();
        let v = clock.read_ns();
        let err = v as i128 - before as i128;
        assert!(
            clock.stats().faults() == 0 && err.unsigned_abs() < 1_000_000,
            "{new_hz} Hz, first read {idle_ms} ms after: off by {err} ns, {:?}",
            clock.stats()
        );
    }
}
