//! KVM steal time: how long each vCPU was runnable but the host ran
//! something else, read from the per-vCPU area the host fills
//! (`MSR_KVM_STEAL_TIME`), with the same distrust as the pvclock areas.
//!
//! A scheduler that charges a task for time its vCPU did not run makes
//! wrong decisions on an overcommitted host; [`StealTime::steal_ns`] is the
//! time to take off. Per CPU it is the steal since the CPU first
//! registered (carried across [`resume_this_cpu`](StealTime::resume_this_cpu)
//! and re-registrations), and never goes back.
//!
//! **Origin.** The host's counter starts anywhere (KVM adds what the vCPU
//! thread waited before the registration, seconds on a loaded host): the
//! first value the host writes after a registration is this CPU's zero,
//! whether it wrote during the MSR write (KVM) or only later (the
//! project's `kvm_pvm` host, whose area is still unwritten when the MSR
//! write returns).
//!
//! **Distrust.** Every reading of the host's counter is judged against
//! the last one this CPU accepted and the caller's clock (`now_ns`, any
//! per-CPU monotonic nanosecond clock: the facade passes its `Clock`'s): a
//! counter that went back, or grew by more than the clock over the same
//! interval (no vCPU can lose more time than passed), is refused and
//! counted in [`StealStats`], and the last accepted value stands. A version
//! stuck odd is given up after [`MAX_READ_ATTEMPTS`](crate::MAX_READ_ATTEMPTS)
//! samples (counted; the value holds). So what a caller sees never grows
//! faster than its clock, whatever the host writes.
//!
//! ```
//! use clockhal_kvmclock::{StealState, StealTime};
//! use clockhal_sim::SimMachine;
//!
//! static STATE: StealState = StealState::new(); // the guest's per-CPU state
//! let m = SimMachine::kvm();
//! let areas = m.alloc_steal_areas(1); // the OS's memory, one area per CPU
//! let steal = StealTime::probe(&m, areas, &STATE, 0).unwrap();
//! // The host runs other work for 3 ms of the next 10 ms.
//! m.with_kvm(|k, _| k.set_steal_permille(300));
//! m.advance(10_000_000);
//! let ns = steal.steal_ns(10_000_000).unwrap();
//! assert!(ns >= 2_900_000 && ns <= 3_100_000, "{ns}");
//! // A host that jumps its counter by a minute in a millisecond is refused.
//! m.with_kvm(|k, ctx| k.publish_steal(ctx, 0, 60_000_000_000));
//! assert_eq!(steal.steal_ns(11_000_000), Some(ns));
//! assert_eq!(steal.stats().too_fast, 1);
//! ```

use crate::registry::{Claim, Registry};
use crate::MAX_READ_ATTEMPTS;
use clockhal_x86::cpuid::{self, KvmFeatures};
use clockhal_x86::paravirt::{
    kvm_register_steal_time, kvm_unregister_steal_time, KvmStealTime, PhysMapped, RegisterError,
};
use clockhal_x86::Hardware;
use core::fmt;
use core::sync::atomic::{
    AtomicBool, AtomicU64,
    Ordering::{AcqRel, Acquire, Relaxed, Release},
};

/// Most CPUs steal time tracks (one [`StealTimePage`](clockhal_x86::paravirt::StealTimePage)'s
/// worth); areas of larger indices are refused.
pub const STEAL_MAX_CPUS: usize = 64;

/// Why steal time is unavailable, or a CPU could not register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum StealError {
    /// CPUID.1:ECX bit 31 is clear: not running under a hypervisor.
    NoHypervisor,
    /// No "KVMKVMKVM" signature at any hypervisor CPUID base.
    NoKvmSignature,
    /// KVM's CPUID leaf 0x40000001 EAX bit 5 (`STEAL_TIME`) is clear.
    NotOffered,
    /// The OS gave no steal-time memory.
    NoMemory,
    /// The [`StealState`] is used by another [`StealTime`] (one at a time).
    StateInUse,
    /// The steal-time memory overlaps memory the OS gave for another
    /// protocol (the pvclock areas): the host would write both over each
    /// other, so it is not registered.
    MemoryShared,
    /// The calling CPU's index has no area (or is at least
    /// [`STEAL_MAX_CPUS`]).
    CpuIndexOutOfRange {
        /// `Hardware::cpu_index()` of the calling CPU.
        cpu: usize,
        /// Areas usable.
        areas: usize,
    },
    /// Another CPU (APIC ID `holder_apic`) registered this index's area:
    /// the OS's `cpu_index()` is not distinct per CPU.
    IndexTaken {
        /// The index both CPUs report.
        cpu: usize,
        /// APIC ID of the CPU that holds it.
        holder_apic: u32,
        /// APIC ID of the CPU that asked.
        this_apic: u32,
    },
    /// This CPU's area is registered already (a second registration of the
    /// same memory is refused; nothing changed).
    AlreadyRegistered,
    /// Refused before the MSR was written (memory not 64-byte aligned,
    /// simulated memory on hardware, the MSR faults).
    Register(RegisterError),
    /// Right after registration the area's version stayed odd: nothing
    /// stays registered.
    AreaBusy,
    /// The calling CPU has not registered (or unregistered) its area.
    Unregistered,
}

impl fmt::Display for StealError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StealError::NoHypervisor => f.write_str("no hypervisor (CPUID.1:ECX[31] clear)"),
            StealError::NoKvmSignature => {
                f.write_str("no KVM signature at any hypervisor CPUID base")
            }
            StealError::NotOffered => {
                f.write_str("KVM does not offer steal time (CPUID 0x40000001 EAX bit 5 clear)")
            }
            StealError::NoMemory => f.write_str("no steal-time memory given"),
            StealError::StateInUse => f.write_str("the steal-time state is in use"),
            StealError::MemoryShared => {
                f.write_str("steal-time memory overlaps the pvclock areas")
            }
            StealError::CpuIndexOutOfRange { cpu, areas } => {
                write!(f, "CPU index {cpu} has no steal-time area ({areas} usable)")
            }
            StealError::IndexTaken {
                cpu,
                holder_apic,
                this_apic,
            } => write!(
                f,
                "steal-time area {cpu} already registered by APIC {holder_apic} (this is APIC {this_apic})"
            ),
            StealError::AlreadyRegistered => {
                f.write_str("this CPU's steal-time area is registered already")
            }
            StealError::Register(e) => write!(f, "steal-time area refused: {e}"),
            StealError::AreaBusy => write!(
                f,
                "steal-time version odd for {MAX_READ_ATTEMPTS} attempts after registration"
            ),
            StealError::Unregistered => f.write_str("this CPU has no registered steal-time area"),
        }
    }
}

impl core::error::Error for StealError {}

/// Readings of the host's counter that were not used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct StealStats {
    /// The version stayed odd or kept changing for
    /// [`MAX_READ_ATTEMPTS`](crate::MAX_READ_ATTEMPTS) samples.
    pub busy_reads: u64,
    /// The counter was below the last accepted value.
    pub went_back: u64,
    /// The counter grew by more than the caller's clock since the last
    /// accepted value.
    pub too_fast: u64,
}

impl StealStats {
    /// Readings refused as implausible (back or too fast): what a host
    /// that writes garbage leaves.
    ///
    /// Interrupt-safe: yes.
    pub const fn refused(&self) -> u64 {
        self.went_back + self.too_fast
    }
}

/// One CPU's accepted state (host counter values are raw; times are the
/// caller's clock).
#[derive(Debug)]
struct CpuSteal {
    /// Host counter and time at registration.
    base_raw: AtomicU64,
    base_ns: AtomicU64,
    /// Last accepted host counter and the time it was accepted at.
    good_raw: AtomicU64,
    good_ns: AtomicU64,
    /// Steal of earlier registrations.
    carried: AtomicU64,
    /// Largest value returned (keeps the result monotonic even for a read
    /// that an interrupt's read overtook).
    returned: AtomicU64,
    /// The host has written the area since registration (version != 0):
    /// its first write sets the counter's origin.
    anchored: AtomicBool,
}

impl CpuSteal {
    const fn new() -> CpuSteal {
        CpuSteal {
            base_raw: AtomicU64::new(0),
            base_ns: AtomicU64::new(0),
            good_raw: AtomicU64::new(0),
            good_ns: AtomicU64::new(0),
            carried: AtomicU64::new(0),
            returned: AtomicU64::new(0),
            anchored: AtomicBool::new(false),
        }
    }

    /// Takes `steal` at `now_ns` as the origin of the host's counter.
    fn anchor(&self, steal: u64, now_ns: u64) {
        self.good_ns.store(now_ns, Release);
        self.base_raw.store(steal, Release);
        self.good_raw.store(steal, Release);
        self.anchored.store(true, Release);
    }

    fn reset(&self) {
        for a in [
            &self.base_raw,
            &self.base_ns,
            &self.good_raw,
            &self.good_ns,
            &self.carried,
            &self.returned,
        ] {
            a.store(0, Release);
        }
        self.anchored.store(false, Release);
    }

    /// Folds this registration's steal into `carried` (so a later
    /// registration continues above it).
    fn fold(&self) {
        let raw = self.good_raw.load(Acquire);
        let this = raw.saturating_sub(self.base_raw.load(Acquire));
        let total = self
            .carried
            .load(Acquire)
            .saturating_add(this)
            .max(self.returned.load(Acquire));
        self.carried.store(total, Release);
        self.base_raw.store(raw, Release);
    }
}

#[derive(Debug, Default)]
struct Counters {
    busy: AtomicU64,
    back: AtomicU64,
    fast: AtomicU64,
}

/// The guest's per-CPU steal-time state (~3.5 KiB), in memory the OS
/// provides — a `static`, as for the clock's per-CPU slots — so that a
/// [`StealTime`] (and a `clockhal::Clock` holding one) stays small when
/// moved on a kernel stack. One [`StealTime`] uses it at a time.
///
/// ```
/// use clockhal_kvmclock::StealState;
/// static STEAL_STATE: StealState = StealState::new();
/// # let _ = &STEAL_STATE;
/// ```
#[derive(Debug)]
pub struct StealState {
    in_use: AtomicBool,
    registry: Registry<STEAL_MAX_CPUS>,
    cpus: [CpuSteal; STEAL_MAX_CPUS],
}

impl StealState {
    /// Unused state.
    ///
    /// Interrupt-safe: yes.
    pub const fn new() -> StealState {
        StealState {
            in_use: AtomicBool::new(false),
            registry: Registry::new(),
            cpus: [const { CpuSteal::new() }; STEAL_MAX_CPUS],
        }
    }

    /// Takes the state for a new [`StealTime`], starting from nothing.
    fn claim(&self) -> bool {
        if self.in_use.swap(true, AcqRel) {
            return false;
        }
        for (i, st) in self.cpus.iter().enumerate() {
            st.reset();
            self.registry.clear(i);
        }
        true
    }
}

impl Default for StealState {
    fn default() -> Self {
        StealState::new()
    }
}

/// KVM steal time on one guest: probe once, register each AP, read on
/// each CPU. Dropping it unregisters the *calling* CPU's area (each AP
/// calls [`unregister_this_cpu`](Self::unregister_this_cpu) first, as for
/// kvmclock) and frees its [`StealState`].
#[derive(Debug)]
pub struct StealTime<H: Hardware> {
    hw: H,
    areas: PhysMapped<[KvmStealTime]>,
    state: &'static StealState,
    counters: Counters,
}

impl<H: Hardware> StealTime<H> {
    /// Finds KVM's `STEAL_TIME` feature and registers the calling CPU's area
    /// (`areas[cpu_index()]`, 64-byte aligned guest memory: a
    /// [`StealTimePage`](clockhal_x86::paravirt::StealTimePage) guarantees
    /// it). `now_ns` is the caller's clock now (the one later reads pass).
    ///
    /// Interrupt-safe: no (writes an MSR; call at boot on the probing CPU).
    pub fn probe(
        hw: H,
        areas: PhysMapped<[KvmStealTime]>,
        state: &'static StealState,
        now_ns: u64,
    ) -> Result<Self, StealError> {
        if !cpuid::hypervisor_present(&hw) {
            return Err(StealError::NoHypervisor);
        }
        let (_, features) = cpuid::kvm(&hw).ok_or(StealError::NoKvmSignature)?;
        if !features.contains(KvmFeatures::STEAL_TIME) {
            return Err(StealError::NotOffered);
        }
        if areas.is_empty() {
            return Err(StealError::NoMemory);
        }
        if !state.claim() {
            return Err(StealError::StateInUse);
        }
        let s = StealTime {
            hw,
            areas,
            state,
            counters: Counters::default(),
        };
        s.register_this_cpu(now_ns)?;
        Ok(s)
    }

    /// Registers the calling CPU's area (every AP, before it reads); `now_ns`
    /// is the caller's clock now. Refused: an index another CPU holds
    /// ([`StealError::IndexTaken`]), this CPU's area registered already
    /// ([`StealError::AlreadyRegistered`], nothing changes), a version odd
    /// right after registration (nothing stays registered).
    ///
    /// Interrupt-safe: no (writes an MSR; no steal read may run on this CPU
    /// meanwhile, though one that does gets a bounded, never-larger value).
    pub fn register_this_cpu(&self, now_ns: u64) -> Result<(), StealError> {
        let cpu = self.hw.cpu_index();
        let apic = cpuid::apic_id(&self.hw);
        let usable = self.areas.len().min(STEAL_MAX_CPUS);
        let (Some(area), Some(st)) = (self.areas.element(cpu), self.state.cpus.get(cpu)) else {
            return Err(StealError::CpuIndexOutOfRange { cpu, areas: usable });
        };
        match self.state.registry.claim(cpu, apic) {
            Ok(Claim::New) => {}
            Ok(Claim::Again) => return Err(StealError::AlreadyRegistered),
            Err(holder) => {
                return Err(StealError::IndexTaken {
                    cpu,
                    holder_apic: holder,
                    this_apic: apic,
                })
            }
        }
        if let Err(e) = kvm_register_steal_time(&self.hw, area) {
            self.state.registry.release(cpu, apic);
            return Err(StealError::Register(e));
        }
        let Some(first) = area.get().sample(MAX_READ_ATTEMPTS) else {
            kvm_unregister_steal_time(&self.hw);
            self.state.registry.release(cpu, apic);
            return Err(StealError::AreaBusy);
        };
        // The host's counter may start anywhere (KVM adds what the vCPU
        // thread waited before): steal counts from its first write after
        // registration — here if it wrote during the MSR write (KVM does,
        // at the next entry), else at the first read that finds it written
        // (version no longer the 0 this registration wrote).
        st.base_ns.store(now_ns, Release);
        st.anchor(first.steal, now_ns);
        st.anchored.store(first.version != 0, Release);
        Ok(())
    }

    /// Stops the host from writing the calling CPU's area (before its memory
    /// is reused: kexec, shutdown). Its steal so far is kept; reads on this
    /// CPU return `None` until it registers again.
    ///
    /// Interrupt-safe: no (writes an MSR).
    pub fn unregister_this_cpu(&self) {
        let cpu = self.hw.cpu_index();
        if self.state.registry.release(cpu, cpuid::apic_id(&self.hw)) {
            kvm_unregister_steal_time(&self.hw);
            if let Some(st) = self.state.cpus.get(cpu) {
                st.fold();
            }
        }
    }

    /// After the guest was restored (the new host knows no registration):
    /// registers the calling CPU's area again (zeroed), continuing its steal
    /// from the value before. Every CPU calls it.
    ///
    /// Interrupt-safe: no (writes an MSR).
    pub fn resume_this_cpu(&self, now_ns: u64) -> Result<(), StealError> {
        let cpu = self.hw.cpu_index();
        if self.state.registry.release(cpu, cpuid::apic_id(&self.hw)) {
            if let Some(st) = self.state.cpus.get(cpu) {
                st.fold();
            }
        }
        self.register_this_cpu(now_ns)
    }

    /// Whether CPU `cpu`'s area is registered.
    ///
    /// Interrupt-safe: yes (one atomic load).
    pub fn is_registered(&self, cpu: usize) -> bool {
        self.state.registry.is_registered(cpu)
    }

    /// The calling CPU's steal time in ns since it first registered, judged
    /// against `now_ns` (the caller's per-CPU monotonic clock, the same one
    /// it registered with; see the module docs). Never less than a value
    /// returned before on this CPU, never more than `now_ns` minus the time
    /// of registration. A refused or busy reading returns the last accepted
    /// value (counted in [`stats`](Self::stats)). `None`: this CPU has no
    /// registered area.
    ///
    /// Interrupt-safe: yes (lock-free: loads, a bounded seqlock sample and
    /// atomic maxima on the CPU's own state).
    pub fn steal_ns(&self, now_ns: u64) -> Option<u64> {
        let cpu = self.hw.cpu_index();
        let st = self.state.cpus.get(cpu)?;
        let area = self.areas.get().get(cpu)?;
        if !self.state.registry.is_registered(cpu) {
            return None;
        }
        // The counter first, then its time (stored in the opposite order):
        // a time newer than the counter only makes the check stricter.
        let mut good = st.good_raw.load(Acquire);
        let good_ns = st.good_ns.load(Acquire);
        let anchored = st.anchored.load(Acquire);
        match area.sample(MAX_READ_ATTEMPTS) {
            Some(s) if !anchored => {
                if s.version != 0 {
                    st.anchor(s.steal, now_ns);
                    good = s.steal;
                }
            }
            None => {
                self.counters.busy.fetch_add(1, Relaxed);
            }
            Some(s) if s.steal < good => {
                self.counters.back.fetch_add(1, Relaxed);
            }
            Some(s) if s.steal - good > now_ns.saturating_sub(good_ns) => {
                self.counters.fast.fetch_add(1, Relaxed);
            }
            Some(s) => {
                st.good_ns.fetch_max(now_ns, Release);
                good = st.good_raw.fetch_max(s.steal, Release).max(s.steal);
            }
        }
        let base = st.base_raw.load(Acquire);
        let since = now_ns.saturating_sub(st.base_ns.load(Acquire));
        let value = st
            .carried
            .load(Acquire)
            .saturating_add(good.saturating_sub(base).min(since));
        Some(self.hw.fetch_max_local(&st.returned, value).max(value))
    }

    /// Whether the host says CPU `cpu`'s vCPU is descheduled now (its
    /// area's `preempted` byte): a spinning waiter whose lock holder's vCPU
    /// is preempted should yield. `None`: `cpu` has no registered area.
    ///
    /// Interrupt-safe: yes (one atomic load).
    pub fn preempted(&self, cpu: usize) -> Option<bool> {
        if !self.is_registered(cpu) {
            return None;
        }
        Some(self.areas.get().get(cpu)?.preempted())
    }

    /// Readings that were not used so far.
    ///
    /// Interrupt-safe: yes (atomic loads).
    pub fn stats(&self) -> StealStats {
        StealStats {
            busy_reads: self.counters.busy.load(Relaxed),
            went_back: self.counters.back.load(Relaxed),
            too_fast: self.counters.fast.load(Relaxed),
        }
    }

    /// The hardware access it was built with.
    ///
    /// Interrupt-safe: yes.
    pub fn hardware(&self) -> &H {
        &self.hw
    }
}

impl<H: Hardware> Drop for StealTime<H> {
    fn drop(&mut self) {
        self.unregister_this_cpu();
        self.state.in_use.store(false, Release);
    }
}
