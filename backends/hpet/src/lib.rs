#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![no_std]
#![forbid(unsafe_code)]

use clockhal_core::{
    ClockSource, Estimate, Extended, Frequency, Placement, Policy, Quality, ReadCost, Stability,
    WrapExtender,
};
use clockhal_x86::{cpuid, Hardware, MmioRegion};
use core::fmt;

pub mod comparator;

/// Register offsets (IA-PC HPET 1.0a, section 2.3).
mod reg {
    pub const CAPABILITIES: usize = 0x000;
    pub const CONFIG: usize = 0x010;
    pub const MAIN_COUNTER: usize = 0x0F0;
    /// Capabilities bit 13: COUNT_SIZE_CAP (64-bit main counter).
    pub const COUNT_SIZE_CAP: u64 = 1 << 13;
    /// Configuration bit 0: ENABLE_CNF.
    pub const ENABLE_CNF: u32 = 1 << 0;
}

/// Shortest and longest period the spec allows (Linux enforces the same):
/// 10 GHz and 10 MHz.
const PERIOD_FS: core::ops::RangeInclusive<u32> = 100_000..=100_000_000;
/// Reads spent waiting for the enabled counter to move. A real or emulated
/// HPET advances by at least 10 ticks per µs and one read takes ≥ 50 ns,
/// so a few hundred reads are plenty; 10,000 bounds a broken device.
const MAX_START_READS: u32 = 10_000;

/// The rating (see [`Quality`]'s bands): every read traps in a VM, but the
/// counter is exact and fine-grained.
pub const RATING: Quality = Quality::new(250);

/// Why [`Hpet::probe`] refused the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum HpetError {
    /// The region is smaller than the registers used (0x100 bytes).
    RegionTooSmall(usize),
    /// The capabilities register reads all ones: nothing is there.
    NoDevice,
    /// The period (femtoseconds) is outside 100,000 ..= 100,000,000.
    BadPeriod(u32),
    /// The main counter did not advance after being enabled.
    NotAdvancing,
}

impl fmt::Display for HpetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HpetError::RegionTooSmall(n) => write!(f, "HPET region of {n} bytes is too small"),
            HpetError::NoDevice => f.write_str("HPET registers read all ones: no device"),
            HpetError::BadPeriod(p) => write!(f, "HPET period {p} fs out of range"),
            HpetError::NotAdvancing => f.write_str("HPET main counter does not advance"),
        }
    }
}

/// The HPET main counter, probed and running.
///
/// A reading never goes below one returned before: a counter that falls
/// behind (reset, garbage, a 32-bit counter whose capabilities claim 64
/// bits) holds at the last value until it catches up, and one garbage
/// value far ahead holds the clock there. Used alone, such a device can
/// so stop the clock; `clockhal`'s `Clock` catches both (its watchdog
/// demotes a stopped source, its jump check a reading no independent
/// counter explains).
pub struct Hpet<H: Hardware> {
    hw: H,
    region: MmioRegion,
    period_fs: u32,
    frequency: Frequency,
    wide: bool,
    stability: Stability,
    /// Widens a 32-bit counter; for a 64-bit one it only holds back a
    /// (broken or reset) counter so reads never go backwards.
    ext: WrapExtender,
}

impl<H: Hardware> Hpet<H> {
    /// Probes the HPET whose register block `region` maps.
    ///
    /// Enables the main counter if firmware left it halted (ENABLE_CNF; the
    /// other configuration bits, including LEG_RT_CNF, are written back as
    /// found) and checks that it advances within a bounded number of reads.
    /// `policy` is accepted for symmetry with the other backends; the HPET
    /// has no policy-dependent choices.
    /// Interrupt-safe: no (one-time probe: busy-waits for ms).
    pub fn probe(hw: H, region: MmioRegion, policy: &Policy) -> Result<Hpet<H>, HpetError> {
        let _ = policy;
        if region.len() < reg::MAIN_COUNTER + 8 {
            return Err(HpetError::RegionTooSmall(region.len()));
        }
        let caps = hw.mmio_read64(region, reg::CAPABILITIES);
        if caps == u64::MAX {
            return Err(HpetError::NoDevice);
        }
        let period_fs = (caps >> 32) as u32;
        if !PERIOD_FS.contains(&period_fs) {
            return Err(HpetError::BadPeriod(period_fs));
        }
        let frequency = Frequency::from_period_fs(period_fs as u64)
            .map_err(|_| HpetError::BadPeriod(period_fs))?;
        let wide = caps & reg::COUNT_SIZE_CAP != 0;

        let config = enable(&hw, region);
        let first = counter(&hw, region, wide);
        let started = (0..MAX_START_READS).any(|_| counter(&hw, region, wide) != first);
        if !started {
            // Leave the device as we found it.
            if config & reg::ENABLE_CNF == 0 {
                hw.mmio_write32(region, reg::CONFIG, config);
            }
            return Err(HpetError::NotAdvancing);
        }

        let stability = Stability::device_counter(cpuid::hypervisor_present(&hw), !wide);
        let ext = WrapExtender::new(if wide { 64 } else { 32 }, counter(&hw, region, wide));
        Ok(Hpet {
            hw,
            region,
            period_fs,
            frequency,
            wide,
            stability,
            ext,
        })
    }

    /// After a resume (S3, a restored snapshot): firmware may have halted
    /// or reset the counter. Re-enables it and restarts the software
    /// extension at its current value (the counter's timeline restarts; a
    /// `Clock` on top rebases its own and keeps advancing).
    /// Interrupt-safe: no (a per-CPU lifecycle step).
    pub fn resume(&self) {
        enable(&self.hw, self.region);
        self.ext.reset(counter(&self.hw, self.region, self.wide));
    }

    /// Counter period in femtoseconds, as the device reports it.
    /// Interrupt-safe: yes.
    pub fn period_fs(&self) -> u32 {
        self.period_fs
    }

    /// Whether the main counter is 64 bits wide (else 32, extended).
    /// Interrupt-safe: yes.
    pub fn counter_64bit(&self) -> bool {
        self.wide
    }

    /// The register block.
    /// Interrupt-safe: yes.
    pub fn region(&self) -> MmioRegion {
        self.region
    }

    /// The hardware handle.
    /// Interrupt-safe: yes.
    pub fn hardware(&self) -> &H {
        &self.hw
    }

    #[inline(always)]
    fn place(&self, how: Placement) -> Extended {
        let (hw, region, wide) = (&self.hw, self.region, self.wide);
        self.ext.place(|| Some(counter(hw, region, wide)), how)
    }
}

/// Sets ENABLE_CNF if it is clear; returns the configuration found. Bits
/// 63:32 of the register are reserved: 32-bit accesses leave them alone.
fn enable<H: Hardware>(hw: &H, region: MmioRegion) -> u32 {
    let config = hw.mmio_read32(region, reg::CONFIG);
    if config & reg::ENABLE_CNF == 0 {
        hw.mmio_write32(region, reg::CONFIG, config | reg::ENABLE_CNF);
    }
    config
}

/// The main counter: one MMIO load, 64 or 32 bits wide.
#[inline(always)]
fn counter<H: Hardware>(hw: &H, region: MmioRegion, wide: bool) -> u64 {
    if wide {
        hw.mmio_read64(region, reg::MAIN_COUNTER)
    } else {
        hw.mmio_read32(region, reg::MAIN_COUNTER) as u64
    }
}

impl<H: Hardware> ClockSource for Hpet<H> {
    fn counter_domain(&self) -> Option<clockhal_core::CounterDomain> {
        Some(clockhal_core::CounterDomain::Hpet)
    }
    fn name(&self) -> &'static str {
        "hpet"
    }

    /// One MMIO load, placed on the 64-bit timeline (read inside the
    /// extension's update: [`WrapExtender::place`]).
    #[inline]
    fn read(&self) -> u64 {
        self.place(Placement::Plain).ticks
    }

    fn read_spanning(&self, span: u64, within: u64) -> u64 {
        self.place(Placement::Spanning { span, within }).ticks
    }

    fn read_forward(&self) -> u64 {
        self.place(Placement::Forward).ticks
    }

    fn read_near(&self, estimate: Option<Estimate>) -> Extended {
        self.place(Placement::Near(estimate))
    }

    fn frequency(&self) -> Frequency {
        self.frequency
    }

    fn quality(&self) -> Quality {
        RATING
    }

    fn stability(&self) -> Stability {
        self.stability
    }

    fn read_cost(&self) -> ReadCost {
        ReadCost::OneTrap
    }

    fn max_read_interval(&self) -> Option<u64> {
        (!self.wide).then(|| self.ext.max_read_interval())
    }
}

impl<H: Hardware> fmt::Debug for Hpet<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hpet")
            .field("region", &self.region)
            .field("period_fs", &self.period_fs)
            .field("counter_64bit", &self.wide)
            .finish()
    }
}
