//! The 8254 PIT's channel 2, as clockhal uses it: the only PIT writes
//! clockhal makes.
//!
//! clockhal runs channel 2 (the one whose gate is port 0x61 bit 0 and whose
//! output drives the PC speaker, the channel Linux calibrates the TSC with)
//! as a free-running 16-bit down-counter: mode 0, binary, initial count
//! 65,536, gate high, speaker data off. It then reads it with a counter latch
//! command and two byte reads. It never touches channel 0 (the OS's timer
//! interrupt, IRQ 0) or channel 1.
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
