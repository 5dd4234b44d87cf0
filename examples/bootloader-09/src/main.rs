//! clockhal in a blog_os kernel as its second edition leaves it (post 12):
//! rust-osdev's `bootloader` 0.9 built into a BIOS disk image by
//! `bootimage`, the 8259 PICs and the PIT timer interrupt.
//!
//! 1. [`interrupts`]: IDT, PICs, PIT channel 0 at 100 Hz (still masked
//!    by `cli`);
//! 2. [`clock_setup`]: `clockhal::boot` turns the `BootInfo` into a
//!    `Platform` (bootloader 0.9 passes no RSDP: clockhal finds it in the
//!    BIOS area), the kernel adds an HPET mapper ([`memory`]) and memory
//!    for kvmclock, probes, prints the report;
//! 3. interrupts on: the timer interrupt ticks the clock's watchdog every
//!    250 ms; after ten ticks (2.5 s, as clockhal's own kernel settles) the
//!    live report is printed and the conformance suite runs over every
//!    source found, with the timer still ticking, in the result-line format
//!    clockhal's QEMU matrix parses; QEMU exits with 33 when no check
//!    failed, 35 otherwise.
#![no_std]
#![no_main]
#![feature(abi_x86_interrupt)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod clock_setup;
// The bootloader_api example's COM1 console, panic handler and QEMU exit:
// nothing in it depends on the loader.
#[path = "../../bootloader-api/kernel/src/console.rs"]
mod console;
mod interrupts;
mod memory;

use bootloader::BootInfo;
use clockhal::x86::{Hardware, Native};
use clockhal::{Clock, Duration};
use clockhal_conformance::probed::{write_sources, ProbedSources};
use clockhal_conformance::{line, CheckResult, Config, Suite, Summary};
use console::{exit_qemu, Console, EXIT_FAILURE, EXIT_SUCCESS};
use core::fmt::Write;
use spin::Once;

/// The loader's entry point (`_start`), calling [`kernel_main`].
mod entry {
    // bootloader 0.9's macro leaves the function it generates undocumented.
    #![allow(missing_docs)]
    bootloader::entry_point!(super::kernel_main);
}

/// The clock, for the timer interrupt and the main code.
static CLOCK: Once<Clock<Native>> = Once::new();

/// Watchdog ticks before the suite runs (2.5 s at one tick per 250 ms).
const SETTLE_TICKS: u32 = 10;

fn kernel_main(boot_info: &'static BootInfo) -> ! {
    let mut out = Console::init();
    let _ = writeln!(
        out,
        "kernel: bootloader 0.9, physical memory at {:#x}, {} memory-map regions",
        boot_info.physical_memory_offset,
        boot_info.memory_map.iter().count()
    );
    interrupts::init();
    // SAFETY: the loader's boot info (feature map_physical_memory); the
    // usable regions are free; the only `Memory`.
    let mut memory = unsafe { memory::Memory::new(boot_info) };
    // SAFETY: we run at CPL0 and own the clock hardware.
    let hw = unsafe { Native::new() };
    let (report, clock) = clock_setup::probe(hw, boot_info, &mut memory, &mut out);

    let Some(clock) = clock else {
        let _ = writeln!(out, "kernel: no clock source was constructed");
        let _ = line::write_header(&mut out, 1, "none");
        let _ = write_sources(&mut out, &report);
        let _ = line::write_summary(&mut out, &Summary::default());
        exit_qemu(EXIT_SUCCESS)
    };
    let clock = CLOCK.call_once(|| clock);
    interrupts::tick(clock);
    let report = settle(clock, &mut out);

    let sources = ProbedSources::new(Some(clock));
    let Some(reference) = sources.reference() else {
        let _ = writeln!(out, "kernel: no reference source");
        exit_qemu(EXIT_FAILURE)
    };
    let _ = line::write_header(&mut out, 1, reference.name());
    let cycles = || hw.rdtsc_ordered();
    let summary = Suite::new(sources.as_slice(), reference, &cycles)
        .config(Config::default())
        .selected(sources.selected())
        .run(&mut |r: &CheckResult<'_>| {
            let _ = line::write_check(&mut out, r);
        });
    let (judged, busy, other) = interrupts::watchdog_ticks();
    let _ = writeln!(
        out,
        "kernel: {} timer interrupts; watchdog ticks: {judged} judged, {busy} busy, {other} other",
        interrupts::irqs()
    );
    let _ = write_sources(&mut out, &report);
    let _ = line::write_summary(&mut out, &summary);
    exit_qemu(if summary.ok() {
        EXIT_SUCCESS
    } else {
        EXIT_FAILURE
    })
}

/// Waits (`hlt`) for [`SETTLE_TICKS`] watchdog ticks from the timer
/// interrupt, at most 10 s of clock time, and returns the live report.
fn settle(clock: &Clock<Native>, out: &mut Console) -> clockhal::Report {
    let deadline = clock.now() + Duration::from_secs(10);
    loop {
        let (judged, busy, other) = interrupts::watchdog_ticks();
        if judged + busy + other >= SETTLE_TICKS {
            break;
        }
        if clock.now() > deadline {
            let _ = writeln!(
                out,
                "kernel: FAILED: {} watchdog ticks in 10 s ({} timer interrupts)",
                judged + busy + other,
                interrupts::irqs()
            );
            exit_qemu(EXIT_FAILURE)
        }
        x86_64::instructions::hlt();
    }
    let report = clock.report();
    let _ = writeln!(
        out,
        "kernel: after {SETTLE_TICKS} watchdog ticks from the timer interrupt ({} Hz, every {}th): {} selected, uptime {} ms; choice: {report:#}",
        interrupts::TIMER_HZ,
        interrupts::IRQS_PER_WATCHDOG_TICK,
        clock.source_name(),
        clock.now().as_nanos() / 1_000_000
    );
    report
}
