//! Simulated HPET (IA-PC HPET 1.0a registers that clock code uses).

use super::SimCtx;

/// HPET parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HpetConfig {
    /// Physical base of the 1 KiB register block.
    pub base: u64,
    /// Counter period in femtoseconds (capabilities bits 63:32).
    pub period_fs: u32,
    /// COUNT_SIZE_CAP: 64-bit main counter.
    pub counter_64bit: bool,
    /// Fault: the counter never advances, even when enabled.
    pub stuck: bool,
    /// Fault: nothing decodes the block; every read is all ones (a missing
    /// device, or a wrong base address).
    pub absent: bool,
    /// General configuration register as firmware left it (bit 0
    /// ENABLE_CNF, bit 1 LEG_RT_CNF).
    pub initial_config: u64,
    /// Main counter value at power-on.
    pub initial_counter: u64,
}

impl HpetConfig {
    /// QEMU's: 100 MHz (10,000,000 fs), 64-bit, at 0xFED00000.
    pub fn qemu() -> Self {
        HpetConfig {
            base: 0xFED0_0000,
            period_fs: 10_000_000,
            counter_64bit: true,
            stuck: false,
            absent: false,
            initial_config: 0,
            initial_counter: 0,
        }
    }
    /// The classic 14.31818 MHz (69,841,279 fs), 64-bit.
    pub fn classic() -> Self {
        HpetConfig {
            period_fs: 69_841_279,
            ..Self::qemu()
        }
    }
    /// The same device with a 32-bit main counter.
    pub fn narrow(self) -> Self {
        HpetConfig {
            counter_64bit: false,
            ..self
        }
    }
}

/// The simulated HPET.
#[derive(Debug)]
pub struct Hpet {
    config: HpetConfig,
    enabled: bool,
    /// Counter value when last halted / written.
    counter_base: u64,
    /// Machine ns when it was last enabled.
    enabled_at_ns: u64,
    config_reg: u64,
    /// Run-time fault: rate error in ppm since `enabled_at_ns`.
    rate_error_ppm: i64,
    /// Run-time fault: the counter stopped.
    stopped: bool,
    /// The counter's true width (wraps at 2^bits), whatever the
    /// capabilities claim.
    bits: u32,
}

impl Hpet {
    /// An HPET per `config`, with the counter at `initial_counter` and the
    /// configuration register at `initial_config` (running since machine
    /// time 0 if that enables it).
    pub fn new(config: HpetConfig) -> Self {
        let config_reg = config.initial_config & 3;
        let bits = if config.counter_64bit { 64 } else { 32 };
        Hpet {
            enabled: config_reg & 1 != 0,
            counter_base: config.initial_counter,
            enabled_at_ns: 0,
            config_reg,
            config,
            rate_error_ppm: 0,
            stopped: false,
            bits,
        }
    }

    /// Run-time fault: from now on the counter runs `ppm` parts per million
    /// fast (negative: slow).
    pub fn set_rate_error_ppm(&mut self, ctx: &SimCtx<'_>, ppm: i64) {
        self.rebase(ctx);
        self.rate_error_ppm = ppm;
    }

    /// Run-time fault: the counter stops (`true`) or runs again from where
    /// it stopped.
    pub fn set_stopped(&mut self, ctx: &SimCtx<'_>, stopped: bool) {
        self.rebase(ctx);
        self.stopped = stopped;
    }

    /// Run-time fault: the counter jumps by `ticks` (wrapping; a "negative"
    /// jump steps it back).
    pub fn jump(&mut self, ctx: &SimCtx<'_>, ticks: u64) {
        self.rebase(ctx);
        self.counter_base = self.counter_base.wrapping_add(ticks);
    }

    /// Run-time fault: from now on the main counter is `bits` wide (1..=64)
    /// and wraps at 2^bits, while the capabilities still claim the
    /// configured width: a 32-bit counter posing as 64-bit, or a wrap that
    /// comes early. The counter keeps its value modulo the new width.
    pub fn set_counter_bits(&mut self, ctx: &SimCtx<'_>, bits: u32) {
        self.rebase(ctx);
        self.bits = bits.clamp(1, 64);
        self.counter_base &= self.mask();
    }

    fn mask(&self) -> u64 {
        u64::MAX >> (64 - self.bits)
    }

    /// Freezes the elapsed count into `counter_base` (before a change).
    fn rebase(&mut self, ctx: &SimCtx<'_>) {
        self.counter_base = self.counter(ctx);
        self.enabled_at_ns = ctx.now_ns;
    }

    /// The general configuration register's current value.
    pub fn config_register(&self) -> u64 {
        self.config_reg
    }

    /// The configuration.
    pub fn config(&self) -> &HpetConfig {
        &self.config
    }

    /// Main counter value now (full 64-bit internal value).
    pub fn counter(&self, ctx: &SimCtx<'_>) -> u64 {
        if !self.enabled || self.config.stuck || self.stopped {
            return self.counter_base & self.mask();
        }
        let ns = ctx.now_ns.saturating_sub(self.enabled_at_ns) as i128;
        let ns = (ns + ns * self.rate_error_ppm as i128 / 1_000_000).max(0) as u128;
        let ticks = (ns * 1_000_000 / self.config.period_fs.max(1) as u128) as u64;
        self.counter_base.wrapping_add(ticks) & self.mask()
    }

    fn capabilities(&self) -> u64 {
        (self.config.period_fs as u64) << 32
            | 0x8086 << 16
            | 1 << 15
            | (self.config.counter_64bit as u64) << 13
            | 2 << 8
            | 1
    }

    pub(super) fn mmio_read(&mut self, ctx: &SimCtx<'_>, addr: u64, size: usize) -> Option<u64> {
        let off = addr.checked_sub(self.config.base)?;
        if off >= 1024 || self.config.absent {
            return None;
        }
        let reg = off & !7;
        let full = match reg {
            0x000 => self.capabilities(),
            0x010 => self.config_reg,
            0x0F0 => self.counter(ctx),
            _ => 0,
        };
        let shifted = full >> ((off & 7) * 8);
        Some(if size == 8 {
            shifted
        } else {
            shifted & 0xFFFF_FFFF
        })
    }

    pub(super) fn mmio_write(&mut self, ctx: &SimCtx<'_>, addr: u64, size: usize, value: u64) {
        let Some(off) = addr.checked_sub(self.config.base) else {
            return;
        };
        if self.config.absent {
            return;
        }
        match (off, size) {
            (0x010, _) => {
                let enable = value & 1 != 0;
                if enable && !self.enabled {
                    self.enabled_at_ns = ctx.now_ns;
                } else if !enable && self.enabled {
                    self.counter_base = self.counter(ctx);
                }
                self.enabled = enable;
                self.config_reg = value & 3;
            }
            (0x0F0, _) if !self.enabled => {
                self.counter_base = if size == 8 {
                    value
                } else {
                    value & 0xFFFF_FFFF
                };
            }
            _ => {}
        }
    }
}
