//! Simulated ACPI PM timer (3.579545 MHz).

use super::SimCtx;

/// PM timer parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PmTimerConfig {
    /// I/O port (QEMU: 0x608 on q35, 0xb008 on pc).
    pub port: u16,
    /// TMR_VAL_EXT: 32-bit counter (else 24-bit).
    pub bits32: bool,
    /// Fault: a non-latching chipset; every 5th read returns a torn value.
    pub glitchy: bool,
    /// Fault: the counter never advances.
    pub stuck: bool,
    /// Fault: every read returns all ones (nothing decodes the port).
    pub all_ones: bool,
}

impl Default for PmTimerConfig {
    fn default() -> Self {
        PmTimerConfig {
            port: 0x608,
            bits32: false,
            glitchy: false,
            stuck: false,
            all_ones: false,
        }
    }
}

/// The PM timer's fixed rate.
pub const PM_TIMER_HZ: u64 = 3_579_545;

/// The simulated PM timer.
#[derive(Debug)]
pub struct PmTimer {
    config: PmTimerConfig,
    reads: u64,
}

impl PmTimer {
    /// A PM timer per `config`.
    pub fn new(config: PmTimerConfig) -> Self {
        PmTimer { config, reads: 0 }
    }

    /// The configuration.
    pub fn config(&self) -> &PmTimerConfig {
        &self.config
    }

    /// Port reads served so far.
    pub fn reads(&self) -> u64 {
        self.reads
    }

    /// The true counter value now (masked to its width).
    pub fn value(&self, ctx: &SimCtx<'_>) -> u32 {
        if self.config.stuck {
            return 0x0012_3456;
        }
        let ticks = (ctx.now_ns as u128 * PM_TIMER_HZ as u128 / 1_000_000_000) as u64;
        let mask = if self.config.bits32 {
            0xFFFF_FFFF
        } else {
            0x00FF_FFFF
        };
        (ticks & mask) as u32
    }

    pub(super) fn port_read(&mut self, ctx: &SimCtx<'_>, port: u16) -> Option<u32> {
        if port != self.config.port {
            return None;
        }
        self.reads += 1;
        if self.config.all_ones {
            return Some(u32::MAX);
        }
        let v = self.value(ctx);
        if self.config.glitchy && self.reads % 5 == 3 {
            // A torn read: the low byte latched from a later count and the
            // middle byte flipped, as non-latching PIIX4/ICH parts do.
            let mask = if self.config.bits32 {
                0xFFFF_FFFF
            } else {
                0x00FF_FFFF
            };
            return Some((v ^ 0x00_80_00 ^ 0xFF) & mask);
        }
        Some(v)
    }
}
