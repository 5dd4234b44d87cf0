//! clockhal in a blog_os-style kernel on rust-osdev's `bootloader_api` 0.11.
//!
//! The bootloader (BIOS or UEFI) maps all physical memory at an offset and
//! hands over a `BootInfo` with that offset and the ACPI RSDP. That is all
//! clockhal needs from it:
//!
//! 1. [`memory`]: an `OffsetPageTable` (translation, and an uncached
//!    mapping for the HPET: the offset mapping is write-back);
//! 2. [`clock_setup`]: `Platform` (RSDP + physical memory reader, HPET
//!    mapper, kvmclock and Hyper-V memory) -> `clockhal::probe` -> report;
//! 3. the conformance suite over every source found, printed in the
//!    result-line format clockhal's QEMU matrix parses; QEMU exits with 33
//!    when no check failed, 35 otherwise.
#![no_std]
#![no_main]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod clock_setup;
mod console;
mod memory;

use bootloader_api::config::{BootloaderConfig, Mapping};
use bootloader_api::{entry_point, BootInfo};
use clockhal::x86::{Hardware, Native};
use clockhal_conformance::probed::{write_sources, ProbedSources};
use clockhal_conformance::{line, CheckResult, Config, Suite, Summary};
use console::{exit_qemu, Console, EXIT_FAILURE, EXIT_SUCCESS};
use core::fmt::Write;

/// Ask the bootloader to map all physical memory (it picks the offset).
static BOOTLOADER_CONFIG: BootloaderConfig = {
    let mut config = BootloaderConfig::new_default();
    config.mappings.physical_memory = Some(Mapping::Dynamic);
    // probe + into_clock + the suite need more than the default 80 KiB.
    config.kernel_stack_size = 256 * 1024;
    config
};

entry_point!(kernel_main, config = &BOOTLOADER_CONFIG);

/// The physical memory mapping covers at least the low 4 GiB (MMIO
/// included), more when RAM goes higher.
const MIN_PHYS_MAPPED: u64 = 1 << 32;

fn kernel_main(boot_info: &'static mut BootInfo) -> ! {
    let mut out = Console::init();
    let Some(phys_offset) = boot_info.physical_memory_offset.into_option() else {
        let _ = writeln!(out, "kernel: no physical memory mapping in BootInfo");
        exit_qemu(EXIT_FAILURE)
    };
    let rsdp = boot_info.rsdp_addr.into_option();
    let phys_end = boot_info
        .memory_regions
        .iter()
        .map(|r| r.end)
        .max()
        .unwrap_or(0)
        .max(MIN_PHYS_MAPPED);
    let _ = writeln!(
        out,
        "kernel: bootloader_api {}.{}.{}, physical memory at {phys_offset:#x}, RSDP {rsdp:x?}",
        boot_info.api_version.version_major(),
        boot_info.api_version.version_minor(),
        boot_info.api_version.version_patch(),
    );

    // SAFETY: the bootloader mapped all physical memory at `phys_offset`
    // (requested in BOOTLOADER_CONFIG), usable regions are free, and this is
    // the only `Memory`.
    let mut memory = unsafe { memory::Memory::new(phys_offset, &boot_info.memory_regions) };
    // SAFETY: we run at CPL0 and own the clock hardware.
    let hw = unsafe { Native::new() };
    let inputs = clock_setup::Inputs {
        rsdp,
        memory: &mut memory,
        phys_end,
    };
    let (report, clock) = clock_setup::probe(hw, inputs, &mut out);

    let sources = ProbedSources::new(clock.as_ref());
    let Some(reference) = sources.reference() else {
        let _ = writeln!(out, "kernel: no clock source was constructed");
        let _ = line::write_header(&mut out, 1, "none");
        let _ = write_sources(&mut out, &report);
        let _ = line::write_summary(&mut out, &Summary::default());
        exit_qemu(EXIT_SUCCESS)
    };
    let _ = line::write_header(&mut out, 1, reference.name());
    let cycles = || hw.rdtsc_ordered();
    let summary = Suite::new(sources.as_slice(), reference, &cycles)
        .config(Config::default())
        .selected(sources.selected())
        .run(&mut |r: &CheckResult<'_>| {
            let _ = line::write_check(&mut out, r);
        });
    let _ = write_sources(&mut out, &report);
    let _ = line::write_summary(&mut out, &summary);
    exit_qemu(if summary.ok() {
        EXIT_SUCCESS
    } else {
        EXIT_FAILURE
    })
}
