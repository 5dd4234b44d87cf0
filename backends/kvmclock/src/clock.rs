//! The kvmclock clock source: registration, the per-vCPU read, events.

use crate::{area::Sample, KvmclockError, WallClock, MAX_READ_ATTEMPTS};
use clockhal_core::{ClockSource, Frequency, MonotonicGuard, Policy, Quality, ReadCost, Stability};
use clockhal_x86::cpuid::{self, KvmFeatures};
use clockhal_x86::paravirt::{
    kvm_register_system_time, kvm_request_wall_clock, kvm_unregister_system_time, PhysMapped,
    PvclockVcpuTimeInfo, PvclockWallClock, PVCLOCK_GUEST_STOPPED, PVCLOCK_TSC_STABLE_BIT,
};
use clockhal_x86::{Hardware, Msr};
use core::sync::atomic::{
    AtomicBool, AtomicU64,
    Ordering::{AcqRel, Relaxed},
};

/// kvmclock's rating (see the crate docs for the rule).
pub const QUALITY: Quality = Quality::new(400);

/// What kvmclock guarantees wherever it probes successfully. With a trusted
/// stable bit the host orders readings across vCPUs; without it the
/// built-in clamp does (see the crate docs), so both cases carry
/// `MONOTONIC_ACROSS_CPUS`.
pub const STABILITY: Stability = Stability::MONOTONIC_PER_CPU
    .union(Stability::MONOTONIC_ACROSS_CPUS)
    .union(Stability::INVARIANT_RATE)
    .union(Stability::SURVIVES_MIGRATION)
    .union(Stability::PER_CPU_SETUP);

/// Fast-path readings are recorded for the clamp at most once per this many
/// ns; it is also the largest forward step when the stable flag drops or a
/// read has to hold (see [`MonotonicGuard`]).
pub const GUARD_SLACK_NS: u64 = 4_096;

/// One rate for every kvmclock: its readings are nanoseconds.
const NS_RATE: Frequency = match Frequency::from_hz(1_000_000_000) {
    Ok(f) => f,
    Err(_) => panic!("1 GHz is a valid rate"),
};

/// What the OS hands to [`Kvmclock::probe`].
#[derive(Clone, Copy, Debug)]
pub struct KvmclockConfig {
    /// One area per CPU, indexed by `Hardware::cpu_index()` (contiguous,
    /// 32-byte aligned guest-physical memory).
    pub areas: PhysMapped<[PvclockVcpuTimeInfo]>,
    /// Where KVM may write the wall clock ([`Kvmclock::wall_clock`]);
    /// `None`: no wall clock.
    pub wall_clock: Option<PhysMapped<PvclockWallClock>>,
}

impl KvmclockConfig {
    /// Areas only, no wall clock.
    pub const fn new(areas: PhysMapped<[PvclockVcpuTimeInfo]>) -> Self {
        KvmclockConfig {
            areas,
            wall_clock: None,
        }
    }

    /// Adds the wall-clock structure.
    pub const fn with_wall_clock(mut self, wall: PhysMapped<PvclockWallClock>) -> Self {
        self.wall_clock = Some(wall);
        self
    }
}

/// Counters an OS can poll to see reads that did not go the normal way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct KvmclockStats {
    /// Reads that gave up on a version that stayed odd or kept changing for
    /// [`MAX_READ_ATTEMPTS`] samples, and returned the held value.
    pub busy_reads: u64,
    /// Reads that found no usable area on their CPU (not registered, index
    /// out of range, multiplier 0, shift out of range) and returned the held
    /// value.
    pub invalid_reads: u64,
    /// Samples retried (odd or changed version, or the reader moved to
    /// another CPU mid-read).
    pub retries: u64,
    /// Readings raised to keep time from going backwards (clamped or held).
    pub raised: u64,
}

/// Which MSR pair the host offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Msrs {
    system_time: Msr,
    wall_clock: Msr,
}

/// kvmclock on one guest: probe once, register each AP, read anywhere.
///
/// Reads are nanoseconds of host time (1 GHz ticks), from the calling CPU's
/// own area: the reader samples `area[cpu_index()]`, reads the TSC inside
/// the seqlock window and re-checks the CPU index, so a migration mid-read
/// retries.
///
/// Dropping it (or [`shutdown`](Self::shutdown)) unregisters the *calling*
/// CPU only; see the crate docs for the SMP rule.
#[derive(Debug)]
pub struct Kvmclock<H: Hardware> {
    hw: H,
    areas: PhysMapped<[PvclockVcpuTimeInfo]>,
    wall: Option<PhysMapped<PvclockWallClock>>,
    msrs: Msrs,
    stable_permitted: bool,
    boot_cpu: usize,
    guard: MonotonicGuard,
    guest_stopped: AtomicBool,
    busy_reads: AtomicU64,
    invalid_reads: AtomicU64,
    retries: AtomicU64,
}

/// Why a read found no fresh value.
#[derive(Clone, Copy)]
enum Miss {
    Busy,
    Invalid,
}

impl<H: Hardware> Kvmclock<H> {
    /// Finds KVM, picks its MSRs, registers the calling CPU's area and
    /// checks that the host filled it.
    ///
    /// `policy` does not change kvmclock's rating (the TSC backend decides
    /// whether it may outrank kvmclock); it is taken for uniformity with the
    /// other backends.
    pub fn probe(hw: H, config: KvmclockConfig, policy: &Policy) -> Result<Self, KvmclockError> {
        let _ = policy;
        if !cpuid::hypervisor_present(&hw) {
            return Err(KvmclockError::NoHypervisor);
        }
        // Any base: KVM sits at 0x40000100 when Hyper-V owns 0x40000000.
        let (_, features) = cpuid::kvm(&hw).ok_or(KvmclockError::NoKvmSignature)?;
        let msrs = if features.contains(KvmFeatures::CLOCKSOURCE2) {
            Msrs {
                system_time: Msr::KVM_SYSTEM_TIME_NEW,
                wall_clock: Msr::KVM_WALL_CLOCK_NEW,
            }
        } else if features.contains(KvmFeatures::CLOCKSOURCE) {
            Msrs {
                system_time: Msr::KVM_SYSTEM_TIME,
                wall_clock: Msr::KVM_WALL_CLOCK,
            }
        } else {
            return Err(KvmclockError::NoClocksource);
        };
        if config.areas.is_empty() {
            return Err(KvmclockError::NoMemory);
        }
        if config.wall_clock.is_some_and(|w| w.phys() % 4 != 0) {
            return Err(KvmclockError::WallClockMisaligned);
        }
        register(&hw, config.areas, msrs.system_time)?;
        Ok(Kvmclock {
            boot_cpu: hw.cpu_index(),
            hw,
            areas: config.areas,
            wall: config.wall_clock,
            msrs,
            stable_permitted: features.contains(KvmFeatures::CLOCKSOURCE_STABLE_BIT),
            guard: MonotonicGuard::new(GUARD_SLACK_NS),
            guest_stopped: AtomicBool::new(false),
            busy_reads: AtomicU64::new(0),
            invalid_reads: AtomicU64::new(0),
            retries: AtomicU64::new(0),
        })
    }

    /// Registers the calling CPU's area (call once on every AP before it
    /// reads) and checks that the host filled it; on error nothing stays
    /// registered for this CPU.
    pub fn register_this_cpu(&self) -> Result<(), KvmclockError> {
        register(&self.hw, self.areas, self.msrs.system_time)
    }

    /// Stops the host from writing the calling CPU's area (writes 0 to the
    /// system-time MSR). Every AP that registered must call this before the
    /// areas' memory is reused; reads on this CPU then return held values.
    pub fn unregister_this_cpu(&self) {
        // Only fails for a wrong MSR, and `msrs` holds a system-time MSR.
        let _ = kvm_unregister_system_time(&self.hw, self.msrs.system_time);
    }

    /// Unregisters the calling CPU and drops the clock (same as `drop`).
    pub fn shutdown(self) {
        drop(self)
    }

    /// Nanoseconds of host time: never earlier than any value returned
    /// before, on any CPU. Bounded: at most [`MAX_READ_ATTEMPTS`] samples;
    /// when none is usable the read returns the held value (see the crate
    /// docs) and counts it in [`stats`](Self::stats).
    #[inline]
    pub fn read_ns(&self) -> u64 {
        match self.sample() {
            Ok((cpu, s)) => {
                if s.flags & PVCLOCK_GUEST_STOPPED != 0 {
                    self.acknowledge_guest_stopped(cpu);
                }
                if self.trusted(&s) {
                    match self.guard.try_fast(s.ns()) {
                        Some(v) => v,
                        None => self.read_again(),
                    }
                } else {
                    self.guard.slow(s.ns())
                }
            }
            Err(miss) => self.hold(miss),
        }
    }

    /// Whether the sample's stable flag may be believed.
    #[inline(always)]
    fn trusted(&self, s: &Sample) -> bool {
        self.stable_permitted && s.flags & PVCLOCK_TSC_STABLE_BIT != 0
    }

    /// A trusted reading fell behind the guard (the reader was held up
    /// after taking its TSC, or the host stepped back): one fresh sample,
    /// which the guard then accepts or repairs.
    #[cold]
    fn read_again(&self) -> u64 {
        match self.sample() {
            Ok((_, s)) if self.trusted(&s) => self.guard.fast(s.ns()),
            Ok((_, s)) => self.guard.slow(s.ns()),
            Err(miss) => self.hold(miss),
        }
    }

    /// A consistent sample of the calling CPU's area with a TSC value read
    /// on that same CPU.
    #[inline(always)]
    fn sample(&self) -> Result<(usize, Sample), Miss> {
        let areas = self.areas.get();
        for _ in 0..MAX_READ_ATTEMPTS {
            let cpu = self.hw.cpu_index();
            let Some(area) = areas.get(cpu) else {
                return Err(Miss::Invalid);
            };
            if let Some(s) = Sample::try_take(area, &mut || self.hw.rdtsc_ordered()) {
                if self.hw.cpu_index() == cpu {
                    return match s.check() {
                        Ok(()) => Ok((cpu, s)),
                        Err(_) => Err(Miss::Invalid),
                    };
                }
            }
            self.retries.fetch_add(1, Relaxed);
            core::hint::spin_loop();
        }
        Err(Miss::Busy)
    }

    #[cold]
    fn hold(&self, miss: Miss) -> u64 {
        match miss {
            Miss::Busy => &self.busy_reads,
            Miss::Invalid => &self.invalid_reads,
        }
        .fetch_add(1, Relaxed);
        self.guard.hold()
    }

    /// Clears `GUEST_STOPPED` in `cpu`'s area, as Linux does, and latches it
    /// for [`take_guest_stopped`](Self::take_guest_stopped).
    #[cold]
    fn acknowledge_guest_stopped(&self, cpu: usize) -> bool {
        let Some(area) = self.areas.get().get(cpu) else {
            return false;
        };
        let was = area.flags.fetch_and(!PVCLOCK_GUEST_STOPPED, AcqRel) & PVCLOCK_GUEST_STOPPED != 0;
        if was {
            self.guest_stopped.store(true, Relaxed);
        }
        was
    }

    /// Whether the host paused the guest since the last call (the
    /// `GUEST_STOPPED` flag, seen by any read or found now in the calling
    /// CPU's area). A `true` means the time jump that follows is legitimate:
    /// an OS watchdog should re-arm instead of firing (Linux touches its
    /// soft-lockup watchdogs). The event is latched, never lost: it stays
    /// pending until taken.
    pub fn take_guest_stopped(&self) -> bool {
        let here = self.acknowledge_guest_stopped(self.hw.cpu_index());
        self.guest_stopped.swap(false, Relaxed) || here
    }

    /// Whether the calling CPU's area is *trusted* stable right now: the host
    /// sets `PVCLOCK_TSC_STABLE_BIT` and KVM's CPUID grants
    /// `CLOCKSOURCE_STABLE_BIT`. Re-checked on every read; when false, reads
    /// go through the clamp.
    pub fn stable(&self) -> bool {
        self.stable_permitted
            && self
                .areas
                .get()
                .get(self.hw.cpu_index())
                .is_some_and(|a| a.flags.load(Relaxed) & PVCLOCK_TSC_STABLE_BIT != 0)
    }

    /// The exact TSC rate the probing CPU's area implies
    /// (`10^9 * 2^32 / (mul * 2^shift)` Hz), for the TSC backend. `None` if
    /// that area is now unreadable or implausible (multiplier 0, shift out of
    /// range, version stuck).
    pub fn tsc_frequency(&self) -> Option<Frequency> {
        let area = self.areas.get().get(self.boot_cpu)?;
        crate::area_tsc_frequency(area).ok()
    }

    /// Asks KVM to rewrite the wall clock now (a wall-clock MSR write: the
    /// host refreshes the structure only then) and reads it. `None` without
    /// a wall-clock structure or if the host did not fill it sanely.
    pub fn wall_clock(&self) -> Option<WallClock> {
        let wall = self.wall?;
        kvm_request_wall_clock(&self.hw, self.msrs.wall_clock, wall).ok()?;
        WallClock::read(wall.get())
    }

    /// Counters of reads that did not go the normal way.
    pub fn stats(&self) -> KvmclockStats {
        KvmclockStats {
            busy_reads: self.busy_reads.load(Relaxed),
            invalid_reads: self.invalid_reads.load(Relaxed),
            retries: self.retries.load(Relaxed),
            raised: self.guard.raised_count(),
        }
    }

    /// Forgets the never-backwards floor. Only for a timeline that
    /// legitimately restarted (e.g. the host restored a saved guest whose
    /// clock went back, like Linux's `pvclock_resume`); otherwise readings
    /// could step back.
    pub fn reset_monotonic(&self) {
        self.guard.reset()
    }

    /// The hardware access this clock was built with.
    pub fn hardware(&self) -> &H {
        &self.hw
    }
}

/// Registers the calling CPU's area with `msr` and checks the host's first
/// write; unregisters again if the area is unusable.
fn register<H: Hardware>(
    hw: &H,
    areas: PhysMapped<[PvclockVcpuTimeInfo]>,
    msr: Msr,
) -> Result<(), KvmclockError> {
    let cpu = hw.cpu_index();
    let area = areas
        .element(cpu)
        .ok_or(KvmclockError::CpuIndexOutOfRange {
            cpu,
            areas: areas.len(),
        })?;
    // `WrongMsr` cannot happen: `msr` is always a system-time MSR.
    kvm_register_system_time(hw, msr, area).map_err(|_| KvmclockError::Misaligned)?;
    let checked = Sample::take(area.get(), || hw.rdtsc_ordered())
        .and_then(|s| s.tsc_frequency().map(|_| ()))
        .map_err(KvmclockError::from);
    if checked.is_err() {
        let _ = kvm_unregister_system_time(hw, msr);
    }
    checked
}

impl<H: Hardware> Drop for Kvmclock<H> {
    fn drop(&mut self) {
        self.unregister_this_cpu();
    }
}

impl<H: Hardware> ClockSource for Kvmclock<H> {
    fn name(&self) -> &'static str {
        "kvmclock"
    }
    #[inline]
    fn read(&self) -> u64 {
        self.read_ns()
    }
    fn frequency(&self) -> Frequency {
        NS_RATE
    }
    fn quality(&self) -> Quality {
        QUALITY
    }
    fn stability(&self) -> Stability {
        STABILITY
    }
    fn read_cost(&self) -> ReadCost {
        ReadCost::NoTrap
    }
}
