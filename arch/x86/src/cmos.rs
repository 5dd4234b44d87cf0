//! CMOS RAM access (the MC146818-compatible RTC): index port 0x70, data
//! port 0x71. Read only: clockhal writes the index port and never the data
//! port.
//!
//! **NMI-disable bit.** On PC chipsets bit 7 of a write to port 0x70 masks
//! NMIs (1 = disabled). The port is write only, so clockhal cannot preserve
//! the OS's choice: the OS states it as an [`NmiBit`], and every index
//! clockhal writes carries that bit. [`NmiBit::Clear`] (NMIs enabled) is
//! what Linux writes.
//!
//! **The OS's obligations** while clockhal reads the RTC (once, at boot):
//! - no concurrent CMOS access (another CPU, an interrupt or NMI handler
//!   between clockhal's index write and data read would read or write the
//!   wrong register): read the RTC before anything else uses CMOS, or hold
//!   the OS's CMOS lock around the call;
//! - after clockhal's reads the index port holds the last index clockhal
//!   selected: re-select before relying on the previous index.
//!
//! Register C (index 0x0C) is never read: reading it acknowledges pending
//! RTC interrupts (periodic, alarm, update-ended), which belong to the OS.

use crate::Hardware;

/// Index port (write only on most chipsets).
pub const INDEX_PORT: u16 = 0x70;
/// Data port.
pub const DATA_PORT: u16 = 0x71;
/// Bit 7 of an index write: NMI disable.
pub const NMI_DISABLE: u8 = 0x80;
/// Status register C: reading it clears the RTC's interrupt flags.
pub const STATUS_C: u8 = 0x0C;

/// What clockhal writes into bit 7 (NMI disable) of every CMOS index.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum NmiBit {
    /// Bit 7 clear: NMIs enabled (the default, as Linux).
    #[default]
    Clear,
    /// Bit 7 set: NMIs stay disabled (for an OS that keeps them masked
    /// through port 0x70).
    Set,
}

/// Reads CMOS byte `index` (index write, then data read: two port
/// accesses).
///
/// `None` without touching the hardware when `index` is 0x80 or above (not
/// addressable through port 0x70: bit 7 is the NMI bit) or is
/// [`STATUS_C`].
/// Interrupt-safe: no (CMOS index/data pairs: not atomic).
pub fn read(hw: &impl Hardware, index: u8, nmi: NmiBit) -> Option<u8> {
    if index >= 0x80 || index == STATUS_C {
        return None;
    }
    let select = match nmi {
        NmiBit::Clear => index,
        NmiBit::Set => index | NMI_DISABLE,
    };
    // SAFETY: `Native::new`'s contract lets clockhal write the CMOS index
    // port; the value selects a register other than status C (whose read has
    // side effects) and carries the NMI bit the OS chose. No memory is
    // involved.
    unsafe { hw.outb(INDEX_PORT, select) };
    Some(hw.inb(DATA_PORT))
}
