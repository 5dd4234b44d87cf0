//! Run-time answers that replace a device's: any MSR, port or MMIO
//! register can be made to read a fixed value or to fault, and put back,
//! while other threads keep reading ([`SimMachine::override_msr`],
//! [`override_port`](SimMachine::override_port),
//! [`override_mmio`](SimMachine::override_mmio)).
//!
//! [`SimMachine::override_msr`]: crate::SimMachine::override_msr

use std::collections::BTreeMap;

/// What an overridden access answers instead of the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// This value (truncated to the access width: `inb` the low 8 bits,
    /// `inl` and 32-bit MMIO the low 32; a 32-bit MMIO read 4 bytes past
    /// an overridden register gets the high half). Writes are dropped.
    Value(u64),
    /// An MSR raises #GP on read and write (`rdmsr` panics with "simulated
    /// #GP", `try_rdmsr` returns `None`); a port or MMIO register is
    /// decoded by nothing: reads all ones, writes are dropped.
    Fault,
}

/// The overrides in force.
#[derive(Debug, Default)]
pub(crate) struct Overrides {
    pub(crate) msr: BTreeMap<u32, Answer>,
    pub(crate) port: BTreeMap<u16, Answer>,
    pub(crate) mmio: BTreeMap<u64, Answer>,
}

pub(crate) fn set<K: Ord>(map: &mut BTreeMap<K, Answer>, key: K, answer: Option<Answer>) {
    match answer {
        Some(a) => {
            map.insert(key, a);
        }
        None => {
            map.remove(&key);
        }
    }
}

impl Overrides {
    /// A port read of `width` bytes, if overridden.
    pub(crate) fn port_read(&self, port: u16, width: u32) -> Option<u32> {
        let mask = if width == 1 { 0xFF } else { u32::MAX };
        self.port.get(&port).map(|a| match a {
            Answer::Value(v) => *v as u32 & mask,
            Answer::Fault => mask,
        })
    }

    /// An MMIO read of `size` bytes at `addr`, if overridden (a 32-bit read
    /// of a 64-bit register's high half included).
    pub(crate) fn mmio_read(&self, addr: u64, size: usize) -> Option<u64> {
        let all_ones = if size == 8 { u64::MAX } else { u32::MAX as u64 };
        let (answer, shift) = match self.mmio.get(&addr) {
            Some(a) => (a, 0),
            None if size == 4 && addr % 8 == 4 => (self.mmio.get(&(addr - 4))?, 32),
            None => return None,
        };
        Some(match answer {
            Answer::Value(v) => (v >> shift) & all_ones,
            Answer::Fault => all_ones,
        })
    }

    /// Whether an MMIO write to `addr` is swallowed by an override.
    pub(crate) fn mmio_write_dropped(&self, addr: u64) -> bool {
        self.mmio.contains_key(&addr) || (addr % 8 == 4 && self.mmio.contains_key(&(addr - 4)))
    }
}
