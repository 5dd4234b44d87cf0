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
    /// The three comparators (timers 0-2).
    timers: [Comparator; 3],
    /// Tn_INT_ROUTE_CAP of every timer (bit n: GSI n allowed).
    route_cap: u32,
    /// Run-time fault: the next `n` comparator writes are dropped.
    drop_comparator_writes: u32,
}

/// One comparator (timer N registers at 0x100 + 0x20 * N).
#[derive(Clone, Copy, Debug, Default)]
struct Comparator {
    /// Tn_INT_ENB_CNF (bit 2), Tn_32MODE_CNF (bit 8), Tn_INT_ROUTE_CNF
    /// (bits 13:9); the rest is not modelled (edge, one-shot).
    config: u64,
    comparator: u64,
    /// A match is pending (set by a comparator or config write, cleared
    /// when the interrupt is taken): the first match counts from then.
    armed: bool,
}

/// Tn_INT_ENB_CNF.
const TN_INT_ENB: u64 = 1 << 2;
/// Tn_32MODE_CNF.
const TN_32MODE: u64 = 1 << 8;

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
            timers: [Comparator::default(); 3],
            route_cap: 0x00FF_0104,
            drop_comparator_writes: 0,
        }
    }

    /// Run-time: every timer's Tn_INT_ROUTE_CAP (bit n: GSI n may be
    /// routed to). The default allows GSIs 2, 8 and 16-23.
    pub fn set_route_cap(&mut self, cap: u32) {
        self.route_cap = cap;
    }

    /// Run-time fault: the next `n` comparator writes are dropped (the
    /// comparator keeps its old value).
    pub fn drop_comparator_writes(&mut self, n: u32) {
        self.drop_comparator_writes = n;
    }

    /// Width of timer `n`'s comparison: 32 when the counter is 32-bit or
    /// the timer is in 32-bit mode.
    fn timer_bits(&self, n: usize) -> u32 {
        if self.bits < 64 || self.timers[n].config & TN_32MODE != 0 {
            self.bits.min(32)
        } else {
            64
        }
    }

    /// When timer `n` next matches, machine ns (`None`: its interrupt is
    /// disabled, the counter does not run, or, for a 64-bit comparison
    /// already passed, never). A comparator behind the counter matches
    /// only after the counter wraps: the "written in the past" race.
    pub fn next_fire_ns(&self, ctx: &SimCtx<'_>, n: usize) -> Option<u64> {
        let t = self.timers.get(n)?;
        if t.config & TN_INT_ENB == 0 || !self.enabled || self.config.stuck || self.stopped {
            return None;
        }
        let bits = self.timer_bits(n);
        let mask = u64::MAX >> (64 - bits);
        let delta = t.comparator.wrapping_sub(self.counter(ctx)) & mask;
        let delta = match (delta, t.armed) {
            (0, true) => 0,
            (0, false) if bits == 64 => return None,
            (0, false) => 1u128 << bits,
            (d, _) => d as u128,
        };
        let ppm = 1_000_000 + self.rate_error_ppm as i128;
        if ppm <= 0 {
            return None;
        }
        // ticks * period / rate factor, rounded up: the first ns at which
        // the counter has reached the comparator.
        let ns =
            (delta * self.config.period_fs as u128 * 1_000_000).div_ceil(1_000_000 * ppm as u128);
        let ns = ns.min(u64::MAX as u128) as u64;
        Some(ctx.now_ns.saturating_add(ns))
    }

    /// Takes timer `n`'s interrupt if it has matched by now: the GSI it
    /// is routed to (Tn_INT_ROUTE_CNF).
    pub fn take_interrupt(&mut self, ctx: &SimCtx<'_>, n: usize) -> Option<u32> {
        let at = self.next_fire_ns(ctx, n)?;
        if ctx.now_ns < at {
            return None;
        }
        let t = &mut self.timers[n];
        t.armed = false;
        Some(((t.config >> 9) & 0x1F) as u32)
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
            r @ 0x100..=0x15F => {
                let n = ((r - 0x100) / 0x20) as usize;
                let t = &self.timers[n];
                match (r - 0x100) % 0x20 {
                    // Tn_SIZE_CAP (bit 5) with a 64-bit counter; route cap.
                    0x00 => {
                        t.config
                            | (self.config.counter_64bit as u64) << 5
                            | (self.route_cap as u64) << 32
                    }
                    0x08 => t.comparator & (u64::MAX >> (64 - self.timer_bits(n))),
                    _ => 0,
                }
            }
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
            (r @ 0x100..=0x15F, _) => {
                let n = ((r - 0x100) / 0x20) as usize;
                let lo = if size == 8 {
                    value
                } else {
                    value & 0xFFFF_FFFF
                };
                match (r - 0x100) % 0x20 {
                    0x00 => {
                        let route = (lo >> 9) & 0x1F;
                        let route = if self.route_cap & (1 << route) != 0 {
                            route
                        } else {
                            (self.timers[n].config >> 9) & 0x1F // not allowed: kept
                        };
                        self.timers[n].config = (lo & (TN_INT_ENB | TN_32MODE)) | route << 9;
                        self.timers[n].armed = true;
                    }
                    0x08 => {
                        if self.drop_comparator_writes > 0 {
                            self.drop_comparator_writes -= 1;
                            return;
                        }
                        let bits = self.timer_bits(n);
                        self.timers[n].comparator = lo & (u64::MAX >> (64 - bits));
                        self.timers[n].armed = true;
                    }
                    _ => {}
                }
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
