//! clockhal's conformance kernel.
//!
//! Boots under QEMU (PVH, via clockhal-boot), starts the other vCPUs, runs
//! the TSC warp test, probes every clockhal backend through the facade
//! (kvmclock registered on every vCPU), runs the conformance suite on every
//! constructed source, runs its timer checks on the boot CPU's interrupts
//! ([`timers`]: TSC-deadline, LAPIC one-shot, HPET comparator), samples
//! the clock across the runner's QMP
//! `stop`/`cont` where it plans one ([`pause`]), reads the user clock page from ring 3 while switching
//! sources ([`userpage`]), and prints the result lines that `clockhal-matrix`
//! parses (format: `clockhal_conformance::line`). Exits through
//! isa-debug-exit: success only when no check failed.
#![no_std]
#![no_main]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod cpuid_dump;
mod cpus;
mod pause;
mod table;
mod timers;
mod userpage;
mod userprog;

use clockhal::x86::paravirt::{PhysMapped, PvclockVcpuTimeInfo, StealTimePage};
use clockhal::x86::{Hardware, MmioRegion, OffsetMapping};
use clockhal::{Platform, Policy};
use clockhal_boot::{println, smp, BootInfo};
use clockhal_conformance::probed::{write_sources, ProbedSources, SOURCE_IDS};
use clockhal_conformance::{line, Check, CheckResult, Config, Suite, Summary, Value};

clockhal_boot::entry!(kmain);

/// One pvclock area per possible vCPU, 32-byte elements in one page.
#[repr(C, align(4096))]
struct PvclockPage([PvclockVcpuTimeInfo; smp::MAX_CPUS]);

static PVCLOCK: PvclockPage = PvclockPage([const { PvclockVcpuTimeInfo::new() }; smp::MAX_CPUS]);

/// One KVM steal-time area per vCPU (64 per page), and the guest's
/// per-CPU steal-time state.
static STEAL: StealTimePage = StealTimePage::new();
static STEAL_STATE: clockhal::kvmclock::StealState = clockhal::kvmclock::StealState::new();

/// The low 4 GiB are identity mapped by clockhal-boot.
const IDENTITY_LIMIT: u64 = 1 << 32;
/// 3..4 GiB are mapped uncached (device registers).
const UNCACHED_BASE: u64 = 3 << 30;

fn kmain(info: &'static BootInfo) -> ! {
    println!(
        "kernel: clockhal conformance kernel, rsdp {:x?}",
        info.rsdp_paddr
    );
    let cpus = smp::start_aps();
    println!("kernel: {cpus} CPU(s)");

    // SAFETY: we run at CPL0 on a clockhal-boot kernel (IDT with MSR-probe
    // recovery, GS-based CPU index), and clockhal may use the clock hardware.
    let hw = unsafe { clockhal_boot::BootHw::new() };
    cpuid_dump::print(&hw);
    let sync = cpus::tsc_warp_test(hw, cpus);
    println!("kernel: TSC sync status {sync:?}");

    // SAFETY: the kernel is identity mapped (phys = virt) and PVCLOCK, one
    // page-aligned static, is physically contiguous and reserved for the
    // hypervisor's writes for the life of the kernel.
    let areas = unsafe { PhysMapped::new(&PVCLOCK.0[..], PVCLOCK.0.as_ptr() as u64) };
    // SAFETY: as for PVCLOCK: identity mapped, one page-aligned static
    // reserved for the hypervisor's writes for the life of the kernel.
    let steal = unsafe { PhysMapped::new(&STEAL, &STEAL as *const StealTimePage as u64) };
    // SAFETY: clockhal-boot identity maps the low 4 GiB; ACPI tables are
    // plain memory there.
    let phys = unsafe { OffsetMapping::new(0, IDENTITY_LIMIT) };
    // The HPET's window, kept for its comparator (the timer checks).
    let hpet_region = core::cell::Cell::new(None);
    let mut map_hpet = |base: u64, len: usize| {
        let end = base.checked_add(len as u64)?;
        if base < UNCACHED_BASE || end > IDENTITY_LIMIT {
            return None;
        }
        // SAFETY: base..end lies in clockhal-boot's uncached identity map,
        // and ACPI says the HPET's registers are there.
        let region = unsafe { MmioRegion::new(base as usize, len) };
        hpet_region.set(region);
        region
    };
    let mut platform = Platform::new()
        .hpet_mapper(&mut map_hpet)
        .pvclock_areas(areas)
        .steal_time(steal, &STEAL_STATE)
        .tsc_sync(sync)
        .cpus(cpus)
        .policy(Policy::new());
    if let Some(rsdp) = info.rsdp_paddr {
        platform = platform.acpi(rsdp, &phys);
    }
    // The stack clockhal needs beyond this frame (which holds the values).
    let stack_before = clockhal_boot::boot_stack_high_water();
    let probed = clockhal::probe(hw, platform);
    let report = *probed.report();
    println!("kernel: choice: {report:#}");
    println!("{}", report.table());
    let clock = match probed.into_clock() {
        Ok(clock) => Some(clock),
        Err(e) => {
            println!("kernel: no clock: {e}");
            None
        }
    };

    if let Some(clock) = &clock {
        for cpu in 1..cpus {
            // Each vCPU registers itself (its kvmclock area; the suite reads
            // every source on every CPU in the cross-CPU check).
            let register = || match clock.register_this_cpu() {
                Ok(()) => println!("kernel: clock registered on cpu {}", smp::current_cpu()),
                Err(e) => println!(
                    "kernel: clock registration FAILED on cpu {}: {e}",
                    smp::current_cpu()
                ),
            };
            if let Err(e) = cpus::run_on(cpu, &register) {
                println!("kernel: cannot run on cpu {cpu}: {e:?}");
            }
        }
    }
    // The first seconds of a kernel's life: the watchdog ticks (refining a
    // loosely calibrated TSC rate, switching to it), as an OS's timer would.
    // The SOURCE lines then report the clock's live verdicts.
    let report = match &clock {
        Some(clock) => settle(clock),
        None => report,
    };
    let report = &report;
    println!(
        "kernel: boot stack high-water {stack_before} bytes before probe, {} after probe and into_clock (of {})",
        clockhal_boot::boot_stack_high_water(),
        clockhal_boot::BOOT_STACK_SIZE
    );

    // Every constructed backend is checked.
    let sources = ProbedSources::new(clock.as_ref());
    let reference = sources.reference();
    let selected = sources.selected();

    let Some(reference) = reference else {
        // Nothing to check (e.g. TCG microvm: no HPET, no PM timer, and no
        // way to rate the TSC). No check failed; the runner's expectation
        // table says whether this is acceptable here.
        println!("kernel: no clock source was constructed");
        let _ = line::write_header(&mut clockhal_boot::serial::lock(), cpus, "none");
        let _ = write_sources(&mut clockhal_boot::serial::lock(), report);
        let _ = line::write_summary(&mut clockhal_boot::serial::lock(), &Summary::default());
        clockhal_boot::exit_qemu(clockhal_boot::EXIT_SUCCESS);
    };
    let _ = line::write_header(&mut clockhal_boot::serial::lock(), cpus, reference.name());

    let cycles = || hw.rdtsc_ordered();
    let mut costs: [Option<u64>; 6] = [None; 6];
    let suite = Suite::new(sources.as_slice(), reference, &cycles)
        .config(Config::default())
        .cpus(&cpus::BootCpus)
        .selected(selected);
    // The runner's QMP stop/cont, where its command line plans one.
    let host = pause::SerialHost::from_cmdline(info.cmdline);
    let mut sink = |r: &CheckResult<'_>| {
        if r.check == Check::ReadCost {
            if let (Some(i), Value::U64(c)) = (
                SOURCE_IDS
                    .iter()
                    .position(|id| id.default_name() == r.source),
                r.value,
            ) {
                costs[i] = Some(c);
            }
        }
        let _ = line::write_check(&mut clockhal_boot::serial::lock(), r);
    };
    let mut summary = match &clock {
        // Steal time on the boot CPU, judged against the reference; timer
        // deadlines through interrupts on the boot CPU; the clock sampled
        // across a host pause.
        Some(clock) => {
            let tsc = sources
                .as_slice()
                .iter()
                .find(|s| s.name() == "tsc")
                .map(|s| s.frequency());
            let devices =
                timers::Devices::probe(hw, clock, info.rsdp_paddr, tsc, hpet_region.get());
            timers::with_timers(clock, &devices, |t| {
                suite
                    .steal(clock)
                    .timers(t)
                    .pause(clock, &host)
                    .run(&mut sink)
            })
        }
        None => suite.run(&mut sink),
    };

    // What the host wrote into the boot CPU's steal-time area (version 0:
    // it never wrote it).
    let st = &STEAL.areas[0];
    println!(
        "kernel: steal-time area 0: version {}, host counter {} ns, refused {:?}",
        st.version.load(core::sync::atomic::Ordering::Relaxed),
        st.steal.load(core::sync::atomic::Ordering::Relaxed),
        clock.as_ref().map(|c| c.steal_time().map(|s| s.stats()))
    );

    // The user clock page, read in ring 3 while the kernel switches sources.
    let pvclock_phys = PVCLOCK.0.as_ptr() as u64;
    for status in userpage::run(hw, clock.as_ref(), report, &PVCLOCK.0, pvclock_phys)
        .into_iter()
        .flatten()
    {
        summary.add(status);
    }

    let _ = write_sources(&mut clockhal_boot::serial::lock(), report);
    let _ = table::write(&mut clockhal_boot::serial::lock(), report, &costs);
    let _ = line::write_summary(&mut clockhal_boot::serial::lock(), &summary);
    clockhal_boot::exit_qemu(if summary.ok() {
        clockhal_boot::EXIT_SUCCESS
    } else {
        clockhal_boot::EXIT_FAILURE
    })
}

/// Watchdog ticks every 250 ms for 2.5 s of clock time; prints what they
/// did beyond a plain judgement, and returns the live report.
fn settle(clock: &clockhal::Clock<clockhal_boot::BootHw>) -> clockhal::Report {
    const TICKS: u32 = 10;
    for i in 1..=TICKS {
        if let Err(e) = clock.spin_for(clockhal::Duration::from_millis(250)) {
            println!("kernel: watchdog tick {i}: {e}");
        }
        match clock.watchdog_tick() {
            clockhal::WatchdogEvent::Judged { .. } => {}
            e => println!("kernel: watchdog tick {i}: {e:?}"),
        }
    }
    let report = clock.report();
    println!(
        "kernel: after {TICKS} watchdog ticks: {} selected; choice: {report:#}",
        clock.source_name()
    );
    report
}
