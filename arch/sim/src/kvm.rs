//! Simulated KVM host: pvclock areas and the wall clock.

use super::SimCtx;
use clockhal_x86::paravirt::{
    pvclock_time_scale, KvmStealTime, PvclockVcpuTimeInfo, KVM_VCPU_PREEMPTED,
    PVCLOCK_GUEST_STOPPED, PVCLOCK_TSC_STABLE_BIT,
};
use std::sync::atomic::Ordering::{Release, SeqCst};
use std::vec::Vec;

const MSR_WALL_OLD: u32 = 0x11;
const MSR_SYSTEM_OLD: u32 = 0x12;
const MSR_WALL_NEW: u32 = 0x4b56_4d00;
const MSR_SYSTEM_NEW: u32 = 0x4b56_4d01;
const MSR_STEAL_TIME: u32 = 0x4b56_4d03;
/// Bits 5:1 of the steal-time MSR are reserved (KVM: #GP when set).
const STEAL_RESERVED: u64 = 0x3e;

/// How the simulated KVM host presents itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvmConfig {
    /// CPUID base of the KVM range (0x40000100 behind Hyper-V enlightenments).
    pub cpuid_base: u32,
    /// Highest leaf offset reported at the base (EAX - base).
    pub cpuid_max_offset: u32,
    /// CLOCKSOURCE (old MSRs 0x11/0x12).
    pub clocksource: bool,
    /// CLOCKSOURCE2 (new MSRs).
    pub clocksource2: bool,
    /// CPUID CLOCKSOURCE_STABLE_BIT (permission to trust the flag).
    pub stable_bit: bool,
    /// Whether the host sets PVCLOCK_TSC_STABLE_BIT in the areas.
    pub stable_flag: bool,
    /// Wall-clock seconds at machine time 0.
    pub wall_epoch_sec: u32,
    /// CPUID STEAL_TIME (bit 5): `MSR_KVM_STEAL_TIME` exists.
    pub steal_time: bool,
}

impl Default for KvmConfig {
    fn default() -> Self {
        KvmConfig {
            cpuid_base: 0x4000_0000,
            cpuid_max_offset: 1,
            clocksource: true,
            clocksource2: true,
            stable_bit: true,
            stable_flag: true,
            wall_epoch_sec: 1_790_000_000,
            steal_time: true,
        }
    }
}

impl KvmConfig {
    /// The CPUID base+1 EAX bits this config decides: CLOCKSOURCE (0),
    /// CLOCKSOURCE2 (3), STEAL_TIME (5), CLOCKSOURCE_STABLE_BIT (24).
    pub const MODELLED_FEATURES: u32 = 1 | 1 << 3 | 1 << 5 | 1 << 24;

    /// CPUID base+1 EAX for this config (the modelled bits only).
    pub fn feature_eax(&self) -> u32 {
        (self.clocksource as u32)
            | (self.clocksource2 as u32) << 3
            | (self.steal_time as u32) << 5
            | (self.stable_bit as u32) << 24
    }
}

/// One pvclock update as a host writes it (see [`KvmHost::publish`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PvclockUpdate {
    /// TSC value at `system_time`.
    pub tsc_timestamp: u64,
    /// Host nanoseconds at `tsc_timestamp`.
    pub system_time: u64,
    /// 32.32 multiplier.
    pub mul: u32,
    /// Pre-shift.
    pub shift: i8,
    /// `PVCLOCK_TSC_STABLE_BIT` | `PVCLOCK_GUEST_STOPPED`.
    pub flags: u8,
}

impl PvclockUpdate {
    /// Writes it into `area` with the seqlock protocol (also for an area
    /// nobody registered: leftover bytes a guest must not trust).
    pub fn write_to(&self, area: &PvclockVcpuTimeInfo) {
        area.publish(
            self.tsc_timestamp,
            self.system_time,
            self.mul,
            self.shift,
            self.flags,
        );
    }
}

/// The simulated KVM host.
#[derive(Debug)]
pub struct KvmHost {
    config: KvmConfig,
    /// Per-CPU registered system-time area (guest-physical address).
    registered: Vec<Option<u64>>,
    /// Last value written to the system-time MSR, per CPU.
    msr_value: Vec<u64>,
    /// Pending guest-stopped notification per CPU.
    stopped: Vec<bool>,
    /// Error the host adds to `system_time` per CPU (fault injection).
    skew_ns: Vec<i64>,
    /// `(mul, shift)` written instead of the true scale (fault injection).
    scale_override: Option<(u32, i8)>,
    /// How far kvmclock lags machine time: the sum of the VM stops
    /// ([`cont_after`](Self::cont_after)), over which it did not advance.
    stopped_ns: u64,
    /// Steal time: the host's model of it.
    steal: StealModel,
}

/// How the simulated host steals from its vCPUs.
#[derive(Debug, Default)]
struct StealModel {
    /// Per CPU: the registered area's guest-physical address.
    registered: Vec<Option<u64>>,
    /// Per CPU: the host's counter (what it writes).
    counter: Vec<u64>,
    /// Per CPU: the steal-time MSR's value.
    msr_value: Vec<u64>,
    /// Share of machine time stolen from every vCPU, in 1/1000.
    permille: u64,
    /// What the counter starts at on registration (KVM adds the vCPU
    /// thread's wait before it).
    on_register_ns: u64,
    /// The host never writes the areas (not even at registration).
    frozen: bool,
    /// Every write leaves the version odd (an update never finished).
    stuck: bool,
    /// The first write after a registration waits for the next advance.
    late: bool,
}

impl StealModel {
    fn grow(&mut self, cpu: usize) {
        if self.registered.len() <= cpu {
            self.registered.resize(cpu + 1, None);
            self.counter.resize(cpu + 1, 0);
            self.msr_value.resize(cpu + 1, 0);
        }
    }
}

impl KvmHost {
    /// A host per `config`.
    pub fn new(config: KvmConfig) -> Self {
        KvmHost {
            config,
            registered: Vec::new(),
            msr_value: Vec::new(),
            stopped: Vec::new(),
            skew_ns: Vec::new(),
            scale_override: None,
            stopped_ns: 0,
            steal: StealModel::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &KvmConfig {
        &self.config
    }

    fn grow(&mut self, cpu: usize) {
        if self.registered.len() <= cpu {
            self.registered.resize(cpu + 1, None);
            self.msr_value.resize(cpu + 1, 0);
            self.stopped.resize(cpu + 1, false);
            self.skew_ns.resize(cpu + 1, 0);
        }
    }

    /// The area registered by `cpu`, if any.
    pub fn area(&self, ctx: &SimCtx<'_>, cpu: usize) -> Option<&'static PvclockVcpuTimeInfo> {
        let phys = (*self.registered.get(cpu)?)?;
        ctx.memory.pvclock(phys)
    }

    /// The guest-physical address `cpu` registered, if any.
    pub fn registered(&self, cpu: usize) -> Option<u64> {
        self.registered.get(cpu).copied().flatten()
    }

    /// Whether the host sets `PVCLOCK_TSC_STABLE_BIT` from the next update
    /// on (the CPUID permission bit stays as configured).
    pub fn set_stable_flag(&mut self, on: bool) {
        self.config.stable_flag = on;
    }

    /// Makes the host's `system_time` for `cpu` (`None`: every CPU) off by
    /// `skew_ns` from the next update on: per-CPU disagreement of an
    /// unstable host, or (same negative skew everywhere) a host whose clock
    /// steps backwards.
    pub fn set_system_time_skew(&mut self, cpu: Option<usize>, skew_ns: i64) {
        match cpu {
            Some(c) => {
                self.grow(c);
                self.skew_ns[c] = skew_ns;
            }
            None => self.skew_ns.iter_mut().for_each(|s| *s = skew_ns),
        }
    }

    /// Writes `(mul, shift)` instead of the true scale from the next update
    /// on (`None` restores the truth): a zero multiplier, any shift.
    pub fn set_scale_override(&mut self, scale: Option<(u32, i8)>) {
        self.scale_override = scale;
    }

    /// Starts an update of `cpu`'s area and never finishes it: the version
    /// stays odd until [`update`](Self::update) runs again.
    pub fn stall_update(&mut self, ctx: &SimCtx<'_>, cpu: usize) {
        if let Some(area) = self.area(ctx, cpu) {
            let v = area.version.load(SeqCst);
            area.version.store(v | 1, SeqCst);
        }
    }

    /// What [`update`](Self::update) would write into `cpu`'s area now
    /// (with the faults set: scale override, skew, stable flag; without
    /// a pending guest-stopped flag): the start of a hostile update.
    pub fn next_update(&self, ctx: &SimCtx<'_>, cpu: usize) -> PvclockUpdate {
        let (mul, shift) = self
            .scale_override
            .or(pvclock_time_scale(ctx.tsc_hz.max(1)))
            .unwrap_or((0, 0));
        let skew = self.skew_ns.get(cpu).copied().unwrap_or(0);
        let system_time = (ctx.now_ns as i128 - self.stopped_ns as i128 + skew as i128)
            .clamp(0, u64::MAX as i128) as u64;
        PvclockUpdate {
            tsc_timestamp: ctx.tsc(cpu),
            system_time,
            mul,
            shift,
            flags: if self.config.stable_flag {
                PVCLOCK_TSC_STABLE_BIT
            } else {
                0
            },
        }
    }

    /// Rewrites `cpu`'s area from the current machine time (what KVM does on
    /// a clock update request), using the seqlock protocol.
    pub fn update(&mut self, ctx: &SimCtx<'_>, cpu: usize) {
        let mut u = self.next_update(ctx, cpu);
        if self.stopped.get(cpu).copied().unwrap_or(false) && self.area(ctx, cpu).is_some() {
            u.flags |= PVCLOCK_GUEST_STOPPED;
            self.stopped[cpu] = false;
        }
        self.publish(ctx, cpu, u);
    }

    /// Writes `u` into `cpu`'s registered area as one seqlock update
    /// (nothing if it has none): any one update a host may write, e.g.
    /// garbage after the guest probed (`mul = u32::MAX, shift = 32`, a
    /// `system_time` 100 years ahead). The next [`update`](Self::update)
    /// writes the truth again. An update left open
    /// ([`stall_update`](Self::stall_update)) is finished, not restarted.
    pub fn publish(&mut self, ctx: &SimCtx<'_>, cpu: usize, u: PvclockUpdate) {
        if let Some(area) = self.area(ctx, cpu) {
            u.write_to(area);
        }
    }

    /// Updates every registered area.
    pub fn update_all(&mut self, ctx: &SimCtx<'_>) {
        for cpu in 0..self.registered.len() {
            self.update(ctx, cpu);
        }
    }

    /// Marks every vCPU as stopped (host paused the guest, KVM's
    /// `KVM_KVMCLOCK_CTRL`); the flag appears at each area's next update.
    pub fn pause_guest(&mut self) {
        for s in &mut self.stopped {
            *s = true;
        }
    }

    /// QEMU's `cont` after a `stop` of `stopped_ns` (the machine's time,
    /// the TSC and the devices moved on; see [`SimMachine::stop_and_cont`](crate::SimMachine::stop_and_cont)):
    /// kvmclock was saved at the stop (`KVM_GET_CLOCK`) and is restored
    /// there (`KVM_SET_CLOCK`), so it did not advance over the stop; every
    /// vCPU is told (`KVM_KVMCLOCK_CTRL`: `GUEST_STOPPED` when `announce`)
    /// and every area is rewritten.
    ///
    /// Interrupt-safe: not applicable (the simulator's host side).
    pub fn cont_after(&mut self, ctx: &SimCtx<'_>, stopped_ns: u64, announce: bool) {
        self.stopped_ns = self.stopped_ns.saturating_add(stopped_ns);
        if announce {
            self.pause_guest();
        }
        self.update_all(ctx);
    }

    // ---- steal time ------------------------------------------------------

    /// `cpu`'s registered steal-time area, if any.
    ///
    /// Interrupt-safe: yes (simulator; takes no lock itself).
    pub fn steal_area(&self, ctx: &SimCtx<'_>, cpu: usize) -> Option<&'static KvmStealTime> {
        let phys = (*self.steal.registered.get(cpu)?)?;
        ctx.memory.steal(phys)
    }

    /// The guest-physical steal-time area `cpu` registered, if any.
    ///
    /// Interrupt-safe: yes (simulator).
    pub fn steal_registered(&self, cpu: usize) -> Option<u64> {
        self.steal.registered.get(cpu).copied().flatten()
    }

    /// From now on every [`SimMachine::advance`](crate::SimMachine::advance)
    /// charges each registered vCPU `permille`/1000 of the advance as steal
    /// and writes its area (above 1000: a host whose steal outruns time).
    ///
    /// Interrupt-safe: yes (simulator).
    pub fn set_steal_permille(&mut self, permille: u64) {
        self.steal.permille = permille;
    }

    /// The host's counter starts at `ns` at each registration (what KVM
    /// carries over from the vCPU thread's earlier waits).
    ///
    /// Interrupt-safe: yes (simulator).
    pub fn set_steal_on_register(&mut self, ns: u64) {
        self.steal.on_register_ns = ns;
    }

    /// A host that never writes the areas (`true`), not even at
    /// registration: the guest's zeroes stay.
    ///
    /// Interrupt-safe: yes (simulator).
    pub fn set_steal_frozen(&mut self, frozen: bool) {
        self.steal.frozen = frozen;
    }

    /// A host whose first write after a registration comes at the next
    /// [`SimMachine::advance`](crate::SimMachine::advance), not during the
    /// MSR write (`true`; as the project's `kvm_pvm` host does), carrying
    /// the counter's start ([`set_steal_on_register`](Self::set_steal_on_register)).
    ///
    /// Interrupt-safe: yes (simulator).
    pub fn set_steal_late(&mut self, late: bool) {
        self.steal.late = late;
    }

    /// A host whose every steal-time write leaves the version odd (`true`),
    /// from registration on: the update never finishes.
    ///
    /// Interrupt-safe: yes (simulator).
    pub fn set_steal_stuck(&mut self, stuck: bool) {
        self.steal.stuck = stuck;
    }

    /// Writes the counter into `cpu`'s area per the model's faults.
    fn write_steal(&self, ctx: &SimCtx<'_>, cpu: usize) {
        if let Some(a) = self.steal_area(ctx, cpu) {
            a.publish(self.steal.counter[cpu]);
            if self.steal.stuck {
                a.version.fetch_or(1, SeqCst);
            }
        }
    }

    /// The host's steal counter for `cpu` (what it last wrote or will write).
    ///
    /// Interrupt-safe: yes (simulator).
    pub fn steal_counter(&self, cpu: usize) -> u64 {
        self.steal.counter.get(cpu).copied().unwrap_or(0)
    }

    /// Writes `steal` into `cpu`'s area as one seqlock update and makes it
    /// the host's counter from now on (garbage: a counter that goes back, a
    /// jump). Nothing without a registered area.
    ///
    /// Interrupt-safe: yes (simulator).
    pub fn publish_steal(&mut self, ctx: &SimCtx<'_>, cpu: usize, steal: u64) {
        self.steal.grow(cpu);
        self.steal.counter[cpu] = steal;
        self.write_steal(ctx, cpu);
    }

    /// Starts an update of `cpu`'s steal-time area and never finishes it:
    /// the version stays odd until the next write.
    ///
    /// Interrupt-safe: yes (simulator).
    pub fn stall_steal(&mut self, ctx: &SimCtx<'_>, cpu: usize) {
        if let Some(a) = self.steal_area(ctx, cpu) {
            a.version.fetch_or(1, SeqCst);
        }
    }

    /// Sets or clears `cpu`'s `preempted` byte (bit 0), as KVM does when it
    /// deschedules or resumes the vCPU.
    ///
    /// Interrupt-safe: yes (simulator).
    pub fn set_preempted(&mut self, ctx: &SimCtx<'_>, cpu: usize, preempted: bool) {
        if let Some(a) = self.steal_area(ctx, cpu) {
            a.preempted
                .store(if preempted { KVM_VCPU_PREEMPTED } else { 0 }, SeqCst);
        }
    }

    /// Charges every registered vCPU its share of `ns` and writes its area
    /// (unless frozen).
    pub(super) fn run_steal(&mut self, ctx: &SimCtx<'_>, ns: u64) {
        let add = (ns as u128 * self.steal.permille as u128 / 1000) as u64;
        for cpu in 0..self.steal.registered.len() {
            if self.steal.registered[cpu].is_none() {
                continue;
            }
            self.steal.counter[cpu] = self.steal.counter[cpu].saturating_add(add);
            let first = self
                .steal_area(ctx, cpu)
                .is_some_and(|a| a.version.load(SeqCst) == 0);
            if !self.steal.frozen && (add != 0 || first) {
                self.write_steal(ctx, cpu);
            }
        }
    }

    fn wrmsr_steal(&mut self, ctx: &SimCtx<'_>, value: u64) -> Result<(), ()> {
        if !self.config.steal_time || value & STEAL_RESERVED != 0 {
            return Err(());
        }
        let cpu = ctx.cpu;
        self.steal.grow(cpu);
        self.steal.msr_value[cpu] = value;
        if value & 1 == 0 {
            self.steal.registered[cpu] = None;
            return Ok(());
        }
        self.steal.registered[cpu] = Some(value & !0x3f);
        // KVM writes the area at the next guest entry: before the wrmsr
        // returns.
        self.steal.counter[cpu] = self.steal.on_register_ns;
        if !self.steal.frozen && !self.steal.late {
            self.write_steal(ctx, cpu);
        }
        Ok(())
    }

    pub(super) fn rdmsr(&mut self, ctx: &SimCtx<'_>, msr: u32) -> Option<Option<u64>> {
        if msr == MSR_STEAL_TIME {
            if !self.config.steal_time {
                return Some(None);
            }
            self.steal.grow(ctx.cpu);
            return Some(Some(self.steal.msr_value[ctx.cpu]));
        }
        match msr {
            MSR_SYSTEM_NEW if self.config.clocksource2 => {}
            MSR_SYSTEM_OLD if self.config.clocksource => {}
            MSR_WALL_NEW | MSR_SYSTEM_NEW | MSR_WALL_OLD | MSR_SYSTEM_OLD => return Some(None),
            _ => return None,
        }
        self.grow(ctx.cpu);
        Some(Some(self.msr_value[ctx.cpu]))
    }

    pub(super) fn wrmsr(
        &mut self,
        ctx: &SimCtx<'_>,
        msr: u32,
        value: u64,
    ) -> Option<Result<(), ()>> {
        if msr == MSR_STEAL_TIME {
            return Some(self.wrmsr_steal(ctx, value));
        }
        let allowed = match msr {
            MSR_SYSTEM_NEW | MSR_WALL_NEW => self.config.clocksource2,
            MSR_SYSTEM_OLD | MSR_WALL_OLD => self.config.clocksource,
            _ => return None,
        };
        if !allowed {
            return Some(Err(()));
        }
        self.grow(ctx.cpu);
        match msr {
            MSR_SYSTEM_NEW | MSR_SYSTEM_OLD => {
                self.msr_value[ctx.cpu] = value;
                if value & 1 != 0 {
                    self.registered[ctx.cpu] = Some(value & !1);
                    self.update(ctx, ctx.cpu);
                } else {
                    self.registered[ctx.cpu] = None;
                }
            }
            _ => {
                if let Some(w) = ctx.memory.wall_clock(value) {
                    let v = w.version.load(SeqCst);
                    w.version.store(v.wrapping_add(1) | 1, SeqCst);
                    let boot_ns = self.config.wall_epoch_sec as u64 * 1_000_000_000;
                    w.sec.store((boot_ns / 1_000_000_000) as u32, Release);
                    w.nsec.store((boot_ns % 1_000_000_000) as u32, Release);
                    w.version
                        .store((v.wrapping_add(1) | 1).wrapping_add(1), SeqCst);
                }
            }
        }
        Some(Ok(()))
    }
}
