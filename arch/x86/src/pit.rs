//! The 8254 PIT's channel 2, as clockhal uses it: the only PIT writes
//! clockhal makes.
//!
//! clockhal runs channel 2 (the one whose gate is port 0x61 bit 0 and whose
//! output drives the PC speaker, the channel Linux calibrates the TSC with)
//! as a free-running 16-bit down-counter: mode 0, binary, initial count
//! 65,536, gate high, speaker data off. It then reads it with a counter latch
//! command and two byte reads. It never touches channel 0 (the OS's timer
//! interrupt, IRQ 0) unless the OS hands it over with a [`Channel0Grant`]
//! (a one-shot timer of last resort: [`program_channel0`]), nor channel 1.
//!
//! **The OS's obligations** once it lets clockhal use the PIT (by creating a
//! [`Native`](crate::Native) and probing the PIT backend):
//! - leave channel 2 alone: no control words for it, no reads or writes of
//!   port 0x42 (a foreign latch or byte read desynchronises the LSB/MSB
//!   flip-flop, and a foreign control word restarts the counter);
//! - leave bits 0–1 of port 0x61 as clockhal set them (gate high, speaker
//!   data off: the PC speaker stays silent). Bits 2–3 are preserved.
//!
//! The free functions below are safe: the only `unsafe` port writes are
//! these fixed sequences, which the [`Native::new`](crate::Native::new)
//! contract allows.

use crate::Hardware;

/// Channel 2 data port (count in, latched count out).
pub const CHANNEL2_DATA: u16 = 0x42;
/// Mode/command register (write only).
pub const MODE_COMMAND: u16 = 0x43;
/// "Port B" / NMI status and control: bit 0 channel-2 gate, bit 1 speaker
/// data, bit 5 channel-2 output (read only).
pub const PORT_B: u16 = 0x61;
/// Port 0x61 bit 0: channel 2's gate input.
pub const PORT_B_GATE2: u8 = 1 << 0;
/// Port 0x61 bit 1: speaker data enable (clockhal keeps it 0: silent).
pub const PORT_B_SPEAKER_DATA: u8 = 1 << 1;
/// Port 0x61 bit 5 (read): channel 2's OUT pin.
pub const PORT_B_OUT2: u8 = 1 << 5;

/// Control word: channel 2 (bits 7:6 = 10), LSB then MSB (bits 5:4 = 11),
/// mode 0 (bits 3:1 = 000), binary (bit 0 = 0). Linux's TSC calibration
/// writes the same word.
pub const CONTROL_CH2_MODE0: u8 = 0b1011_0000;
/// Counter latch command for channel 2 (bits 7:6 = 10, bits 5:4 = 00).
pub const LATCH_CH2: u8 = 0b1000_0000;

/// Starts channel 2 as a free-running counter: gate high and speaker data
/// off (a read-modify-write of port 0x61 that keeps bits 2–3), then control
/// word [`CONTROL_CH2_MODE0`] and initial count 0 (= 65,536). In mode 0 the
/// 8254 keeps decrementing after terminal count, wrapping from 0 to 0xFFFF,
/// so the counter has a period of exactly 65,536 input clocks.
///
/// Restarting is harmless (the counter starts over). Writes to absent ports
/// are dropped by the bus, and an absent PIT then reads 0xFFFF.
/// Interrupt-safe: no (latch and two byte reads: not atomic).
pub fn start_channel2(hw: &impl Hardware) {
    let port_b = hw.inb(PORT_B);
    let port_b = (port_b & !PORT_B_SPEAKER_DATA) | PORT_B_GATE2;
    // SAFETY: `Native::new`'s contract lets clockhal program PIT channel 2
    // and bits 0-1 of port 0x61; this sequence writes exactly those (bits
    // 2-3 of 0x61 are written back as read, bits 4-7 are read only). The
    // PIT has no memory access, so no write here can break memory safety.
    unsafe {
        hw.outb(PORT_B, port_b);
        hw.outb(MODE_COMMAND, CONTROL_CH2_MODE0);
        hw.outb(CHANNEL2_DATA, 0);
        hw.outb(CHANNEL2_DATA, 0);
    }
}

/// Latches channel 2's count and reads it (LSB, then MSB): three port
/// accesses. The value counts *down*; 0 stands for 65,536.
///
/// Callers serialise this across CPUs (the latch and the LSB/MSB flip-flop
/// are shared device state); clockhal's PIT backend does.
/// Interrupt-safe: no (latch and two byte reads: not atomic).
#[inline]
pub fn read_channel2(hw: &impl Hardware) -> u16 {
    // SAFETY: a counter latch command for channel 2 only copies its count
    // into the output latch (allowed by `Native::new`'s contract; it does not
    // change the mode or the count).
    unsafe { hw.outb(MODE_COMMAND, LATCH_CH2) };
    let lo = hw.inb(CHANNEL2_DATA);
    let hi = hw.inb(CHANNEL2_DATA);
    u16::from_le_bytes([lo, hi])
}

/// Port 0x61 as read: [`PORT_B_GATE2`], [`PORT_B_SPEAKER_DATA`],
/// [`PORT_B_OUT2`]. Reads 0xFF where nothing decodes the port (QEMU
/// microvm has no port 0x61).
/// Interrupt-safe: no (latch and two byte reads: not atomic).
pub fn port_b(hw: &impl Hardware) -> u8 {
    hw.inb(PORT_B)
}

/// Channel 0 data port (the OS's timer, IRQ 0).
pub const CHANNEL0_DATA: u16 = 0x40;

/// Control word: channel 0 (bits 7:6 = 00), LSB then MSB (bits 5:4 = 11),
/// mode 0 "interrupt on terminal count" (bits 3:1 = 000), binary: OUT0
/// goes low, and rises (IRQ 0's edge) N + 1 input clocks after the count
/// N is written.
pub const CONTROL_CH0_MODE0: u8 = 0b0011_0000;

/// The OS's statement that clockhal may program PIT channel 0 (its timer
/// interrupt, IRQ 0): the only way to reach [`program_channel0`] and
/// [`stop_channel0`]. Without one clockhal never touches channel 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Channel0Grant {
    simulated: bool,
}

impl Channel0Grant {
    /// Channel 0 handed to clockhal.
    /// Interrupt-safe: yes.
    ///
    /// # Safety
    /// For as long as any copy is used: the OS no longer uses PIT channel 0
    /// (its timer interrupt comes from another device, or from this one
    /// through clockhal), nothing else writes port 0x40 or channel-0
    /// control words, and an IRQ 0 at any moment breaks none of the OS's
    /// invariants.
    pub const unsafe fn new() -> Channel0Grant {
        Channel0Grant { simulated: false }
    }

    /// A grant only a simulated machine honours (real hardware,
    /// [`Native`](crate::Native), drops the writes), so it is safe.
    /// Interrupt-safe: yes.
    pub const fn simulated() -> Channel0Grant {
        Channel0Grant { simulated: true }
    }

    /// Whether it was made by [`Channel0Grant::simulated`].
    /// Interrupt-safe: yes.
    pub const fn is_simulated(&self) -> bool {
        self.simulated
    }
}

/// Starts a one-shot on channel 0: control word [`CONTROL_CH0_MODE0`],
/// then `count` (1..=65,536; 65,536 is written as 0), LSB then MSB. IRQ 0
/// rises `count + 1` input clocks later. A simulated grant on real
/// hardware writes nothing.
///
/// Callers serialise this with other channel-0 writes (the LSB/MSB
/// flip-flop is device state).
/// Interrupt-safe: yes (three port writes; no lock).
pub fn program_channel0(hw: &impl Hardware, grant: &Channel0Grant, count: u32) {
    if grant.simulated && !hw.is_simulated() {
        return;
    }
    let [lo, hi, ..] = (count.clamp(1, 0x1_0000) as u16 as u32).to_le_bytes();
    // SAFETY: `Channel0Grant::new`'s contract: the OS gave channel 0 to
    // clockhal; these writes program only channel 0 (a control word naming
    // it, then its data port). The PIT has no memory access.
    unsafe {
        hw.outb(MODE_COMMAND, CONTROL_CH0_MODE0);
        hw.outb(CHANNEL0_DATA, lo);
        hw.outb(CHANNEL0_DATA, hi);
    }
}

/// Stops a pending channel-0 one-shot on an 8254: a control word alone
/// sets OUT0 low and the counter waits for a count. (QEMU's PIT keeps the
/// old count running: an interrupt already programmed may still come.)
/// Interrupt-safe: yes.
pub fn stop_channel0(hw: &impl Hardware, grant: &Channel0Grant) {
    if grant.simulated && !hw.is_simulated() {
        return;
    }
    // SAFETY: as `program_channel0`: a channel-0 control word only.
    unsafe { hw.outb(MODE_COMMAND, CONTROL_CH0_MODE0) }
}
