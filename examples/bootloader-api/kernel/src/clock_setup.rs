//! Every call into clockhal's facade: the kernel tells clockhal what it
//! knows (RSDP, how to read physical memory, how to map the HPET, memory
//! for kvmclock and the Hyper-V page), probes, and prints the report.

use crate::memory::Memory;
use clockhal::tsc::SyncStatus;
use clockhal::x86::paravirt::{HvReferenceTscPage, PhysMapped, PvclockPage};
use clockhal::x86::{Native, OffsetMapping};
use clockhal::{Clock, Platform, Policy, Report};
use core::cell::RefCell;
use core::fmt::Write;
use x86_64::{PhysAddr, VirtAddr};

/// kvmclock's per-vCPU areas: one page-aligned page, so one frame.
static PVCLOCK: PvclockPage = PvclockPage::new();
static HV_PAGE: HvReferenceTscPage = HvReferenceTscPage::new();

/// Everything the bootloader told us that clockhal needs.
pub struct Inputs<'m> {
    /// `BootInfo::rsdp_addr`.
    pub rsdp: Option<u64>,
    /// The address space (translation, uncached mappings).
    pub memory: &'m mut Memory,
    /// End of the physical memory the bootloader maps (at least 4 GiB).
    pub phys_end: u64,
}

/// Probes every clockhal backend, prints the report to `out`, and returns
/// it with the clock (which owns the backends; `None` if nothing is usable).
pub fn probe(
    hw: Native,
    inputs: Inputs<'_>,
    out: &mut dyn Write,
) -> (Report, Option<Clock<Native>>) {
    // SAFETY: bootloader_api's `physical_memory` mapping maps all physical
    // memory up to `phys_end` at this offset; ACPI tables are plain memory.
    let phys = unsafe {
        OffsetMapping::from_x86_64(
            VirtAddr::new(inputs.memory.phys_offset()),
            PhysAddr::new(inputs.phys_end),
        )
    };
    // SAFETY: the tables are the live address space; PVCLOCK is reserved
    // for the hypervisor's writes forever.
    let areas = unsafe { PhysMapped::translated(&PVCLOCK, inputs.memory.tables()) };
    // SAFETY: as for PVCLOCK.
    let hv_page = unsafe { PhysMapped::translated(&HV_PAGE, inputs.memory.tables()) };
    let memory = RefCell::new(inputs.memory);
    let hpet_mapping = RefCell::new(None);
    let mut map_hpet = |base: u64, len: usize| {
        let mapped = memory.borrow_mut().map_uncached(base, len);
        let region = mapped.as_ref().ok().copied();
        *hpet_mapping.borrow_mut() = Some((base, mapped));
        region
    };

    let mut platform = Platform::new()
        .hpet_mapper(&mut map_hpet)
        .hyperv_guest_os_id(clockhal::hyperv::DEFAULT_GUEST_OS_ID)
        .tsc_sync(SyncStatus::SingleCpu)
        .policy(Policy::new());
    if let Some(rsdp) = inputs.rsdp {
        platform = platform.acpi(rsdp, &phys);
    }
    match areas {
        Ok(areas) => platform = platform.pvclock_areas(areas.areas()),
        Err(e) => {
            let _ = writeln!(out, "kernel: no kvmclock areas: {e}");
        }
    }
    match hv_page {
        Ok(page) => platform = platform.hyperv_tsc_page(page),
        Err(e) => {
            let _ = writeln!(out, "kernel: no Hyper-V page: {e}");
        }
    }
    let probed = clockhal::probe(hw, platform);
    match hpet_mapping.into_inner() {
        Some((phys, Ok(region))) => {
            let virt = region.base() as u64;
            let flags = memory.borrow().flags_of(virt);
            let _ = writeln!(out, "kernel: HPET {phys:#x} mapped at {virt:#x}, {flags:?}");
        }
        Some((phys, Err(e))) => {
            let _ = writeln!(out, "kernel: HPET {phys:#x} not mapped: {e}");
        }
        None => {}
    }
    let report = *probed.report();
    let _ = writeln!(out, "kernel: choice: {report:#}");
    let _ = writeln!(out, "{}", report.table());
    (report, probed.into_clock().ok())
}
