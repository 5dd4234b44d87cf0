//! An HPET comparator as a one-shot [`TimerDevice`] (IA-PC HPET 1.0a,
//! section 2.3.8: timer N registers at 0x100 + 0x20·N).
//!
//! A comparator fires when the main counter *equals* it, so a comparator
//! written behind the counter (the counter passed it while the write was
//! in flight: a VM exit, an SMI) matches only after the counter wraps, in
//! minutes (32 bits) or never (64). Like Linux's
//! `hpet_clkevt_set_next_event`, [`HpetComparator::program`] re-reads the
//! counter after the write and reports [`TimerError::InPast`] when the
//! target is not at least [`MIN_MARGIN_TICKS`] ahead: the caller then
//! treats the deadline as due, or programs a longer delta.
//!
//! Comparison width: 64 bits when the main counter and the comparator
//! (Tn_SIZE_CAP) both are; otherwise 32 (Tn_32MODE_CNF set on a 64-bit
//! timer), with deltas below 2^31 so the signed check above is exact.

use crate::reg;
use clockhal_core::timer::{TimerDescriptor, TimerDevice, TimerError, TimerMode, TimerScope};
use clockhal_core::Frequency;
use clockhal_x86::{cpuid, Hardware, MmioRegion};
use core::fmt;

/// Margin, in counter ticks, that a freshly written comparator must be
/// ahead of the counter re-read after the write (Linux uses 128 too).
pub const MIN_MARGIN_TICKS: u64 = 128;

/// Tn_INT_ENB_CNF.
const TN_INT_ENB: u64 = 1 << 2;
/// Tn_SIZE_CAP: the comparator is 64 bits wide.
const TN_SIZE_CAP: u64 = 1 << 5;
/// Tn_32MODE_CNF.
const TN_32MODE: u64 = 1 << 8;
/// Capabilities bits 12:8: NUM_TIM_CAP (last timer's index).
const NUM_TIM_SHIFT: u32 = 8;

fn config_off(n: u8) -> usize {
    0x100 + 0x20 * n as usize
}
fn comparator_off(n: u8) -> usize {
    0x108 + 0x20 * n as usize
}

/// Where the comparator's interrupt goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum HpetRoute {
    /// The lowest GSI in Tn_INT_ROUTE_CAP.
    Auto,
    /// This IOAPIC input (GSI 0..=31), which Tn_INT_ROUTE_CAP must allow.
    Gsi(u8),
}

/// Why a comparator could not be set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ComparatorError {
    /// The region is smaller than the timer's registers.
    RegionTooSmall(usize),
    /// The capabilities read all ones, or the period is out of range.
    NoDevice,
    /// The device has no timer with this index.
    NoSuchTimer {
        /// Asked for.
        index: u8,
        /// Timers the device has.
        count: u8,
    },
    /// The GSI is not in the timer's Tn_INT_ROUTE_CAP (or the cap is empty).
    RouteNotAllowed {
        /// Asked for (`None`: `Auto` with an empty cap).
        gsi: Option<u8>,
        /// Tn_INT_ROUTE_CAP.
        cap: u32,
    },
    /// The route read back differs from the one written.
    RouteNotTaken,
}

impl fmt::Display for ComparatorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ComparatorError::RegionTooSmall(n) => write!(f, "HPET region of {n} bytes too small"),
            ComparatorError::NoDevice => f.write_str("no HPET (capabilities unusable)"),
            ComparatorError::NoSuchTimer { index, count } => {
                write!(f, "HPET has {count} timers, no timer {index}")
            }
            ComparatorError::RouteNotAllowed { gsi, cap } => match gsi {
                Some(g) => write!(f, "GSI {g} not in Tn_INT_ROUTE_CAP {cap:#x}"),
                None => write!(f, "Tn_INT_ROUTE_CAP {cap:#x} allows no GSI"),
            },
            ComparatorError::RouteNotTaken => f.write_str("HPET did not take the route written"),
        }
    }
}

impl core::error::Error for ComparatorError {}

/// One HPET comparator, one-shot, edge-triggered, routed to an IOAPIC
/// GSI. A global device: it fires on whichever CPU the OS routes the GSI
/// to. The OS programs the IOAPIC entry for [`gsi`](Self::gsi) with its
/// vector.
///
/// The main counter must be running ([`Hpet::probe`](crate::Hpet::probe)
/// enables it).
///
/// ```
/// use clockhal_core::timer::TimerDevice;
/// use clockhal_hpet::comparator::{HpetComparator, HpetRoute};
/// use clockhal_sim::{HpetConfig, SimConfig};
///
/// let m = SimConfig::cpu(2_000_000_000).with_hpet(HpetConfig::qemu()).build();
/// let region = m.hpet_region().unwrap();
/// let _clock = clockhal_hpet::Hpet::probe(&m, region, &Default::default()).unwrap();
/// let t = HpetComparator::new(&m, region, 0, HpetRoute::Auto).unwrap();
/// assert_eq!(t.gsi(), 2);
/// t.program(100_000).unwrap(); // 1 ms at 100 MHz
/// assert!(m.hpet_next_fire_ns(0).is_some());
/// ```
pub struct HpetComparator<H: Hardware> {
    hw: H,
    region: MmioRegion,
    index: u8,
    gsi: u8,
    wide: bool,
    frequency: Frequency,
    hypervisor: bool,
}

impl<H: Hardware> HpetComparator<H> {
    /// Sets up timer `index` of the HPET at `region`: one-shot, edge,
    /// IOAPIC route `route`, interrupt disabled until the first
    /// [`program`](TimerDevice::program). Reads back the route.
    /// Interrupt-safe: no (a setup step).
    pub fn new(
        hw: H,
        region: MmioRegion,
        index: u8,
        route: HpetRoute,
    ) -> Result<Self, ComparatorError> {
        if region.len() < comparator_off(index) + 8 {
            return Err(ComparatorError::RegionTooSmall(region.len()));
        }
        let caps = hw.mmio_read64(region, reg::CAPABILITIES);
        let period = (caps >> 32) as u32;
        if caps == u64::MAX || !crate::PERIOD_FS.contains(&period) {
            return Err(ComparatorError::NoDevice);
        }
        let frequency =
            Frequency::from_period_fs(period as u64).map_err(|_| ComparatorError::NoDevice)?;
        let count = ((caps >> NUM_TIM_SHIFT) & 0x1F) as u8 + 1;
        if index >= count {
            return Err(ComparatorError::NoSuchTimer { index, count });
        }
        let cfg = hw.mmio_read64(region, config_off(index));
        let cap = (cfg >> 32) as u32;
        let gsi = match route {
            HpetRoute::Auto if cap != 0 => cap.trailing_zeros() as u8,
            HpetRoute::Auto => return Err(ComparatorError::RouteNotAllowed { gsi: None, cap }),
            HpetRoute::Gsi(g) if g < 32 && cap & (1 << g) != 0 => g,
            HpetRoute::Gsi(g) => {
                return Err(ComparatorError::RouteNotAllowed { gsi: Some(g), cap })
            }
        };
        let wide = caps & reg::COUNT_SIZE_CAP != 0 && cfg & TN_SIZE_CAP != 0;
        let hypervisor = cpuid::hypervisor_present(&hw);
        let t = HpetComparator {
            hw,
            region,
            index,
            gsi,
            wide,
            frequency,
            hypervisor,
        };
        t.write_config(false);
        let back = t.hw.mmio_read32(region, config_off(index));
        if (back >> 9) & 0x1F != gsi as u32 {
            return Err(ComparatorError::RouteNotTaken);
        }
        Ok(t)
    }

    /// The GSI (IOAPIC input) the comparator raises.
    /// Interrupt-safe: yes.
    pub fn gsi(&self) -> u8 {
        self.gsi
    }

    /// The timer's index in the block.
    /// Interrupt-safe: yes.
    pub fn index(&self) -> u8 {
        self.index
    }

    /// Whether comparisons are 64 bits wide (else 32).
    /// Interrupt-safe: yes.
    pub fn comparator_64bit(&self) -> bool {
        self.wide
    }

    /// Writes the low half of the timer's configuration: route, edge,
    /// one-shot, 32-bit mode where narrow, interrupt enable as given.
    fn write_config(&self, enable: bool) {
        // Tn_TYPE_CNF (periodic), Tn_INT_TYPE_CNF (level) and Tn_FSB_EN
        // stay clear: one-shot, edge, IOAPIC.
        let mut v = (self.gsi as u64) << 9;
        if !self.wide {
            v |= TN_32MODE;
        }
        if enable {
            v |= TN_INT_ENB;
        }
        self.hw
            .mmio_write32(self.region, config_off(self.index), v as u32);
    }

    fn counter(&self) -> u64 {
        if self.wide {
            self.hw.mmio_read64(self.region, reg::MAIN_COUNTER)
        } else {
            self.hw.mmio_read32(self.region, reg::MAIN_COUNTER) as u64
        }
    }

    fn max_delta(&self) -> u64 {
        if self.wide {
            i64::MAX as u64
        } else {
            i32::MAX as u64
        }
    }
}

impl<H: Hardware> TimerDevice for HpetComparator<H> {
    fn descriptor(&self) -> TimerDescriptor {
        TimerDescriptor {
            name: "hpet-comparator",
            scope: TimerScope::Global,
            mode: TimerMode::Delta,
            max_delta_ticks: self.max_delta(),
            min_delta_ticks: 2 * MIN_MARGIN_TICKS,
            resolution_ns: clockhal_core::timer::ns_per_tick_ceil(self.frequency),
            // Counter read, comparator write, config write, counter re-read.
            traps_per_arm: if self.hypervisor { 4 } else { 0 },
            needs_calibrated_rate: false,
            stops_in_deep_idle: false,
            rating: 50,
            rating_reason: "HPET comparator: global, exact rate, every access traps in a VM",
        }
    }

    fn rate(&self) -> Option<Frequency> {
        Some(self.frequency)
    }

    fn program(&self, ticks: u64) -> Result<(), TimerError> {
        if ticks < 2 * MIN_MARGIN_TICKS || ticks > self.max_delta() {
            return Err(TimerError::OutOfRange { ticks });
        }
        let target = self.counter().wrapping_add(ticks);
        if self.wide {
            self.hw
                .mmio_write64(self.region, comparator_off(self.index), target);
        } else {
            self.hw
                .mmio_write32(self.region, comparator_off(self.index), target as u32);
        }
        // Enabled after the comparator is written, so the old value cannot
        // match in between.
        self.write_config(true);
        // The race: the counter may have passed the target while the
        // write was in flight. Signed distance at the comparison width.
        let after = self.counter();
        let ahead = if self.wide {
            target.wrapping_sub(after) as i64
        } else {
            (target as u32).wrapping_sub(after as u32) as i32 as i64
        };
        if ahead < MIN_MARGIN_TICKS as i64 {
            return Err(TimerError::InPast);
        }
        Ok(())
    }

    fn cancel(&self) {
        self.write_config(false);
    }

    fn counter(&self) -> Option<u64> {
        Some(HpetComparator::counter(self))
    }
}

impl<H: Hardware> fmt::Debug for HpetComparator<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HpetComparator")
            .field("region", &self.region)
            .field("index", &self.index)
            .field("gsi", &self.gsi)
            .field("comparator_64bit", &self.wide)
            .finish()
    }
}
