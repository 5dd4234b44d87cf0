//! Simulated MC146818-compatible CMOS RTC (ports 0x70/0x71).
//!
//! The clock follows a wall-clock timeline in Unix nanoseconds that runs at
//! machine speed ([`CmosRtc::unix_ns`]); second edges fall where that
//! timeline crosses a whole second. Registers follow the data sheet and
//! QEMU's hw/rtc/mc146818rtc.c: seconds, minutes, hours (24 h, or 12 h with
//! the PM flag in bit 7), day of week (1 = Sunday), day, month, year, a
//! century register at a configurable index, all BCD or binary (status B
//! bit 2); status A (0x26, UIP in bit 7), B (SET, DM, 24/12), C (reads
//! clear it: counted), D (VRT). Other indices are 128 bytes of CMOS RAM.
//!
//! The update-in-progress window: UIP reads 1 from [`RtcConfig::uip_lead_ns`]
//! before each second edge until [`RtcConfig::update_ns`] after it. On an
//! MC146818 with the 32.768 kHz time base the lead is 244 µs and the update
//! cycle 1984 µs, and the clock registers read as garbage (0xFF here) during
//! the cycle; QEMU raises UIP for the last 244 µs of each second only and
//! updates the registers at the edge (`update_ns` = 0).
//!
//! The clock registers are read only here (writes to them are dropped; set
//! the time with [`CmosRtc::set_unix_ns`]); writes to other indices land in
//! CMOS RAM.

use super::SimCtx;
use std::vec::Vec;

/// 8 periods of the 32.768 kHz time base (244.140625 µs): how long UIP is
/// raised before an update (QEMU's `UIP_HOLD_LENGTH`, truncated to ns).
pub const UIP_LEAD_NS: u64 = 8 * 1_000_000_000 / 32_768;
/// The MC146818's update cycle with a 32.768 kHz time base.
pub const UPDATE_CYCLE_NS: u64 = 1_984_000;

/// RTC parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RtcConfig {
    /// Wall-clock time at machine power-on (`SimConfig::start_ns`), in ns
    /// since the Unix epoch (UTC).
    pub unix_ns_at_start: u64,
    /// Status B bit 2 (DM): binary registers (else BCD).
    pub binary: bool,
    /// Status B bit 1: 24-hour mode (else 12-hour with the PM flag).
    pub hour24: bool,
    /// CMOS index of the century register (QEMU: 0x32), `None` for none.
    pub century_index: Option<u8>,
    /// UIP raised this long before each second edge.
    pub uip_lead_ns: u64,
    /// Update cycle after each edge (UIP still raised, clock registers
    /// unreadable).
    pub update_ns: u64,
    /// Status B bit 7 (SET): updates inhibited, the time stands still at
    /// `unix_ns_at_start`.
    pub halted: bool,
    /// Status D bit 7 (VRT): valid RAM and time (a good battery).
    pub battery_ok: bool,
    /// Fault: UIP reads 1 forever.
    pub uip_stuck: bool,
    /// Fault: these (index, byte) pairs override what the RTC returns
    /// (garbage, out-of-range or hostile values).
    pub forced: Vec<(u8, u8)>,
}

impl RtcConfig {
    /// QEMU's RTC on pc/q35 (microvm with TCG too): BCD, 24 h, century at
    /// 0x32, UIP in the last 244 µs of each second, set to
    /// 2026-12-01 12:34:56.250 UTC at power-on.
    pub fn qemu() -> Self {
        RtcConfig {
            unix_ns_at_start: 1_796_128_496_250_000_000,
            binary: false,
            hour24: true,
            century_index: Some(0x32),
            uip_lead_ns: UIP_LEAD_NS,
            update_ns: 0,
            halted: false,
            battery_ok: true,
            uip_stuck: false,
            forced: Vec::new(),
        }
    }

    /// A PC's MC146818: as [`qemu`](Self::qemu) but with the 1984 µs update
    /// cycle during which the clock registers are unreadable.
    pub fn hardware() -> Self {
        RtcConfig {
            update_ns: UPDATE_CYCLE_NS,
            ..Self::qemu()
        }
    }

    /// The same RTC showing `unix_ns` at power-on.
    pub fn at_unix_ns(self, unix_ns: u64) -> Self {
        RtcConfig {
            unix_ns_at_start: unix_ns,
            ..self
        }
    }

    /// The same RTC with another register format.
    pub fn with_format(self, binary: bool, hour24: bool) -> Self {
        RtcConfig {
            binary,
            hour24,
            ..self
        }
    }

    /// The same RTC with register `index` forced to `value`.
    pub fn with_forced(mut self, index: u8, value: u8) -> Self {
        self.forced.push((index, value));
        self
    }
}

/// The calendar fields of a Unix second (proleptic Gregorian, UTC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Civil {
    year: u64,
    month: u8,
    day: u8,
    hour: u8,
    minute: u8,
    second: u8,
    /// 0 = Sunday.
    weekday: u8,
}

/// Days since 1970-01-01 to (year, month, day): the inverse of the usual
/// days-from-civil, by 400-year eras of 146,097 days starting on March 1.
fn civil(unix_s: u64) -> Civil {
    let days = unix_s / 86_400;
    let secs = unix_s % 86_400;
    // Shift the epoch to 0000-03-01 (719,468 days before 1970-01-01).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u8;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
    let year = yoe + era * 400 + (month <= 2) as u64;
    Civil {
        year,
        month,
        day,
        hour: (secs / 3_600) as u8,
        minute: (secs / 60 % 60) as u8,
        second: (secs % 60) as u8,
        weekday: ((days + 4) % 7) as u8, // 1970-01-01 was a Thursday
    }
}

/// The simulated RTC.
#[derive(Debug)]
pub struct CmosRtc {
    config: RtcConfig,
    /// Wall time `base_unix_ns` at machine time `base_machine_ns`.
    base_unix_ns: u64,
    base_machine_ns: u64,
    ram: [u8; 128],
    index: u8,
    nmi_disabled: bool,
    index_writes: u64,
    data_writes: u64,
    status_c_reads: u64,
}

impl CmosRtc {
    /// An RTC per `config`, for a machine powered on at `start_ns`.
    pub fn new(config: RtcConfig, start_ns: u64) -> Self {
        CmosRtc {
            base_unix_ns: config.unix_ns_at_start,
            base_machine_ns: start_ns,
            config,
            ram: [0; 128],
            index: 0,
            nmi_disabled: false,
            index_writes: 0,
            data_writes: 0,
            status_c_reads: 0,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &RtcConfig {
        &self.config
    }

    /// Mutable configuration: faults and formats can change at run time.
    pub fn config_mut(&mut self) -> &mut RtcConfig {
        &mut self.config
    }

    /// The RTC's wall-clock time at machine time `now_ns`, in Unix ns
    /// (standing still while halted).
    pub fn unix_ns(&self, now_ns: u64) -> u64 {
        if self.config.halted {
            return self.base_unix_ns;
        }
        self.base_unix_ns + now_ns.saturating_sub(self.base_machine_ns)
    }

    /// Sets the clock to `unix_ns` now.
    pub fn set_unix_ns(&mut self, ctx: &SimCtx<'_>, unix_ns: u64) {
        self.base_unix_ns = unix_ns;
        self.base_machine_ns = ctx.now_ns;
    }

    /// Machine time of the first second edge at or after machine time
    /// `now_ns` (where the registers start showing the next second).
    pub fn next_edge_ns(&self, now_ns: u64) -> u64 {
        let phase = self.unix_ns(now_ns) % 1_000_000_000;
        if phase == 0 {
            now_ns
        } else {
            now_ns + (1_000_000_000 - phase)
        }
    }

    /// Whether the last index write set bit 7 (NMI disable).
    pub fn nmi_disabled(&self) -> bool {
        self.nmi_disabled
    }

    /// Index-port writes so far.
    pub fn index_writes(&self) -> u64 {
        self.index_writes
    }

    /// Data-port writes so far.
    pub fn data_writes(&self) -> u64 {
        self.data_writes
    }

    /// Reads of status register C (each acknowledges RTC interrupts).
    pub fn status_c_reads(&self) -> u64 {
        self.status_c_reads
    }

    fn encode(&self, v: u8) -> u8 {
        if self.config.binary {
            v
        } else {
            ((v / 10) << 4) | (v % 10)
        }
    }

    fn uip(&self, now_ns: u64) -> bool {
        if self.config.uip_stuck {
            return true;
        }
        if self.config.halted {
            return false;
        }
        let phase = self.unix_ns(now_ns) % 1_000_000_000;
        phase >= 1_000_000_000 - self.config.uip_lead_ns.min(1_000_000_000)
            || phase < self.config.update_ns
    }

    fn clock_register(&self, index: u8, now_ns: u64) -> Option<u8> {
        let unix = self.unix_ns(now_ns);
        let in_update = !self.config.halted && unix % 1_000_000_000 < self.config.update_ns;
        let c = civil(unix / 1_000_000_000);
        let v = match index {
            0x00 => self.encode(c.second),
            0x02 => self.encode(c.minute),
            0x04 if self.config.hour24 => self.encode(c.hour),
            0x04 => {
                let h = if c.hour % 12 == 0 { 12 } else { c.hour % 12 };
                self.encode(h) | ((c.hour >= 12) as u8) << 7
            }
            0x06 => self.encode(c.weekday + 1),
            0x07 => self.encode(c.day),
            0x08 => self.encode(c.month),
            0x09 => self.encode((c.year % 100) as u8),
            i if Some(i) == self.config.century_index => self.encode((c.year / 100 % 100) as u8),
            _ => return None,
        };
        Some(if in_update { 0xFF } else { v })
    }

    fn read_data(&mut self, now_ns: u64) -> u8 {
        let index = self.index;
        if let Some(&(_, v)) = self.config.forced.iter().rev().find(|f| f.0 == index) {
            return v;
        }
        if let Some(v) = self.clock_register(index, now_ns) {
            return v;
        }
        match index {
            0x0A => 0x26 | (self.uip(now_ns) as u8) << 7,
            0x0B => {
                (self.config.halted as u8) << 7
                    | (self.config.binary as u8) << 2
                    | (self.config.hour24 as u8) << 1
            }
            0x0C => {
                self.status_c_reads += 1;
                0
            }
            0x0D => (self.config.battery_ok as u8) << 7,
            i => self.ram[i as usize],
        }
    }

    pub(super) fn port_read(&mut self, ctx: &SimCtx<'_>, port: u16) -> Option<u8> {
        match port {
            // The index port is write only (QEMU returns 0xFF).
            0x70 => Some(0xFF),
            0x71 => Some(self.read_data(ctx.now_ns)),
            _ => None,
        }
    }

    pub(super) fn port_write(&mut self, ctx: &SimCtx<'_>, port: u16, value: u8) -> bool {
        match port {
            0x70 => {
                self.index_writes += 1;
                self.index = value & 0x7F;
                self.nmi_disabled = value & 0x80 != 0;
            }
            0x71 => {
                self.data_writes += 1;
                let i = self.index;
                if i >= 0x0E && self.clock_register(i, ctx.now_ns).is_none() {
                    self.ram[i as usize] = value;
                }
            }
            _ => return false,
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_matches_known_dates() {
        // Reference values from Python's datetime (UTC).
        let cases = [
            (0, (1970, 1, 1, 0, 0, 0, 4)),
            (946_684_799, (1999, 12, 31, 23, 59, 59, 5)),
            (951_782_400, (2000, 2, 29, 0, 0, 0, 2)),
            (951_868_800, (2000, 3, 1, 0, 0, 0, 3)),
            (1_709_211_600, (2024, 2, 29, 13, 0, 0, 4)),
            (1_796_128_496, (2026, 12, 1, 12, 34, 56, 2)),
            (4_107_456_000, (2100, 2, 28, 0, 0, 0, 0)),
            (4_107_542_400, (2100, 3, 1, 0, 0, 0, 1)),
        ];
        for (t, (y, mo, d, h, mi, s, wd)) in cases {
            let c = civil(t);
            assert_eq!(
                (c.year, c.month, c.day, c.hour, c.minute, c.second, c.weekday),
                (y, mo, d, h, mi, s, wd),
                "{t}"
            );
        }
    }
}
