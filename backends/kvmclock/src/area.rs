//! Decoding one pvclock area: the seqlock read and the scaling.
//!
//! Read-only and independent of MSRs, so it works on any area: one this
//! crate registered, or the page a host kernel maps into its vDSO.

use clockhal_core::{Frequency, TscMap};
use clockhal_x86::paravirt::{
    pvclock_scale_delta, pvclock_tsc_hz_ratio, PvclockSample, PvclockVcpuTimeInfo,
    PVCLOCK_GUEST_STOPPED, PVCLOCK_TSC_STABLE_BIT,
};
use core::fmt;

/// How many times a read samples an area whose version is odd or changes
/// under it before giving up ([`PvclockError::Busy`]). A real host update
/// takes well under a microsecond; 64 attempts with a `pause` between them
/// last a few microseconds, so a stuck host cannot hang a reader.
pub const MAX_READ_ATTEMPTS: u32 = 64;

/// One decoded reading of a pvclock area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PvclockTime {
    /// Host system time in ns (`system_time` extrapolated to `tsc`).
    pub ns: u64,
    /// The TSC value the reading was computed from.
    pub tsc: u64,
    /// The area's (even) version the reading came from.
    pub version: u32,
    /// The area's flags at that version.
    pub flags: u8,
}

impl PvclockTime {
    /// The host set `PVCLOCK_TSC_STABLE_BIT` (trust it only with KVM's CPUID
    /// `CLOCKSOURCE_STABLE_BIT`).
    /// Interrupt-safe: yes.
    pub const fn tsc_stable_flag(&self) -> bool {
        self.flags & PVCLOCK_TSC_STABLE_BIT != 0
    }

    /// The host set `PVCLOCK_GUEST_STOPPED` (it paused the guest).
    /// Interrupt-safe: yes.
    pub const fn guest_stopped(&self) -> bool {
        self.flags & PVCLOCK_GUEST_STOPPED != 0
    }
}

/// Why an area could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PvclockError {
    /// `tsc_to_system_mul` is 0: the host has not written the area.
    NotWritten,
    /// `tsc_shift` is outside -32..=32: no host encodes a real TSC so.
    ShiftOutOfRange(i8),
    /// The TSC rate the area implies is outside 1 Hz ..= 2^40 Hz.
    FrequencyOutOfRange,
    /// The version stayed odd or kept changing for
    /// [`MAX_READ_ATTEMPTS`] samples.
    Busy,
}

impl fmt::Display for PvclockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PvclockError::NotWritten => f.write_str("pvclock area not written (multiplier 0)"),
            PvclockError::ShiftOutOfRange(s) => write!(f, "pvclock shift {s} outside -32..=32"),
            PvclockError::FrequencyOutOfRange => {
                f.write_str("pvclock implies a TSC rate outside 1 Hz..=2^40 Hz")
            }
            PvclockError::Busy => write!(
                f,
                "pvclock version odd or changing for {MAX_READ_ATTEMPTS} attempts"
            ),
        }
    }
}

impl core::error::Error for PvclockError {}

/// One consistent copy of an area and a TSC value read inside its seqlock
/// window (the seqlock itself is clockhal-user's, shared with the
/// user-space reader).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sample(PvclockSample);

impl core::ops::Deref for Sample {
    type Target = PvclockSample;
    fn deref(&self) -> &PvclockSample {
        &self.0
    }
}

impl Sample {
    /// One seqlock attempt: `None` if the version was odd or changed.
    #[inline(always)]
    pub(crate) fn try_take(
        area: &PvclockVcpuTimeInfo,
        rdtsc: &mut impl FnMut() -> u64,
    ) -> Option<Sample> {
        area.try_sample(rdtsc).map(Sample)
    }

    /// Bounded retry of [`try_take`](Self::try_take).
    #[inline]
    pub(crate) fn take(
        area: &PvclockVcpuTimeInfo,
        mut rdtsc: impl FnMut() -> u64,
    ) -> Result<Sample, PvclockError> {
        for _ in 0..MAX_READ_ATTEMPTS {
            if let Some(s) = Self::try_take(area, &mut rdtsc) {
                return Ok(s);
            }
            core::hint::spin_loop();
        }
        Err(PvclockError::Busy)
    }

    /// Rejects values no host writes (cheap: two compares).
    #[inline(always)]
    pub(crate) fn check(&self) -> Result<(), PvclockError> {
        if self.mul == 0 {
            return Err(PvclockError::NotWritten);
        }
        if pvclock_tsc_hz_ratio(self.mul, self.shift).is_none() {
            return Err(PvclockError::ShiftOutOfRange(self.shift));
        }
        Ok(())
    }

    /// `system_time + scale(tsc - tsc_timestamp)`. A TSC behind the
    /// timestamp (a hostile or sloppy host) counts as no time elapsed
    /// instead of wrapping to ~584 years; the sum saturates.
    #[inline(always)]
    pub(crate) fn ns(&self) -> u64 {
        let delta = self.tsc.saturating_sub(self.tsc_timestamp);
        self.system_time
            .saturating_add(pvclock_scale_delta(delta, self.mul, self.shift))
    }

    /// The map these parameters define (`None` for a multiplier of 0 or a
    /// shift out of range).
    #[inline]
    pub(crate) fn map(&self) -> Option<TscMap> {
        TscMap::pvclock(self.mul, self.shift, self.tsc_timestamp, self.system_time)
    }

    /// The exact TSC rate this sample's `(mul, shift)` imply.
    pub(crate) fn tsc_frequency(&self) -> Result<Frequency, PvclockError> {
        self.check()?;
        let (num, den) = pvclock_tsc_hz_ratio(self.mul, self.shift)
            .ok_or(PvclockError::ShiftOutOfRange(self.shift))?;
        Frequency::from_ratio(num, den).map_err(|_| PvclockError::FrequencyOutOfRange)
    }

    #[inline(always)]
    pub(crate) fn time(&self) -> PvclockTime {
        PvclockTime {
            ns: self.ns(),
            tsc: self.tsc,
            version: self.version,
            flags: self.flags,
        }
    }
}

/// Reads any pvclock area: seqlock (bounded), exact 128-bit scaling.
///
/// Read-only: it never writes the area (not even to acknowledge
/// `GUEST_STOPPED`, which it reports in [`PvclockTime::flags`]) and touches
/// no MSR, so it can decode a page mapped read-only, such as the one a Linux
/// KVM guest maps into every process for its vDSO. `rdtsc` must return the
/// TSC of the CPU the area belongs to, ordered after earlier loads
/// (`Hardware::rdtsc_ordered`).
///
/// Errors: [`PvclockError::NotWritten`] (multiplier 0),
/// [`PvclockError::ShiftOutOfRange`], [`PvclockError::Busy`] (version odd or
/// changing for [`MAX_READ_ATTEMPTS`] samples). Never panics, never hangs.
/// Interrupt-safe: yes.
///
/// ```
/// use clockhal_kvmclock::read_area;
/// use clockhal_x86::paravirt::PvclockVcpuTimeInfo;
/// use core::sync::atomic::Ordering::Relaxed;
/// let area = PvclockVcpuTimeInfo::new();
/// // A 2 GHz TSC: 0.5 ns per tick is mul 2^31 with shift 0.
/// area.tsc_to_system_mul.store(1 << 31, Relaxed);
/// area.tsc_timestamp.store(1_000, Relaxed);
/// area.system_time.store(5_000_000, Relaxed);
/// area.version.store(2, Relaxed);
/// let t = read_area(&area, || 3_000).unwrap();
/// assert_eq!(t.ns, 5_000_000 + 1_000);
/// ```
#[inline]
pub fn read_area(
    area: &PvclockVcpuTimeInfo,
    rdtsc: impl FnMut() -> u64,
) -> Result<PvclockTime, PvclockError> {
    let s = Sample::take(area, rdtsc)?;
    s.check()?;
    Ok(s.time())
}

/// The exact TSC rate an area's `(mul, shift)` imply:
/// `10^9 * 2^32 / (mul * 2^shift)` Hz (read under the seqlock; no TSC read).
/// Interrupt-safe: yes.
///
/// ```
/// use clockhal_kvmclock::area_tsc_frequency;
/// use clockhal_core::Frequency;
/// use clockhal_x86::paravirt::PvclockVcpuTimeInfo;
/// use core::sync::atomic::Ordering::Relaxed;
/// let area = PvclockVcpuTimeInfo::new();
/// area.tsc_to_system_mul.store(1 << 31, Relaxed);
/// area.tsc_shift.store(-1, Relaxed);
/// area.version.store(2, Relaxed);
/// assert_eq!(area_tsc_frequency(&area), Ok(Frequency::from_hz(4_000_000_000).unwrap()));
/// ```
pub fn area_tsc_frequency(area: &PvclockVcpuTimeInfo) -> Result<Frequency, PvclockError> {
    Sample::take(area, || 0)?.tsc_frequency()
}
