//! What only the OS knows, handed to [`probe`](crate::probe) in one value.

use crate::SelfCheck;
use clockhal_core::{ClockSource, Frequency, Policy, UpdateBounds, WatchdogConfig};
use clockhal_x86::paravirt::{
    HvReferenceTscPage, PhysMapped, PvclockPage, PvclockVcpuTimeInfo, PvclockWallClock,
};
#[cfg(feature = "kvmclock")]
use clockhal_x86::paravirt::{KvmStealTime, StealTimePage};
use clockhal_x86::{MmioRegion, PhysMemory};
use core::fmt;

/// How clockhal gets at the HPET's registers.
///
/// Creating an [`MmioRegion`] is the OS's `unsafe` promise that the address
/// maps the device, so clockhal never maps anything itself: either the OS
/// passes the region, or it passes a callback that maps the physical base
/// clockhal found in the ACPI "HPET" table.
pub enum HpetAccess<'a> {
    /// No HPET access: the HPET candidate is rejected.
    None,
    /// The OS mapped the HPET already.
    Region(MmioRegion),
    /// `map(phys, len)` maps `len` bytes of device registers at physical
    /// address `phys` (uncached) and returns the region, or `None` if it
    /// cannot. Called at most once, only when ACPI names an HPET. `FnMut`:
    /// mapping edits the kernel's page tables and takes frames from its
    /// allocator.
    Map(&'a mut dyn FnMut(u64, usize) -> Option<MmioRegion>),
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
/// let mut mapped = 0;
/// let mut map_hpet = |phys: u64, len: usize| -> Option<clockhal_x86::MmioRegion> {
///     // Map `phys..phys + len` uncached in the kernel's page tables, then:
///     mapped += 1;
///     // SAFETY: the mapping above points at the HPET's registers.
///     unsafe { clockhal_x86::MmioRegion::new(phys as usize, len) }
/// };
/// let platform = Platform::new()
///     .acpi(rsdp, &phys_mem)
///     .hpet_mapper(&mut map_hpet)
///     .cpus(4)
///     .policy(Policy::new());
/// ```
pub struct Platform<'a> {
    pub(crate) acpi: Option<(u64, &'a dyn PhysMemory)>,
    pub(crate) hpet: HpetAccess<'a>,
    pub(crate) pm_timer: Option<(u16, bool)>,
    #[cfg(feature = "pit")]
    pub(crate) pit: Option<clockhal_pit::PitOptions>,
    #[cfg(feature = "rtc")]
    pub(crate) rtc_reference: bool,
    pub(crate) pvclock_areas: Option<PhysMapped<[PvclockVcpuTimeInfo]>>,
    pub(crate) pvclock_wall_clock: Option<PhysMapped<PvclockWallClock>>,
    pub(crate) hyperv_tsc_page: Option<PhysMapped<HvReferenceTscPage>>,
    pub(crate) hyperv_guest_os_id: Option<u64>,
    pub(crate) tsc_reference: Option<&'a dyn ClockSource>,
    pub(crate) tsc_rate: Option<Frequency>,
    #[cfg(feature = "tsc")]
    pub(crate) tsc_sync: clockhal_tsc::SyncStatus,
    pub(crate) cpus: Option<usize>,
    pub(crate) update_bounds: UpdateBounds,
    pub(crate) supervision_timeout: clockhal_core::Duration,
    pub(crate) max_jump: clockhal_core::Duration,
    pub(crate) clamp_granule: clockhal_core::ClampGranule,
    pub(crate) policy: Policy,
    pub(crate) self_check: SelfCheck,
    pub(crate) watchdog: WatchdogConfig,
    pub(crate) extra: Option<&'static dyn ClockSource>,
    pub(crate) extra_tsc: Option<&'static (dyn clockhal_core::DynTscSource + Sync)>,
    pub(crate) clock_page: Option<clockhal_user::ClockPageWriter<'static>>,
    #[cfg(feature = "kvmclock")]
    pub(crate) steal: Option<(
        PhysMapped<[KvmStealTime]>,
        &'static clockhal_kvmclock::StealState,
    )>,
}

/// An OS-supplied source that reads the TSC through a map
/// ([`Platform::extra_tsc_source`]): a [`ClockSource`] and a
/// [`TscSource`](clockhal_core::TscSource) at once (every such `Sync` type
/// is one).
pub trait ExtraTscSource: ClockSource + clockhal_core::DynTscSource + Sync {
    /// Its [`ClockSource`] view (no trait upcasting before Rust 1.86).
    /// Interrupt-safe: yes.
    fn as_clock_source(&self) -> &dyn ClockSource;
    /// Its [`TscSource`](clockhal_core::TscSource) view.
    /// Interrupt-safe: yes.
    fn as_tsc_source(&self) -> &(dyn clockhal_core::DynTscSource + Sync);
}

impl<T: ClockSource + clockhal_core::DynTscSource + Sync> ExtraTscSource for T {
    fn as_clock_source(&self) -> &dyn ClockSource {
        self
    }
    fn as_tsc_source(&self) -> &(dyn clockhal_core::DynTscSource + Sync) {
        self
    }
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
            .field("pit", &{
                #[cfg(feature = "pit")]
                {
                    self.pit
                }
                #[cfg(not(feature = "pit"))]
                {
                    None::<()>
                }
            })
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
            .field("tsc_rate", &self.tsc_rate)
            .field("cpus", &self.cpus)
            .field("update_bounds", &self.update_bounds)
            .field("policy", &self.policy)
            .field("self_check", &self.self_check)
            .field("watchdog", &self.watchdog)
            .field("extra", &self.extra.map(|e| e.name()))
            .field("clock_page", &self.clock_page.is_some())
            .field("steal_time", &{
                #[cfg(feature = "kvmclock")]
                {
                    self.steal.map(|(a, _)| (a.phys(), a.len()))
                }
                #[cfg(not(feature = "kvmclock"))]
                {
                    None::<()>
                }
            })
            .finish()
    }
}

impl<'a> Platform<'a> {
    /// Nothing known yet: only CPUID-discoverable sources (TSC, Hyper-V MSR)
    /// can be probed.
    /// Interrupt-safe: yes.
    pub fn new() -> Platform<'a> {
        Platform {
            acpi: None,
            hpet: HpetAccess::None,
            pm_timer: None,
            #[cfg(feature = "pit")]
            pit: Some(clockhal_pit::PitOptions {
                as_clock: clockhal_pit::ReadCommitment::None,
            }),
            #[cfg(feature = "rtc")]
            rtc_reference: true,
            pvclock_areas: None,
            pvclock_wall_clock: None,
            hyperv_tsc_page: None,
            hyperv_guest_os_id: None,
            tsc_reference: None,
            tsc_rate: None,
            #[cfg(feature = "tsc")]
            tsc_sync: clockhal_tsc::SyncStatus::default(),
            cpus: None,
            update_bounds: UpdateBounds::new(),
            supervision_timeout: clockhal_core::Duration::from_secs(2),
            max_jump: clockhal_core::Duration::from_secs(10),
            clamp_granule: clockhal_core::ClampGranule::EXACT,
            policy: Policy::new(),
            self_check: SelfCheck::new(),
            watchdog: WatchdogConfig::default(),
            extra: None,
            extra_tsc: None,
            clock_page: None,
            #[cfg(feature = "kvmclock")]
            steal: None,
        }
    }

    /// The user clock page to keep up to date (`clockhal_user`): the
    /// clock republishes its mapping at every change of source, so user
    /// programs read the time without a system call where the source
    /// allows (the TSC, kvmclock with a trusted stable bit, the Hyper-V
    /// page) and are told to ask the kernel where it does not. Build the
    /// writer before the page is mapped into any process.
    /// Interrupt-safe: yes.
    pub fn clock_page(mut self, writer: clockhal_user::ClockPageWriter<'static>) -> Self {
        self.clock_page = Some(writer);
        self
    }

    /// The RSDP's physical address and a reader for physical memory: the
    /// HPET base and the PM timer port come from the ACPI tables (unless
    /// given explicitly).
    /// Interrupt-safe: yes.
    pub fn acpi(mut self, rsdp: u64, memory: &'a dyn PhysMemory) -> Self {
        self.acpi = Some((rsdp, memory));
        self
    }

    /// The HPET's registers, already mapped by the OS.
    /// Interrupt-safe: yes.
    pub fn hpet_region(mut self, region: MmioRegion) -> Self {
        self.hpet = HpetAccess::Region(region);
        self
    }

    /// A callback mapping the HPET that ACPI names (see [`HpetAccess::Map`]).
    /// Interrupt-safe: yes.
    pub fn hpet_mapper(mut self, map: &'a mut dyn FnMut(u64, usize) -> Option<MmioRegion>) -> Self {
        self.hpet = HpetAccess::Map(map);
        self
    }

    /// The ACPI PM timer's port and width (`bits32`: TMR_VAL_EXT), if the
    /// OS knows them; otherwise they come from the FADT. (The counter is
    /// read as 24 bits either way: see `clockhal_acpi_pm::AcpiPm::probe`.)
    /// Interrupt-safe: yes.
    pub fn pm_timer(mut self, port: u16, bits32: bool) -> Self {
        self.pm_timer = Some((port, bits32));
        self
    }

    /// Whether and how clockhal may use the 8254 PIT's channel 2 (it
    /// programs channel 2 and port 0x61 bits 0–1; channel 0, the OS's
    /// tick, is never touched). The default, a PIT without a read
    /// commitment, makes it the TSC's calibration reference only where
    /// nothing else can give the TSC a rate (no stated rate, no HPET, no PM
    /// timer: QEMU microvm), as Linux calibrates against the PIT, and the
    /// probe's third witness where the TSC has no stated rate and both an
    /// HPET and a PM timer could disagree about it (its rate is measured
    /// once, in the self-check; it is never a watchdog member). `None`:
    /// clockhal never touches the PIT (two disagreeing device counters then
    /// stay undecided). A commitment
    /// ([`ReadCommitment::EveryMs`](clockhal_pit::ReadCommitment)) also
    /// makes it a clock of last resort.
    /// Interrupt-safe: yes.
    #[cfg(feature = "pit")]
    pub fn pit(mut self, options: Option<clockhal_pit::PitOptions>) -> Self {
        self.pit = options;
        self
    }

    /// Whether the probe may time the CMOS RTC's second edges to give the
    /// TSC a rate where nothing else can (feature `rtc`; default yes): no
    /// stated rate (CPUID, hypervisor, OS), no HPET, no PM timer, no PIT,
    /// no OS reference — QEMU `-M microvm,pit=off` under TCG, where Linux
    /// finds no clock to calibrate against. It costs two to three seconds
    /// of boot (three edges; up to six, some six seconds, where a loaded
    /// host's preemptions widen the edges' windows), and two edge waits
    /// (1.1 s at 10 GHz of TSC ticks each: 11 s on a 2 GHz TSC) where the
    /// RTC never ticks (one is taken again: a host pause across the first
    /// edge looks the same). The rate is within its stated uncertainty (the
    /// report's `±` ppm: the edges' poll windows over the span): on a quiet
    /// host 100 ppm or better; a host that preempts the vCPU for a
    /// millisecond every few hundred TSC reads widens it to ~250 ppm, as
    /// stated. Not counted: the RTC's own rate error (its host's clock
    /// when emulated, a PC crystal's ±20-100 ppm).
    /// Ports 0x70/0x71 are read during the probe only then (status A and
    /// the time registers, as
    /// [`Clock::set_wall_clock_from_rtc`](crate::Clock::set_wall_clock_from_rtc)
    /// does): turning on the `rtc` feature is the OS's consent; `false`
    /// withdraws it for the probe (an OS whose CMOS driver already runs).
    ///
    /// Interrupt-safe: yes (a builder; touches no hardware).
    #[cfg(feature = "rtc")]
    pub fn rtc_reference(mut self, allowed: bool) -> Self {
        self.rtc_reference = allowed;
        self
    }

    /// Memory for kvmclock: one pvclock area per vCPU (index = the
    /// [`Hardware::cpu_index`](clockhal_x86::Hardware::cpu_index) of the
    /// vCPU that registers it). The slice must be physically contiguous
    /// (`PhysMapped::new`'s promise); a static array in a higher-half
    /// kernel may straddle two frames — prefer
    /// [`pvclock_page`](Self::pvclock_page).
    /// Interrupt-safe: yes.
    pub fn pvclock_areas(mut self, areas: PhysMapped<[PvclockVcpuTimeInfo]>) -> Self {
        self.pvclock_areas = Some(areas);
        self
    }

    /// Memory for kvmclock as one page of 128 areas: a single physical
    /// frame, so every area's physical address is right by construction.
    /// Interrupt-safe: yes.
    pub fn pvclock_page(mut self, page: PhysMapped<PvclockPage>) -> Self {
        self.pvclock_areas = Some(page.areas());
        self
    }

    /// Memory for KVM steal time: one page of 64 areas (one per vCPU,
    /// index = `cpu_index()`; a single frame, so every area's physical
    /// address is right by construction) and the guest's per-CPU state (a
    /// `static`). The clock registers the areas with its per-CPU lifecycle
    /// and serves [`Clock::steal_ns`](crate::Clock::steal_ns). Must not
    /// overlap the pvclock areas.
    ///
    /// ```
    /// use clockhal::kvmclock::StealState;
    /// use clockhal::x86::paravirt::{PhysMapped, StealTimePage};
    /// use clockhal::Platform;
    /// static STEAL_PAGE: StealTimePage = StealTimePage::new();
    /// static STEAL_STATE: StealState = StealState::new();
    /// # let phys = 0x20_0000; // the page's guest-physical address
    /// // A kernel: `unsafe { PhysMapped::new(&STEAL_PAGE, phys) }`.
    /// let page = PhysMapped::simulated(&STEAL_PAGE, phys);
    /// let p = Platform::new().steal_time(page, &STEAL_STATE);
    /// # let _ = p;
    /// ```
    ///
    /// Interrupt-safe: yes (stores the values).
    #[cfg(feature = "kvmclock")]
    pub fn steal_time(
        self,
        page: PhysMapped<StealTimePage>,
        state: &'static clockhal_kvmclock::StealState,
    ) -> Self {
        self.steal_time_areas(page.steal_areas(), state)
    }

    /// Memory for KVM steal time as contiguous 64-byte-aligned areas, one
    /// per vCPU (prefer [`steal_time`](Self::steal_time), one frame), and
    /// the guest's per-CPU state.
    ///
    /// Interrupt-safe: yes (stores the values).
    #[cfg(feature = "kvmclock")]
    pub fn steal_time_areas(
        mut self,
        areas: PhysMapped<[KvmStealTime]>,
        state: &'static clockhal_kvmclock::StealState,
    ) -> Self {
        self.steal = Some((areas, state));
        self
    }

    /// Memory for kvmclock's wall-clock structure (optional).
    /// Interrupt-safe: yes.
    pub fn pvclock_wall_clock(mut self, wall: PhysMapped<PvclockWallClock>) -> Self {
        self.pvclock_wall_clock = Some(wall);
        self
    }

    /// A page for the Hyper-V reference TSC page.
    /// Interrupt-safe: yes.
    pub fn hyperv_tsc_page(mut self, page: PhysMapped<HvReferenceTscPage>) -> Self {
        self.hyperv_tsc_page = Some(page);
        self
    }

    /// Lets clockhal write this Hyper-V guest OS identity if none is set
    /// (opt-in: without it clockhal never writes the guest OS ID MSR, and a
    /// partition with no identity gets no reference TSC page).
    /// `clockhal::hyperv::DEFAULT_GUEST_OS_ID` is one an OS without its own
    /// may use.
    /// Interrupt-safe: yes.
    pub fn hyperv_guest_os_id(mut self, id: u64) -> Self {
        self.hyperv_guest_os_id = Some(id);
        self
    }

    /// A reference clock the OS trusts for TSC calibration (e.g. a PIT
    /// driver). Without one, clockhal calibrates against the HPET, else the
    /// PM timer, when the TSC has no better rate source.
    /// Interrupt-safe: yes.
    pub fn tsc_reference(mut self, reference: &'a dyn ClockSource) -> Self {
        self.tsc_reference = Some(reference);
        self
    }

    /// The OS's TSC synchronisation test result across CPUs, if it ran one
    /// before probing (it can also give it later:
    /// [`Clock::set_tsc_sync`](crate::Clock::set_tsc_sync)).
    /// Interrupt-safe: yes.
    #[cfg(feature = "tsc")]
    pub fn tsc_sync(mut self, sync: clockhal_tsc::SyncStatus) -> Self {
        self.tsc_sync = sync;
        self
    }

    /// The TSC rate the OS or its loader knows (a boot parameter, its own
    /// calibration, a firmware table): used after CPUID's own statements,
    /// shown as "rate supplied by the OS", and cross-checked against a
    /// reference when one exists.
    /// Interrupt-safe: yes.
    pub fn tsc_rate(mut self, rate: Frequency) -> Self {
        self.tsc_rate = Some(rate);
        self
    }

    /// How many CPUs the OS runs. With more than one, the TSC is not
    /// auto-selected until a warp test says the TSCs are in step. If the
    /// OS does not say, the MADT's count of enabled processors is used
    /// (with [`acpi`](Self::acpi)), else 1: an SMP kernel that forgets this
    /// call still gets no TSC trusted across CPUs nobody tested.
    /// Interrupt-safe: yes.
    pub fn cpus(mut self, n: usize) -> Self {
        self.cpus = Some(n.max(1));
        self
    }

    /// How long a supervised TSC (not invariant, kept under the watchdog)
    /// stays the current source after the last watchdog tick that judged
    /// it (default 2 s: eight ticks at the suggested 250 ms). Past it, the
    /// next read switches to the best source that needs no supervision:
    /// an OS that stops ticking falls back to a correct clock instead of
    /// running on an unchecked TSC. The time is asked of an independent
    /// 64-bit counter (the HPET) where there is one: a guest paused with its
    /// devices (QEMU's stop/cont without kvmclock) is past the deadline on
    /// the TSC alone, and keeps the TSC until the next tick judges it.
    /// Interrupt-safe: yes.
    pub fn supervision_timeout(mut self, d: clockhal_core::Duration) -> Self {
        self.supervision_timeout = d;
        self
    }

    /// Readings more than this beyond the last instant the watchdog
    /// verified (default 10 s) are checked against an independent 64-bit
    /// counter (the HPET, the Hyper-V MSR) before they are returned: a
    /// source that jumps further than that counter's elapsed time explains
    /// (by 1% + 1 s) is at fault (`Demotion::Jumped`), its reading is not
    /// returned. A host pause announced through kvmclock is not a jump
    /// (kvmclock itself hides it). One the host does not announce (QEMU's
    /// stop/cont without kvmclock: the devices freeze, the TSC counts on)
    /// is taken for a pause by the watchdog up to this bound, and beyond
    /// it looks like a jump of the raw TSC. A counter that does not count
    /// at all (read again for up to 100 µs) witnesses nothing: it is
    /// demoted as stopped, so no switch lands on it, and the reading is
    /// taken as where no such counter exists.
    /// Interrupt-safe: yes.
    pub fn max_jump(mut self, d: clockhal_core::Duration) -> Self {
        self.max_jump = d;
        self
    }

    /// Resolution of readings from a source that does not order its
    /// readings across CPUs (kvmclock without a trusted stable bit, a TSC
    /// not known to be synchronised, a device): they go through one global
    /// clamp, exact by default (as Linux's pvclock clamp). With readers on
    /// several CPUs at high rates, a coarser granule (e.g.
    /// `ClampGranule::from_log2(10)`, 1024 ns) writes the clamp's shared
    /// cache line at most once per granule instead of on nearly every read:
    /// in `clockhal-bench`, kvmclock without the stable bit with two threads
    /// reading costs ~1.9x an ordered `rdtsc` at 1024 ns against ~9x exact.
    /// Readings through the clamp then advance in steps of the granule; the
    /// ordering guarantee is unchanged (never earlier than any reading
    /// returned before, on any CPU). Sources that order their own readings
    /// are not affected. Applies to [`Clock::now`](crate::Clock::now)
    /// (the facade's clamp); the sources' own reads, through which the
    /// probe's self-check and the watchdog measure them, stay exact, so a
    /// coarse granule can neither make a counter look stuck nor its rate
    /// look off.
    /// Interrupt-safe: yes.
    ///
    /// ```
    /// use clockhal::{ClampGranule, Platform};
    /// let p = Platform::new().clamp_granule(ClampGranule::from_log2(10).unwrap());
    /// # let _ = p;
    /// ```
    pub fn clamp_granule(mut self, granule: clockhal_core::ClampGranule) -> Self {
        self.clamp_granule = granule;
        self
    }

    /// What a hypervisor's update of kvmclock or Hyper-V page parameters
    /// may do before it is not believed (`clockhal_core::UpdateBounds`).
    /// Interrupt-safe: yes.
    pub fn update_bounds(mut self, bounds: UpdateBounds) -> Self {
        self.update_bounds = bounds;
        self
    }

    /// Migration stance, calibration budget, forced source.
    /// Interrupt-safe: yes.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// Tuning of the probe-time self-check.
    /// Interrupt-safe: yes.
    pub fn self_check(mut self, check: SelfCheck) -> Self {
        self.self_check = check;
        self
    }

    /// Tuning of the run-time watchdog ([`Clock::watchdog_tick`](crate::Clock::watchdog_tick)).
    /// Interrupt-safe: yes.
    pub fn watchdog(mut self, config: WatchdogConfig) -> Self {
        self.watchdog = config;
        self
    }

    /// One more candidate supplied by the OS (a PIT or RTC driver, a
    /// platform timer clockhal has no backend for), ranked with the others
    /// under [`SourceId::Extra`](crate::SourceId::Extra).
    /// Interrupt-safe: yes.
    pub fn extra(mut self, source: &'static dyn ClockSource) -> Self {
        self.extra = Some(source);
        self.extra_tsc = None;
        self
    }

    /// [`extra`](Self::extra) for a source that reads the TSC through a
    /// validated map (a paravirtual clock clockhal has no backend for,
    /// such as a Xen pvclock): besides its [`ClockSource`] view (probed,
    /// self-checked, judged by the watchdog like any candidate), the
    /// [`Clock`](crate::Clock) reads it through its
    /// [`TscSource`](clockhal_core::TscSource) in the one read loop
    /// (cached map per CPU, token, window, floors), as it reads kvmclock.
    /// Its [`ClockSource::counter_domain`] should say
    /// [`CounterDomain::Tsc`](clockhal_core::CounterDomain::Tsc): it then
    /// votes with the TSC, not as an independent witness.
    /// Interrupt-safe: yes.
    pub fn extra_tsc_source(mut self, source: &'static dyn ExtraTscSource) -> Self {
        self.extra = Some(source.as_clock_source());
        self.extra_tsc = Some(source.as_tsc_source());
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
