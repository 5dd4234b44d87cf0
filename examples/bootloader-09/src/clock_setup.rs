//! Every call into clockhal's facade: bootloader 0.9's `BootInfo` through
//! `clockhal::boot` (physical memory, the RSDP found in the BIOS areas),
//! plus what no boot protocol says: how to map the HPET, memory for
//! kvmclock and the Hyper-V page, one CPU.

use crate::memory::Memory;
use bootloader::BootInfo;
use clockhal::boot::{BootMemory, BootPlatform};
use clockhal::tsc::SyncStatus;
use clockhal::x86::paravirt::{HvReferenceTscPage, PhysMapped, PvclockPage};
use clockhal::x86::Native;
use clockhal::{Clock, Report};
use core::cell::RefCell;
use core::fmt::Write;

/// kvmclock's per-vCPU areas: one page-aligned page, so one frame.
static PVCLOCK: PvclockPage = PvclockPage::new();
static HV_PAGE: HvReferenceTscPage = HvReferenceTscPage::new();

/// Probes every clockhal backend, prints the report to `out`, and returns
/// it with the clock (`None` if nothing is usable).
///
/// Interrupt-safe: no (probes for ~0.1 s, maps the HPET: at boot).
pub fn probe(
    hw: Native,
    boot_info: &'static BootInfo,
    memory: &mut Memory,
    out: &mut dyn Write,
) -> (Report, Option<Clock<Native>>) {
    // SAFETY: the loader's boot info; nothing in this kernel unmaps its
    // physical-memory mapping.
    let boot = unsafe { BootMemory::from_bootloader_0_9(boot_info) };
    match boot.rsdp() {
        Ok(rsdp) => {
            let _ = writeln!(
                out,
                "kernel: RSDP {rsdp:#x} (found in the BIOS area: bootloader 0.9 passes none)"
            );
        }
        Err(e) => {
            let _ = writeln!(out, "kernel: no RSDP: {e}");
        }
    }
    // SAFETY: the tables are the live address space; the statics are
    // reserved for the hypervisor's writes forever.
    let areas = unsafe { PhysMapped::translated(&PVCLOCK, memory.tables()) };
    // SAFETY: as for PVCLOCK.
    let hv_page = unsafe { PhysMapped::translated(&HV_PAGE, memory.tables()) };
    let memory = RefCell::new(memory);
    let hpet_mapping = RefCell::new(None);
    let mut map_hpet = |base: u64, len: usize| {
        let mapped = memory.borrow_mut().map_uncached(base, len);
        let region = mapped.as_ref().ok().copied();
        *hpet_mapping.borrow_mut() = Some((base, mapped));
        region
    };

    let mut platform = boot
        .platform()
        .hpet_mapper(&mut map_hpet)
        .hyperv_guest_os_id(clockhal::hyperv::DEFAULT_GUEST_OS_ID)
        // bootloader 0.9 starts no other CPU.
        .tsc_sync(SyncStatus::SingleCpu);
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
