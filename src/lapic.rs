//! The local APIC timer's rate: stated by the platform where it is
//! ([`stated_rate`], [`Clock::lapic_rate`]), else measured against the
//! clock ([`Clock::calibrate_lapic`]) — the first thing a kernel needs to
//! program its timer interrupt.
//!
//! Stated rates, best first:
//! 1. Hyper-V's `HV_X64_MSR_APIC_FREQUENCY` (0x40000023, Hz), when the
//!    partition offers the frequency MSRs (CPUID 0x40000003 EAX bit 11 and
//!    EDX bit 8);
//! 2. the hypervisor timing leaf (0x40000010 EBX, kHz: QEMU/KVM with
//!    `+invtsc`, VMware), as the TSC backend reads it;
//! 3. on bare-metal Intel CPUs that enumerate CPUID leaf 0x15, its core
//!    crystal (ECX): the SDM says the APIC timer then runs at the crystal
//!    rate (Linux sets `lapic_timer_period` from it). Never under a
//!    hypervisor, whose virtual APIC timer runs at a rate of its own
//!    (KVM: 1 GHz).
//!
//! A stated rate is the timer's input (divide configuration 1): divide it
//! by the OS's divide configuration. Every stated value is untrusted: one
//! outside [`PLAUSIBLE_STATED_HZ`] is skipped.
//!
//! Calibration touches no APIC register itself: the OS passes two
//! closures, one that starts its timer (one-shot, masked, the divide
//! configuration it will use) with an initial count, one that reads the
//! current-count register. The rate measured is that register's: the
//! divide configuration included.
//!
//! ```
//! use clockhal::lapic::{self, LapicRateOrigin};
//! use clockhal_sim::SimMachine;
//!
//! let r = lapic::stated_rate(&SimMachine::bare_metal()).unwrap();
//! assert_eq!(r.origin, LapicRateOrigin::CrystalLeaf15);
//! assert_eq!(r.frequency.hz_rounded(), 24_000_000);
//! assert_eq!(r.to_string(), "24000000 Hz (CPUID leaf 0x15 crystal)");
//!
//! assert!(lapic::stated_rate(&SimMachine::qemu_tcg()).is_none()); // calibrate
//! ```

use crate::wait::{spin_until, Stalled};
use crate::Clock;
use clockhal_core::{ppm, Bracketed, Duration, Frequency, Instant};
use clockhal_x86::{cpuid, rdmsr_checked, Hardware, Msr};
use core::fmt;
use core::ops::RangeInclusive;

/// Stated APIC timer input rates believed: 1 MHz to 10 GHz (crystals are
/// 19.2–38.4 MHz, front-side buses 100–400 MHz, Hyper-V 200 MHz, KVM
/// 1 GHz).
pub const PLAUSIBLE_STATED_HZ: RangeInclusive<u64> = 1_000_000..=10_000_000_000;

/// Measured current-count rates believed: 1 kHz (a 19.2 MHz crystal
/// divided by 128 is 150 kHz) to 10 GHz.
pub const PLAUSIBLE_MEASURED_HZ: RangeInclusive<u64> = 1_000..=10_000_000_000;

/// Where an APIC timer rate came from.
///
/// ```
/// use clockhal::lapic::{stated_rate, LapicRateOrigin};
/// let r = stated_rate(&clockhal_sim::SimMachine::hyperv()).unwrap();
/// assert_eq!(r.origin, LapicRateOrigin::HypervMsr);
/// assert_eq!(r.origin.to_string(), "Hyper-V APIC frequency MSR");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum LapicRateOrigin {
    /// Hyper-V's APIC frequency MSR (exact).
    HypervMsr,
    /// The hypervisor timing leaf's EBX (kHz, exact to 1 kHz).
    HypervisorLeaf,
    /// CPUID leaf 0x15's core crystal on bare-metal Intel (exact).
    CrystalLeaf15,
    /// Measured against the clock ([`Clock::calibrate_lapic`]).
    Calibrated {
        /// The clock source it was measured against (`"kvmclock"`, ...).
        against: &'static str,
        /// Bound on the relative error against that source, ppm: the two
        /// samples' bracket widths and the clock's resolution (its tick, or
        /// the clamp granule) over the interval, plus one count. The
        /// source's own rate error (see the report) comes on top.
        uncertainty_ppm: u32,
    },
}

impl fmt::Display for LapicRateOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LapicRateOrigin::HypervMsr => f.write_str("Hyper-V APIC frequency MSR"),
            LapicRateOrigin::HypervisorLeaf => f.write_str("hypervisor timing leaf"),
            LapicRateOrigin::CrystalLeaf15 => f.write_str("CPUID leaf 0x15 crystal"),
            LapicRateOrigin::Calibrated {
                against,
                uncertainty_ppm,
            } => write!(f, "calibrated against {against}, ±{uncertainty_ppm} ppm"),
        }
    }
}

/// An APIC timer rate and where it came from.
///
/// ```
/// let r = clockhal::lapic::stated_rate(&clockhal_sim::SimMachine::hyperv()).unwrap();
/// assert_eq!(r.frequency.hz_rounded(), 200_000_000);
/// assert_eq!(r.to_string(), "200000000 Hz (Hyper-V APIC frequency MSR)");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LapicRate {
    /// Counts per second (stated: at divide configuration 1; calibrated:
    /// at the OS's).
    pub frequency: Frequency,
    /// Its provenance.
    pub origin: LapicRateOrigin,
}

impl fmt::Display for LapicRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.frequency, self.origin)
    }
}

/// Why [`Clock::calibrate_lapic`] gave no rate.
///
/// ```
/// # #[cfg(feature = "tsc")] {
/// use clockhal::lapic::LapicError;
/// use clockhal::{Duration, Platform};
/// use clockhal_sim::SimMachine;
///
/// let m = SimMachine::bare_metal();
/// let clock = clockhal::probe(&m, Platform::new()).into_clock().unwrap();
/// // The OS's start closure did not start the timer: the count stays.
/// let e = clock.calibrate_lapic(|_| {}, || 0x1234, Duration::from_micros(100));
/// assert_eq!(e, Err(LapicError::NotCounting { first: 0x1234, last: 0x1234 }));
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum LapicError {
    /// The current count did not go down between the two samples (the
    /// timer was not started, or it reloaded: periodic mode).
    NotCounting {
        /// The count at the first sample.
        first: u32,
        /// The count at the second.
        last: u32,
    },
    /// The count reached 0 before the second sample.
    Expired,
    /// The clock stood still during the measurement.
    ClockStalled(Stalled),
    /// The measured rate is outside [`PLAUSIBLE_MEASURED_HZ`].
    Implausible {
        /// Counts.
        counts: u32,
        /// Over this many ns of the clock.
        elapsed_ns: u64,
    },
    /// The clock switched source (or rebased) during every one of
    /// [`CALIBRATION_ATTEMPTS`] measurements: a switch moves the timeline by
    /// up to a margin the bound could not state.
    SourceSwitched,
}

impl fmt::Display for LapicError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LapicError::NotCounting { first, last } => write!(
                f,
                "APIC timer did not count down (current count {first:#x}, then {last:#x})"
            ),
            LapicError::Expired => f.write_str("APIC timer reached 0 during the calibration"),
            LapicError::ClockStalled(s) => write!(f, "calibration: {s}"),
            LapicError::Implausible { counts, elapsed_ns } => write!(
                f,
                "APIC timer counted {counts} in {elapsed_ns} ns: not a plausible rate"
            ),
            LapicError::SourceSwitched => write!(
                f,
                "the clock switched source during each of {CALIBRATION_ATTEMPTS} calibrations"
            ),
        }
    }
}

impl core::error::Error for LapicError {}

/// The APIC timer's input rate where the platform states it (see the
/// module docs for the order and the rules), `None` where it must be
/// calibrated. Reads CPUID and, on Hyper-V with the frequency MSRs, one
/// MSR (read with [`rdmsr_checked`]). Needs no clock: usable before the
/// probe.
/// Interrupt-safe: yes.
///
/// ```
/// use clockhal::lapic::{stated_rate, LapicRateOrigin};
/// use clockhal_sim::SimMachine;
/// let r = stated_rate(&SimMachine::qemu_kvm_invtsc()).unwrap(); // -cpu host,+invtsc
/// assert_eq!((r.frequency.hz_rounded(), r.origin), (1_000_000_000, LapicRateOrigin::HypervisorLeaf));
/// assert_eq!(stated_rate(&SimMachine::qemu_kvm()), None); // KVM states it only with invtsc
/// ```
pub fn stated_rate<H: Hardware>(hw: &H) -> Option<LapicRate> {
    let believe = |hz: u64, origin| {
        Frequency::from_hz(hz)
            .ok()
            .filter(|f| PLAUSIBLE_STATED_HZ.contains(&f.hz_rounded()))
            .map(|frequency| LapicRate { frequency, origin })
    };
    let hyperv = cpuid::hyperv(hw)
        .filter(|(_, features)| features.frequency_msrs())
        .and_then(|_| rdmsr_checked(hw, Msr::HV_APIC_FREQUENCY))
        .and_then(|hz| believe(hz, LapicRateOrigin::HypervMsr));
    let leaf = || {
        cpuid::timing_leaves(hw).find_map(|leaf| {
            believe(
                u64::from(leaf.apic_khz) * 1_000,
                LapicRateOrigin::HypervisorLeaf,
            )
        })
    };
    let crystal = || {
        if cpuid::hypervisor_present(hw) || cpuid::vendor(hw) != cpuid::Vendor::Intel {
            return None;
        }
        let leaf = cpuid::tsc_leaf(hw)?;
        leaf.tsc_hz_ratio()?;
        believe(u64::from(leaf.crystal()?), LapicRateOrigin::CrystalLeaf15)
    };
    hyperv.or_else(leaf).or_else(crystal)
}

/// Bracketed samples per end of a calibration; the narrowest is used.
const SAMPLE_TRIES: u32 = 16;
/// Measurements [`Clock::calibrate_lapic`] makes at most: one more after
/// each that a source switch spoiled.
pub const CALIBRATION_ATTEMPTS: u32 = 3;
/// A bracket this narrow (ns) is taken at once.
const GOOD_ENOUGH_NS: u64 = 100;

impl<H: Hardware + Clone> Clock<H> {
    /// The APIC timer's stated input rate on this machine
    /// ([`stated_rate`]), `None` where it must be calibrated
    /// ([`calibrate_lapic`](Self::calibrate_lapic)).
    /// Interrupt-safe: yes.
    ///
    /// ```
    /// # #[cfg(feature = "kvmclock")] {
    /// # use clockhal_sim::SimMachine;
    /// let m = SimMachine::qemu_kvm_invtsc();
    /// let platform = clockhal::Platform::new().pvclock_areas(m.alloc_pvclock_areas(1));
    /// let clock = clockhal::probe(&m, platform).into_clock().unwrap();
    /// let rate = clock.lapic_rate().unwrap();
    /// assert_eq!(rate.to_string(), "1000000000 Hz (hypervisor timing leaf)");
    /// # }
    /// ```
    pub fn lapic_rate(&self) -> Option<LapicRate> {
        stated_rate(&self.hw)
    }

    /// Measures the APIC timer's current-count rate against this clock.
    ///
    /// Calls `start(u32::MAX)` (the OS writes its initial-count register,
    /// the timer already set up one-shot and masked with the divide
    /// configuration it will use), samples `read()` (the current-count
    /// register) between two clock reads, spins for `budget` on the clock
    /// (less if the count falls below a quarter of the first sample's),
    /// samples again, and divides. 10 ms give a few ppm on a TSC-based clock; a
    /// trapping clock (HPET, PM timer) needs longer for the same bound.
    ///
    /// A source switch during the measurement (another CPU's watchdog tick)
    /// would put the switch's margin into the interval: that measurement is
    /// dropped and made again (the timer restarted), up to
    /// [`CALIBRATION_ATTEMPTS`] in all, so the bound and the source named
    /// hold for the one that is returned.
    ///
    /// The result is relative to the clock; its
    /// [`Calibrated`](LapicRateOrigin::Calibrated) origin says against
    /// which source and how well. Errors: a timer that does not count
    /// down, reaches 0, an implausible rate, a clock that stood still
    /// ([`LapicError`]). Touches no hardware beyond the clock and the
    /// closures.
    /// Interrupt-safe: no (busy-waits for the calibration window).
    ///
    /// ```
    /// # #[cfg(feature = "tsc")] {
    /// use clockhal::{Duration, Platform};
    /// use clockhal_sim::SimMachine;
    /// use std::cell::Cell;
    ///
    /// let m = SimMachine::bare_metal();
    /// let clock = clockhal::probe(&m, Platform::new()).into_clock().unwrap();
    /// // A stand-in APIC timer at 24 MHz / 16 = 1.5 MHz, on machine time.
    /// let started = Cell::new((0u64, 0u32));
    /// let start = |initial| started.set((m.now_ns(), initial));
    /// let read = || {
    ///     let (at, initial) = started.get();
    ///     let counted = (m.now_ns() - at) * 3 / 2_000; // 1.5 counts per µs
    ///     initial.saturating_sub(counted as u32)
    /// };
    /// let rate = clock.calibrate_lapic(start, read, Duration::from_millis(10)).unwrap();
    /// let hz = rate.frequency.hz_rounded();
    /// assert!(hz.abs_diff(1_500_000) <= 1_500, "{rate}");
    /// # }
    /// ```
    pub fn calibrate_lapic(
        &self,
        mut start: impl FnMut(u32),
        mut read: impl FnMut() -> u32,
        budget: Duration,
    ) -> Result<LapicRate, LapicError> {
        for _ in 0..CALIBRATION_ATTEMPTS {
            let switches = self.switches();
            let r = self.calibrate_lapic_once(&mut start, &mut read, budget);
            if self.switches() == switches {
                return r;
            }
        }
        Err(LapicError::SourceSwitched)
    }

    /// One measurement of [`calibrate_lapic`](Self::calibrate_lapic).
    fn calibrate_lapic_once(
        &self,
        start: &mut impl FnMut(u32),
        read: &mut impl FnMut() -> u32,
        budget: Duration,
    ) -> Result<LapicRate, LapicError> {
        let against = self.source_name();
        start(u32::MAX);
        let sample = |read: &mut dyn FnMut() -> u32| {
            // The clock never goes backwards, so every bracket is kept.
            Bracketed::tightest(
                SAMPLE_TRIES,
                GOOD_ENOUGH_NS,
                || self.now_ns(),
                || u64::from(read()),
            )
            .unwrap_or_default()
        };
        let first = sample(read);
        let end = Instant::from_nanos(first.mid()).saturating_add(budget);
        // Ends early with a quarter of the first count left: far from 0.
        let floor = (first.inner / 4) as u32;
        spin_until(|| self.now(), end, || read() > floor).map_err(LapicError::ClockStalled)?;
        let last = sample(read);
        let (c0, c1) = (first.inner as u32, last.inner as u32);
        if c1 >= c0 {
            return Err(LapicError::NotCounting {
                first: c0,
                last: c1,
            });
        }
        if c1 == 0 {
            return Err(LapicError::Expired);
        }
        let counts = c0 - c1;
        let elapsed_ns = last.mid().saturating_sub(first.mid());
        let implausible = LapicError::Implausible { counts, elapsed_ns };
        let frequency =
            Frequency::from_ratio(u128::from(counts) * 1_000_000_000, u128::from(elapsed_ns))
                .ok()
                .filter(|f| PLAUSIBLE_MEASURED_HZ.contains(&f.hz_rounded()))
                .ok_or(implausible)?;
        // Each count reading lies within its bracket: the interval is
        // known to half the two widths, and to the clock's resolution (a
        // bracket inside one clamp granule has width 0); the counts to one.
        let slack = (first.width().unwrap_or(0) + last.width().unwrap_or(0))
            .div_ceil(2)
            .saturating_add(self.resolution_ns());
        let bound = ppm(i128::from(slack), elapsed_ns) + ppm(1, u64::from(counts)) + 1;
        Ok(LapicRate {
            frequency,
            origin: LapicRateOrigin::Calibrated {
                against,
                uncertainty_ppm: u32::try_from(bound).unwrap_or(u32::MAX),
            },
        })
    }
}
