//! Simulated 8254 programmable interval timer (ports 0x40–0x43) and the
//! channel-2 half of port 0x61.
//!
//! Modelled: three channels, control words (access mode LSB / MSB /
//! LSB-then-MSB, modes 0–5, with 6 and 7 aliasing 2 and 3), counter latch
//! and read-back commands (count and status), the LSB/MSB flip-flops, the
//! gate of channel 2 (port 0x61 bit 0; channels 0 and 1 have theirs tied
//! high), OUT2 in port 0x61 bit 5, and counting at an exact rational rate on
//! the machine's timeline (tick `n` falls at `n / rate` seconds of machine
//! time, whatever the accesses cost).
//!
//! Not modelled: BCD counting (the bit is kept and reported in the status
//! byte, but the counter counts in binary), the one-clock delay before a
//! written count takes effect, interrupts.
//!
//! Two behaviours differ between real 8254s and QEMU/KVM, chosen with
//! [`PitModel`]: whether a low gate pauses counting, and whether a control
//! word stops the counter until a new count is written.

use super::SimCtx;

/// How faithfully the PIT follows the 8254 data sheet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PitModel {
    /// A real 8254: a low gate pauses counting in modes 0, 2, 3 and 4;
    /// modes 1 and 5 wait for a gate rising edge; a control word stops the
    /// counter until the new count is written.
    Hardware,
    /// QEMU's hw/timer/i8254.c (and KVM's in-kernel PIT): counting ignores
    /// the gate level (a rising edge restarts modes 1, 2, 3 and 5), and a
    /// control word leaves the counter running.
    Qemu,
}

/// PIT parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PitConfig {
    /// Input clock as `(numerator, denominator)` Hz.
    pub rate: (u64, u64),
    /// Semantics of gate and control words.
    pub model: PitModel,
    /// Port 0x61 (channel-2 gate, speaker data, OUT2) is decoded. QEMU
    /// creates it with the PC speaker on pc/q35; microvm has none (the
    /// port reads 0xFF and writes are dropped).
    pub port_61: bool,
    /// Fault: every counter read (live or latched) returns this value.
    pub stuck: Option<u16>,
    /// Fault: latch commands are ignored, so reads return live counter
    /// bytes, LSB and MSB taken at different instants (they can tear).
    pub ignores_latch: bool,
}

/// The 8254's input clock on PC hardware: the 14.31818 MHz oscillator
/// (4 x the NTSC colour subcarrier, 315/88 MHz) divided by 12, i.e.
/// 105/88 MHz = 1,193,181.818... Hz.
pub const PIT_HARDWARE_RATE: (u64, u64) = (105_000_000, 88);
/// QEMU's emulated PIT: `PIT_FREQ` = 1,193,182 Hz
/// (include/hw/timer/i8254.h).
pub const PIT_QEMU_RATE: (u64, u64) = (1_193_182, 1);
/// KVM's in-kernel PIT: `KVM_PIT_FREQ` = 1,193,181 Hz
/// (arch/x86/kvm/i8254.h).
pub const PIT_KVM_RATE: (u64, u64) = (1_193_181, 1);

impl PitConfig {
    /// A PC's 8254 at [`PIT_HARDWARE_RATE`], data-sheet semantics, port 0x61.
    pub fn hardware() -> Self {
        PitConfig {
            rate: PIT_HARDWARE_RATE,
            model: PitModel::Hardware,
            port_61: true,
            stuck: None,
            ignores_latch: false,
        }
    }

    /// QEMU TCG q35/pc: the emulated PIT at 1,193,182 Hz and the PC
    /// speaker's port 0x61.
    pub fn qemu() -> Self {
        PitConfig {
            rate: PIT_QEMU_RATE,
            model: PitModel::Qemu,
            ..Self::hardware()
        }
    }

    /// QEMU/KVM q35/pc: KVM's in-kernel PIT (1,193,181 Hz) and its speaker
    /// port.
    pub fn kvm() -> Self {
        PitConfig {
            rate: PIT_KVM_RATE,
            ..Self::qemu()
        }
    }

    /// QEMU microvm: the emulated PIT (`pit=auto` is on; hw/i386/microvm.c)
    /// but no PC speaker, so nothing decodes port 0x61 and channel 2's gate
    /// stays low, which QEMU's counting ignores.
    pub fn microvm() -> Self {
        PitConfig {
            port_61: false,
            ..Self::qemu()
        }
    }
}

/// Access mode of a channel (control word bits 5:4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    Lsb = 1,
    Msb = 2,
    Word = 3,
}

impl Access {
    fn from_bits(b: u8) -> Access {
        match b & 3 {
            1 => Access::Lsb,
            2 => Access::Msb,
            _ => Access::Word,
        }
    }
}

#[derive(Clone, Debug)]
struct Channel {
    access: Access,
    mode: u8,
    bcd: bool,
    /// Initial count, 1..=65536 (0 written means 65536).
    count: u32,
    /// A count was written since the last control word (the status byte's
    /// "null count" is its negation).
    armed: bool,
    /// Ticks counted before `running_since`.
    elapsed_base: u64,
    /// Tick index since which the channel counts, `None` while paused.
    running_since: Option<u64>,
    gate: bool,
    /// Latched count and how many bytes of it are left to read.
    latched: Option<(u16, u8)>,
    latched_status: Option<u8>,
    /// Next byte of a Word read / write is the MSB.
    read_msb: bool,
    write_msb: bool,
    write_lsb: u8,
}

impl Channel {
    fn new(gate: bool) -> Channel {
        // As QEMU's reset: mode 3, count 65536, counting.
        Channel {
            access: Access::Word,
            mode: 3,
            bcd: false,
            count: 0x1_0000,
            armed: true,
            elapsed_base: 0,
            running_since: Some(0),
            gate,
            latched: None,
            latched_status: None,
            read_msb: false,
            write_msb: false,
            write_lsb: 0,
        }
    }

    /// The effective mode (6 and 7 are 2 and 3).
    fn mode(&self) -> u8 {
        match self.mode {
            6 => 2,
            7 => 3,
            m => m,
        }
    }

    fn elapsed(&self, tick: u64) -> u64 {
        self.elapsed_base + self.running_since.map_or(0, |s| tick.saturating_sub(s))
    }

    /// The counting element's value now.
    fn value(&self, tick: u64) -> u16 {
        let e = self.elapsed(tick);
        let n = self.count as u64;
        let v = match self.mode() {
            0 | 1 | 4 | 5 => n.wrapping_sub(e) & 0xFFFF,
            2 => n - e % n,
            // Square wave counts down by two (QEMU's approximation).
            _ => n - (2 * e) % n,
        };
        v as u16
    }

    /// The OUT pin now (modes 1 and 5 are approximated as 0 and 4).
    fn out(&self, tick: u64) -> bool {
        let e = self.elapsed(tick);
        let n = self.count as u64;
        match self.mode() {
            0 | 1 => e >= n,
            2 => e % n != n - 1,
            3 => e % n < n.div_ceil(2),
            _ => e != n,
        }
    }

    fn status(&self, tick: u64) -> u8 {
        (self.out(tick) as u8) << 7
            | (!self.armed as u8) << 6
            | (self.access as u8) << 4
            | self.mode << 1
            | self.bcd as u8
    }

    fn pause(&mut self, tick: u64) {
        if let Some(s) = self.running_since.take() {
            self.elapsed_base += tick.saturating_sub(s);
        }
    }

    fn restart(&mut self, tick: u64) {
        self.elapsed_base = 0;
        self.running_since = Some(tick);
    }
}

/// The simulated PIT.
#[derive(Debug)]
pub struct Pit8254 {
    config: PitConfig,
    channels: [Channel; 3],
    speaker_data: bool,
    /// Bits 2-3 of port 0x61 as last written.
    port_61_nmi_bits: u8,
    refresh: bool,
    control_writes: [u64; 3],
    port_61_writes: u64,
    /// Channel 0 in mode 0: the tick its count was written at, until its
    /// IRQ 0 edge is taken (a control word for channel 0 clears it).
    irq0_since: Option<u64>,
}

impl Pit8254 {
    /// A PIT per `config`, in QEMU's reset state (every channel mode 3,
    /// count 65536; channel 2's gate low).
    pub fn new(config: PitConfig) -> Self {
        Pit8254 {
            config,
            channels: [Channel::new(true), Channel::new(true), Channel::new(false)],
            speaker_data: false,
            port_61_nmi_bits: 0,
            refresh: false,
            control_writes: [0; 3],
            port_61_writes: 0,
            irq0_since: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &PitConfig {
        &self.config
    }

    /// Sets a fault at run time (`None` heals it).
    pub fn set_stuck(&mut self, value: Option<u16>) {
        self.config.stuck = value;
    }

    /// The input clock's tick index at machine time `ns`.
    pub fn tick_at(&self, ns: u64) -> u64 {
        let (num, den) = self.config.rate;
        (ns as u128 * num as u128 / (den as u128 * 1_000_000_000)) as u64
    }

    /// Channel `ch`'s counting element now (what a latch would capture).
    pub fn count(&self, ctx: &SimCtx<'_>, ch: usize) -> u16 {
        match self.config.stuck {
            Some(v) => v,
            None => self.channels[ch].value(self.tick_at(ctx.now_ns)),
        }
    }

    /// Channel `ch`'s mode as last programmed (0..=7).
    pub fn mode(&self, ch: usize) -> u8 {
        self.channels[ch].mode
    }

    /// Channel `ch`'s gate input.
    pub fn gate(&self, ch: usize) -> bool {
        self.channels[ch].gate
    }

    /// Whether the PC speaker's data bit (port 0x61 bit 1) is on.
    pub fn speaker_on(&self) -> bool {
        self.speaker_data
    }

    /// Control words written for channel `ch` (latch commands included).
    pub fn control_writes(&self, ch: usize) -> u64 {
        self.control_writes[ch]
    }

    /// Writes to port 0x61 that reached the device.
    pub fn port_61_writes(&self) -> u64 {
        self.port_61_writes
    }

    /// When channel 0's mode-0 one-shot raises IRQ 0, machine ns: `N + 1`
    /// input clocks after its count `N` was written (8254 mode 0). `None`
    /// when none is pending (not mode 0, no count since the control word,
    /// or already taken). Periodic modes are not modelled as interrupts.
    pub fn channel0_next_fire_ns(&self) -> Option<u64> {
        let since = self.irq0_since?;
        let c = &self.channels[0];
        if c.mode() != 0 || self.config.stuck.is_some() {
            return None;
        }
        let tick = since + c.count as u64 + 1;
        let (num, den) = self.config.rate;
        let ns = (tick as u128 * den as u128 * 1_000_000_000).div_ceil(num as u128);
        Some(ns.min(u64::MAX as u128) as u64)
    }

    /// Channel 0's IRQ 0 edge, if it has come by now (taken once).
    pub fn channel0_take_interrupt(&mut self, ctx: &SimCtx<'_>) -> bool {
        match self.channel0_next_fire_ns() {
            Some(at) if ctx.now_ns >= at => {
                self.irq0_since = None;
                true
            }
            _ => false,
        }
    }

    fn latch(&mut self, ch: usize, tick: u64) {
        if self.config.ignores_latch {
            return;
        }
        let v = match self.config.stuck {
            Some(v) => v,
            None => self.channels[ch].value(tick),
        };
        let c = &mut self.channels[ch];
        // A latched count stays until read (a second latch is ignored).
        if c.latched.is_none() {
            c.latched = Some((v, if c.access == Access::Word { 2 } else { 1 }));
        }
    }

    fn control(&mut self, value: u8, tick: u64) {
        let sc = (value >> 6) as usize;
        if sc == 3 {
            // Read-back: bit 5 clear latches counts, bit 4 clear statuses.
            for ch in 0..3 {
                if value & (2 << ch) == 0 {
                    continue;
                }
                self.control_writes[ch] += 1;
                if value & 0x20 == 0 {
                    self.latch(ch, tick);
                }
                if value & 0x10 == 0 && self.channels[ch].latched_status.is_none() {
                    let s = self.channels[ch].status(tick);
                    self.channels[ch].latched_status = Some(s);
                }
            }
            return;
        }
        self.control_writes[sc] += 1;
        let access = (value >> 4) & 3;
        if access == 0 {
            self.latch(sc, tick);
            return;
        }
        if sc == 0 {
            // OUT0 goes low: no edge until a new count is written.
            self.irq0_since = None;
        }
        let hardware = self.config.model == PitModel::Hardware;
        let c = &mut self.channels[sc];
        c.access = Access::from_bits(access);
        c.mode = (value >> 1) & 7;
        c.bcd = value & 1 != 0;
        c.read_msb = false;
        c.write_msb = false;
        c.latched = None;
        if hardware {
            // The counter waits for its new count.
            c.armed = false;
            c.pause(tick);
        }
    }

    fn write_count(&mut self, ch: usize, value: u8, tick: u64) {
        let hardware = self.config.model == PitModel::Hardware;
        let c = &mut self.channels[ch];
        let count = match c.access {
            Access::Lsb => value as u32,
            Access::Msb => (value as u32) << 8,
            Access::Word if !c.write_msb => {
                c.write_lsb = value;
                c.write_msb = true;
                return;
            }
            Access::Word => {
                c.write_msb = false;
                c.write_lsb as u32 | (value as u32) << 8
            }
        };
        c.count = if count == 0 { 0x1_0000 } else { count };
        c.armed = true;
        c.restart(tick);
        if ch == 0 && c.mode() == 0 {
            self.irq0_since = Some(tick);
        }
        let c = &mut self.channels[ch];
        // On an 8254, modes 1 and 5 wait for a gate rising edge, and a low
        // gate holds the others; QEMU counts from the write regardless.
        if hardware && (matches!(c.mode(), 1 | 5) || !c.gate) {
            c.pause(tick);
        }
    }

    fn read_data(&mut self, ch: usize, tick: u64) -> u8 {
        if let Some(s) = self.channels[ch].latched_status.take() {
            return s;
        }
        let c = &mut self.channels[ch];
        if let Some((v, left)) = c.latched {
            let msb = match c.access {
                Access::Lsb => false,
                Access::Msb => true,
                Access::Word => left == 1,
            };
            c.latched = if left > 1 { Some((v, left - 1)) } else { None };
            return if msb { (v >> 8) as u8 } else { v as u8 };
        }
        let v = match self.config.stuck {
            Some(v) => v,
            None => c.value(tick),
        };
        let msb = match c.access {
            Access::Lsb => false,
            Access::Msb => true,
            Access::Word => {
                let m = c.read_msb;
                c.read_msb = !m;
                m
            }
        };
        if msb {
            (v >> 8) as u8
        } else {
            v as u8
        }
    }

    fn set_gate2(&mut self, high: bool, tick: u64) {
        let hardware = self.config.model == PitModel::Hardware;
        let c = &mut self.channels[2];
        let rising = high && !c.gate;
        c.gate = high;
        match c.mode() {
            // Modes 1, 2, 3 and 5: a rising edge (re)starts the count.
            1..=3 | 5 if rising && c.armed => c.restart(tick),
            // A low gate pauses 0, 2, 3 and 4 on an 8254 (QEMU ignores it).
            2 | 3 if hardware && !high => c.pause(tick),
            0 | 4 if hardware => {
                if !high {
                    c.pause(tick);
                } else if c.armed && c.running_since.is_none() {
                    c.running_since = Some(tick);
                }
            }
            _ => {}
        }
    }

    fn port_61_read(&mut self, tick: u64) -> u8 {
        // Bit 4 toggles on every read, as QEMU's refresh-clock stand-in.
        self.refresh = !self.refresh;
        let c = &self.channels[2];
        let out = match self.config.stuck {
            Some(_) => false,
            None => c.out(tick),
        };
        (c.gate as u8)
            | (self.speaker_data as u8) << 1
            | self.port_61_nmi_bits
            | (self.refresh as u8) << 4
            | (out as u8) << 5
    }

    pub(super) fn port_read(&mut self, ctx: &SimCtx<'_>, port: u16) -> Option<u8> {
        let tick = self.tick_at(ctx.now_ns);
        match port {
            0x40..=0x42 => Some(self.read_data((port - 0x40) as usize, tick)),
            // The mode/command register is write only.
            0x43 => Some(0),
            0x61 if self.config.port_61 => Some(self.port_61_read(tick)),
            _ => None,
        }
    }

    pub(super) fn port_write(&mut self, ctx: &SimCtx<'_>, port: u16, value: u8) -> bool {
        let tick = self.tick_at(ctx.now_ns);
        match port {
            0x40..=0x42 => self.write_count((port - 0x40) as usize, value, tick),
            0x43 => self.control(value, tick),
            0x61 if self.config.port_61 => {
                self.port_61_writes += 1;
                self.speaker_data = value & 2 != 0;
                self.port_61_nmi_bits = value & 0x0C;
                self.set_gate2(value & 1 != 0, tick);
            }
            _ => return false,
        }
        true
    }
}
