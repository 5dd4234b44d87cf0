//! The kvmclock clock source: registration, the per-vCPU read, events.

use crate::registry::{Registry, MAX_CPUS};
use crate::{area::Sample, KvmclockError, WallClock};
use clockhal_core::{
    ClampGranule, ClockSource, Frequency, LastMap, MapMiss, MapNow, Policy, Quality, ReadCost,
    Stability, Timeline, TscMap, TscSource, UpdateBounds, UpdateFault, UpdateJudge,
};
use clockhal_x86::cpuid::{self, KvmFeatures};
use clockhal_x86::paravirt::{
    kvm_register_system_time, kvm_request_wall_clock, kvm_unregister_system_time, PhysMapped,
    PvclockVcpuTimeInfo, PvclockWallClock, PVCLOCK_GUEST_STOPPED, PVCLOCK_TSC_STABLE_BIT,
};
use clockhal_x86::{Hardware, Msr, Seam};
use core::sync::atomic::{
    AtomicBool, AtomicU32, AtomicU64,
    Ordering::{AcqRel, Acquire, Relaxed},
};

/// kvmclock's rating (see the crate docs for the rule).
pub const RATING: Quality = Quality::new(400);

/// What kvmclock guarantees wherever it probes successfully. With a trusted
/// stable bit the host orders readings across vCPUs; without it the global
/// clamp does (see the crate docs), so both cases carry
/// `MONOTONIC_ACROSS_CPUS`.
pub const STABILITY: Stability = Stability::MONOTONIC_PER_CPU
    .union(Stability::MONOTONIC_ACROSS_CPUS)
    .union(Stability::INVARIANT_RATE)
    .union(Stability::SURVIVES_MIGRATION)
    .union(Stability::PER_CPU_SETUP);

/// Two vCPUs' areas that claim the stable bit must give the same time for
/// the same TSC value (KVM's master clock writes identical areas); one that
/// differs by more than this many ns makes the stable bit untrusted.
pub const STABLE_AGREEMENT_NS: u64 = 1_000;

pub use clockhal_core::REVALIDATE_NS;

/// An update's `tsc_timestamp` this many TSC ticks or less behind the
/// read (about 100 s at 10 GHz) is where its continuity is judged. Long,
/// because a host's anchor can be old legitimately (KVM's master clock
/// anchors every vCPU's area where the master clock was last set, and a
/// vCPU may first read an update after idling), and judged anywhere else
/// an update with a migration's new TSC rate would look discontinuous. The
/// price: an update whose rate differs (within the rate range) anchored
/// long ago moves the read's time by the rate difference times that age;
/// `clockhal`'s `Clock` catches such a step with its jump check (ahead) and
/// its watchdog (a rate off against an independent counter).
const MAX_ANCHOR_AGE_TICKS: u64 = 1 << 40;

/// What the OS hands to [`Kvmclock::probe`].
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct KvmclockConfig {
    /// One area per CPU, indexed by `Hardware::cpu_index()` (physically
    /// contiguous, 32-byte aligned guest memory; a
    /// [`PvclockPage`](clockhal_x86::paravirt::PvclockPage) guarantees
    /// both).
    pub areas: PhysMapped<[PvclockVcpuTimeInfo]>,
    /// Where KVM may write the wall clock ([`Kvmclock::wall_clock`]);
    /// `None`: no wall clock.
    pub wall_clock: Option<PhysMapped<PvclockWallClock>>,
    /// What a parameter update may do before it is not believed.
    pub bounds: UpdateBounds,
    /// Resolution of readings without a trusted stable bit, which go
    /// through one global clamp ([`ClampGranule::EXACT`] by default, as
    /// Linux's). On SMP guests that read the clock from several CPUs at
    /// high rates, a coarser granule (e.g. 1024 ns) stops the clamp's cache
    /// line from being written by every read; readings then advance in
    /// steps of the granule, still never earlier than any returned before
    /// on any CPU. Readings with a trusted stable bit are not affected.
    /// Whoever measures this clock's rate or progress through its reads
    /// (a self-check, a watchdog) sees the granule: 2^20 ns in a 250 ms
    /// interval is 4,000 ppm. clockhal's facade leaves its kvmclock exact
    /// and coarsens its own clamp instead (`Platform::clamp_granule`).
    pub clamp_granule: ClampGranule,
}

impl KvmclockConfig {
    /// Areas only, no wall clock, default bounds.
    /// Interrupt-safe: yes.
    pub const fn new(areas: PhysMapped<[PvclockVcpuTimeInfo]>) -> Self {
        KvmclockConfig {
            areas,
            wall_clock: None,
            bounds: UpdateBounds::new(),
            clamp_granule: ClampGranule::EXACT,
        }
    }

    /// Adds the wall-clock structure.
    /// Interrupt-safe: yes.
    pub const fn with_wall_clock(mut self, wall: PhysMapped<PvclockWallClock>) -> Self {
        self.wall_clock = Some(wall);
        self
    }

    /// Sets the update bounds.
    /// Interrupt-safe: yes.
    pub const fn with_bounds(mut self, bounds: UpdateBounds) -> Self {
        self.bounds = bounds;
        self
    }

    /// Sets the resolution of the clamp path ([`clamp_granule`](Self::clamp_granule)).
    /// Interrupt-safe: yes.
    pub const fn with_clamp_granule(mut self, granule: ClampGranule) -> Self {
        self.clamp_granule = granule;
        self
    }
}

/// Counters an OS can poll to see reads that did not go the normal way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct KvmclockStats {
    /// Reads that gave up on a version that stayed odd or kept changing for
    /// [`MAX_READ_ATTEMPTS`](crate::MAX_READ_ATTEMPTS) samples and had no
    /// earlier parameters to use: they returned the held value.
    pub busy_reads: u64,
    /// Reads on a CPU index that has no area or did not register it: they
    /// returned the held value.
    pub unregistered_reads: u64,
    /// Host updates whose parameters were implausible (no map, rate out of
    /// range): reads kept using the previous parameters.
    pub rejected_updates: u64,
    /// Host updates whose time was discontinuous beyond the bounds: their
    /// rate was used, continuing the previous timeline.
    pub reanchored_updates: u64,
    /// Times the stable bit stopped being trusted (areas that disagree).
    pub stable_revocations: u64,
}

impl KvmclockStats {
    /// Events that count against the host (rejected or reanchored updates):
    /// the watchdog demotes a source that has them. A revoked stable bit
    /// is not one: readings then go through the clamp, which keeps them
    /// correct (and the revocation may be the OS's own warp-test result).
    /// Interrupt-safe: yes.
    pub const fn faults(&self) -> u64 {
        self.rejected_updates + self.reanchored_updates
    }
}

/// Why a read could not use the area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ReadMiss {
    /// No area for this CPU index, or it was never registered on it.
    Unregistered,
    /// The caller is no longer on `cpu` (a kernel that migrated it during
    /// the sample): the sample paired another CPU's TSC with this area.
    Migrated,
    /// The version stayed odd or kept changing.
    Busy,
    /// The host's parameters were never plausible.
    Rejected(UpdateFault),
}

/// A validated map of one CPU's area, for a reader that caches it (the
/// facade's `Clock`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AreaMap {
    /// The area version the map is valid for ([`Kvmclock::area_version`]).
    pub version: u32,
    /// TSC ticks to kvmclock nanoseconds.
    pub map: TscMap,
    /// The host orders readings across CPUs (a trusted stable bit).
    pub ordered: bool,
    /// The TSC value the area was sampled with.
    pub tsc: u64,
}

/// Which MSR pair the host offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Msrs {
    system_time: Msr,
    wall_clock: Msr,
}

#[derive(Debug, Default)]
struct Counters {
    busy: AtomicU64,
    unregistered: AtomicU64,
    revoked: AtomicU64,
}

/// kvmclock on one guest: probe once, register each AP, read anywhere.
///
/// Reads are nanoseconds of host time (1 GHz ticks), from the calling CPU's
/// own area, with the TSC read inside the area's seqlock window. Each CPU
/// keeps the map its area's parameters define, validated once per host
/// update ([`clockhal_core::judge_update`]), in its own cache line.
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
    stable_trusted: AtomicBool,
    boot_cpu: usize,
    registry: Registry,
    /// Its own reads' per-CPU state and clamp (the one read loop in core).
    timeline: Timeline,
    /// Judges host updates; holds the last parameters any CPU accepted (a
    /// CPU's first update is judged against them).
    judge: UpdateJudge,
    /// Even; cached entries of another epoch are stale.
    epoch: AtomicU32,
    guest_stopped: AtomicBool,
    counters: Counters,
}

impl<H: Hardware> Kvmclock<H> {
    /// Finds KVM, picks its MSRs, registers the calling CPU's area and
    /// checks that the host filled it plausibly.
    ///
    /// `policy` does not change kvmclock's rating (the TSC backend decides
    /// whether it may outrank kvmclock); it is taken so every backend's
    /// probe has the same shape.
    /// Interrupt-safe: no (one-time probe: busy-waits for ms).
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
        let cpu = hw.cpu_index();
        let apic = cpuid::apic_id(&hw);
        let registry = Registry::new();
        let first = register(&hw, config.areas, msrs.system_time, cpu)?;
        // A fresh registry: the claim cannot fail.
        let _ = registry.claim(cpu, apic);
        let probe_map = first.map().ok_or(KvmclockError::NotWritten)?;
        let Some(timeline) = Timeline::claim(hw.slot_pool(), config.clamp_granule) else {
            registry.release(cpu, apic);
            let _ = kvm_unregister_system_time(&hw, msrs.system_time);
            return Err(KvmclockError::NoPerCpuMemory);
        };
        let stable_permitted = features.contains(KvmFeatures::CLOCKSOURCE_STABLE_BIT);
        Ok(Kvmclock {
            boot_cpu: cpu,
            hw,
            areas: config.areas,
            wall: config.wall_clock,
            msrs,
            stable_permitted,
            stable_trusted: AtomicBool::new(stable_permitted),
            registry,
            timeline,
            judge: UpdateJudge::new(probe_map, config.bounds, first.version, 2),
            epoch: AtomicU32::new(2),
            guest_stopped: AtomicBool::new(false),
            counters: Counters::default(),
        })
    }

    /// Registers the calling CPU's area (call once on every AP before it
    /// reads) and checks that the host filled it; on error nothing stays
    /// registered for this CPU. A second CPU registering an index another
    /// CPU holds (an SMP kernel whose `cpu_index()` is the same everywhere)
    /// is refused with [`KvmclockError::IndexTaken`]. While the stable bit
    /// is trusted, the new area must agree with the boot CPU's
    /// ([`STABLE_AGREEMENT_NS`]), else the stable bit stops being trusted.
    /// Interrupt-safe: no (a per-CPU lifecycle step).
    pub fn register_this_cpu(&self) -> Result<(), KvmclockError> {
        let cpu = self.hw.cpu_index();
        let apic = cpuid::apic_id(&self.hw);
        if cpu >= MAX_CPUS {
            return Err(KvmclockError::CpuIndexOutOfRange {
                cpu,
                areas: self.areas.len().min(MAX_CPUS),
            });
        }
        if let Err(holder) = self.registry.claim(cpu, apic) {
            return Err(KvmclockError::IndexTaken {
                cpu,
                holder_apic: holder,
                this_apic: apic,
            });
        }
        if let Err(e) = register(&self.hw, self.areas, self.msrs.system_time, cpu) {
            self.registry.release(cpu, apic);
            return Err(e);
        }
        self.timeline.invalidate(self.hw.slot_pool(), cpu);
        self.check_stable_agreement();
        Ok(())
    }

    /// Whether CPU `cpu`'s area is registered (reads there are served).
    /// Interrupt-safe: yes.
    pub fn is_registered(&self, cpu: usize) -> bool {
        self.registry.is_registered(cpu)
    }

    /// Stops the host from updating the calling CPU's area (call on each AP
    /// before the memory is reused). Later reads on this CPU return the held
    /// value (and count as unregistered) until it registers again.
    /// Interrupt-safe: no (a per-CPU lifecycle step).
    pub fn unregister_this_cpu(&self) {
        let cpu = self.hw.cpu_index();
        if self.registry.release(cpu, cpuid::apic_id(&self.hw)) {
            // `WrongMsr` cannot happen: `msrs.system_time` is a system-time MSR.
            let _ = kvm_unregister_system_time(&self.hw, self.msrs.system_time);
        }
        self.timeline.invalidate(self.hw.slot_pool(), cpu);
    }

    /// Unregisters the calling CPU's area and drops the clock (same as
    /// `drop`). Other CPUs must have called
    /// [`unregister_this_cpu`](Self::unregister_this_cpu) themselves.
    /// Interrupt-safe: no (a per-CPU lifecycle step).
    pub fn shutdown(self) {
        drop(self)
    }

    /// After the guest was restored (resume from a snapshot, S3): the new
    /// host knows no registration. Re-registers the calling CPU's area (each
    /// AP calls this too) and forgets the continuity of the parameters and
    /// this CPU's floor, so the restored host's timeline — which may lie
    /// before the old one — is taken as it is. A `Clock` on top rebases
    /// its own timeline and keeps advancing.
    /// Interrupt-safe: no (a per-CPU lifecycle step).
    pub fn resume_this_cpu(&self) -> Result<(), KvmclockError> {
        let cpu = self.hw.cpu_index();
        let apic = cpuid::apic_id(&self.hw);
        self.registry.release(cpu, apic);
        let machine = cpu == self.boot_cpu;
        self.timeline.resume_cpu(self.hw.slot_pool(), cpu, machine);
        if machine {
            // Every reader's cached maps are of the old host: stale.
            self.epoch.fetch_add(2, AcqRel);
        }
        self.register_this_cpu()
    }

    /// Nanoseconds of host time: never earlier than a value returned before
    /// on this CPU; across CPUs, ordered by the host while its stable bit is
    /// trusted, else by a global clamp (see the crate docs). Bounded; when
    /// no valid parameters are available the read returns the held value
    /// and counts it in [`stats`](Self::stats). The loop is core's
    /// ([`clockhal_core::timeline`]) over this clock as a [`TscSource`].
    /// Interrupt-safe: yes (NMI too).
    #[inline]
    pub fn read_ns(&self) -> u64 {
        self.timeline
            .read(self.hw.slot_pool(), Seam(&self.hw), self)
    }

    /// The validated map of `cpu`'s area now (one seqlock sample, and a
    /// judgement of the parameters when the host changed them since this
    /// clock's own reads last cached them on `cpu`).
    ///
    /// Interrupt-safe: yes (lock-free, bounded).
    pub fn area_map(&self, cpu: usize) -> Result<AreaMap, ReadMiss> {
        self.area_map_after(cpu, None)
    }

    /// [`area_map`](Self::area_map) for a caller that reads through the
    /// maps with floors of its own: `returned` is the highest value it
    /// returned from this clock, in kvmclock ns. New parameters are a step
    /// back only against what was returned (by the caller or by
    /// [`read_ns`](Self::read_ns)), not against the old parameters'
    /// extrapolation: after QEMU's `stop`/`cont` the host restores kvmclock
    /// where the guest stopped, behind that extrapolation by the pause, and
    /// nobody read past the stop ([`clockhal_core::judge_update_after`]).
    /// A reader with its own per-CPU cache uses [`TscSource::map_now`].
    ///
    /// Interrupt-safe: yes (lock-free, bounded).
    pub fn area_map_after(&self, cpu: usize, returned: Option<u64>) -> Result<AreaMap, ReadMiss> {
        let epoch = self.epoch.load(Acquire);
        let last = self.timeline.last_map(self.hw.slot_pool(), cpu, epoch);
        self.sample_map(cpu, last, returned).map(|m| AreaMap {
            version: m.tag,
            map: m.map,
            ordered: m.ordered,
            tsc: m.tsc,
        })
    }

    /// One sample of `cpu`'s area and, for new parameters, their judgement
    /// against `last` (the reader's last map on `cpu`).
    fn sample_map(
        &self,
        cpu: usize,
        last: Option<LastMap>,
        returned: Option<u64>,
    ) -> Result<MapNow, ReadMiss> {
        let miss = |c: &AtomicU64, m: ReadMiss| {
            c.fetch_add(1, Relaxed);
            Err(m)
        };
        let Some(area) = self.areas.get().get(cpu) else {
            return miss(&self.counters.unregistered, ReadMiss::Unregistered);
        };
        if !self.registry.is_registered(cpu) {
            return miss(&self.counters.unregistered, ReadMiss::Unregistered);
        }
        // The reader's map of this epoch is its cache; any it has is this
        // CPU's continuity baseline, also across a change of epoch (a
        // revoked stable bit). Not across a resume, whose restored host's
        // timeline is taken as it is: every reader drops its maps there.
        let cached = last.filter(|l| l.current);
        let baseline = last.map(|l| l.map);
        let sampled = Sample::take(area, || self.hw.rdtsc_ordered());
        if self.hw.cpu_index() != cpu {
            return Err(ReadMiss::Migrated);
        }
        let s = match sampled {
            Ok(s) => s,
            Err(_) => {
                // The host is mid-update for too long: the last validated
                // parameters are as good as they were a moment ago.
                self.counters.busy.fetch_add(1, Relaxed);
                let Some(e) = cached else {
                    return Err(ReadMiss::Busy);
                };
                let tsc = self.hw.rdtsc_ordered();
                return Ok(MapNow {
                    tag: e.tag,
                    map: e.map,
                    ordered: e.ordered,
                    tsc,
                });
            }
        };
        if s.flags & PVCLOCK_GUEST_STOPPED != 0 {
            self.acknowledge_guest_stopped(cpu);
        }
        let ordered = self.stable_permitted
            && s.flags & PVCLOCK_TSC_STABLE_BIT != 0
            && self.stable_trusted.load(Relaxed);
        let map = match cached {
            Some(e) if e.tag == s.version => e.map,
            _ => {
                // Judged against this CPU's last map, else the last one any
                // CPU accepted — but only while the host promises one TSC
                // timeline for all vCPUs and the areas agree (trusted
                // stable bit): with per-vCPU TSC offsets another CPU's map
                // says nothing about this CPU's TSC. Then a CPU's first
                // update is judged for plausibility alone, and the facade's
                // jump check (an independent reference) stands behind it.
                let last = baseline.or_else(|| if ordered { self.last_accepted() } else { None });
                let new = s.map();
                let epoch = self.epoch.load(Acquire);
                // Continuity is judged where the host anchored the update
                // (its tsc_timestamp): what the old parameters predict there
                // against the new system_time. Judged at this read's TSC
                // instead, an update first seen late after a TSC rate change
                // (a migration) would look discontinuous by the rate change
                // times the delay. A timestamp in the future, or absurdly far
                // back, is not trusted as the anchor.
                let at = match s.tsc.checked_sub(s.tsc_timestamp) {
                    Some(back) if back <= MAX_ANCHOR_AGE_TICKS => s.tsc_timestamp,
                    _ => s.tsc,
                };
                // `None` is below any value: the larger of the two known.
                let returned = returned.max(self.returned());
                // What was returned before this read, through any
                // parameters and on any CPU, is a step back only from the
                // new parameters *now*: values another reader took through
                // them since lie above their anchor by the time since
                // (after QEMU's cont, a watchdog round that read first).
                let returned = match (returned, new) {
                    (Some(r), Some(m)) => {
                        Some(r.saturating_sub(m.apply(s.tsc).saturating_sub(m.apply(at))))
                    }
                    (r, _) => r,
                };
                self.judge
                    .judge_after(last, returned, new, at, s.version, epoch)
                    .map_err(ReadMiss::Rejected)?
            }
        };
        Ok(MapNow {
            tag: s.version,
            map,
            ordered,
            tsc: s.tsc,
        })
    }

    /// The highest value [`read_ns`](Self::read_ns) returned on any CPU
    /// (`None`: nothing yet).
    fn returned(&self) -> Option<u64> {
        self.timeline.returned(self.hw.slot_pool())
    }

    /// The map some CPU accepted last in this epoch (none after a resume:
    /// the restored host's first parameters are taken as they are).
    fn last_accepted(&self) -> Option<TscMap> {
        self.judge.last_accepted(self.epoch.load(Acquire))
    }

    /// Changes whenever readings' validity changes for every CPU (a revoked
    /// stable bit, a resume): a reader that caches [`AreaMap`]s drops them
    /// when it changes.
    /// Interrupt-safe: yes.
    pub fn epoch(&self) -> u32 {
        self.epoch.load(Acquire)
    }

    /// `cpu`'s area version now (what [`AreaMap::version`] must equal for
    /// a cached map to be current), or `None` without an area.
    /// Interrupt-safe: yes.
    #[inline(always)]
    pub fn area_version(&self, cpu: usize) -> Option<u32> {
        self.areas.get().get(cpu).map(|a| a.version.load(Relaxed))
    }

    /// Compares every registered area with the boot CPU's at the same TSC
    /// value; while the stable bit is trusted, one that disagrees by more
    /// than [`STABLE_AGREEMENT_NS`] revokes the trust (from then on every
    /// read goes through the clamp). Returns whether the bit is still
    /// trusted. Bounded: one seqlock sample per registered area.
    ///
    /// Registration runs it; a host that later updates one vCPU's area out
    /// of step with the others is found only by the next call, so call it
    /// periodically (`clockhal`'s `Clock` does at every watchdog tick):
    /// until then readings on different CPUs may disagree by what that
    /// update's continuity check allowed.
    /// Interrupt-safe: yes.
    pub fn check_stable_agreement(&self) -> bool {
        if !self.stable_trusted.load(Acquire) {
            return false;
        }
        let Some(boot) = self.areas.get().get(self.boot_cpu) else {
            return true;
        };
        let rdtsc = || self.hw.rdtsc_ordered();
        let Ok(b) = Sample::take(boot, rdtsc) else {
            return true;
        };
        let Some(bmap) = b.map() else {
            return true;
        };
        for cpu in self.registry.registered().filter(|&c| c != self.boot_cpu) {
            let Some(area) = self.areas.get().get(cpu) else {
                continue;
            };
            let Ok(s) = Sample::take(area, rdtsc) else {
                continue;
            };
            // An area without the bit is compared too: its readings go
            // through the clamp while the stable ones do not, so one that
            // runs ahead would put the stable CPUs behind what it returned.
            let Some(m) = s.map() else {
                continue;
            };
            if m.apply(s.tsc).abs_diff(bmap.apply(s.tsc)) > STABLE_AGREEMENT_NS {
                self.distrust_stable();
                return false;
            }
        }
        true
    }

    /// Stops trusting the host's stable bit (e.g. the OS's warp test found
    /// the TSCs out of step, or the areas disagree): every read goes through
    /// the global clamp from now on, starting above every value any CPU
    /// returned so far.
    /// Interrupt-safe: yes.
    pub fn distrust_stable(&self) {
        if self.stable_trusted.swap(false, AcqRel) {
            self.counters.revoked.fetch_add(1, Relaxed);
            self.timeline.absorb_floors(self.hw.slot_pool());
            self.epoch.fetch_add(2, AcqRel);
        }
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
    /// Interrupt-safe: yes.
    pub fn take_guest_stopped(&self) -> bool {
        let cpu = self.hw.cpu_index();
        let here = self.registry.is_registered(cpu) && self.acknowledge_guest_stopped(cpu);
        self.guest_stopped.swap(false, Relaxed) || here
    }

    /// Whether the calling CPU's area is *trusted* stable right now: the host
    /// sets `PVCLOCK_TSC_STABLE_BIT`, KVM's CPUID grants
    /// `CLOCKSOURCE_STABLE_BIT`, and the trust was not revoked
    /// ([`check_stable_agreement`](Self::check_stable_agreement)).
    /// Interrupt-safe: yes.
    pub fn stable(&self) -> bool {
        self.stable_trusted.load(Relaxed)
            && self
                .areas
                .get()
                .get(self.hw.cpu_index())
                .is_some_and(|a| a.flags.load(Relaxed) & PVCLOCK_TSC_STABLE_BIT != 0)
    }

    /// The exact TSC rate the probing CPU's area implies
    /// (`10^9 * 2^32 / (mul * 2^shift)` Hz), for the TSC backend. `None` if
    /// that area is now unreadable or implausible.
    /// Interrupt-safe: yes.
    pub fn tsc_frequency(&self) -> Option<Frequency> {
        let area = self.areas.get().get(self.boot_cpu)?;
        crate::area_tsc_frequency(area).ok()
    }

    /// Asks KVM to rewrite the wall clock now (a wall-clock MSR write: the
    /// host refreshes the structure only then) and reads it. `None` without
    /// a wall-clock structure or if the host did not fill it sanely.
    /// Interrupt-safe: yes.
    pub fn wall_clock(&self) -> Option<WallClock> {
        let wall = self.wall?;
        kvm_request_wall_clock(&self.hw, self.msrs.wall_clock, wall).ok()?;
        WallClock::read(wall.get())
    }

    /// Counters of reads and updates that did not go the normal way.
    /// Interrupt-safe: yes.
    pub fn stats(&self) -> KvmclockStats {
        let c = &self.counters;
        KvmclockStats {
            busy_reads: c.busy.load(Relaxed),
            unregistered_reads: c.unregistered.load(Relaxed),
            rejected_updates: self.judge.rejected(),
            reanchored_updates: self.judge.reanchored(),
            stable_revocations: c.revoked.load(Relaxed),
        }
    }

    /// The CPU index kvmclock was probed on (its area's rate is the TSC
    /// rate hint).
    /// Interrupt-safe: yes.
    pub fn boot_cpu(&self) -> usize {
        self.boot_cpu
    }

    /// The hardware access this clock was built with.
    /// Interrupt-safe: yes.
    pub fn hardware(&self) -> &H {
        &self.hw
    }
}

/// Registers `cpu`'s area with `msr` and checks the host's first write;
/// unregisters again if the area is unusable. Returns that first sample.
fn register<H: Hardware>(
    hw: &H,
    areas: PhysMapped<[PvclockVcpuTimeInfo]>,
    msr: Msr,
    cpu: usize,
) -> Result<Sample, KvmclockError> {
    let area =
        areas
            .element(cpu)
            .filter(|_| cpu < MAX_CPUS)
            .ok_or(KvmclockError::CpuIndexOutOfRange {
                cpu,
                areas: areas.len().min(MAX_CPUS),
            })?;
    kvm_register_system_time(hw, msr, area).map_err(KvmclockError::Register)?;
    let checked = Sample::take(area.get(), || hw.rdtsc_ordered())
        .map_err(KvmclockError::from)
        .and_then(|s| s.tsc_frequency().map(|_| s).map_err(KvmclockError::from));
    if checked.is_err() {
        let _ = kvm_unregister_system_time(hw, msr);
    }
    checked
}

impl<H: Hardware> Drop for Kvmclock<H> {
    fn drop(&mut self) {
        let cpu = self.hw.cpu_index();
        let apic = cpuid::apic_id(&self.hw);
        if self.registry.release(cpu, apic) {
            let _ = kvm_unregister_system_time(&self.hw, self.msrs.system_time);
        }
        self.timeline.release(self.hw.slot_pool());
    }
}

impl<H: Hardware> TscSource for Kvmclock<H> {
    #[inline(always)]
    fn token(&self, cpu: usize) -> Option<u32> {
        self.area_version(cpu)
    }
    #[inline(always)]
    fn token_reader(&self, cpu: usize) -> Option<impl Fn() -> Option<u32> + '_> {
        let area = self.areas.get().get(cpu)?;
        Some(move || Some(area.version.load(Relaxed)))
    }
    fn map_now(
        &self,
        cpu: usize,
        last: Option<LastMap>,
        returned: Option<u64>,
    ) -> Result<MapNow, MapMiss> {
        self.sample_map(cpu, last, returned).map_err(|m| match m {
            ReadMiss::Unregistered => MapMiss::Unserved,
            ReadMiss::Migrated => MapMiss::Migrated,
            ReadMiss::Busy => MapMiss::Busy,
            ReadMiss::Rejected(f) => MapMiss::Rejected(f),
        })
    }
    fn serves(&self, cpu: usize) -> bool {
        self.is_registered(cpu)
    }
    fn epoch(&self) -> u32 {
        self.epoch.load(Acquire)
    }
}

impl<H: Hardware> ClockSource for Kvmclock<H> {
    fn counter_domain(&self) -> Option<clockhal_core::CounterDomain> {
        Some(clockhal_core::CounterDomain::Tsc)
    }
    fn name(&self) -> &'static str {
        "kvmclock"
    }
    #[inline]
    fn read(&self) -> u64 {
        self.read_ns()
    }
    fn frequency(&self) -> Frequency {
        // One rate for every kvmclock: its readings are nanoseconds.
        Frequency::NANOSECONDS
    }
    fn quality(&self) -> Quality {
        RATING
    }
    fn stability(&self) -> Stability {
        STABILITY
    }
    fn read_cost(&self) -> ReadCost {
        ReadCost::NoTrap
    }
}
