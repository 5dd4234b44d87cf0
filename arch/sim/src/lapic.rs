//! Simulated local APIC timer (one-shot and TSC-deadline modes; xAPIC MMIO
//! and x2APIC MSRs), with the faults timer code must survive: early fires,
//! dropped arms, a TSC-deadline MSR a nested host ignores.
//!
//! The simulator has no interrupt controller: a test asks when the timer
//! of a CPU will fire ([`SimMachine::lapic_next_fire_ns`](crate::SimMachine::lapic_next_fire_ns))
//! and takes the interrupt once machine time got there
//! ([`SimMachine::lapic_take_interrupt`](crate::SimMachine::lapic_take_interrupt)).

use super::SimCtx;

/// LAPIC parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LapicConfig {
    /// xAPIC register page (IA32_APIC_BASE bits 51:12).
    pub base: u64,
    /// The timer's input rate in Hz (divide configuration 1): KVM's 1 GHz,
    /// a crystal's 24 MHz.
    pub timer_hz: u64,
    /// x2APIC mode enabled (and CPUID.1:ECX bit 21 set).
    pub x2apic: bool,
    /// TSC-deadline mode offered (CPUID.1:ECX bit 24).
    pub tsc_deadline: bool,
    /// Always-running APIC timer (CPUID.6:EAX bit 2).
    pub arat: bool,
}

impl LapicConfig {
    /// QEMU/KVM's: 1 GHz, x2APIC, TSC-deadline, ARAT.
    pub fn kvm() -> Self {
        LapicConfig {
            base: 0xFEE0_0000,
            timer_hz: 1_000_000_000,
            x2apic: true,
            tsc_deadline: true,
            arat: true,
        }
    }
    /// QEMU TCG's: xAPIC only, no TSC-deadline, no ARAT, 1 GHz.
    pub fn tcg() -> Self {
        LapicConfig {
            x2apic: false,
            tsc_deadline: false,
            arat: false,
            ..Self::kvm()
        }
    }
}

/// One CPU's timer.
#[derive(Clone, Debug, Default)]
struct CpuTimer {
    lvt: u32,
    divide: u32,
    initial: u32,
    armed_at_ns: u64,
    /// One-shot: machine ns of the fire, while armed.
    fire_ns: Option<u64>,
    /// TSC-deadline: the armed deadline (0: none).
    deadline: u64,
}

const LVT_MASKED: u32 = 1 << 16;
const MODE_SHIFT: u32 = 17;
const MODE_ONE_SHOT: u32 = 0;
const MODE_TSC_DEADLINE: u32 = 2;

/// The simulated local APICs of all CPUs.
#[derive(Debug)]
pub struct Lapic {
    config: LapicConfig,
    cpus: Vec<CpuTimer>,
    early_ns: u64,
    drop_arms: u32,
    ignore_deadline_writes: bool,
    arms: u64,
}

/// Divide configuration register value -> divisor (SDM 11.5.4).
fn divisor(reg: u32) -> u64 {
    let x = (reg & 3) | ((reg >> 1) & 4);
    if x == 7 {
        1
    } else {
        2 << x
    }
}

impl Lapic {
    /// Timers for `cpus` CPUs, all disarmed and masked.
    pub fn new(config: LapicConfig, cpus: usize) -> Self {
        let t = CpuTimer {
            lvt: LVT_MASKED,
            ..Default::default()
        };
        Lapic {
            config,
            cpus: vec![t; cpus.max(1)],
            early_ns: 0,
            drop_arms: 0,
            ignore_deadline_writes: false,
            arms: 0,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &LapicConfig {
        &self.config
    }

    /// Fault: every fire from the next arm on comes `ns` early (a host
    /// that rounds its timer down, a rate that is off).
    pub fn set_early_ns(&mut self, ns: u64) {
        self.early_ns = ns;
    }

    /// Fault: the next `n` arms (initial-count or TSC-deadline writes) are
    /// dropped: the timer stays disarmed.
    pub fn drop_next_arms(&mut self, n: u32) {
        self.drop_arms = n;
    }

    /// Fault: TSC-deadline writes are ignored (some nested hosts): the MSR
    /// reads 0 and nothing fires.
    pub fn set_ignore_deadline_writes(&mut self, on: bool) {
        self.ignore_deadline_writes = on;
    }

    /// Arms accepted so far (all CPUs).
    pub fn arms(&self) -> u64 {
        self.arms
    }

    /// `IA32_APIC_BASE`: base | enable | x2APIC mode | BSP (CPU 0).
    pub fn apic_base(&self, cpu: usize) -> u64 {
        self.config.base | 1 << 11 | (self.config.x2apic as u64) << 10 | ((cpu == 0) as u64) << 8
    }

    fn mode(t: &CpuTimer) -> u32 {
        (t.lvt >> MODE_SHIFT) & 3
    }

    fn current_count(&self, ctx: &SimCtx<'_>, cpu: usize) -> u32 {
        let t = &self.cpus[cpu];
        if Self::mode(t) != MODE_ONE_SHOT || t.fire_ns.is_none() {
            return 0;
        }
        let elapsed = ctx.now_ns.saturating_sub(t.armed_at_ns) as u128;
        let counts =
            elapsed * self.config.timer_hz as u128 / (divisor(t.divide) as u128 * 1_000_000_000);
        (t.initial as u128).saturating_sub(counts) as u32
    }

    /// When CPU `cpu`'s timer fires, machine ns (`None`: disarmed).
    pub fn next_fire_ns(&self, ctx: &SimCtx<'_>, cpu: usize) -> Option<u64> {
        let t = self.cpus.get(cpu)?;
        match Self::mode(t) {
            MODE_ONE_SHOT => t.fire_ns,
            MODE_TSC_DEADLINE if t.deadline != 0 => {
                let now_tsc = ctx.tsc(cpu);
                let at = if t.deadline <= now_tsc {
                    ctx.now_ns
                } else {
                    let d = (t.deadline - now_tsc) as u128 * 1_000_000_000;
                    ctx.now_ns
                        .saturating_add(d.div_ceil(ctx.tsc_hz.max(1) as u128) as u64)
                };
                Some(at.saturating_sub(self.early_ns).max(t.armed_at_ns))
            }
            _ => None,
        }
    }

    /// Takes CPU `cpu`'s interrupt if its timer has fired by now: the
    /// vector, and the timer is disarmed. A masked LVT fires silently.
    pub fn take_interrupt(&mut self, ctx: &SimCtx<'_>, cpu: usize) -> Option<u8> {
        let at = self.next_fire_ns(ctx, cpu)?;
        if ctx.now_ns < at {
            return None;
        }
        let t = &mut self.cpus[cpu];
        t.fire_ns = None;
        t.deadline = 0;
        (t.lvt & LVT_MASKED == 0).then_some(t.lvt as u8)
    }

    fn arm_dropped(&mut self) -> bool {
        if self.drop_arms > 0 {
            self.drop_arms -= 1;
            return true;
        }
        self.arms += 1;
        false
    }

    fn write_reg(&mut self, ctx: &SimCtx<'_>, cpu: usize, offset: u64, value: u32) {
        if cpu >= self.cpus.len() {
            return;
        }
        match offset {
            0x320 => {
                let t = &mut self.cpus[cpu];
                let old_mode = Self::mode(t);
                t.lvt = value & 0x7_10FF;
                // A mode change disarms the timer (SDM 11.5.4.1).
                if Self::mode(t) != old_mode {
                    t.fire_ns = None;
                    t.deadline = 0;
                }
            }
            0x3E0 => self.cpus[cpu].divide = value & 0xB,
            0x380 => {
                if Self::mode(&self.cpus[cpu]) != MODE_ONE_SHOT {
                    return; // ignored in TSC-deadline mode
                }
                if value != 0 && self.arm_dropped() {
                    return;
                }
                let early = self.early_ns;
                let hz = self.config.timer_hz.max(1) as u128;
                let t = &mut self.cpus[cpu];
                t.initial = value;
                t.armed_at_ns = ctx.now_ns;
                t.fire_ns = (value != 0).then(|| {
                    let ns =
                        (value as u128 * divisor(t.divide) as u128 * 1_000_000_000).div_ceil(hz);
                    ctx.now_ns
                        .saturating_add(ns as u64)
                        .saturating_sub(early)
                        .max(ctx.now_ns)
                });
            }
            _ => {}
        }
    }

    fn read_reg(&self, ctx: &SimCtx<'_>, cpu: usize, offset: u64) -> Option<u32> {
        let t = self.cpus.get(cpu)?;
        Some(match offset {
            0x020 => (cpu as u32) << 24, // xAPIC ID
            0x030 => 0x0005_0014,        // version
            0x320 => t.lvt,
            0x380 => t.initial,
            0x390 => self.current_count(ctx, cpu),
            0x3E0 => t.divide,
            _ => 0,
        })
    }

    pub(super) fn mmio_read(&self, ctx: &SimCtx<'_>, addr: u64) -> Option<u64> {
        if self.config.x2apic {
            return None; // the page does not decode in x2APIC mode
        }
        let off = addr.checked_sub(self.config.base)?;
        if off >= 4096 {
            return None;
        }
        self.read_reg(ctx, ctx.cpu, off).map(u64::from)
    }

    pub(super) fn mmio_write(&mut self, ctx: &SimCtx<'_>, addr: u64, value: u64) -> bool {
        if self.config.x2apic {
            return false;
        }
        let Some(off) = addr.checked_sub(self.config.base).filter(|&o| o < 4096) else {
            return false;
        };
        self.write_reg(ctx, ctx.cpu, off, value as u32);
        true
    }

    /// `Some(value)` for the MSRs this device implements, `Some(None)`
    /// for a #GP, `None` for MSRs it does not own.
    pub(super) fn rdmsr(&self, ctx: &SimCtx<'_>, msr: u32) -> Option<Option<u64>> {
        let cpu = ctx.cpu;
        match msr {
            0x1B => Some(Some(self.apic_base(cpu))),
            0x6E0 if self.config.tsc_deadline => {
                Some(Some(self.cpus.get(cpu).map_or(0, |t| t.deadline)))
            }
            0x800..=0x8FF if self.config.x2apic => Some(
                self.read_reg(ctx, cpu, ((msr - 0x800) as u64) << 4)
                    .map(u64::from),
            ),
            0x800..=0x8FF => Some(None),
            _ => None,
        }
    }

    /// As [`rdmsr`](Self::rdmsr): `Some(Ok)` handled, `Some(Err)` #GP.
    pub(super) fn wrmsr(
        &mut self,
        ctx: &SimCtx<'_>,
        msr: u32,
        value: u64,
    ) -> Option<Result<(), ()>> {
        let cpu = ctx.cpu;
        match msr {
            0x1B => Some(Ok(())), // mode switches are not modelled
            0x6E0 if self.config.tsc_deadline => {
                if cpu >= self.cpus.len()
                    || Self::mode(&self.cpus[cpu]) != MODE_TSC_DEADLINE
                    || self.ignore_deadline_writes
                {
                    return Some(Ok(()));
                }
                if value != 0 && self.arm_dropped() {
                    return Some(Ok(()));
                }
                let t = &mut self.cpus[cpu];
                t.deadline = value;
                t.armed_at_ns = ctx.now_ns;
                Some(Ok(()))
            }
            0x800..=0x8FF if self.config.x2apic => {
                self.write_reg(ctx, cpu, ((msr - 0x800) as u64) << 4, value as u32);
                Some(Ok(()))
            }
            0x800..=0x8FF => Some(Err(())),
            _ => None,
        }
    }
}
