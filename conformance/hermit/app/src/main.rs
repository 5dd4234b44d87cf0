//! clockhal inside Hermit: a normal `std` Hermit application that probes
//! every clock source, prints the report, runs the conformance suite on
//! every source it found and exits with 0 only when no check failed.
//!
//! What Hermit does not offer an application, and how it is obtained here:
//!
//! - **CPL0**: Hermit runs applications in ring 0 (checked: CS & 3), so
//!   rdtsc, rdmsr and port I/O work, and Hermit 0.11 itself never touches
//!   kvmclock, the HPET or the PM timer.
//! - **The RSDP**: our loader puts it in Hermit's devicetree (for Hermit)
//!   and passes `env=CLOCKHAL_RSDP=0x…` on Hermit's command line, which
//!   Hermit turns into this environment variable.
//! - **Physical addresses** (pvclock areas, Hyper-V page) and **the HPET
//!   mapping**: read from the live page tables ([`paging`]); the loader's
//!   identity map of the low 4 GiB (3..4 GiB uncached) survives in Hermit,
//!   and every address is checked, not assumed. Where a check fails, that
//!   source is reported absent with the reason.
//!
//! Output: human lines prefixed `hermit-app:`, then the suite's result
//! lines (`clockhal_conformance::line`) for the matrix runner.

mod clock_setup;
mod cpus;
mod paging;

use clockhal::x86::{Hardware, Native};
use clockhal_conformance::probed::{write_sources, ProbedSources};
use clockhal_conformance::{line, CheckResult, Config, Suite, Summary};
use std::process::ExitCode;

/// The environment variable the loader sets (see the loader's RSDP_ENV).
const RSDP_ENV: &str = "CLOCKHAL_RSDP";

/// The RSDP address from the environment, if set and well-formed.
fn rsdp_from_env() -> Option<u64> {
    let value = std::env::var(RSDP_ENV).ok()?;
    let parsed = value
        .strip_prefix("0x")
        .and_then(|hex| u64::from_str_radix(hex, 16).ok());
    if parsed.is_none() {
        println!("hermit-app: {RSDP_ENV}={value:?} is not 0x<hex>: ACPI sources off");
    }
    parsed
}

fn privilege_level() -> u16 {
    let cs: u16;
    // SAFETY: reading CS has no side effects.
    unsafe { core::arch::asm!("mov {0:x}, cs", out(reg) cs, options(nomem, nostack)) };
    cs & 3
}

/// Prints to Hermit's console (stdout), one `line` record at a time.
fn emit(write: impl FnOnce(&mut String) -> std::fmt::Result) {
    let mut s = String::new();
    let _ = write(&mut s);
    print!("{s}");
}

fn main() -> ExitCode {
    let cpl = privilege_level();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rsdp = rsdp_from_env();
    println!("hermit-app: clockhal inside Hermit, CPL{cpl}, {cpus} CPU(s), RSDP {rsdp:x?}");
    if cpl != 0 {
        println!("hermit-app: not at CPL0: clock hardware is out of reach");
        return ExitCode::FAILURE;
    }

    // SAFETY: CPL0 (checked above), and nothing else in Hermit 0.11 uses the
    // clock MSRs, the HPET or the PM timer.
    let hw = unsafe { Native::new() };
    let hermit_cpus = cpus::HermitCpus::new(cpus);
    let tsc_sync = clock_setup::tsc_sync(hw, &hermit_cpus);
    println!("hermit-app: TSC sync {tsc_sync:?}");
    let (report, clock) = clock_setup::probe(hw, &clock_setup::Inputs { rsdp, tsc_sync });

    let sources = ProbedSources::new(clock.as_ref());
    let Some(reference) = sources.reference() else {
        println!("hermit-app: no clock source was constructed");
        emit(|s| line::write_header(s, cpus, "none"));
        emit(|s| write_sources(s, &report));
        emit(|s| line::write_summary(s, &Summary::default()));
        return ExitCode::SUCCESS;
    };
    emit(|s| line::write_header(s, cpus, reference.name()));
    let cycles = || hw.rdtsc_ordered();
    let mut suite = Suite::new(sources.as_slice(), reference, &cycles)
        .config(Config::default())
        .selected(sources.selected());
    if cpus > 1 && clock_setup::readable_on_every_cpu(clock.as_ref()) {
        suite = suite.cpus(&hermit_cpus);
    }
    let summary = suite.run(&mut |r: &CheckResult<'_>| emit(|s| line::write_check(s, r)));
    emit(|s| write_sources(s, &report));
    clock_setup::compare_with_hermit_clock(&report, clock.as_ref());
    emit(|s| line::write_summary(s, &summary));
    if summary.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
