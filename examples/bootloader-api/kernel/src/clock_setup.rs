//! Every call into clockhal's facade: the kernel tells clockhal what it
//! knows (RSDP, how to read physical memory, how to map the HPET, memory
//! for kvmclock and the Hyper-V page), probes, and prints the report.

use crate::memory::Memory;
use clockhal::tsc::SyncStatus;
use clockhal::x86::paravirt::{HvReferenceTscPage, PhysMapped, PvclockVcpuTimeInfo};
use clockhal::x86::{MmioRegion, Native, OffsetMapping};
use clockhal::{Clock, Platform, Policy, Report};
use core::cell::{Cell, RefCell};
use core::fmt::Write;

/// kvmclock's per-vCPU area (this kernel runs on one CPU), alone in a page
/// so that it is physically contiguous.
#[repr(C, align(4096))]
struct PvclockPage([PvclockVcpuTimeInfo; 1]);

static PVCLOCK: PvclockPage = PvclockPage([PvclockVcpuTimeInfo::new()]);
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
    let phys = unsafe { OffsetMapping::new(inputs.memory.phys_offset(), inputs.phys_end) };
    let areas = inputs.memory.phys_addr_of(&PVCLOCK.0);
    let hv_page = inputs.memory.phys_addr_of(&HV_PAGE);
    let memory = RefCell::new(inputs.memory);
    let hpet_mapping = Cell::new(None);
    let mut map_hpet = |base: u64, len: usize| {
        let virt = memory.borrow_mut().map_uncached(base, len)?;
        hpet_mapping.set(Some((base, virt)));
        // SAFETY: `virt` now maps the HPET's registers (named by ACPI)
        // uncached, in address space nothing else uses.
        unsafe { MmioRegion::new(virt as usize, len) }
    };

    let mut platform = Platform::new()
        .hpet_mapper(&mut map_hpet)
        .hyperv_guest_os_id(clockhal::hyperv::DEFAULT_GUEST_OS_ID)
        .tsc_sync(SyncStatus::SingleCpu)
        .policy(Policy::new());
    if let Some(rsdp) = inputs.rsdp {
        platform = platform.acpi(rsdp, &phys);
    }
    if let Some(pa) = areas {
        // SAFETY: the physical address comes from the page tables; PVCLOCK
        // is a static, reserved for the hypervisor's writes forever.
        platform = platform.pvclock_areas(unsafe { PhysMapped::new(&PVCLOCK.0[..], pa) });
    }
    if let Some(pa) = hv_page {
        // SAFETY: as for PVCLOCK (one aligned 4 KiB page).
        platform = platform.hyperv_tsc_page(unsafe { PhysMapped::new(&HV_PAGE, pa) });
    }
    let probed = clockhal::probe(hw, platform);
    if let Some((phys, virt)) = hpet_mapping.get() {
        let flags = memory.borrow().flags_of(virt);
        let _ = writeln!(out, "kernel: HPET {phys:#x} mapped at {virt:#x}, {flags:?}");
    }
    let report = *probed.report();
    let _ = writeln!(out, "kernel: choice: {report:#}");
    let _ = writeln!(out, "{}", report.table());
    (report, probed.into_clock().ok())
}
