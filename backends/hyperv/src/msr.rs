//! The partition reference counter MSR: the "hyperv-msr" clock.

use crate::HV_RATE;
use clockhal_core::MonotonicGuard;
use clockhal_core::{ClockSource, Frequency, Quality, ReadCost, Stability};
use clockhal_x86::{Hardware, Msr};

/// "hyperv-msr" rating: every read traps, but exact and migration-safe.
pub const MSR_QUALITY: Quality = Quality::new(280);

/// What the MSR clock guarantees.
pub const MSR_STABILITY: Stability = Stability::MONOTONIC_PER_CPU
    .union(Stability::MONOTONIC_ACROSS_CPUS)
    .union(Stability::INVARIANT_RATE)
    .union(Stability::SURVIVES_MIGRATION)
    .union(Stability::TRAPS_EVERY_READ);

/// Page readings are recorded for the guard at most once per this many
/// 100 ns units (4.1 us); also the largest forward step when a read falls
/// back from the page to the MSR.
pub const GUARD_SLACK: u64 = 41;

/// The "hyperv-msr" clock: TIME_REF_COUNT (MSR 0x40000020), 10 MHz, one
/// exit per read.
///
/// Also the base of [`HypervPageClock`](crate::HypervPageClock): both share
/// this clock's never-backwards guard.
#[derive(Debug)]
pub struct HypervMsrClock<H: Hardware> {
    pub(crate) hw: H,
    pub(crate) guard: MonotonicGuard,
}

impl<H: Hardware> HypervMsrClock<H> {
    pub(crate) fn new(hw: H) -> Self {
        HypervMsrClock {
            hw,
            guard: MonotonicGuard::new(GUARD_SLACK),
        }
    }

    /// Reference time in 100 ns units: one MSR read, never earlier than any
    /// value either Hyper-V clock returned before.
    #[inline]
    pub fn read_100ns(&self) -> u64 {
        self.guard.slow(self.hw.rdmsr(Msr::HV_TIME_REF_COUNT))
    }

    /// The hardware access this clock was built with.
    pub fn hardware(&self) -> &H {
        &self.hw
    }
}

impl<H: Hardware> ClockSource for HypervMsrClock<H> {
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
        MSR_QUALITY
    }
    fn stability(&self) -> Stability {
        MSR_STABILITY
    }
    fn read_cost(&self) -> ReadCost {
        ReadCost::OneTrap
    }
}
