//! Hyper-V synthetic timer 0 in direct mode as a one-shot [`TimerDevice`]
//! (TLFS "Synthetic Timers"): the expiry is an absolute partition
//! reference time in 100 ns units; direct mode raises the APIC vector the
//! OS chose, with no SynIC message page. Per-vCPU.
//!
//! Tested against the simulator only (no Hyper-V host here), like the rest
//! of this crate. Under Hyper-V it ranks above the LAPIC timer, whose
//! every register write is an intercept, as Linux's `hv_stimer0` does
//! (rating 1000).

use crate::HV_RATE;
use clockhal_core::timer::{TimerDescriptor, TimerDevice, TimerError, TimerMode, TimerScope};
use clockhal_core::Frequency;
use clockhal_x86::timer_regs::{hv_stimer0_disable, hv_stimer0_write};
use clockhal_x86::{cpuid, rdmsr_checked, Hardware, Msr};
use core::fmt;

/// Config: Enable (bit 0).
const ENABLE: u64 = 1 << 0;
/// Config: DirectMode (bit 12).
const DIRECT_MODE: u64 = 1 << 12;
/// Config: vector (bits 11:4).
const VECTOR_SHIFT: u32 = 4;

/// Why STIMER0 is not usable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum StimerError {
    /// No Hyper-V CPUID leaves.
    NotHyperv,
    /// CPUID 0x40000003 EAX bit 3 (synthetic timer MSRs) is clear.
    NoSyntheticTimers,
    /// EDX bit 19 (direct mode) is clear: only SynIC messages, which need
    /// a message page this crate does not set up.
    NoDirectMode,
    /// EAX bit 1 (TIME_REF_COUNT, the timer's timeline) is clear.
    NoReferenceCounter,
    /// The vector is below 32.
    BadVector(u8),
}

impl fmt::Display for StimerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StimerError::NotHyperv => "not a Hyper-V partition",
            StimerError::NoSyntheticTimers => "partition offers no synthetic timers",
            StimerError::NoDirectMode => "synthetic timers without direct mode",
            StimerError::NoReferenceCounter => "no TIME_REF_COUNT for the timer's timeline",
            StimerError::BadVector(_) => "vector below 32",
        })
    }
}

impl core::error::Error for StimerError {}

/// STIMER0, one-shot, direct mode at the OS's vector.
///
/// ```
/// use clockhal_core::timer::TimerDevice;
/// use clockhal_hyperv::stimer::HypervStimer;
/// use clockhal_sim::{HypervConfig, SimConfig};
///
/// let m = SimConfig::cpu(2_000_000_000)
///     .with_hyperv(HypervConfig { synthetic_timers: true, ..Default::default() })
///     .build();
/// let t = HypervStimer::new(&m, 0xEC).unwrap();
/// t.program(10).unwrap(); // 1 µs
/// assert!(m.stimer_next_fire_ns(0).unwrap() >= m.now_ns());
/// ```
pub struct HypervStimer<H: Hardware> {
    hw: H,
    vector: u8,
}

impl<H: Hardware> HypervStimer<H> {
    /// STIMER0 at `vector`, after checking the partition's CPUID.
    /// Disables the calling vCPU's timer.
    /// Interrupt-safe: no (a setup step).
    pub fn new(hw: H, vector: u8) -> Result<Self, StimerError> {
        let (_, f) = cpuid::hyperv(&hw).ok_or(StimerError::NotHyperv)?;
        if f.eax & (1 << 3) == 0 {
            return Err(StimerError::NoSyntheticTimers);
        }
        if f.edx & (1 << 19) == 0 {
            return Err(StimerError::NoDirectMode);
        }
        if !f.time_ref_count() {
            return Err(StimerError::NoReferenceCounter);
        }
        if vector < 32 {
            return Err(StimerError::BadVector(vector));
        }
        let t = HypervStimer { hw, vector };
        t.cancel();
        Ok(t)
    }

    /// The vector it fires at.
    /// Interrupt-safe: yes.
    pub fn vector(&self) -> u8 {
        self.vector
    }

    fn reference_time(&self) -> Option<u64> {
        rdmsr_checked(&self.hw, Msr::HV_TIME_REF_COUNT)
    }
}

impl<H: Hardware> TimerDevice for HypervStimer<H> {
    fn descriptor(&self) -> TimerDescriptor {
        TimerDescriptor {
            name: "hyperv-stimer0",
            scope: TimerScope::PerCpu,
            mode: TimerMode::Delta,
            // The count is 64-bit absolute; keep deltas where ref + delta
            // cannot wrap for centuries.
            max_delta_ticks: i64::MAX as u64,
            min_delta_ticks: 1,
            resolution_ns: 100,
            // TIME_REF_COUNT read, config write, count write.
            traps_per_arm: 3,
            needs_calibrated_rate: false,
            stops_in_deep_idle: false,
            rating: 1000,
            rating_reason:
                "Hyper-V STIMER0 direct mode: per-vCPU, exact 10 MHz, no LAPIC intercepts",
        }
    }

    fn rate(&self) -> Option<Frequency> {
        Some(HV_RATE)
    }

    fn program(&self, ticks: u64) -> Result<(), TimerError> {
        if ticks == 0 || ticks > i64::MAX as u64 {
            return Err(TimerError::OutOfRange { ticks });
        }
        let now = self.reference_time().ok_or(TimerError::Dropped)?;
        self.program_at(now.saturating_add(ticks))
    }

    /// An absolute reference time (100 ns units); an expiry in the past
    /// fires at once (TLFS). 0 would disable: written as 1.
    fn program_at(&self, counter: u64) -> Result<(), TimerError> {
        let config = ENABLE | DIRECT_MODE | (self.vector as u64) << VECTOR_SHIFT;
        hv_stimer0_write(&self.hw, config, counter.max(1));
        Ok(())
    }

    fn cancel(&self) {
        hv_stimer0_disable(&self.hw);
    }

    /// TIME_REF_COUNT (one intercept).
    fn counter(&self) -> Option<u64> {
        self.reference_time()
    }
}

impl<H: Hardware> fmt::Debug for HypervStimer<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HypervStimer")
            .field("vector", &self.vector)
            .finish()
    }
}
