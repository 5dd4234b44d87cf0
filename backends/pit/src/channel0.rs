//! PIT channel 0 as a one-shot [`TimerDevice`] of last resort, where the
//! OS gives it up ([`Channel0Grant`]): mode 0, "interrupt on terminal
//! count", IRQ 0. 16 bits at 1.193 MHz reach 54.9 ms, so long deadlines
//! go in pieces; every arm is three port writes (three exits in a VM).
//!
//! The IRQ is the legacy IRQ 0 (on IOAPIC machines usually GSI 2 by the
//! MADT's interrupt source override): the OS routes it and owns the vector.

use crate::PIT_FREQUENCY;
use clockhal_core::timer::{TimerDescriptor, TimerDevice, TimerError, TimerMode, TimerScope};
use clockhal_core::Frequency;
use clockhal_x86::pit::{program_channel0, stop_channel0, Channel0Grant};
use clockhal_x86::{cpuid, Hardware};
use core::fmt;

/// Longest count: 65,536 (written as 0).
pub const MAX_COUNT: u64 = 1 << 16;

/// PIT channel 0, one-shot.
///
/// ```
/// use clockhal_core::timer::TimerDevice;
/// use clockhal_pit::channel0::PitChannel0;
/// use clockhal_sim::SimMachine;
/// use clockhal_x86::pit::Channel0Grant;
///
/// let m = SimMachine::bare_metal();
/// let t = PitChannel0::new(&m, Channel0Grant::simulated());
/// t.program(1_193).unwrap(); // ~1 ms
/// assert!(m.pit_ch0_next_fire_ns().unwrap() > m.now_ns());
/// ```
pub struct PitChannel0<H: Hardware> {
    hw: H,
    grant: Channel0Grant,
    hypervisor: bool,
}

impl<H: Hardware> PitChannel0<H> {
    /// Channel 0 under `grant`; writes nothing yet.
    /// Interrupt-safe: yes.
    pub fn new(hw: H, grant: Channel0Grant) -> Self {
        let hypervisor = cpuid::hypervisor_present(&hw);
        PitChannel0 {
            hw,
            grant,
            hypervisor,
        }
    }
}

impl<H: Hardware> TimerDevice for PitChannel0<H> {
    fn descriptor(&self) -> TimerDescriptor {
        TimerDescriptor {
            name: "pit-ch0",
            scope: TimerScope::Global,
            mode: TimerMode::Delta,
            max_delta_ticks: MAX_COUNT,
            min_delta_ticks: 1,
            resolution_ns: clockhal_core::timer::ns_per_tick_ceil(PIT_FREQUENCY),
            traps_per_arm: if self.hypervisor { 3 } else { 0 },
            needs_calibrated_rate: false,
            stops_in_deep_idle: false,
            rating: 10,
            rating_reason:
                "PIT channel 0: last resort, 16-bit (54.9 ms), three port writes per arm",
        }
    }

    fn rate(&self) -> Option<Frequency> {
        Some(PIT_FREQUENCY)
    }

    /// Count `ticks`: IRQ 0 comes `ticks + 1` clocks later (never early).
    fn program(&self, ticks: u64) -> Result<(), TimerError> {
        if ticks == 0 || ticks > MAX_COUNT {
            return Err(TimerError::OutOfRange { ticks });
        }
        program_channel0(&self.hw, &self.grant, ticks as u32);
        Ok(())
    }

    fn cancel(&self) {
        stop_channel0(&self.hw, &self.grant);
    }
}

impl<H: Hardware> fmt::Debug for PitChannel0<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PitChannel0")
            .field("grant", &self.grant)
            .finish()
    }
}
