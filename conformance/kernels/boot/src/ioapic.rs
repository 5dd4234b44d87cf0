//! I/O APIC routing of one GSI to a vector on the boot CPU.
//!
//! The I/O APICs and their GSI ranges come from the MADT
//! ([`crate::acpi::for_each_interrupt_entry`]). A route is a redirection
//! entry: fixed delivery, physical destination (the boot CPU's APIC ID),
//! with the trigger mode and polarity the device drives. Used for QEMU's
//! HPET comparators, which have no MSI by default and raise an I/O APIC
//! input from their Tn_INT_ROUTE_CAP.

use crate::acpi::{self, IoApicEntry};
use crate::phys;
use core::ptr::{read_volatile, write_volatile};

const IOREGSEL: u64 = 0x00;
const IOWIN: u64 = 0x10;
/// IOAPICVER: bits 23:16 = last redirection entry.
const REG_VERSION: u32 = 0x01;
const REG_REDIRECTION: u32 = 0x10;
const MASKED: u32 = 1 << 16;
const LEVEL: u32 = 1 << 15;
const ACTIVE_LOW: u32 = 1 << 13;

/// How the device drives its line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// Edge, active high (the HPET with Tn_INT_TYPE_CNF clear).
    EdgeHigh,
    /// Level, active low (PCI INTx).
    LevelLow,
}

/// One I/O APIC, reached through its MMIO window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoApic {
    entry: IoApicEntry,
    /// Redirection entries it has.
    inputs: u32,
}

/// Why a GSI could not be routed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteError {
    /// No valid MADT.
    NoMadt,
    /// No I/O APIC in the MADT serves this GSI.
    NoIoApic(u32),
    /// The I/O APIC's registers are outside the identity map.
    Unmapped(u32),
    /// The entry read back differs from the one written.
    NotTaken {
        /// Written.
        wrote: u32,
        /// Read back.
        read: u32,
    },
}

impl core::fmt::Display for RouteError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RouteError::NoMadt => f.write_str("no valid MADT"),
            RouteError::NoIoApic(g) => write!(f, "no I/O APIC in the MADT serves GSI {g}"),
            RouteError::Unmapped(a) => write!(f, "I/O APIC at {a:#x} is not mapped"),
            RouteError::NotTaken { wrote, read } => {
                write!(f, "redirection entry wrote {wrote:#x}, read back {read:#x}")
            }
        }
    }
}

impl IoApic {
    /// The I/O APIC of the MADT whose inputs include `gsi`.
    pub fn for_gsi(rsdp_paddr: u64, gsi: u32) -> Result<IoApic, RouteError> {
        let mut found: Option<IoApic> = None;
        let mut unmapped = None;
        let ok = acpi::for_each_interrupt_entry(
            rsdp_paddr,
            |e| {
                if found.is_some() || gsi < e.gsi_base {
                    return;
                }
                let base = u64::from(e.address);
                if !phys::is_mapped(base, 0x20) {
                    unmapped = Some(e.address);
                    return;
                }
                let io = IoApic { entry: e, inputs: 0 };
                let inputs = ((io.read(REG_VERSION) >> 16) & 0xFF) + 1;
                if gsi < e.gsi_base + inputs {
                    found = Some(IoApic { entry: e, inputs });
                }
            },
            |_| {},
        );
        if !ok {
            return Err(RouteError::NoMadt);
        }
        found.ok_or(match unmapped {
            Some(a) => RouteError::Unmapped(a),
            None => RouteError::NoIoApic(gsi),
        })
    }

    /// Its MADT entry.
    pub fn entry(&self) -> IoApicEntry {
        self.entry
    }

    /// Redirection entries (inputs) it has.
    pub fn inputs(&self) -> u32 {
        self.inputs
    }

    fn read(&self, reg: u32) -> u32 {
        let base = u64::from(self.entry.address);
        // SAFETY: the I/O APIC window is in the uncached identity map
        // (checked in `for_gsi`); selecting a register and reading the
        // window has no other effect. Boot CPU only, interrupts off, so
        // the select/read pair is not interleaved.
        unsafe {
            write_volatile((base + IOREGSEL) as *mut u32, reg);
            read_volatile((base + IOWIN) as *const u32)
        }
    }

    fn write(&self, reg: u32, value: u32) {
        let base = u64::from(self.entry.address);
        // SAFETY: as for `read`; the registers written are redirection
        // entries, which only say where an input's interrupts go.
        unsafe {
            write_volatile((base + IOREGSEL) as *mut u32, reg);
            write_volatile((base + IOWIN) as *mut u32, value);
        }
    }

    /// Routes `gsi` to `vector` on the CPU with APIC ID `dest` (fixed,
    /// physical), unmasked, and reads the entry back.
    pub fn route(&self, gsi: u32, vector: u8, dest: u32, trigger: Trigger) -> Result<(), RouteError> {
        let pin = gsi - self.entry.gsi_base;
        let mut low = u32::from(vector);
        if trigger == Trigger::LevelLow {
            low |= LEVEL | ACTIVE_LOW;
        }
        // Masked while the halves change, then unmasked.
        self.write(REG_REDIRECTION + 2 * pin, low | MASKED);
        self.write(REG_REDIRECTION + 2 * pin + 1, (dest & 0xFF) << 24);
        self.write(REG_REDIRECTION + 2 * pin, low);
        let read = self.read(REG_REDIRECTION + 2 * pin);
        // Bits 12 (delivery status) and 14 (remote IRR) are read-only state.
        if read & !((1 << 12) | (1 << 14)) != low {
            return Err(RouteError::NotTaken { wrote: low, read });
        }
        Ok(())
    }

    /// Masks `gsi`.
    pub fn mask(&self, gsi: u32) {
        let pin = gsi - self.entry.gsi_base;
        let low = self.read(REG_REDIRECTION + 2 * pin);
        self.write(REG_REDIRECTION + 2 * pin, low | MASKED);
    }
}
