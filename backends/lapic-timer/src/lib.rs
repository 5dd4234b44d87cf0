#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![no_std]
#![forbid(unsafe_code)]

use clockhal_core::timer::{TimerDescriptor, TimerDevice, TimerError, TimerMode, TimerScope};
use clockhal_core::Frequency;
use clockhal_x86::timer_regs::{
    apic_timer_read, apic_timer_write, write_tsc_deadline, ApicAccess, ApicTimerReg,
    IA32_TSC_DEADLINE,
};
use clockhal_x86::{cpuid, rdmsr_checked, Hardware};
use core::fmt;

/// LVT timer bit 16: masked.
const LVT_MASKED: u32 = 1 << 16;
/// LVT timer mode field (bits 18:17).
const LVT_ONE_SHOT: u32 = 0;
const LVT_TSC_DEADLINE: u32 = 2 << 17;

/// Largest divide configuration (SDM 11.5.4: 1, 2, 4, ..., 128).
pub const MAX_DIVIDE: u64 = 128;

/// What CPUID says about the calling CPU's APIC timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LapicFeatures {
    /// CPUID.1:ECX bit 21: x2APIC supported.
    pub x2apic: bool,
    /// CPUID.1:ECX bit 24: TSC-deadline mode.
    pub tsc_deadline: bool,
    /// CPUID.6:EAX bit 2: the APIC timer keeps running in deep C-states.
    pub arat: bool,
    /// Under a hypervisor (every timer register write exits).
    pub hypervisor: bool,
}

impl LapicFeatures {
    /// Reads CPUID (leaf 6 only where the maximum basic leaf reaches it).
    /// Interrupt-safe: yes.
    pub fn read<H: Hardware + ?Sized>(hw: &H) -> LapicFeatures {
        let l1 = hw.cpuid(1, 0);
        let max_basic = hw.cpuid(0, 0).eax;
        let arat = max_basic >= 6 && hw.cpuid(6, 0).eax & (1 << 2) != 0;
        LapicFeatures {
            x2apic: l1.ecx & (1 << 21) != 0,
            tsc_deadline: l1.ecx & (1 << 24) != 0,
            arat,
            hypervisor: cpuid::hypervisor_present(&hw),
        }
    }
}

/// Why a LAPIC timer device could not be set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum LapicTimerError {
    /// The vector is below 32 (exceptions; 0–15 are illegal LVT vectors).
    BadVector(u8),
    /// The rate times the divide it was measured at is not a valid rate.
    BadRate,
    /// CPUID.1:ECX bit 24 is clear: no TSC-deadline mode.
    NoTscDeadline,
    /// The TSC-deadline MSR did not keep the value written (a host that
    /// drops the write), or reading it raised #GP.
    DeadlineDropped,
}

impl fmt::Display for LapicTimerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LapicTimerError::BadVector(v) => write!(f, "vector {v} is not usable for a timer"),
            LapicTimerError::BadRate => f.write_str("APIC timer rate out of range"),
            LapicTimerError::NoTscDeadline => f.write_str("CPU offers no TSC-deadline mode"),
            LapicTimerError::DeadlineDropped => {
                f.write_str("IA32_TSC_DEADLINE did not keep the value written")
            }
        }
    }
}

impl core::error::Error for LapicTimerError {}

fn check_vector(vector: u8) -> Result<(), LapicTimerError> {
    if vector < 32 {
        return Err(LapicTimerError::BadVector(vector));
    }
    Ok(())
}

/// Divide configuration register value for divisor `1 << shift`
/// (SDM 11.5.4: bits 0, 1, 3; 0b1011 is divide by 1).
const fn divide_config(shift: u32) -> u32 {
    if shift == 0 {
        0b1011
    } else {
        let x = shift - 1; // 2 -> 0, ..., 128 -> 6
        (x & 3) | ((x & 4) << 1)
    }
}

/// The smallest divide (`1 << shift`) whose 32-bit count holds `ticks`
/// input ticks, and that count rounded up (never early). `None` when
/// even divide 128 cannot hold it.
/// Interrupt-safe: yes.
///
/// ```
/// use clockhal_lapic_timer::choose_divide;
/// assert_eq!(choose_divide(1_000), Some((0, 1_000)));
/// assert_eq!(choose_divide(u32::MAX as u64 + 1), Some((1, 1 << 31)));
/// assert_eq!(choose_divide(u32::MAX as u64 * 2 + 1), Some((2, 0x8000_0000))); // rounded up
/// assert_eq!(choose_divide(u32::MAX as u64 * 128 + 1), None);
/// ```
pub const fn choose_divide(ticks: u64) -> Option<(u32, u32)> {
    let mut shift = 0;
    while shift <= 7 {
        let count = ticks.div_ceil(1 << shift);
        if count <= u32::MAX as u64 {
            return Some((shift, count as u32));
        }
        shift += 1;
    }
    None
}

/// The LAPIC timer in one-shot mode, on whichever CPU calls it (per-CPU
/// device: each CPU runs [`init_this_cpu`](Self::init_this_cpu) once, at
/// bring-up and after resume).
///
/// Ticks are the timer's *input* ticks (divide 1); [`program`](TimerDevice::program)
/// picks the divide per arm.
///
/// ```
/// use clockhal_core::timer::TimerDevice;
/// use clockhal_core::Frequency;
/// use clockhal_lapic_timer::LapicOneShot;
/// use clockhal_sim::{LapicConfig, SimConfig};
/// use clockhal_x86::timer_regs::ApicAccess;
///
/// let m = SimConfig::cpu(2_000_000_000).with_lapic(LapicConfig::tcg()).build();
/// let access = ApicAccess::detect(&m, m.lapic_region()).unwrap();
/// let rate = Frequency::from_hz(1_000_000_000).unwrap(); // stated, at divide 1
/// let t = LapicOneShot::new(&m, access, 0xEF, rate, 1).unwrap();
/// let start = m.now_ns();
/// t.program(5_000).unwrap(); // 5 µs
/// let at = m.lapic_next_fire_ns(0).unwrap();
/// assert!(at >= start + 5_000);
/// ```
pub struct LapicOneShot<H: Hardware> {
    hw: H,
    access: ApicAccess,
    vector: u8,
    input: Frequency,
    features: LapicFeatures,
}

impl<H: Hardware> LapicOneShot<H> {
    /// The one-shot timer at `vector`, whose current count runs at `rate`
    /// when the divide configuration is `rate_divide` (a stated rate: 1;
    /// a calibrated one: the divide the OS calibrated with). Sets up the
    /// calling CPU's LVT ([`init_this_cpu`](Self::init_this_cpu)).
    /// Interrupt-safe: no (a per-CPU setup step).
    pub fn new(
        hw: H,
        access: ApicAccess,
        vector: u8,
        rate: Frequency,
        rate_divide: u8,
    ) -> Result<Self, LapicTimerError> {
        check_vector(vector)?;
        if rate_divide == 0 || !rate_divide.is_power_of_two() || rate_divide as u64 > MAX_DIVIDE {
            return Err(LapicTimerError::BadRate);
        }
        let input = Frequency::from_ratio(
            rate.numerator() as u128 * rate_divide as u128,
            rate.denominator() as u128,
        )
        .map_err(|_| LapicTimerError::BadRate)?;
        let features = LapicFeatures::read(&hw);
        let t = LapicOneShot {
            hw,
            access,
            vector,
            input,
            features,
        };
        t.init_this_cpu();
        Ok(t)
    }

    /// Puts the calling CPU's LVT timer in one-shot mode at the vector,
    /// unmasked, disarmed. Run on each CPU at bring-up and after resume.
    /// Interrupt-safe: yes.
    pub fn init_this_cpu(&self) {
        apic_timer_write(&self.hw, self.access, ApicTimerReg::InitialCount, 0);
        apic_timer_write(
            &self.hw,
            self.access,
            ApicTimerReg::LvtTimer,
            self.vector as u32 | LVT_ONE_SHOT,
        );
    }

    /// Masks the calling CPU's timer and stops it (CPU offline).
    /// Interrupt-safe: yes.
    pub fn shutdown_this_cpu(&self) {
        apic_timer_write(&self.hw, self.access, ApicTimerReg::InitialCount, 0);
        apic_timer_write(
            &self.hw,
            self.access,
            ApicTimerReg::LvtTimer,
            self.vector as u32 | LVT_MASKED,
        );
    }

    /// The CPUID features it found.
    /// Interrupt-safe: yes.
    pub fn features(&self) -> LapicFeatures {
        self.features
    }

    /// The vector it fires at.
    /// Interrupt-safe: yes.
    pub fn vector(&self) -> u8 {
        self.vector
    }
}

impl<H: Hardware> TimerDevice for LapicOneShot<H> {
    fn descriptor(&self) -> TimerDescriptor {
        let (rating, rating_reason) = if self.features.arat {
            (100, "LAPIC one-shot: per-CPU, rate stated or calibrated")
        } else {
            (
                80,
                "LAPIC one-shot without ARAT: stops in deep C-states (CPUID.6:EAX[2] clear)",
            )
        };
        TimerDescriptor {
            name: "lapic-oneshot",
            scope: TimerScope::PerCpu,
            mode: TimerMode::Delta,
            max_delta_ticks: u32::MAX as u64 * MAX_DIVIDE,
            min_delta_ticks: 1,
            resolution_ns: clockhal_core::timer::ns_per_tick_ceil(self.input),
            // The divide and the initial count: two register writes, each an
            // exit under a hypervisor.
            traps_per_arm: if self.features.hypervisor { 2 } else { 0 },
            needs_calibrated_rate: true,
            stops_in_deep_idle: !self.features.arat,
            rating,
            rating_reason,
        }
    }

    fn rate(&self) -> Option<Frequency> {
        Some(self.input)
    }

    fn program(&self, ticks: u64) -> Result<(), TimerError> {
        if ticks == 0 {
            return Err(TimerError::OutOfRange { ticks });
        }
        let (shift, count) = choose_divide(ticks).ok_or(TimerError::OutOfRange { ticks })?;
        apic_timer_write(
            &self.hw,
            self.access,
            ApicTimerReg::DivideConfig,
            divide_config(shift),
        );
        apic_timer_write(&self.hw, self.access, ApicTimerReg::InitialCount, count);
        Ok(())
    }

    fn cancel(&self) {
        apic_timer_write(&self.hw, self.access, ApicTimerReg::InitialCount, 0);
    }

    /// The current count (in divided units of the last arm).
    fn counter(&self) -> Option<u64> {
        Some(apic_timer_read(&self.hw, self.access, ApicTimerReg::CurrentCount) as u64)
    }
}

impl<H: Hardware> fmt::Debug for LapicOneShot<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LapicOneShot")
            .field("access", &self.access)
            .field("vector", &self.vector)
            .field("input", &self.input)
            .field("features", &self.features)
            .finish()
    }
}

/// The LAPIC timer in TSC-deadline mode: fires when the calling CPU's TSC
/// reaches the value written to `IA32_TSC_DEADLINE`. Per-CPU; absolute,
/// 64 bits (no piece splitting), no rate to calibrate.
///
/// ```
/// use clockhal_core::timer::TimerDevice;
/// use clockhal_core::Frequency;
/// use clockhal_lapic_timer::LapicTscDeadline;
/// use clockhal_sim::{LapicConfig, SimConfig};
/// use clockhal_x86::{timer_regs::ApicAccess, Hardware};
///
/// let m = SimConfig::cpu(2_000_000_000).with_lapic(LapicConfig::kvm()).build();
/// let access = ApicAccess::detect(&m, None).unwrap(); // x2APIC
/// let tsc = Frequency::from_hz(2_000_000_000).unwrap();
/// let t = LapicTscDeadline::new(&m, access, 0xEF, tsc).unwrap();
/// t.self_test().unwrap();
/// let now = m.rdtsc();
/// t.program_at(now + 2_000).unwrap(); // 1 µs of TSC
/// assert!(m.lapic_next_fire_ns(0).unwrap() >= m.now_ns());
/// ```
pub struct LapicTscDeadline<H: Hardware> {
    hw: H,
    access: ApicAccess,
    vector: u8,
    tsc: Frequency,
    features: LapicFeatures,
}

impl<H: Hardware> LapicTscDeadline<H> {
    /// TSC-deadline mode at `vector`; `tsc` is the TSC's rate (for the
    /// descriptor's resolution and for [`program`](TimerDevice::program)'s
    /// deltas). Sets up the calling CPU's LVT.
    /// Interrupt-safe: no (a per-CPU setup step).
    pub fn new(
        hw: H,
        access: ApicAccess,
        vector: u8,
        tsc: Frequency,
    ) -> Result<Self, LapicTimerError> {
        check_vector(vector)?;
        let features = LapicFeatures::read(&hw);
        if !features.tsc_deadline {
            return Err(LapicTimerError::NoTscDeadline);
        }
        let t = LapicTscDeadline {
            hw,
            access,
            vector,
            tsc,
            features,
        };
        t.init_this_cpu();
        Ok(t)
    }

    /// Puts the calling CPU's LVT timer in TSC-deadline mode at the vector
    /// (a mode change disarms it). Run on each CPU at bring-up and resume.
    /// Interrupt-safe: yes.
    pub fn init_this_cpu(&self) {
        apic_timer_write(
            &self.hw,
            self.access,
            ApicTimerReg::LvtTimer,
            self.vector as u32 | LVT_TSC_DEADLINE,
        );
    }

    /// Masks the calling CPU's timer and disarms it (CPU offline).
    /// Interrupt-safe: yes.
    pub fn shutdown_this_cpu(&self) {
        write_tsc_deadline(&self.hw, 0);
        apic_timer_write(
            &self.hw,
            self.access,
            ApicTimerReg::LvtTimer,
            self.vector as u32 | LVT_TSC_DEADLINE | LVT_MASKED,
        );
    }

    /// Arms a deadline about one second ahead, reads `IA32_TSC_DEADLINE`
    /// back and disarms: a host that drops the write (reads 0 or another
    /// value) fails it. Run at probe time, before relying on the device.
    /// Interrupt-safe: no (a probe step; it briefly arms the timer).
    pub fn self_test(&self) -> Result<(), LapicTimerError> {
        let far = self.hw.rdtsc().saturating_add(self.tsc.hz_rounded()).max(1);
        write_tsc_deadline(&self.hw, far);
        let back = rdmsr_checked(&self.hw, IA32_TSC_DEADLINE);
        write_tsc_deadline(&self.hw, 0);
        match back {
            Some(v) if v == far => Ok(()),
            _ => Err(LapicTimerError::DeadlineDropped),
        }
    }

    /// The CPUID features it found.
    /// Interrupt-safe: yes.
    pub fn features(&self) -> LapicFeatures {
        self.features
    }
}

impl<H: Hardware> TimerDevice for LapicTscDeadline<H> {
    fn descriptor(&self) -> TimerDescriptor {
        let (rating, rating_reason) = if self.features.arat {
            (
                150,
                "LAPIC TSC-deadline: per-CPU, absolute 64-bit, on the clock's own TSC map",
            )
        } else {
            (
                90,
                "LAPIC TSC-deadline without ARAT: stops in deep C-states (CPUID.6:EAX[2] clear)",
            )
        };
        TimerDescriptor {
            name: "lapic-tsc-deadline",
            scope: TimerScope::PerCpu,
            mode: TimerMode::AbsoluteCounter,
            max_delta_ticks: u64::MAX,
            min_delta_ticks: 1,
            resolution_ns: clockhal_core::timer::ns_per_tick_ceil(self.tsc),
            traps_per_arm: if self.features.hypervisor { 1 } else { 0 },
            needs_calibrated_rate: false,
            stops_in_deep_idle: !self.features.arat,
            rating,
            rating_reason,
        }
    }

    fn rate(&self) -> Option<Frequency> {
        Some(self.tsc)
    }

    fn program(&self, ticks: u64) -> Result<(), TimerError> {
        if ticks == 0 {
            return Err(TimerError::OutOfRange { ticks });
        }
        self.program_at(self.hw.rdtsc().saturating_add(ticks))
    }

    /// 0 would disarm: a deadline of TSC 0 is written as 1 (long past, so
    /// it fires at once).
    fn program_at(&self, counter: u64) -> Result<(), TimerError> {
        write_tsc_deadline(&self.hw, counter.max(1));
        Ok(())
    }

    fn cancel(&self) {
        write_tsc_deadline(&self.hw, 0);
    }

    fn counter(&self) -> Option<u64> {
        Some(self.hw.rdtsc())
    }
}

impl<H: Hardware> fmt::Debug for LapicTscDeadline<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LapicTscDeadline")
            .field("access", &self.access)
            .field("vector", &self.vector)
            .field("tsc", &self.tsc)
            .field("features", &self.features)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn divide_encodings_match_the_sdm() {
        // SDM 11.5.4: 0000 /2, 0001 /4, 0010 /8, 0011 /16, 1000 /32,
        // 1001 /64, 1010 /128, 1011 /1.
        let want = [
            0b1011, 0b0000, 0b0001, 0b0010, 0b0011, 0b1000, 0b1001, 0b1010,
        ];
        for (shift, w) in want.iter().enumerate() {
            assert_eq!(divide_config(shift as u32), *w, "divide {}", 1 << shift);
        }
    }

    #[test]
    fn divide_rounds_up() {
        for ticks in [
            1u64,
            2,
            3,
            u32::MAX as u64,
            u32::MAX as u64 + 1,
            1 << 38,
            u32::MAX as u64 * 128,
        ] {
            let (shift, count) = choose_divide(ticks).unwrap();
            let covered = (count as u64) << shift;
            assert!(covered >= ticks, "{ticks}: {count} << {shift}");
            assert!(
                covered - ticks < 1 << shift,
                "{ticks}: more than one divided tick over"
            );
            if shift > 0 {
                assert!(
                    ticks.div_ceil(1 << (shift - 1)) > u32::MAX as u64,
                    "not the smallest"
                );
            }
        }
    }
}
