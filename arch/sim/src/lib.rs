#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(unsafe_code)]

mod acpi_tables;
mod cpuid;
mod hpet;
mod hyperv;
mod kvm;
mod lapic;
mod low_memory;
mod memory;
mod overrides;
mod pit;
mod pm_timer;
mod port_tap;
mod profiles;
#[cfg(target_arch = "x86_64")]
mod real_tsc;
mod rtc;
mod tsc;

pub use acpi_tables::{AcpiImage, AcpiTablesBuilder, FadtSpec, HpetTableSpec};
pub use cpuid::{
    CpuidDump, CpuidMissing, CpuidTable, QEMU_CPUID_DUMPS, QEMU_KVM_INVTSC, QEMU_KVM_MICROVM,
    QEMU_KVM_Q35, QEMU_TCG_MICROVM, QEMU_TCG_PC, QEMU_TCG_Q35,
};
pub use hpet::{Hpet, HpetConfig};
pub use hyperv::{HypervConfig, HypervHost};
pub use kvm::{KvmConfig, KvmHost, PvclockUpdate};
pub use lapic::{Lapic, LapicConfig};
pub use low_memory::{LowMemory, LOW_MEMORY_LEN};
pub use memory::SharedMemory;
pub use overrides::Answer;
pub use pit::{Pit8254, PitConfig, PitModel, PIT_HARDWARE_RATE, PIT_KVM_RATE, PIT_QEMU_RATE};
pub use pm_timer::{PmTimer, PmTimerConfig, PM_TIMER_HZ};
pub use port_tap::{PortAccess, PortTap};
#[cfg(target_arch = "x86_64")]
pub use real_tsc::RealTsc;
pub use rtc::{CmosRtc, RtcConfig, UIP_LEAD_NS, UPDATE_CYCLE_NS};
pub use tsc::SimTsc;

use clockhal_x86::paravirt::{
    HvReferenceTscPage, KvmStealTime, PhysMapped, PvclockVcpuTimeInfo, PvclockWallClock,
};
use clockhal_x86::{CpuidResult, Hardware, MmioRegion, Msr};
use overrides::Overrides;
use std::boxed::Box;
use std::cell::Cell;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::vec::Vec;

std::thread_local! {
    static CURRENT_CPU: Cell<usize> = const { Cell::new(0) };
}

/// `IA32_TSC`: reads the TSC; a write sets it (and moves TSC_ADJUST).
const MSR_TSC: u32 = 0x10;

/// What an MSR that no device implements does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnknownMsr {
    /// Raise #GP (KVM, real hardware): `rdmsr` panics with "simulated #GP",
    /// `try_rdmsr` returns `None`.
    Fault,
    /// Read as 0, ignore writes (QEMU TCG).
    ReadZero,
}

/// Simulated cost of each kind of access, in nanoseconds of machine time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimCosts {
    /// `rdtsc`/`rdtscp`.
    pub rdtsc_ns: u64,
    /// `cpuid` (a VM exit under a hypervisor).
    pub cpuid_ns: u64,
    /// MSR, port or MMIO access.
    pub trap_ns: u64,
}

impl Default for SimCosts {
    fn default() -> Self {
        SimCosts {
            rdtsc_ns: 10,
            cpuid_ns: 100,
            trap_ns: 1_000,
        }
    }
}

/// Everything that defines a simulated machine at power-on.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The TSC's true rate in Hz at power-on.
    pub tsc_hz: u64,
    /// Per-CPU TSC offsets in ticks (length = CPU count): the hypervisor's,
    /// invisible in `IA32_TSC_ADJUST`.
    pub tsc_offsets: Vec<i64>,
    /// CPUID table: (leaf, subleaf) -> registers (leaves that ignore ECX
    /// under subleaf 0).
    pub cpuid: CpuidTable,
    /// What leaves missing from the table answer.
    pub cpuid_missing: CpuidMissing,
    /// Behaviour of unimplemented MSRs.
    pub unknown_msr: UnknownMsr,
    /// Access costs.
    pub costs: SimCosts,
    /// Machine time at power-on, in ns.
    pub start_ns: u64,
    /// KVM host, if any.
    pub kvm: Option<KvmConfig>,
    /// Hyper-V partition, if any.
    pub hyperv: Option<HypervConfig>,
    /// HPET, if any.
    pub hpet: Option<HpetConfig>,
    /// ACPI PM timer, if any.
    pub pm_timer: Option<PmTimerConfig>,
    /// 8254 PIT (ports 0x40-0x43, 0x61), if any.
    pub pit: Option<PitConfig>,
    /// CMOS RTC (ports 0x70-0x71), if any.
    pub rtc: Option<RtcConfig>,
    /// Local APIC timers (one per CPU), if modelled. Without one, the APIC
    /// MSRs and MMIO page are absent as any other unknown register.
    pub lapic: Option<LapicConfig>,
}

/// The four CPUID registers, for table building.
pub const fn regs(eax: u32, ebx: u32, ecx: u32, edx: u32) -> CpuidResult {
    CpuidResult { eax, ebx, ecx, edx }
}

fn sig_regs(max: u32, sig: &[u8; 12]) -> CpuidResult {
    let w = |i: usize| u32::from_le_bytes([sig[i], sig[i + 1], sig[i + 2], sig[i + 3]]);
    regs(max, w(0), w(4), w(8))
}

impl SimConfig {
    /// A bare CPU: GenuineIntel, max basic leaf 0x16, max extended leaf
    /// 0x80000008, TSC at `tsc_hz`, one CPU, nothing else; missing leaves
    /// answer per [`CpuidMissing::HighestBasic`].
    pub fn cpu(tsc_hz: u64) -> SimConfig {
        let mut cpuid = CpuidTable::new();
        // "GenuineIntel" is EBX,EDX,ECX = "Genu","ineI","ntel".
        cpuid.insert(
            (0, 0),
            regs(
                0x16,
                u32::from_le_bytes(*b"Genu"),
                u32::from_le_bytes(*b"ntel"),
                u32::from_le_bytes(*b"ineI"),
            ),
        );
        cpuid.insert((1, 0), regs(0x000906EA, 0, 0, 1 << 4)); // TSC
        cpuid.insert((0x8000_0000, 0), regs(0x8000_0008, 0, 0, 0));
        cpuid.insert((0x8000_0001, 0), regs(0, 0, 0, 1 << 27)); // RDTSCP
        SimConfig {
            tsc_hz,
            tsc_offsets: vec![0],
            cpuid,
            cpuid_missing: CpuidMissing::HighestBasic,
            unknown_msr: UnknownMsr::Fault,
            costs: SimCosts::default(),
            start_ns: 1_000_000_000,
            kvm: None,
            hyperv: None,
            hpet: None,
            pm_timer: None,
            pit: None,
            rtc: None,
            lapic: None,
        }
    }

    /// What `cpuid(leaf, subleaf)` answers on CPU 0 of a machine built from
    /// this configuration (without the cost or the bookkeeping of an
    /// access): the table's entry, else what [`cpuid_missing`](Self::cpuid_missing)
    /// says.
    pub fn cpuid_value(&self, leaf: u32, subleaf: u32) -> CpuidResult {
        cpuid::answer(&self.cpuid, self.cpuid_missing, 0, leaf, subleaf)
    }

    /// Replaces the CPUID table with what a real machine answered: the
    /// dump's leaves within their range (the rest is the out-of-range
    /// rule's, [`CpuidMissing::HighestBasic`], which is set too).
    pub fn with_cpuid_dump(mut self, dump: CpuidDump) -> Self {
        self.cpuid = dump.table();
        self.cpuid_missing = CpuidMissing::HighestBasic;
        self
    }

    /// Sets a CPUID leaf.
    pub fn with_cpuid(mut self, leaf: u32, subleaf: u32, r: CpuidResult) -> Self {
        self.cpuid.insert((leaf, subleaf), r);
        self
    }

    /// Removes a CPUID leaf (it then answers per [`SimConfig::cpuid_missing`]).
    pub fn without_cpuid(mut self, leaf: u32, subleaf: u32) -> Self {
        self.cpuid.remove(&(leaf, subleaf));
        self
    }

    /// Sets CPUID.80000007:EDX bit 8 (invariant TSC).
    pub fn with_invariant_tsc(self, on: bool) -> Self {
        self.with_cpuid(0x8000_0007, 0, regs(0, 0, 0, if on { 1 << 8 } else { 0 }))
    }

    /// Sets leaf 0x15 (denominator, numerator, crystal Hz).
    pub fn with_tsc_leaf(self, den: u32, num: u32, crystal_hz: u32) -> Self {
        self.with_cpuid(0x15, 0, regs(den, num, crystal_hz, 0))
    }

    /// `n` CPUs, CPU `i` with TSC offset `offsets[i]` (missing ones 0).
    pub fn with_cpus(mut self, n: usize, offsets: &[i64]) -> Self {
        self.tsc_offsets = (0..n.max(1))
            .map(|i| offsets.get(i).copied().unwrap_or(0))
            .collect();
        self
    }

    /// Sets the hypervisor-present bit and a signature range at `base`.
    pub fn with_hypervisor(mut self, base: u32, max_leaf: u32, sig: &[u8; 12]) -> Self {
        let mut l1 = self.cpuid.get(&(1, 0)).copied().unwrap_or_default();
        l1.ecx |= 1 << 31;
        self.cpuid.insert((1, 0), l1);
        self.cpuid.insert((base, 0), sig_regs(max_leaf, sig));
        self
    }

    /// Adds a KVM host and its CPUID range per the config (the feature
    /// bits it models are set or cleared; others a dump brought stay).
    pub fn with_kvm(mut self, kvm: KvmConfig) -> Self {
        let base = kvm.cpuid_base;
        self = self.with_hypervisor(
            base,
            base + kvm.cpuid_max_offset,
            clockhal_x86::cpuid::KVM_SIGNATURE,
        );
        let old = self.cpuid.get(&(base + 1, 0)).copied().unwrap_or_default();
        let eax = (old.eax & !KvmConfig::MODELLED_FEATURES) | kvm.feature_eax();
        self.cpuid
            .insert((base + 1, 0), regs(eax, old.ebx, old.ecx, old.edx));
        self.kvm = Some(kvm);
        self
    }

    /// Adds a Hyper-V partition (signature at 0x40000000, "Hv#1", features).
    pub fn with_hyperv(mut self, hv: HypervConfig) -> Self {
        self = self.with_hypervisor(
            0x4000_0000,
            0x4000_0006,
            clockhal_x86::cpuid::HYPERV_SIGNATURE,
        );
        self.cpuid
            .insert((0x4000_0001, 0), regs(0x3123_7648, 0, 0, 0));
        self.cpuid.insert(
            (0x4000_0003, 0),
            regs(hv.feature_eax(), 0, 0, hv.feature_edx()),
        );
        self.hyperv = Some(hv);
        self
    }

    /// Adds an HPET.
    pub fn with_hpet(mut self, hpet: HpetConfig) -> Self {
        self.hpet = Some(hpet);
        self
    }

    /// Adds an ACPI PM timer.
    pub fn with_pm_timer(mut self, pm: PmTimerConfig) -> Self {
        self.pm_timer = Some(pm);
        self
    }

    /// Adds an 8254 PIT.
    pub fn with_pit(mut self, pit: PitConfig) -> Self {
        self.pit = Some(pit);
        self
    }

    /// Adds a CMOS RTC.
    pub fn with_rtc(mut self, rtc: RtcConfig) -> Self {
        self.rtc = Some(rtc);
        self
    }

    /// Adds local APIC timers and the CPUID bits that announce them: APIC
    /// (1:EDX bit 9), x2APIC (1:ECX bit 21) and TSC-deadline (1:ECX bit
    /// 24) per the config, ARAT (6:EAX bit 2).
    pub fn with_lapic(mut self, lapic: LapicConfig) -> Self {
        let mut l1 = self.cpuid.get(&(1, 0)).copied().unwrap_or_default();
        l1.edx |= 1 << 9;
        l1.ecx &= !(1 << 21 | 1 << 24);
        l1.ecx |= (lapic.x2apic as u32) << 21 | (lapic.tsc_deadline as u32) << 24;
        self.cpuid.insert((1, 0), l1);
        let mut l6 = self.cpuid.get(&(6, 0)).copied().unwrap_or_default();
        l6.eax = (l6.eax & !(1 << 2)) | (lapic.arat as u32) << 2;
        self.cpuid.insert((6, 0), l6);
        self.lapic = Some(lapic);
        self
    }

    /// Builds the machine.
    pub fn build(self) -> SimMachine {
        SimMachine::new(self)
    }
}

/// Machine state the devices see during an access.
pub struct SimCtx<'a> {
    /// Machine time in ns.
    pub now_ns: u64,
    /// The TSC's current rate.
    pub tsc_hz: u64,
    /// CPU performing the access.
    pub cpu: usize,
    /// Memory shared with the hypervisor.
    pub memory: &'a SharedMemory,
    tsc: &'a SimTsc,
}

impl SimCtx<'_> {
    /// CPU `cpu`'s TSC now.
    pub fn tsc(&self, cpu: usize) -> u64 {
        self.tsc.ticks(self.now_ns, cpu)
    }
}

/// Trapping accesses seen so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrapCounts {
    /// `rdmsr` (including `try_rdmsr`).
    pub msr_reads: u64,
    /// `wrmsr`.
    pub msr_writes: u64,
    /// Port reads.
    pub port_reads: u64,
    /// Port writes.
    pub port_writes: u64,
    /// MMIO loads.
    pub mmio_reads: u64,
    /// MMIO stores.
    pub mmio_writes: u64,
    /// `cpuid` (traps under a hypervisor).
    pub cpuid: u64,
    /// `rdtsc`/`rdtscp` (not a trap, counted for completeness).
    pub rdtsc: u64,
}

impl TrapCounts {
    /// MSR, port and MMIO accesses: the exits a clock read may cause.
    pub fn exits(&self) -> u64 {
        self.msr_reads
            + self.msr_writes
            + self.port_reads
            + self.port_writes
            + self.mmio_reads
            + self.mmio_writes
    }
}

#[derive(Default)]
struct Counters {
    msr_reads: AtomicU64,
    msr_writes: AtomicU64,
    port_reads: AtomicU64,
    port_writes: AtomicU64,
    mmio_reads: AtomicU64,
    mmio_writes: AtomicU64,
    cpuid: AtomicU64,
    rdtsc: AtomicU64,
}

struct State {
    now_ns: u64,
    cpuid: CpuidTable,
    cpuid_missing: CpuidMissing,
    tsc: SimTsc,
    tsc_aux: Vec<u32>,
    overrides: Overrides,
    kvm: Option<KvmHost>,
    hyperv: Option<HypervHost>,
    hpet: Option<Hpet>,
    pm: Option<PmTimer>,
    pit: Option<Pit8254>,
    rtc: Option<CmosRtc>,
    lapic: Option<Lapic>,
}

impl State {
    fn cpuid(&self, cpu: usize, leaf: u32, subleaf: u32) -> CpuidResult {
        cpuid::answer(&self.cpuid, self.cpuid_missing, cpu, leaf, subleaf)
    }

    /// `IA32_TSC_ADJUST` exists (CPUID.(7,0):EBX bit 1).
    fn has_tsc_adjust(&self, cpu: usize) -> bool {
        self.cpuid(cpu, 7, 0).ebx & (1 << 1) != 0
    }

    /// The TSC exists (CPUID.1:EDX bit 4), and with it `IA32_TSC`.
    fn has_tsc(&self, cpu: usize) -> bool {
        self.cpuid(cpu, 1, 0).edx & (1 << 4) != 0
    }
}

/// The simulated machine. Implements [`Hardware`]; `&SimMachine` does too.
pub struct SimMachine {
    config: SimConfig,
    memory: SharedMemory,
    state: Mutex<State>,
    counters: Counters,
    /// Distinct (leaf, subleaf) pairs read since the last
    /// [`take_cpuid_reads`](SimMachine::take_cpuid_reads).
    cpuid_reads: Mutex<BTreeSet<(u32, u32)>>,
    rdtsc_hook: RdtscHookSlot,
    /// One owner of the clock hardware at a time (`Hardware::clock_lease`).
    lease: AtomicBool,
    /// This machine's per-CPU clock memory (`Hardware::slot_pool`).
    pool: Box<clockhal_core::SlotPool>,
}

/// A test's code that runs right after a `rdtsc` (see
/// [`SimMachine::set_rdtsc_hook`]).
type RdtscHook = Box<dyn FnMut(&SimMachine) + Send>;

/// The installed hook; `generation` changes on every set/clear so a hook
/// that replaces or clears itself while running is not put back.
#[derive(Default)]
struct RdtscHookSlot {
    hook: Mutex<Option<RdtscHook>>,
    installed: AtomicBool,
    generation: AtomicU64,
}

impl core::fmt::Debug for SimMachine {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SimMachine")
            .field("config", &self.config)
            .finish()
    }
}

/// The devices' view of the machine; `$st` is a `&mut State` (so the
/// devices, other fields, stay borrowable).
macro_rules! ctx {
    ($self:ident, $st:ident) => {
        SimCtx {
            now_ns: $st.now_ns,
            tsc_hz: $st.tsc.hz(),
            tsc: &$st.tsc,
            cpu: SimMachine::current_cpu(),
            memory: &$self.memory,
        }
    };
}

/// Runs `$f` on the device in field `$dev` (`None` if absent).
macro_rules! with_device {
    ($self:ident, $dev:ident, $f:ident) => {{
        let mut guard = $self.lock();
        let st = &mut *guard;
        let ctx = ctx!($self, st);
        st.$dev.as_mut().map(|d| $f(d, &ctx))
    }};
}

impl SimMachine {
    /// A machine from `config`.
    pub fn new(config: SimConfig) -> SimMachine {
        let state = State {
            now_ns: config.start_ns,
            cpuid: config.cpuid.clone(),
            cpuid_missing: config.cpuid_missing,
            tsc: SimTsc::new(config.tsc_hz, &config.tsc_offsets),
            tsc_aux: vec![0; config.tsc_offsets.len()],
            overrides: Overrides::default(),
            kvm: config.kvm.clone().map(KvmHost::new),
            hyperv: config.hyperv.clone().map(HypervHost::new),
            hpet: config.hpet.clone().map(Hpet::new),
            pm: config.pm_timer.clone().map(PmTimer::new),
            pit: config.pit.clone().map(Pit8254::new),
            rtc: config.rtc.clone().map(|r| CmosRtc::new(r, config.start_ns)),
            lapic: config
                .lapic
                .clone()
                .map(|l| Lapic::new(l, config.tsc_offsets.len())),
        };
        SimMachine {
            config,
            memory: SharedMemory::default(),
            state: Mutex::new(state),
            counters: Counters::default(),
            cpuid_reads: Mutex::default(),
            rdtsc_hook: RdtscHookSlot::default(),
            lease: AtomicBool::new(false),
            pool: Box::new(clockhal_core::SlotPool::new()),
        }
    }

    /// The configuration this machine was built from (its power-on state;
    /// run-time changes are not reflected here).
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// Memory shared with the simulated hypervisor.
    pub fn memory(&self) -> &SharedMemory {
        &self.memory
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn current_cpu() -> usize {
        CURRENT_CPU.with(|c| c.get())
    }

    /// Makes the calling thread run on CPU `cpu` from now on.
    pub fn set_cpu(&self, cpu: usize) {
        assert!(cpu < self.config.tsc_offsets.len(), "no CPU {cpu}");
        CURRENT_CPU.with(|c| c.set(cpu));
    }

    /// Runs `f` on CPU `cpu` (for the calling thread), then restores.
    pub fn on_cpu<R>(&self, cpu: usize, f: impl FnOnce() -> R) -> R {
        let prev = Self::current_cpu();
        self.set_cpu(cpu);
        let r = f();
        CURRENT_CPU.with(|c| c.set(prev));
        r
    }

    /// Number of CPUs.
    pub fn cpu_count(&self) -> usize {
        self.config.tsc_offsets.len()
    }

    /// Advances machine time by `ns`.
    ///
    /// A KVM host with steal time charges its vCPUs the configured share
    /// of `ns` ([`KvmHost::set_steal_permille`]) and writes their areas.
    pub fn advance(&self, ns: u64) {
        let mut guard = self.lock();
        let st = &mut *guard;
        st.now_ns = st.now_ns.saturating_add(ns);
        let ctx = ctx!(self, st);
        if let Some(k) = st.kvm.as_mut() {
            k.run_steal(&ctx, ns);
        }
    }

    /// Machine time in ns (the "true" time tests compare against).
    pub fn now_ns(&self) -> u64 {
        self.lock().now_ns
    }

    /// CPU `cpu`'s TSC at the current machine time, without advancing it.
    pub fn tsc_of(&self, cpu: usize) -> u64 {
        let st = self.lock();
        st.tsc.ticks(st.now_ns, cpu)
    }

    /// The TSC state now (rate, offsets, TSC_ADJUST).
    pub fn tsc_state(&self) -> SimTsc {
        self.lock().tsc.clone()
    }

    // ---- run-time changes ------------------------------------------------

    /// From now on the TSC counts at `hz` (every CPU), continuing from its
    /// current value: a live migration to a host with another TSC rate and
    /// no TSC scaling. The KVM host and the Hyper-V partition publish the
    /// new rate at their next update; until then their pages extrapolate
    /// the old one.
    pub fn set_tsc_hz(&self, hz: u64) {
        let mut st = self.lock();
        let now = st.now_ns;
        st.tsc.set_hz(now, hz);
    }

    /// Steps the TSC of `cpu` (`None`: every CPU) by `ticks` (negative:
    /// back), as a hypervisor's TSC offset change does: `IA32_TSC_ADJUST`
    /// does not show it.
    pub fn step_tsc(&self, cpu: Option<usize>, ticks: i64) {
        let mut st = self.lock();
        for c in 0..st.tsc.cpus() {
            if cpu.is_none_or(|x| x == c) {
                let o = st.tsc.offset(c).wrapping_add(ticks);
                st.tsc.set_offset(c, o);
            }
        }
    }

    /// Sets `cpu`'s hypervisor TSC offset to `ticks` (what
    /// [`SimConfig::tsc_offsets`] set at power-on).
    pub fn set_tsc_offset(&self, cpu: usize, ticks: i64) {
        self.lock().tsc.set_offset(cpu, ticks);
    }

    /// Sets `cpu`'s `IA32_TSC_ADJUST` to `value`, moving its TSC by the
    /// change: what firmware or an earlier OS that wrote the TSC leaves
    /// behind. The MSR is readable where CPUID.(7,0):EBX bit 1 says so.
    pub fn set_tsc_adjust(&self, cpu: usize, value: i64) {
        self.lock().tsc.set_adjust(cpu, value);
    }

    /// Sets CPUID `(leaf, subleaf)` (leaves that ignore ECX: subleaf 0)
    /// from the next `cpuid` on.
    pub fn set_cpuid(&self, leaf: u32, subleaf: u32, r: CpuidResult) {
        self.lock().cpuid.insert((leaf, subleaf), r);
    }

    /// Removes CPUID `(leaf, subleaf)`: it answers per the machine's
    /// [`CpuidMissing`] rule from the next `cpuid` on.
    pub fn remove_cpuid(&self, leaf: u32, subleaf: u32) {
        self.lock().cpuid.remove(&(leaf, subleaf));
    }

    /// Changes what leaves missing from the table answer.
    pub fn set_cpuid_missing(&self, rule: CpuidMissing) {
        self.lock().cpuid_missing = rule;
    }

    /// Makes MSR `msr` answer `answer` instead of whatever implements it
    /// (`None`: the device again), on every CPU.
    ///
    /// ```
    /// use clockhal_sim::{Answer, SimMachine};
    /// use clockhal_x86::{Hardware, Msr};
    /// let m = SimMachine::kvm();
    /// m.override_msr(Msr::IA32_TSC_ADJUST, Some(Answer::Fault));
    /// assert_eq!(m.try_rdmsr(Msr::IA32_TSC_ADJUST), None);
    /// m.override_msr(Msr::IA32_TSC_ADJUST, None);
    /// assert_eq!(m.try_rdmsr(Msr::IA32_TSC_ADJUST), Some(0));
    /// ```
    pub fn override_msr(&self, msr: Msr, answer: Option<Answer>) {
        overrides::set(&mut self.lock().overrides.msr, msr.number(), answer);
    }

    /// Makes port `port` answer `answer` to `inb` and `inl` (`None`: the
    /// device again); writes to it are dropped meanwhile.
    pub fn override_port(&self, port: u16, answer: Option<Answer>) {
        overrides::set(&mut self.lock().overrides.port, port, answer);
    }

    /// Makes the MMIO register at physical address `phys` answer `answer`
    /// (`None`: the device again); writes to it are dropped meanwhile.
    /// `phys` is the register's address, e.g. the HPET base + 0xF0 for its
    /// main counter.
    pub fn override_mmio(&self, phys: u64, answer: Option<Answer>) {
        overrides::set(&mut self.lock().overrides.mmio, phys, answer);
    }

    /// Removes every MSR, port and MMIO override.
    pub fn clear_overrides(&self) {
        self.lock().overrides = Overrides::default();
    }

    /// Trap counts so far.
    pub fn traps(&self) -> TrapCounts {
        let c = &self.counters;
        let l = |a: &AtomicU64| a.load(Ordering::SeqCst);
        TrapCounts {
            msr_reads: l(&c.msr_reads),
            msr_writes: l(&c.msr_writes),
            port_reads: l(&c.port_reads),
            port_writes: l(&c.port_writes),
            mmio_reads: l(&c.mmio_reads),
            mmio_writes: l(&c.mmio_writes),
            cpuid: l(&c.cpuid),
            rdtsc: l(&c.rdtsc),
        }
    }

    /// Zeroes the trap counters.
    pub fn reset_traps(&self) {
        let c = &self.counters;
        for a in [
            &c.msr_reads,
            &c.msr_writes,
            &c.port_reads,
            &c.port_writes,
            &c.mmio_reads,
            &c.mmio_writes,
            &c.cpuid,
            &c.rdtsc,
        ] {
            a.store(0, Ordering::SeqCst);
        }
    }

    /// The distinct CPUID (leaf, subleaf) pairs read since the last call,
    /// and forgets them: lets a test check that a decoder never reads above
    /// a range's maximum leaf.
    pub fn take_cpuid_reads(&self) -> BTreeSet<(u32, u32)> {
        std::mem::take(&mut *self.cpuid_reads.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Installs `hook`, run right after every `rdtsc`/`rdtscp` (after the
    /// value is taken, before the caller sees it), replacing any previous
    /// hook. The hook may use the machine freely (devices, `set_cpu`,
    /// `advance`, even `clear_rdtsc_hook`): it is how tests make a host
    /// update land *inside* a guest's read (seqlock retries, a migration to
    /// another CPU mid-read). A `rdtsc` issued by the hook itself, or by
    /// another thread while the hook runs, does not run it again.
    ///
    /// ```
    /// use clockhal_sim::SimMachine;
    /// use clockhal_x86::Hardware;
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::sync::Arc;
    /// let m = SimMachine::bare_metal();
    /// let n = Arc::new(AtomicU32::new(0));
    /// let seen = n.clone();
    /// m.set_rdtsc_hook(move |m| {
    ///     if seen.fetch_add(1, Ordering::SeqCst) == 1 {
    ///         m.clear_rdtsc_hook(); // two rdtscs, then gone
    ///     }
    /// });
    /// for _ in 0..5 {
    ///     m.rdtsc();
    /// }
    /// assert_eq!(n.load(Ordering::SeqCst), 2);
    /// ```
    pub fn set_rdtsc_hook(&self, hook: impl FnMut(&SimMachine) + Send + 'static) {
        let slot = &self.rdtsc_hook;
        let mut h = slot.hook.lock().unwrap_or_else(|e| e.into_inner());
        slot.generation.fetch_add(1, Ordering::SeqCst);
        *h = Some(Box::new(hook));
        slot.installed.store(true, Ordering::SeqCst);
    }

    /// Removes the `rdtsc` hook, if any.
    pub fn clear_rdtsc_hook(&self) {
        let slot = &self.rdtsc_hook;
        let mut h = slot.hook.lock().unwrap_or_else(|e| e.into_inner());
        slot.generation.fetch_add(1, Ordering::SeqCst);
        slot.installed.store(false, Ordering::SeqCst);
        *h = None;
    }

    fn run_rdtsc_hook(&self) {
        let slot = &self.rdtsc_hook;
        let (hook, generation) = {
            let mut h = slot.hook.lock().unwrap_or_else(|e| e.into_inner());
            (h.take(), slot.generation.load(Ordering::SeqCst))
        };
        let Some(mut hook) = hook else { return };
        hook(self);
        let mut h = slot.hook.lock().unwrap_or_else(|e| e.into_inner());
        if slot.generation.load(Ordering::SeqCst) == generation && h.is_none() {
            *h = Some(hook);
        }
    }

    /// QEMU `stop`, `ns` of host time, `cont`, at once for the guest (no
    /// guest instruction runs in between): machine time, the TSC and the
    /// devices move on by `ns`; kvmclock is restored where it stopped
    /// ([`KvmHost::cont_after`], `GUEST_STOPPED` set when `announce`).
    ///
    /// Interrupt-safe: not applicable (the simulator's host side).
    pub fn stop_and_cont(&self, ns: u64, announce: bool) {
        let mut guard = self.lock();
        let st = &mut *guard;
        st.now_ns = st.now_ns.saturating_add(ns);
        let ctx = ctx!(self, st);
        if let Some(k) = st.kvm.as_mut() {
            k.cont_after(&ctx, ns, announce);
        }
    }

    /// Runs `f` on the KVM host (`None` if the machine has none).
    pub fn with_kvm<R>(&self, f: impl FnOnce(&mut KvmHost, &SimCtx<'_>) -> R) -> Option<R> {
        with_device!(self, kvm, f)
    }

    /// Runs `f` on the Hyper-V partition (`None` if absent).
    pub fn with_hyperv<R>(&self, f: impl FnOnce(&mut HypervHost, &SimCtx<'_>) -> R) -> Option<R> {
        with_device!(self, hyperv, f)
    }

    /// Runs `f` on the HPET (`None` if absent).
    pub fn with_hpet<R>(&self, f: impl FnOnce(&mut Hpet, &SimCtx<'_>) -> R) -> Option<R> {
        with_device!(self, hpet, f)
    }

    /// Runs `f` on the PM timer (`None` if absent).
    pub fn with_pm_timer<R>(&self, f: impl FnOnce(&mut PmTimer, &SimCtx<'_>) -> R) -> Option<R> {
        with_device!(self, pm, f)
    }

    /// Runs `f` on the PIT (`None` if absent).
    pub fn with_pit<R>(&self, f: impl FnOnce(&mut Pit8254, &SimCtx<'_>) -> R) -> Option<R> {
        with_device!(self, pit, f)
    }

    /// Runs `f` on the RTC (`None` if absent).
    pub fn with_rtc<R>(&self, f: impl FnOnce(&mut CmosRtc, &SimCtx<'_>) -> R) -> Option<R> {
        with_device!(self, rtc, f)
    }

    /// Runs `f` on the local APICs (`None` if not modelled).
    pub fn with_lapic<R>(&self, f: impl FnOnce(&mut Lapic, &SimCtx<'_>) -> R) -> Option<R> {
        with_device!(self, lapic, f)
    }

    /// When CPU `cpu`'s APIC timer fires, machine ns (`None`: disarmed or
    /// no APIC).
    pub fn lapic_next_fire_ns(&self, cpu: usize) -> Option<u64> {
        let mut guard = self.lock();
        let st = &mut *guard;
        let ctx = ctx!(self, st);
        st.lapic.as_ref().and_then(|l| l.next_fire_ns(&ctx, cpu))
    }

    /// CPU `cpu`'s APIC timer interrupt, if it has fired by now: its
    /// vector (the timer is then disarmed). `None`: not yet, disarmed, or
    /// masked.
    pub fn lapic_take_interrupt(&self, cpu: usize) -> Option<u8> {
        let mut guard = self.lock();
        let st = &mut *guard;
        let ctx = ctx!(self, st);
        st.lapic.as_mut().and_then(|l| l.take_interrupt(&ctx, cpu))
    }

    /// When vCPU `cpu`'s Hyper-V STIMER0 fires, machine ns (`None`:
    /// disabled, or no partition).
    pub fn stimer_next_fire_ns(&self, cpu: usize) -> Option<u64> {
        let mut guard = self.lock();
        let st = &mut *guard;
        let ctx = ctx!(self, st);
        st.hyperv
            .as_ref()
            .and_then(|h| h.stimer_next_fire_ns(&ctx, cpu))
    }

    /// vCPU `cpu`'s STIMER0 interrupt (direct mode: its vector), if it has
    /// fired by now.
    pub fn stimer_take_interrupt(&self, cpu: usize) -> Option<u8> {
        let mut guard = self.lock();
        let st = &mut *guard;
        let ctx = ctx!(self, st);
        st.hyperv
            .as_mut()
            .and_then(|h| h.stimer_take_interrupt(&ctx, cpu))
    }

    /// When PIT channel 0's one-shot raises IRQ 0, machine ns (`None`:
    /// none pending, or no PIT).
    pub fn pit_ch0_next_fire_ns(&self) -> Option<u64> {
        self.lock()
            .pit
            .as_ref()
            .and_then(|p| p.channel0_next_fire_ns())
    }

    /// PIT channel 0's IRQ 0, if it has come by now (taken once).
    pub fn pit_ch0_take_interrupt(&self) -> bool {
        let mut guard = self.lock();
        let st = &mut *guard;
        let ctx = ctx!(self, st);
        st.pit
            .as_mut()
            .is_some_and(|p| p.channel0_take_interrupt(&ctx))
    }

    /// The xAPIC register page as the OS would map it (simulated).
    pub fn lapic_region(&self) -> Option<MmioRegion> {
        self.config
            .lapic
            .as_ref()
            .map(|l| MmioRegion::simulated(l.base as usize, 4096))
    }

    /// When HPET timer `n` next matches, machine ns (`None`: disabled,
    /// no HPET, or never).
    pub fn hpet_next_fire_ns(&self, n: usize) -> Option<u64> {
        let mut guard = self.lock();
        let st = &mut *guard;
        let ctx = ctx!(self, st);
        st.hpet.as_ref().and_then(|h| h.next_fire_ns(&ctx, n))
    }

    /// HPET timer `n`'s interrupt, if it has matched by now: the GSI it is
    /// routed to.
    pub fn hpet_take_interrupt(&self, n: usize) -> Option<u32> {
        let mut guard = self.lock();
        let st = &mut *guard;
        let ctx = ctx!(self, st);
        st.hpet.as_mut().and_then(|h| h.take_interrupt(&ctx, n))
    }

    /// The HPET's register window as the OS would map it (simulated).
    pub fn hpet_region(&self) -> Option<MmioRegion> {
        self.config
            .hpet
            .as_ref()
            .map(|h| MmioRegion::simulated(h.base as usize, 1024))
    }

    /// `n` contiguous pvclock areas (one per vCPU) at a fake physical address.
    pub fn alloc_pvclock_areas(&self, n: usize) -> PhysMapped<[PvclockVcpuTimeInfo]> {
        self.memory.alloc_pvclock_areas(n)
    }

    /// `n` contiguous steal-time areas (one per vCPU), 64-byte aligned.
    ///
    /// Interrupt-safe: no (allocates; simulator).
    pub fn alloc_steal_areas(&self, n: usize) -> PhysMapped<[KvmStealTime]> {
        self.memory.alloc_steal_areas(n)
    }

    /// A pvclock wall-clock structure.
    pub fn alloc_wall_clock(&self) -> PhysMapped<PvclockWallClock> {
        self.memory.alloc_wall_clock()
    }

    /// A Hyper-V reference TSC page.
    pub fn alloc_hv_page(&self) -> PhysMapped<HvReferenceTscPage> {
        self.memory.alloc_hv_page()
    }

    /// The same memory as `mapped`, announced `by` bytes past its
    /// guest-physical address: a misaligned buffer, for alignment checks.
    /// The simulated hypervisors only write memory they find at the exact
    /// address they were given, and nothing was allocated at this one, so
    /// the buffer is never written through it.
    pub fn misaligned<T: ?Sized>(&self, mapped: PhysMapped<T>, by: u64) -> PhysMapped<T> {
        // In the simulator's fake physical space `phys + by` names no
        // allocation (they are page-granular and looked up by exact
        // address), so no simulated host ever writes through it.
        PhysMapped::simulated(mapped.get(), mapped.phys() + by)
    }

    /// A guest `wrmsr`, as the simulated machine handles it (safe: the
    /// simulated hypervisor only writes memory it allocated). A write to an
    /// MSR nobody implements panics with "simulated #GP" when unknown MSRs
    /// fault.
    pub fn write_msr(&self, msr: Msr, value: u64) {
        self.counters.msr_writes.fetch_add(1, Ordering::SeqCst);
        let mut guard = self.lock();
        let st = &mut *guard;
        self.tick(st, self.config.costs.trap_ns);
        let cpu = Self::current_cpu();
        let gp = || -> ! { panic!("simulated #GP: wrmsr {msr:?} = {value:#x}") };
        match st.overrides.msr.get(&msr.number()) {
            Some(Answer::Fault) => gp(),
            Some(Answer::Value(_)) => return,
            None => {}
        }
        match msr.number() {
            n if n == Msr::IA32_TSC_AUX.number() => {
                st.tsc_aux[cpu] = value as u32;
                return;
            }
            MSR_TSC if st.has_tsc(cpu) => {
                let now = st.now_ns;
                st.tsc.write_tsc(now, cpu, value);
                return;
            }
            n if n == Msr::IA32_TSC_ADJUST.number() && st.has_tsc_adjust(cpu) => {
                st.tsc.set_adjust(cpu, value as i64);
                return;
            }
            _ => {}
        }
        let ctx = ctx!(self, st);
        if let Some(r) = st
            .lapic
            .as_mut()
            .and_then(|l| l.wrmsr(&ctx, msr.number(), value))
        {
            return r.unwrap_or_else(|()| gp());
        }
        if let Some(r) = st
            .kvm
            .as_mut()
            .and_then(|k| k.wrmsr(&ctx, msr.number(), value))
        {
            return r.unwrap_or_else(|()| gp());
        }
        if let Some(r) = st
            .hyperv
            .as_mut()
            .and_then(|h| h.wrmsr(&ctx, msr.number(), value))
        {
            return r.unwrap_or_else(|()| gp());
        }
        if self.config.unknown_msr == UnknownMsr::Fault {
            gp();
        }
    }

    /// A guest `outb`, as the simulated machine handles it (safe: simulated
    /// devices only). Writes to absent devices are dropped.
    pub fn write_port8(&self, port: u16, value: u8) {
        self.counters.port_writes.fetch_add(1, Ordering::SeqCst);
        let mut guard = self.lock();
        let st = &mut *guard;
        self.tick(st, self.config.costs.trap_ns);
        if st.overrides.port.contains_key(&port) {
            return;
        }
        let ctx = ctx!(self, st);
        let _handled = st
            .pit
            .as_mut()
            .is_some_and(|p| p.port_write(&ctx, port, value))
            || st
                .rtc
                .as_mut()
                .is_some_and(|r| r.port_write(&ctx, port, value));
    }

    fn tick(&self, st: &mut State, ns: u64) {
        st.now_ns = st.now_ns.saturating_add(ns);
    }

    fn msr_read(&self, msr: Msr) -> Option<u64> {
        self.counters.msr_reads.fetch_add(1, Ordering::SeqCst);
        let mut guard = self.lock();
        let st = &mut *guard;
        self.tick(st, self.config.costs.trap_ns);
        let cpu = Self::current_cpu();
        match st.overrides.msr.get(&msr.number()) {
            Some(Answer::Fault) => return None,
            Some(Answer::Value(v)) => return Some(*v),
            None => {}
        }
        match msr.number() {
            n if n == Msr::IA32_TSC_AUX.number() => return st.tsc_aux.get(cpu).map(|&v| v as u64),
            MSR_TSC if st.has_tsc(cpu) => return Some(st.tsc.ticks(st.now_ns, cpu)),
            n if n == Msr::IA32_TSC_ADJUST.number() && st.has_tsc_adjust(cpu) => {
                return Some(st.tsc.adjust(cpu) as u64)
            }
            _ => {}
        }
        let ctx = ctx!(self, st);
        if let Some(v) = st.lapic.as_ref().and_then(|l| l.rdmsr(&ctx, msr.number())) {
            return v;
        }
        if let Some(v) = st.kvm.as_mut().and_then(|k| k.rdmsr(&ctx, msr.number())) {
            return v;
        }
        if let Some(v) = st.hyperv.as_mut().and_then(|h| h.rdmsr(&ctx, msr.number())) {
            return v;
        }
        match self.config.unknown_msr {
            UnknownMsr::ReadZero => Some(0),
            UnknownMsr::Fault => None,
        }
    }
}

impl Hardware for SimMachine {
    fn rdtsc(&self) -> u64 {
        self.counters.rdtsc.fetch_add(1, Ordering::SeqCst);
        let tsc = {
            let mut st = self.lock();
            self.tick(&mut st, self.config.costs.rdtsc_ns);
            st.tsc.ticks(st.now_ns, Self::current_cpu())
        };
        if self.rdtsc_hook.installed.load(Ordering::SeqCst) {
            self.run_rdtsc_hook();
        }
        tsc
    }

    fn rdtsc_ordered(&self) -> u64 {
        self.rdtsc()
    }

    /// # Panics
    /// With "simulated #UD" when CPUID.80000001:EDX bit 27 (RDTSCP) is
    /// clear, as the instruction faults then.
    fn rdtscp(&self) -> (u64, u32) {
        let cpu = Self::current_cpu();
        let has = self.lock().cpuid(cpu, 0x8000_0001, 0).edx & (1 << 27) != 0;
        assert!(
            has,
            "simulated #UD: rdtscp without CPUID.80000001:EDX.RDTSCP"
        );
        let t = self.rdtsc();
        let aux = self.lock().tsc_aux[cpu];
        (t, aux)
    }

    fn cpuid(&self, leaf: u32, subleaf: u32) -> CpuidResult {
        self.counters.cpuid.fetch_add(1, Ordering::SeqCst);
        self.cpuid_reads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((leaf, subleaf));
        let mut st = self.lock();
        self.tick(&mut st, self.config.costs.cpuid_ns);
        st.cpuid(Self::current_cpu(), leaf, subleaf)
    }

    fn rdmsr(&self, msr: Msr) -> u64 {
        match self.msr_read(msr) {
            Some(v) => v,
            None => panic!("simulated #GP: rdmsr {msr:?}"),
        }
    }

    fn try_rdmsr(&self, msr: Msr) -> Option<u64> {
        self.msr_read(msr)
    }

    fn recovers_msr_faults(&self) -> bool {
        true
    }

    // The trait makes `wrmsr` unsafe for real hardware; the simulator's
    // "hypervisor" only ever writes memory it allocated itself.
    #[allow(unsafe_code)]
    unsafe fn wrmsr(&self, msr: Msr, value: u64) {
        self.write_msr(msr, value)
    }

    fn inb(&self, port: u16) -> u8 {
        self.counters.port_reads.fetch_add(1, Ordering::SeqCst);
        let mut guard = self.lock();
        let st = &mut *guard;
        self.tick(st, self.config.costs.trap_ns);
        if let Some(v) = st.overrides.port_read(port, 1) {
            return v as u8;
        }
        let ctx = ctx!(self, st);
        // An absent device reads all ones.
        st.pit
            .as_mut()
            .and_then(|p| p.port_read(&ctx, port))
            .or_else(|| st.rtc.as_mut().and_then(|r| r.port_read(&ctx, port)))
            .unwrap_or(u8::MAX)
    }

    // As `wrmsr`: unsafe only because the trait is; simulated ports have no
    // effect outside the simulation.
    #[allow(unsafe_code)]
    unsafe fn outb(&self, port: u16, value: u8) {
        self.write_port8(port, value)
    }

    fn inl(&self, port: u16) -> u32 {
        self.counters.port_reads.fetch_add(1, Ordering::SeqCst);
        let mut guard = self.lock();
        let st = &mut *guard;
        self.tick(st, self.config.costs.trap_ns);
        if let Some(v) = st.overrides.port_read(port, 4) {
            return v;
        }
        let ctx = ctx!(self, st);
        st.pm
            .as_mut()
            .and_then(|p| p.port_read(&ctx, port))
            .unwrap_or(u32::MAX)
    }

    fn mmio_read32(&self, region: MmioRegion, offset: usize) -> u32 {
        self.mmio_read(region, offset, 4) as u32
    }

    fn mmio_read64(&self, region: MmioRegion, offset: usize) -> u64 {
        self.mmio_read(region, offset, 8)
    }

    fn mmio_write32(&self, region: MmioRegion, offset: usize, value: u32) {
        self.mmio_write(region, offset, 4, value as u64)
    }

    fn mmio_write64(&self, region: MmioRegion, offset: usize, value: u64) {
        self.mmio_write(region, offset, 8, value)
    }

    fn cpu_index(&self) -> usize {
        Self::current_cpu()
    }

    fn is_simulated(&self) -> bool {
        true
    }

    fn clock_lease(&self) -> &AtomicBool {
        &self.lease
    }

    fn slot_pool(&self) -> &clockhal_core::SlotPool {
        &self.pool
    }
}

impl SimMachine {
    fn mmio_addr(region: MmioRegion, offset: usize, size: usize) -> Option<u64> {
        // A simulated region may sit at the top of the address space: an
        // access whose address wraps is out of bounds, as on hardware.
        region
            .contains(offset, size)
            .then(|| region.base().checked_add(offset))
            .flatten()
            .map(|a| a as u64)
    }

    fn mmio_read(&self, region: MmioRegion, offset: usize, size: usize) -> u64 {
        self.counters.mmio_reads.fetch_add(1, Ordering::SeqCst);
        let mut guard = self.lock();
        let st = &mut *guard;
        self.tick(st, self.config.costs.trap_ns);
        let all_ones = if size == 8 { u64::MAX } else { u32::MAX as u64 };
        let Some(addr) = Self::mmio_addr(region, offset, size) else {
            return all_ones;
        };
        if let Some(v) = st.overrides.mmio_read(addr, size) {
            return v;
        }
        let ctx = ctx!(self, st);
        if let Some(v) = st.lapic.as_ref().and_then(|l| l.mmio_read(&ctx, addr)) {
            return v;
        }
        st.hpet
            .as_mut()
            .and_then(|h| h.mmio_read(&ctx, addr, size))
            .unwrap_or(all_ones)
    }

    fn mmio_write(&self, region: MmioRegion, offset: usize, size: usize, value: u64) {
        self.counters.mmio_writes.fetch_add(1, Ordering::SeqCst);
        let mut guard = self.lock();
        let st = &mut *guard;
        self.tick(st, self.config.costs.trap_ns);
        let Some(addr) = Self::mmio_addr(region, offset, size) else {
            return;
        };
        if st.overrides.mmio_write_dropped(addr) {
            return;
        }
        let ctx = ctx!(self, st);
        if st
            .lapic
            .as_mut()
            .is_some_and(|l| l.mmio_write(&ctx, addr, value))
        {
            return;
        }
        if let Some(h) = st.hpet.as_mut() {
            h.mmio_write(&ctx, addr, size, value);
        }
    }
}
