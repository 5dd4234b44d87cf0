//! The partition reference counter MSR: the "hyperv-msr" clock.

use crate::HV_RATE;
use clockhal_core::{ClockSource, Frequency, Quality, ReadCost, Stability, WrapExtender};
use clockhal_x86::{rdmsr_checked, Hardware, Msr};
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// "hyperv-msr" rating: every read traps, but exact and migration-safe.
pub const MSR_RATING: Quality = Quality::new(280);

/// What the MSR clock guarantees: one partition-wide counter, kept
/// monotonic against a hostile one as every device counter is (a reading
/// behind the last is held).
pub const MSR_STABILITY: Stability = Stability::MONOTONIC_PER_CPU
    .union(Stability::MONOTONIC_ACROSS_CPUS)
    .union(Stability::INVARIANT_RATE)
    .union(Stability::SURVIVES_MIGRATION)
    .union(Stability::TRAPS_EVERY_READ);

/// The "hyperv-msr" clock: TIME_REF_COUNT (MSR 0x40000020), 10 MHz, one
/// exit per read.
///
/// Also the fallback of [`HypervPageClock`](crate::HypervPageClock) while
/// the page is invalid.
///
/// Readings are kept monotonic as a 64-bit device counter's are (a
/// [`WrapExtender`] of 64 bits: a reading behind the last is held), so one
/// garbage value less than 2^63 ahead holds the clock there until the
/// counter catches up: the partition's word is all this clock has.
/// `clockhal`'s `Clock` checks such a jump against an independent counter
/// before returning it.
#[derive(Debug)]
pub struct HypervMsrClock<H: Hardware> {
    pub(crate) hw: H,
    /// One partition-wide counter: its readings in order, on every CPU.
    ext: WrapExtender,
    faults: AtomicU64,
}

impl<H: Hardware> HypervMsrClock<H> {
    pub(crate) fn new(hw: H) -> Self {
        HypervMsrClock {
            hw,
            ext: WrapExtender::new(64, 0),
            faults: AtomicU64::new(0),
        }
    }

    /// Reference time in 100 ns units: one MSR read, never earlier than a
    /// value this clock returned before, on any CPU.
    /// Interrupt-safe: yes.
    #[inline]
    pub fn read_100ns(&self) -> u64 {
        self.ext.extend(self.raw_100ns())
    }

    /// TIME_REF_COUNT as the partition returns it (not kept in order).
    /// Read with a #GP-recovering read where the OS offers one: a partition that
    /// withdraws the MSR after the probe gives the last value (held, and
    /// counted in [`faults`](Self::faults)) instead of a crash.
    #[inline]
    pub(crate) fn raw_100ns(&self) -> u64 {
        self.try_raw_100ns().unwrap_or_else(|| self.ext.last())
    }

    /// TIME_REF_COUNT, or `None` (counted in [`faults`](Self::faults))
    /// when the read raised #GP: no fresh value.
    #[inline]
    pub(crate) fn try_raw_100ns(&self) -> Option<u64> {
        let v = rdmsr_checked(&self.hw, Msr::HV_TIME_REF_COUNT);
        if v.is_none() {
            self.faults.fetch_add(1, Relaxed);
        }
        v
    }

    /// Reads of TIME_REF_COUNT that faulted (the partition withdrew the
    /// MSR after the probe): each returned the held value.
    /// Interrupt-safe: yes.
    pub fn faults(&self) -> u64 {
        self.faults.load(Relaxed)
    }

    /// Forgets the last reading (after a restore that moved the
    /// partition's reference time back).
    /// Interrupt-safe: no (a per-CPU lifecycle step).
    pub fn reset_monotonic(&self) {
        self.ext.reset(0)
    }

    /// The hardware access this clock was built with.
    /// Interrupt-safe: yes.
    pub fn hardware(&self) -> &H {
        &self.hw
    }
}

impl<H: Hardware> ClockSource for HypervMsrClock<H> {
    fn counter_domain(&self) -> Option<clockhal_core::CounterDomain> {
        Some(clockhal_core::CounterDomain::HypervisorCounter)
    }
    fn name(&self) -> &'static str {
        "hyperv-msr"
    }
    #[inline]
    fn read(&self) -> u64 {
        self.read_100ns()
    }
    fn frequency(&self) -> Frequency {
        HV_RATE
    }
    fn quality(&self) -> Quality {
        MSR_RATING
    }
    fn stability(&self) -> Stability {
        MSR_STABILITY
    }
    fn read_cost(&self) -> ReadCost {
        ReadCost::OneTrap
    }
}
