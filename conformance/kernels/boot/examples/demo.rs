//! Demo kernel for clockhal-boot: prints the boot info, starts the other CPUs,
//! runs a job on each, meets CPU 1 at a rendezvous, probes an absent MSR and
//! exits QEMU with success (status 33).
//!
//! Build: `cargo build --release --target x86_64-unknown-none --example demo`
//! (see README.md for the QEMU command lines). Failure paths, chosen with
//! `-append`: `fault` (page fault on CPU 0), `fault-ap` (page fault on CPU 1),
//! `panic` (panic on CPU 0), `panic-ap` (panic on CPU 1); all must end with
//! status 35.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicUsize, Ordering};

use clockhal_boot::{println, smp, BootInfo};

clockhal_boot::entry!(kmain);

/// An MSR in KVM's paravirtual range that KVM does not implement: #GP under
/// KVM, reads as 0 under TCG.
const ABSENT_MSR: u32 = 0x4b56_4dff;
/// First address the identity map does not cover.
const UNMAPPED: u64 = 1 << 32;

/// Rendezvous counter for the two-CPU check.
static ARRIVED: AtomicUsize = AtomicUsize::new(0);

fn rdtsc() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: RDTSC has no side effects.
    unsafe { core::arch::asm!("rdtsc", out("eax") lo, out("edx") hi, options(nomem, nostack)) };
    (u64::from(hi) << 32) | u64::from(lo)
}

fn hello(arg: usize) {
    let cpu = smp::current_cpu();
    println!(
        "demo: hello from cpu {cpu} (APIC ID {:?}), arg={arg:#x}",
        smp::apic_id(cpu)
    );
}

/// Both CPUs meet here: each bumps the counter and waits (bounded) for the other.
fn rendezvous(_: usize) {
    ARRIVED.fetch_add(1, Ordering::AcqRel);
    let mut spins = 0u64;
    while ARRIVED.load(Ordering::Acquire) < 2 && spins < 1_000_000_000 {
        spins += 1;
        core::hint::spin_loop();
    }
}

fn probe_on_ap(_: usize) {
    let cpu = smp::current_cpu();
    println!(
        "demo: cpu {cpu} try_rdmsr({ABSENT_MSR:#x}) = {:x?}",
        clockhal_boot::try_rdmsr(ABSENT_MSR)
    );
}

fn fault(_: usize) {
    // SAFETY: deliberately touches unmapped memory to exercise the #PF report.
    let value = unsafe { core::ptr::read_volatile(UNMAPPED as *const u64) };
    println!("demo: read {value:#x} from an unmapped address?!");
}

fn panic_now(_: usize) {
    panic!("requested by the command line");
}

fn kmain(info: &BootInfo) -> ! {
    println!("demo: booted, cpu {}", smp::current_cpu());
    println!(
        "demo: start_info={:#x} valid={} version={} rsdp={:x?} ({:?})",
        info.start_info_paddr, info.start_info_valid, info.start_info_version, info.rsdp_paddr, info.rsdp_source
    );
    println!("demo: cmdline={:?}", info.cmdline);
    for region in info.memory_map {
        println!(
            "demo:   memory {:#012x}..{:#012x} type {}",
            region.base,
            region.base + region.size,
            region.kind
        );
    }
    let wants = |word: &str| info.cmdline.split_ascii_whitespace().any(|w| w == word);

    let mut failures = 0;

    let t0 = rdtsc();
    let cpus = smp::start_aps();
    let t1 = rdtsc();
    println!("demo: cpu_count={cpus} (start_aps took {} TSC cycles)", t1 - t0);

    let t0 = rdtsc();
    let mut sum = 0;
    for _ in 0..1000 {
        sum += core::hint::black_box(smp::current_cpu());
    }
    let t1 = rdtsc();
    println!("demo: 1000 x current_cpu() = {} TSC cycles (sum {sum})", t1 - t0);

    for cpu in 0..cpus {
        if let Err(e) = smp::run_on(cpu, hello, 0xC10C_0000 + cpu) {
            println!("demo: run_on({cpu}) FAILED: {e}");
            failures += 1;
        }
    }
    if cpus > 1 {
        match smp::post(1, rendezvous, 0) {
            Ok(pending) => {
                rendezvous(0);
                match pending.wait() {
                    Ok(()) if ARRIVED.load(Ordering::Acquire) == 2 => println!("demo: rendezvous with cpu 1 ok"),
                    other => {
                        println!("demo: rendezvous FAILED: {other:?}");
                        failures += 1;
                    }
                }
            }
            Err(e) => {
                println!("demo: post(1) FAILED: {e}");
                failures += 1;
            }
        }
        if !matches!(smp::post(0, hello, 0), Err(smp::SmpError::CurrentCpu)) {
            println!("demo: post to self should be refused");
            failures += 1;
        }
        if !matches!(smp::post(cpus, hello, 0), Err(smp::SmpError::NoSuchCpu)) {
            println!("demo: post to a missing CPU should be refused");
            failures += 1;
        }
    }

    let absent = clockhal_boot::try_rdmsr(ABSENT_MSR);
    println!("demo: try_rdmsr({ABSENT_MSR:#x}) = {absent:x?}");
    // SAFETY: writing an absent MSR either faults (recovered) or is ignored.
    let wrote = unsafe { clockhal_boot::try_wrmsr(ABSENT_MSR, 1) };
    println!("demo: try_wrmsr({ABSENT_MSR:#x}, 1) = {wrote}");
    println!(
        "demo: try_rdmsr(IA32_TSC_AUX) = {:x?}",
        clockhal_boot::try_rdmsr(0xC000_0103)
    );
    let efer = clockhal_boot::try_rdmsr(0xC000_0080);
    println!("demo: try_rdmsr(IA32_EFER) = {efer:x?}");
    if efer.is_none_or(|v| v & 0x500 != 0x500) {
        println!("demo: EFER should read with LME|LMA set");
        failures += 1;
    }
    if cpus > 1 {
        smp::run_on(1, probe_on_ap, 0).ok();
    }

    let on_ap = |f: fn(usize)| {
        if cpus > 1 {
            let _ = smp::run_on(1, f, 0);
        } else {
            println!("demo: no CPU 1 to run that on");
        }
    };
    if wants("fault") {
        fault(0);
    }
    if wants("fault-ap") {
        on_ap(fault);
    }
    if wants("panic") {
        panic_now(0);
    }
    if wants("panic-ap") {
        on_ap(panic_now);
    }

    if failures == 0 {
        println!("demo: PASS");
        clockhal_boot::exit_qemu(clockhal_boot::EXIT_SUCCESS)
    } else {
        println!("demo: FAIL ({failures})");
        clockhal_boot::exit_qemu(clockhal_boot::EXIT_FAILURE)
    }
}
