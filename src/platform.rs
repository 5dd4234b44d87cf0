//! What only the OS knows, handed to [`probe`](crate::probe) in one value.

use crate::SelfCheck;
use clockhal_core::{ClockSource, Policy, WatchdogConfig};
use clockhal_x86::paravirt::{
    HvReferenceTscPage, PhysMapped, PvclockVcpuTimeInfo, PvclockWallClock,
};
use clockhal_x86::{MmioRegion, PhysMemory};
use core::fmt;

/// How clockhal gets at the HPET's registers.
///
/// Creating an [`MmioRegion`] is the OS's `unsafe` promise that the address
/// maps the device, so clockhal never maps anything itself: either the OS
/// passes the region, or it passes a callback that maps the physical base
/// clockhal found in the ACPI "HPET" table.
#[derive(Clone, Copy)]
pub enum HpetAccess<'a> {
    /// No HPET access: the HPET candidate is rejected.
    None,
    /// The OS mapped the HPET already.
    Region(MmioRegion),
    /// `map(phys, len)` maps `len` bytes of device registers at physical
    /// address `phys` (uncached) and returns the region, or `None` if it
    /// cannot. Called at most once, only when ACPI names an HPET.
    Map(&'a dyn Fn(u64, usize) -> Option<MmioRegion>),
}

impl fmt::Debug for HpetAccess<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HpetAccess::None => f.write_str("None"),
            HpetAccess::Region(r) => f.debug_tuple("Region").field(r).finish(),
            HpetAccess::Map(_) => f.write_str("Map(..)"),
        }
    }
}

/// Everything the OS tells [`probe`](crate::probe): firmware tables, device
/// mappings, memory to share with the hypervisor, TSC sync results, policy.
///
/// Everything is optional; a candidate whose input is missing is listed as
/// rejected with the reason. Built with chained setters:
///
/// ```no_run
/// use clockhal::{Platform, Policy};
/// # fn inputs() -> (u64, clockhal_x86::OffsetMapping) { unimplemented!() }
/// let (rsdp, phys_mem) = inputs();
/// let map_hpet = |phys: u64, len: usize| -> Option<clockhal_x86::MmioRegion> {
///     // Map `phys..phys + len` uncached in the kernel's page tables, then:
///     // SAFETY: the mapping above points at the HPET's registers.
///     unsafe { clockhal_x86::MmioRegion::new(phys as usize, len) }
/// };
/// let platform = Platform::new()
///     .acpi(rsdp, &phys_mem)
///     .hpet_mapper(&map_hpet)
///     .policy(Policy::new());
/// ```
#[derive(Clone, Copy)]
pub struct Platform<'a> {
    pub(crate) acpi: Option<(u64, &'a dyn PhysMemory)>,
    pub(crate) hpet: HpetAccess<'a>,
    pub(crate) pm_timer: Option<(u16, bool)>,
    pub(crate) pvclock_areas: Option<PhysMapped<[PvclockVcpuTimeInfo]>>,
    pub(crate) pvclock_wall_clock: Option<PhysMapped<PvclockWallClock>>,
    pub(crate) hyperv_tsc_page: Option<PhysMapped<HvReferenceTscPage>>,
    pub(crate) hyperv_guest_os_id: Option<u64>,
    pub(crate) tsc_reference: Option<&'a dyn ClockSource>,
    #[cfg(feature = "tsc")]
    pub(crate) tsc_sync: clockhal_tsc::SyncStatus,
    pub(crate) policy: Policy,
    pub(crate) self_check: SelfCheck,
    pub(crate) watchdog: WatchdogConfig,
    pub(crate) extra: Option<&'static dyn ClockSource>,
}

impl Default for Platform<'_> {
    fn default() -> Self {
        Platform::new()
    }
}

impl fmt::Debug for Platform<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Platform")
            .field("rsdp", &self.acpi.map(|(rsdp, _)| rsdp))
            .field("hpet", &self.hpet)
            .field("pm_timer", &self.pm_timer)
            .field(
                "pvclock_areas",
                &self.pvclock_areas.map(|a| (a.phys(), a.len())),
            )
            .field(
                "pvclock_wall_clock",
                &self.pvclock_wall_clock.map(|w| w.phys()),
            )
            .field("hyperv_tsc_page", &self.hyperv_tsc_page.map(|p| p.phys()))
            .field("hyperv_guest_os_id", &self.hyperv_guest_os_id)
            .field("tsc_reference", &self.tsc_reference.map(|r| r.name()))
            .field("policy", &self.policy)
            .field("self_check", &self.self_check)
            .field("watchdog", &self.watchdog)
            .field("extra", &self.extra.map(|e| e.name()))
            .finish()
    }
}

impl<'a> Platform<'a> {
    /// Nothing known yet: only CPUID-discoverable sources (TSC, Hyper-V MSR)
    /// can be probed.
    pub fn new() -> Platform<'a> {
        Platform {
            acpi: None,
            hpet: HpetAccess::None,
            pm_timer: None,
            pvclock_areas: None,
            pvclock_wall_clock: None,
            hyperv_tsc_page: None,
            hyperv_guest_os_id: None,
            tsc_reference: None,
            #[cfg(feature = "tsc")]
            tsc_sync: clockhal_tsc::SyncStatus::default(),
            policy: Policy::new(),
            self_check: SelfCheck::new(),
            watchdog: WatchdogConfig::default(),
            extra: None,
        }
    }

    /// The RSDP's physical address and a reader for physical memory: the
    /// HPET base and the PM timer port come from the ACPI tables (unless
    /// given explicitly).
    pub fn acpi(mut self, rsdp: u64, memory: &'a dyn PhysMemory) -> Self {
        self.acpi = Some((rsdp, memory));
        self
    }

    /// The HPET's registers, already mapped by the OS.
    pub fn hpet_region(mut self, region: MmioRegion) -> Self {
        self.hpet = HpetAccess::Region(region);
        self
    }

    /// A callback mapping the HPET that ACPI names (see [`HpetAccess::Map`]).
    pub fn hpet_mapper(mut self, map: &'a dyn Fn(u64, usize) -> Option<MmioRegion>) -> Self {
        self.hpet = HpetAccess::Map(map);
        self
    }

    /// The ACPI PM timer's port and width (`bits32`: TMR_VAL_EXT), if the
    /// OS knows them; otherwise they come from the FADT.
    pub fn pm_timer(mut self, port: u16, bits32: bool) -> Self {
        self.pm_timer = Some((port, bits32));
        self
    }

    /// Memory for kvmclock: one pvclock area per vCPU (index = the
    /// [`Hardware::cpu_index`](clockhal_x86::Hardware::cpu_index) of the
    /// vCPU that registers it).
    pub fn pvclock_areas(mut self, areas: PhysMapped<[PvclockVcpuTimeInfo]>) -> Self {
        self.pvclock_areas = Some(areas);
        self
    }

    /// Memory for kvmclock's wall-clock structure (optional).
    pub fn pvclock_wall_clock(mut self, wall: PhysMapped<PvclockWallClock>) -> Self {
        self.pvclock_wall_clock = Some(wall);
        self
    }

    /// A page for the Hyper-V reference TSC page.
    pub fn hyperv_tsc_page(mut self, page: PhysMapped<HvReferenceTscPage>) -> Self {
        self.hyperv_tsc_page = Some(page);
        self
    }

    /// The Hyper-V guest OS identity to write (if the OS has not already).
    pub fn hyperv_guest_os_id(mut self, id: u64) -> Self {
        self.hyperv_guest_os_id = Some(id);
        self
    }

    /// A reference clock the OS trusts for TSC calibration (e.g. a PIT
    /// driver). Without one, clockhal calibrates against the HPET, else the
    /// PM timer, when the TSC has no better rate source.
    pub fn tsc_reference(mut self, reference: &'a dyn ClockSource) -> Self {
        self.tsc_reference = Some(reference);
        self
    }

    /// The OS's TSC synchronisation test result across CPUs.
    #[cfg(feature = "tsc")]
    pub fn tsc_sync(mut self, sync: clockhal_tsc::SyncStatus) -> Self {
        self.tsc_sync = sync;
        self
    }

    /// Migration stance, calibration budget, forced source.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// Tuning of the probe-time self-check.
    pub fn self_check(mut self, check: SelfCheck) -> Self {
        self.self_check = check;
        self
    }

    /// Tuning of the run-time watchdog ([`Clock::watchdog_tick`](crate::Clock::watchdog_tick)).
    pub fn watchdog(mut self, config: WatchdogConfig) -> Self {
        self.watchdog = config;
        self
    }

    /// One more candidate supplied by the OS (a PIT or RTC driver, a
    /// platform timer clockhal has no backend for), ranked with the others
    /// under [`SourceId::Extra`](crate::SourceId::Extra).
    pub fn extra(mut self, source: &'static dyn ClockSource) -> Self {
        self.extra = Some(source);
        self
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for HpetAccess<'_> {
    fn format(&self, f: defmt::Formatter) {
        match self {
            HpetAccess::None => defmt::write!(f, "None"),
            HpetAccess::Region(r) => defmt::write!(f, "Region({})", r),
            HpetAccess::Map(_) => defmt::write!(f, "Map(..)"),
        }
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for Platform<'_> {
    fn format(&self, f: defmt::Formatter) {
        defmt::write!(
            f,
            "Platform {{ rsdp: {}, hpet: {}, pm_timer: {}, pvclock_areas: {}, hyperv_tsc_page: {}, policy: {} }}",
            self.acpi.map(|(rsdp, _)| rsdp),
            self.hpet,
            self.pm_timer,
            self.pvclock_areas.map(|a| a.phys()),
            self.hyperv_tsc_page.map(|p| p.phys()),
            self.policy
        )
    }
}
