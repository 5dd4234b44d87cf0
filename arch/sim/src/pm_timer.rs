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
    /// Ticks at `base_ns` (unmasked), and the machine time then.
    base_ticks: u64,
    base_ns: u64,
    /// Run-time faults.
    rate_error_ppm: i64,
    stopped: bool,
    glitchy: bool,
    all_ones: bool,
}

impl PmTimer {
    /// A PM timer per `config`.
    pub fn new(config: PmTimerConfig) -> Self {
        PmTimer {
            reads: 0,
            base_ticks: 0,
            base_ns: 0,
            rate_error_ppm: 0,
            stopped: false,
            glitchy: config.glitchy,
            all_ones: config.all_ones,
            config,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &PmTimerConfig {
        &self.config
    }

    /// Port reads served so far.
    pub fn reads(&self) -> u64 {
        self.reads
    }

    fn mask(&self) -> u32 {
        if self.config.bits32 {
            0xFFFF_FFFF
        } else {
            0x00FF_FFFF
        }
    }

    /// Elapsed ticks (unmasked) at `ctx`'s time.
    fn ticks(&self, ctx: &SimCtx<'_>) -> u64 {
        if self.stopped {
            return self.base_ticks;
        }
        let ns = ctx.now_ns.saturating_sub(self.base_ns) as i128;
        let ns = (ns + ns * self.rate_error_ppm as i128 / 1_000_000).max(0) as u128;
        self.base_ticks
            .wrapping_add((ns * PM_TIMER_HZ as u128 / 1_000_000_000) as u64)
    }

    fn rebase(&mut self, ctx: &SimCtx<'_>) {
        self.base_ticks = self.ticks(ctx);
        self.base_ns = ctx.now_ns;
    }

    /// The true counter value now (masked to its width).
    pub fn value(&self, ctx: &SimCtx<'_>) -> u32 {
        if self.config.stuck {
            return 0x0012_3456;
        }
        self.ticks(ctx) as u32 & self.mask()
    }

    /// Run-time fault: from now on the counter runs `ppm` parts per million
    /// fast (negative: slow).
    pub fn set_rate_error_ppm(&mut self, ctx: &SimCtx<'_>, ppm: i64) {
        self.rebase(ctx);
        self.rate_error_ppm = ppm;
    }

    /// Run-time fault: the counter stops (`true`, holding its value) or
    /// counts again from there.
    pub fn set_stopped(&mut self, ctx: &SimCtx<'_>, stopped: bool) {
        self.rebase(ctx);
        self.stopped = stopped;
    }

    /// Run-time fault: the counter jumps by `ticks` (wrapping at its width;
    /// a "negative" jump steps it back).
    pub fn jump(&mut self, ctx: &SimCtx<'_>, ticks: u64) {
        self.rebase(ctx);
        self.base_ticks = self.base_ticks.wrapping_add(ticks);
    }

    /// Run-time fault: every 5th read is torn ([`PmTimerConfig::glitchy`]).
    pub fn set_glitchy(&mut self, on: bool) {
        self.glitchy = on;
    }

    /// Run-time fault: every read returns all ones
    /// ([`PmTimerConfig::all_ones`]).
    pub fn set_all_ones(&mut self, on: bool) {
        self.all_ones = on;
    }

    pub(super) fn port_read(&mut self, ctx: &SimCtx<'_>, port: u16) -> Option<u32> {
        if port != self.config.port {
            return None;
        }
        self.reads += 1;
        if self.all_ones {
            return Some(u32::MAX);
        }
        let v = self.value(ctx);
        if self.glitchy && self.reads % 5 == 3 {
            // A torn read: the low byte latched from a later count and the
            // middle byte flipped, as non-latching PIIX4/ICH parts do.
            return Some((v ^ 0x00_80_00 ^ 0xFF) & self.mask());
        }
        Some(v)
    }
}
