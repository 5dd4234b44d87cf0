//! Run-time fault injection: every kind of answer changes after the
//! machine is built and is put back, and changes made while other threads
//! read are atomic.

use clockhal_sim::{Answer, KvmConfig, SimConfig, SimCosts, SimMachine, PM_TIMER_HZ};
use clockhal_x86::paravirt::{pvclock_scale_delta, PVCLOCK_TSC_STABLE_BIT};
use clockhal_x86::{Hardware, Msr};
use std::sync::atomic::{AtomicBool, Ordering};

#[test]
fn cpuid_leaves_change_at_run_time() {
    let m = SimMachine::qemu_kvm();
    assert_eq!(m.cpuid(0x8000_0007, 0).edx & (1 << 8), 0);
    m.set_cpuid(0x8000_0007, 0, clockhal_sim::regs(0, 0, 0, 1 << 8));
    assert_ne!(m.cpuid(0x8000_0007, 0).edx & (1 << 8), 0);
    m.remove_cpuid(0x8000_0007, 0);
    assert_eq!(m.cpuid(0x8000_0007, 0).edx, 0, "in range, absent: zero");
    // Removing the KVM signature takes the whole range out of range.
    m.remove_cpuid(0x4000_0000, 0);
    assert_eq!(m.cpuid(0x4000_0001, 0), m.cpuid(0x24, 0));
}

#[test]
fn msr_values_and_faults_change_at_run_time() {
    let m = SimMachine::qemu_kvm();
    let system_time = Msr::KVM_SYSTEM_TIME_NEW;
    assert_eq!(m.try_rdmsr(system_time), Some(0));
    m.override_msr(system_time, Some(Answer::Fault));
    assert_eq!(m.try_rdmsr(system_time), None);
    let r = std::panic::catch_unwind(|| m.rdmsr(system_time));
    assert!(r.is_err(), "rdmsr of a faulting MSR is a #GP");
    m.override_msr(system_time, Some(Answer::Value(0xDEAD)));
    assert_eq!(m.rdmsr(system_time), 0xDEAD);
    m.override_msr(system_time, None);
    assert_eq!(m.try_rdmsr(system_time), Some(0));
    // An MSR nobody implements can be made to exist.
    let unknown = Msr::new(0x1234);
    assert_eq!(m.try_rdmsr(unknown), None);
    m.override_msr(unknown, Some(Answer::Value(7)));
    assert_eq!(m.try_rdmsr(unknown), Some(7));
    m.clear_overrides();
    assert_eq!(m.try_rdmsr(unknown), None);
}

#[test]
fn ports_change_at_run_time() {
    let m = SimMachine::qemu_tcg();
    let pm = m.config().pm_timer.as_ref().unwrap().port;
    let a = m.inl(pm);
    m.override_port(pm, Some(Answer::Value(0x0012_3456)));
    assert_eq!(m.inl(pm), 0x0012_3456);
    assert_eq!(m.inl(pm), 0x0012_3456, "stuck");
    m.override_port(pm, Some(Answer::Fault));
    assert_eq!(m.inl(pm), u32::MAX);
    m.override_port(pm, None);
    assert!(m.inl(pm).wrapping_sub(a) & 0xFF_FFFF > 0);
    // 8-bit: the PIT's channel 0 data port.
    m.override_port(0x40, Some(Answer::Value(0x1AB)));
    assert_eq!(m.inb(0x40), 0xAB);
}

#[test]
fn mmio_registers_change_at_run_time() {
    let m = SimMachine::qemu_tcg();
    let region = m.hpet_region().unwrap();
    let counter = region.base() as u64 + 0xF0;
    // Enable the HPET, read it, then freeze the counter register.
    m.mmio_write64(region, 0x10, 1);
    m.override_mmio(counter, Some(Answer::Value(0x1_0000_0002)));
    assert_eq!(m.mmio_read64(region, 0xF0), 0x1_0000_0002);
    assert_eq!(m.mmio_read32(region, 0xF0), 2);
    assert_eq!(m.mmio_read32(region, 0xF4), 1, "high half");
    m.override_mmio(counter, Some(Answer::Fault));
    assert_eq!(m.mmio_read64(region, 0xF0), u64::MAX);
    m.override_mmio(counter, None);
    let a = m.mmio_read64(region, 0xF0);
    m.advance(1_000_000);
    assert!(m.mmio_read64(region, 0xF0) - a >= 100_000);
}

#[test]
fn the_tsc_changes_rate_continuously() {
    let m = SimConfig::cpu(1_000_000_000).build();
    m.advance(1_000_000);
    let before = m.tsc_of(0);
    m.set_tsc_hz(3_000_000_000);
    assert_eq!(m.tsc_of(0), before, "no jump at the change");
    m.advance(1_000);
    assert_eq!(m.tsc_of(0) - before, 3_000);
    assert_eq!(m.tsc_state().hz(), 3_000_000_000);
}

#[test]
fn the_tsc_steps_per_cpu_and_tsc_adjust_follows_guest_writes_only() {
    // Free accesses: time moves only when the test says.
    let mut config = SimMachine::qemu_kvm_config().with_cpus(2, &[]);
    config.costs = SimCosts {
        rdtsc_ns: 0,
        cpuid_ns: 0,
        trap_ns: 0,
    };
    let m = config.build();
    let t = m.tsc_of(1);
    m.step_tsc(Some(1), -5_000);
    assert_eq!(m.tsc_of(1), t - 5_000);
    assert_eq!(m.tsc_of(0), t, "CPU 0 untouched");
    // A hypervisor offset is invisible in TSC_ADJUST ...
    assert_eq!(m.on_cpu(1, || m.rdmsr(Msr::IA32_TSC_ADJUST)), 0);
    // ... a guest write of the TSC is not.
    m.on_cpu(1, || m.write_msr(Msr::new(0x10), t + 1_000_000));
    let adjust = m.on_cpu(1, || m.rdmsr(Msr::IA32_TSC_ADJUST)) as i64;
    assert_eq!(adjust, 1_005_000);
    assert_eq!(m.tsc_of(1), t + 1_000_000);
    m.set_tsc_adjust(1, 0);
    assert_eq!(m.tsc_of(1), t - 5_000);
    m.step_tsc(None, 10);
    m.set_tsc_offset(1, 0);
    assert_eq!(m.tsc_of(0), t + 10);
    assert_eq!(m.tsc_of(1), t);
    // Where CPUID denies TSC_ADJUST the MSR does not exist.
    m.set_cpuid(7, 0, clockhal_sim::regs(0, 0, 0, 0));
    assert_eq!(m.try_rdmsr(Msr::IA32_TSC_ADJUST), None);
}

#[test]
fn rdtscp_faults_where_cpuid_denies_it() {
    let tcg = SimMachine::qemu_tcg();
    let _ = tcg.rdtscp();
    let kvm = SimMachine::qemu_kvm();
    let r = std::panic::catch_unwind(|| kvm.rdtscp());
    assert!(r.is_err(), "kvm_pvm's -cpu host has no RDTSCP");
}

#[test]
fn hpet_width_and_wrap_change_at_run_time() {
    let m = SimMachine::qemu_tcg();
    let region = m.hpet_region().unwrap();
    m.mmio_write64(region, 0x10, 1);
    m.with_hpet(|h, c| {
        h.set_counter_bits(c, 32);
        h.jump(c, 0xFFFF_FF00);
    });
    let a = m.mmio_read64(region, 0xF0);
    m.advance(10_000); // 1,000 ticks at 100 MHz
    let b = m.mmio_read64(region, 0xF0);
    assert!(b < a && b < 1_000, "wrapped at 32 bits: {a:#x} -> {b:#x}");
    // The capabilities still claim 64 bits.
    assert_ne!(m.mmio_read64(region, 0) & (1 << 13), 0);
}

#[test]
fn pm_timer_faults_change_at_run_time() {
    let m = SimMachine::qemu_tcg();
    let port = m.config().pm_timer.as_ref().unwrap().port;
    let ticks = |ns: u64| (ns as u128 * PM_TIMER_HZ as u128 / 1_000_000_000) as u32;
    m.with_pm_timer(|p, c| p.set_stopped(c, true));
    let a = m.inl(port);
    m.advance(1_000_000);
    assert_eq!(m.inl(port), a, "stopped");
    m.with_pm_timer(|p, c| {
        p.set_stopped(c, false);
        p.set_rate_error_ppm(c, 100_000); // 10% fast
    });
    let a = m.inl(port);
    m.advance(10_000_000);
    let d = m.inl(port).wrapping_sub(a) & 0xFF_FFFF;
    assert!(d.abs_diff(ticks(11_000_000)) < 10, "{d}");
    m.with_pm_timer(|p, c| p.jump(c, 0xFF_FFFF)); // one tick back
    m.with_pm_timer(|p, _| p.set_all_ones(true));
    assert_eq!(m.inl(port), u32::MAX);
}

#[test]
fn pvclock_and_hyperv_pages_take_one_hostile_update() {
    let m = SimMachine::qemu_kvm();
    let areas = m.alloc_pvclock_areas(2);
    m.write_msr(Msr::KVM_SYSTEM_TIME_NEW, areas.phys() | 1);
    let area = &areas.get()[0];
    let truth = m.with_kvm(|k, c| k.next_update(c, 0)).unwrap();
    assert_eq!(truth.flags, PVCLOCK_TSC_STABLE_BIT);
    let garbage = clockhal_sim::PvclockUpdate {
        mul: u32::MAX,
        shift: 32,
        ..truth
    };
    m.with_kvm(|k, c| k.publish(c, 0, garbage));
    assert_eq!(area.tsc_to_system_mul.load(Ordering::SeqCst), u32::MAX);
    assert_eq!(area.version.load(Ordering::SeqCst) % 2, 0);
    m.with_kvm(|k, c| k.update(c, 0));
    let ns = pvclock_scale_delta(
        m.tsc_of(0) - area.tsc_timestamp.load(Ordering::SeqCst),
        area.tsc_to_system_mul.load(Ordering::SeqCst),
        area.tsc_shift.load(Ordering::SeqCst),
    );
    assert!(ns < 1_000, "the truth again");
    // Stale bytes in the area nobody registered: the host never touches it.
    garbage.write_to(&areas.get()[1]);
    m.with_kvm(|k, c| k.update_all(c));
    assert_eq!(
        areas.get()[1].tsc_to_system_mul.load(Ordering::SeqCst),
        u32::MAX
    );

    let hv = SimMachine::hyperv();
    let page = hv.alloc_hv_page();
    hv.write_msr(Msr::HV_REFERENCE_TSC, page.phys() | 1);
    let seq = page.get().sequence.load(Ordering::SeqCst);
    hv.with_hyperv(|h, c| h.publish(c, 1 << 63, 1 << 62));
    assert_eq!(page.get().offset.load(Ordering::SeqCst), 1 << 62);
    assert_ne!(page.get().sequence.load(Ordering::SeqCst), seq);
    hv.with_hyperv(|h, c| h.invalidate_page(c));
    assert_eq!(page.get().sequence.load(Ordering::SeqCst), 0);
}

#[test]
fn kvm_host_follows_a_tsc_rate_change_at_its_next_update() {
    let m = SimConfig::cpu(2_000_000_000)
        .with_kvm(KvmConfig::default())
        .build();
    let areas = m.alloc_pvclock_areas(1);
    m.write_msr(Msr::KVM_SYSTEM_TIME_NEW, areas.phys() | 1);
    let a = &areas.get()[0];
    let ns_per_million_ticks = || {
        pvclock_scale_delta(
            1_000_000,
            a.tsc_to_system_mul.load(Ordering::SeqCst),
            a.tsc_shift.load(Ordering::SeqCst),
        )
    };
    assert!(ns_per_million_ticks().abs_diff(500_000) <= 1);
    m.set_tsc_hz(2_500_000_000);
    assert!(
        ns_per_million_ticks().abs_diff(500_000) <= 1,
        "not before the update"
    );
    m.with_kvm(|k, c| k.update(c, 0));
    assert!(ns_per_million_ticks().abs_diff(400_000) <= 1);
}

#[test]
fn changes_are_atomic_while_other_threads_read() {
    // Readers on two CPUs see either the device or the override, never
    // anything else, while a third thread flips MSR, port, MMIO and CPUID
    // answers; nothing deadlocks.
    let m = SimMachine::qemu_kvm_config().with_cpus(2, &[]).build();
    let region = m.hpet_region().unwrap();
    let counter = region.base() as u64 + 0xF0;
    let port = m.config().pm_timer.as_ref().unwrap().port;
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for cpu in 0..2 {
            let (m, stop) = (&m, &stop);
            s.spawn(move || {
                m.set_cpu(cpu);
                let mut seen = [false; 2];
                while !stop.load(Ordering::Relaxed) {
                    let msr = m.try_rdmsr(Msr::KVM_SYSTEM_TIME_NEW);
                    assert!(matches!(msr, Some(0) | Some(0xAB) | None), "{msr:?}");
                    let v = m.inl(port);
                    assert!(v == 77 || v <= 0xFF_FFFF, "{v:#x}");
                    let c = m.mmio_read64(region, 0xF0);
                    assert!(c == 5 || c < 1 << 40, "{c:#x}");
                    let inv = m.cpuid(0x8000_0007, 0).edx;
                    assert!(inv == 0 || inv == 1 << 8, "{inv:#x}");
                    seen[(msr == Some(0xAB)) as usize] = true;
                }
                seen
            });
        }
        for i in 0..2_000u64 {
            let on = i % 2 == 0;
            m.override_msr(
                Msr::KVM_SYSTEM_TIME_NEW,
                match i % 3 {
                    0 => Some(Answer::Value(0xAB)),
                    1 => Some(Answer::Fault),
                    _ => None,
                },
            );
            m.override_port(port, on.then_some(Answer::Value(77)));
            m.override_mmio(counter, on.then_some(Answer::Value(5)));
            m.set_cpuid(
                0x8000_0007,
                0,
                clockhal_sim::regs(0, 0, 0, if on { 1 << 8 } else { 0 }),
            );
            m.step_tsc(Some(1), if on { 1 } else { -1 });
        }
        stop.store(true, Ordering::Relaxed);
    });
}

/// A simulated MMIO region at the very top of the address space: an
/// access whose address would wrap reads as all ones (it panicked).
#[test]
fn an_mmio_access_that_would_wrap_reads_all_ones() {
    use clockhal_x86::{Hardware, MmioRegion};
    let m = SimMachine::kvm();
    let r = MmioRegion::simulated(usize::MAX - 7, 16);
    assert_eq!(m.mmio_read64(r, 8), u64::MAX);
}
