//! Every call into clockhal's facade: what this application knows about the
//! machine goes into a `Platform`, `probe` picks the clock, and the report
//! is printed.

use crate::cpus::HermitCpus;
use crate::paging::{self, IdentityMemory};
use clockhal::tsc::{warp_participant, SyncStatus, WarpBudget, WarpReport, WarpShared};
use clockhal::x86::paravirt::{HvReferenceTscPage, PhysMapped, PvclockPage};
use clockhal::x86::{MmioRegion, Native};
use clockhal::{Clock, Platform, Policy, Report, SourceId};
use clockhal_conformance::Cpus;

/// The kvmclock areas, one per vCPU, in one page so that they are
/// physically contiguous.
static PVCLOCK: PvclockPage = PvclockPage::new();
static HV_PAGE: HvReferenceTscPage = HvReferenceTscPage::new();

/// What the application found out about the machine.
pub struct Inputs {
    /// The RSDP the loader passed (`CLOCKHAL_RSDP`), if any.
    pub rsdp: Option<u64>,
    /// The TSC warp test's verdict ([`tsc_sync`]).
    pub tsc_sync: SyncStatus,
}

/// clockhal's TSC warp test between CPU 0 and every other CPU.
pub fn tsc_sync(hw: Native, cpus: &HermitCpus) -> SyncStatus {
    if cpus.count() <= 1 {
        return SyncStatus::SingleCpu;
    }
    let budget = WarpBudget::DEFAULT;
    let mut reports = vec![WarpReport::default(); cpus.count() - 1];
    for (cpu, report) in (1..cpus.count()).zip(reports.iter_mut()) {
        let shared = WarpShared::new();
        let remote = || {
            warp_participant(&hw, &shared, cpu, &budget);
        };
        let mut local = WarpReport::default();
        match cpus.run_concurrently(cpu, &remote, &mut || {
            local = warp_participant(&hw, &shared, 0, &budget)
        }) {
            Ok(()) => *report = local,
            Err(e) => println!("hermit-app: TSC warp test with CPU {cpu} not run: {e}"),
        }
        println!("hermit-app: TSC warp test CPU 0 <-> {cpu}: {report}");
    }
    SyncStatus::from_reports(&reports)
}

/// Probes every clockhal backend, prints the report, and returns it with
/// the clock (which owns the backends; `None` if nothing is usable).
pub fn probe(hw: Native, inputs: &Inputs) -> (Report, Option<Clock<Native>>) {
    let memory = IdentityMemory::new();
    // The HPET is usable only where the loader's identity map, which Hermit
    // keeps, maps it uncached: checked, not assumed.
    let mut map_hpet = |base: u64, len: usize| {
        if !paging::is_identity_mapped(base, len as u64, true) {
            println!("hermit-app: HPET {base:#x} is not identity mapped uncached: not used");
            return None;
        }
        // SAFETY: base..base+len is mapped uncached at the same address
        // (just checked), and ACPI's HPET table says the HPET is there.
        unsafe { MmioRegion::new(base as usize, len) }
    };
    let mut platform = Platform::new()
        .hpet_mapper(&mut map_hpet)
        .hyperv_guest_os_id(clockhal::hyperv::DEFAULT_GUEST_OS_ID)
        .tsc_sync(inputs.tsc_sync)
        .policy(Policy::new());
    match paging::phys_addr_of(&PVCLOCK) {
        Some(pa) => {
            println!(
                "hermit-app: pvclock areas at virt {:p} = phys {pa:#x} (page tables)",
                &PVCLOCK
            );
            // SAFETY: PVCLOCK's physical address comes from the page tables
            // (contiguity checked); it is a static, reserved for the
            // hypervisor's writes for the life of the program.
            platform = platform.pvclock_areas(unsafe { PhysMapped::new(&PVCLOCK, pa) }.areas());
        }
        None => println!("hermit-app: pvclock areas not contiguously mapped: kvmclock off"),
    }
    match paging::phys_addr_of(&HV_PAGE) {
        // SAFETY: as for PVCLOCK (one aligned 4 KiB page).
        Some(pa) => platform = platform.hyperv_tsc_page(unsafe { PhysMapped::new(&HV_PAGE, pa) }),
        None => println!("hermit-app: Hyper-V page not contiguously mapped: MSR mode only"),
    }
    if let Some(rsdp) = inputs.rsdp {
        platform = platform.acpi(rsdp, &memory);
    }
    let probed = clockhal::probe(hw, platform);
    let report = *probed.report();
    println!("hermit-app: choice: {report:#}");
    println!("{}", report.table());
    (report, probed.into_clock().ok())
}

/// Whether the suite may read the sources on every CPU: kvmclock needs an
/// area registered per CPU and a `Hardware::cpu_index`, which this
/// application does not provide (Hermit cannot boot under this machine's
/// KVM, so that path could not be tested here).
pub fn readable_on_every_cpu(clock: Option<&Clock<Native>>) -> bool {
    clock.is_none_or(|c| c.kvmclock().is_none())
}

extern "C" {
    /// Hermit's TSC rate in MHz, measured against the PIT at boot.
    fn sys_get_processor_frequency() -> u16;
}

/// Times a sleep with the selected clock and with Hermit's own
/// `std::time::Instant` (the TSC divided by an integer MHz that Hermit
/// measured with the PIT at boot), to show how far Hermit's clock is off.
pub fn compare_with_hermit_clock(report: &Report, clock: Option<&Clock<Native>>) {
    const SLEEP_MS: u64 = 200;
    let Some(clock) = clock else {
        println!("hermit-app: no clockhal clock to compare with Hermit's: {report:#}");
        return;
    };
    let ours_start = clock.now();
    let hermit_start = std::time::Instant::now();
    std::thread::sleep(std::time::Duration::from_millis(SLEEP_MS));
    let ours = clock.elapsed(ours_start).as_nanos() as i128;
    let hermit = hermit_start.elapsed().as_nanos() as i128;
    let ppm = (hermit - ours) * 1_000_000 / ours.max(1);
    println!(
        "hermit-app: a {SLEEP_MS} ms sleep took {ours} ns by clockhal ({}), {hermit} ns by Hermit's Instant ({ppm:+} ppm)",
        clock.source_name()
    );
    // SAFETY: a Hermit system call without arguments or side effects.
    let hermit_mhz = unsafe { sys_get_processor_frequency() };
    let tsc_hz = report.get(SourceId::Tsc).and_then(|c| c.frequency());
    println!(
        "hermit-app: Hermit's TSC rate {hermit_mhz} MHz (PIT at boot); clockhal's {:?} Hz",
        tsc_hz.map(|f| f.hz_rounded())
    );
}
