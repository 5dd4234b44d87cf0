//! Every call into clockhal's facade: what this application knows about the
//! machine goes into a `Platform`, `probe` picks the clock, and the report
//! is printed.

use crate::paging::{self, IdentityMemory};
use clockhal::tsc::SyncStatus;
use clockhal::x86::paravirt::{HvReferenceTscPage, PhysMapped, PvclockVcpuTimeInfo};
use clockhal::x86::{MmioRegion, Native};
use clockhal::{Platform, Policy, Probed};

/// pvclock areas: one per vCPU Hermit may run (32 bytes each, one page).
pub const MAX_CPUS: usize = 16;

/// The kvmclock areas, in one page so that they are physically contiguous.
#[repr(C, align(4096))]
struct PvclockPage([PvclockVcpuTimeInfo; MAX_CPUS]);

static PVCLOCK: PvclockPage = PvclockPage([const { PvclockVcpuTimeInfo::new() }; MAX_CPUS]);
static HV_PAGE: HvReferenceTscPage = HvReferenceTscPage::new();

/// What the application found out about the machine.
pub struct Inputs {
    /// The RSDP the loader passed (`CLOCKHAL_RSDP`), if any.
    pub rsdp: Option<u64>,
    /// CPUs Hermit runs on.
    pub cpus: usize,
}

/// Probes every clockhal backend and prints the report.
pub fn probe(hw: Native, inputs: &Inputs) -> Probed<Native> {
    let memory = IdentityMemory::new();
    // The HPET is usable only where the loader's identity map, which Hermit
    // keeps, maps it uncached: checked, not assumed.
    let map_hpet = |base: u64, len: usize| {
        if !paging::is_identity_mapped(base, len as u64, true) {
            println!("hermit-app: HPET {base:#x} is not identity mapped uncached: not used");
            return None;
        }
        // SAFETY: base..base+len is mapped uncached at the same address
        // (just checked), and ACPI's HPET table says the HPET is there.
        unsafe { MmioRegion::new(base as usize, len) }
    };
    let mut platform = Platform::new()
        .hpet_mapper(&map_hpet)
        .tsc_sync(if inputs.cpus == 1 {
            SyncStatus::SingleCpu
        } else {
            SyncStatus::default()
        })
        .policy(Policy::new());
    match paging::phys_addr_of(&PVCLOCK.0) {
        Some(pa) => {
            println!(
                "hermit-app: pvclock areas at virt {:p} = phys {pa:#x} (page tables)",
                &PVCLOCK.0
            );
            // SAFETY: PVCLOCK's physical address comes from the page tables
            // (contiguity checked); it is a static, reserved for the
            // hypervisor's writes for the life of the program.
            platform = platform.pvclock_areas(unsafe { PhysMapped::new(&PVCLOCK.0[..], pa) });
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
    let probed = clockhal::probe(hw, &platform);
    let report = probed.report();
    println!("hermit-app: choice: {report:#}");
    println!("{}", report.table());
    probed
}
