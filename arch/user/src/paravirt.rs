//! The hypervisors' clock pages: their layouts, their arithmetic, and the
//! bounded seqlock decoders the clock-page reader and writer share.
//!
//! The layouts are ABI (Linux `pvclock-abi.h`, the Hyper-V TLFS) and are
//! declared with atomics: the hypervisor writes them behind the compiler's
//! back. `clockhal-x86` re-exports everything public here under
//! `clockhal_x86::paravirt`, so kernels and user programs share one copy of
//! the layouts and of the math.
//!
//! The decoders only ever *load* (relaxed loads plus acquire fences), which
//! Rust allows on memory mapped read-only — the way an OS hands these pages
//! to its processes.

use crate::sync::{fence, AtomicI64, AtomicI8, AtomicU32, AtomicU64, AtomicU8, Ordering};
use crate::tsc::load_after;

/// `pvclock_vcpu_time_info`: one per vCPU, 32 bytes, written by KVM.
///
/// 32-byte alignment keeps an area inside one page, as the ABI requires.
#[repr(C, align(32))]
#[derive(Debug, Default)]
pub struct PvclockVcpuTimeInfo {
    /// Odd while the host updates the area.
    pub version: AtomicU32,
    /// Padding.
    pub pad0: AtomicU32,
    /// TSC value at `system_time`.
    pub tsc_timestamp: AtomicU64,
    /// Nanoseconds at `tsc_timestamp`.
    pub system_time: AtomicU64,
    /// 32.32 fixed-point multiplier from (shifted) TSC ticks to ns.
    pub tsc_to_system_mul: AtomicU32,
    /// Pre-shift of the TSC delta (negative: right shift).
    pub tsc_shift: AtomicI8,
    /// [`PVCLOCK_TSC_STABLE_BIT`] | [`PVCLOCK_GUEST_STOPPED`].
    pub flags: AtomicU8,
    /// Padding.
    pub pad: [AtomicU8; 2],
}

/// `flags` bit: the host guarantees a TSC-stable, cross-vCPU-consistent clock
/// (trust it only when CPUID grants `CLOCKSOURCE_STABLE_BIT`).
pub const PVCLOCK_TSC_STABLE_BIT: u8 = 1 << 0;
/// `flags` bit: the host paused the guest; the guest clears it.
pub const PVCLOCK_GUEST_STOPPED: u8 = 1 << 1;

// The ABI layouts (loom's atomics, for the models only, are larger).
#[cfg(not(loom))]
const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<PvclockVcpuTimeInfo>() == 32);
    assert!(align_of::<PvclockVcpuTimeInfo>() == 32);
    assert!(offset_of!(PvclockVcpuTimeInfo, tsc_timestamp) == 8);
    assert!(offset_of!(PvclockVcpuTimeInfo, system_time) == 16);
    assert!(offset_of!(PvclockVcpuTimeInfo, tsc_to_system_mul) == 24);
    assert!(offset_of!(PvclockVcpuTimeInfo, tsc_shift) == 28);
    assert!(offset_of!(PvclockVcpuTimeInfo, flags) == 29);
};

impl PvclockVcpuTimeInfo {
    /// Writes the area as a KVM host does: version odd while the fields
    /// change, even after (an update left open, odd, is finished rather than
    /// restarted). A guest never writes the area; this is for simulators,
    /// benchmarks and tests that play the host.
    /// Interrupt-safe: yes.
    pub fn publish(&self, tsc_timestamp: u64, system_time: u64, mul: u32, shift: i8, flags: u8) {
        use Ordering::{Release, SeqCst};
        let odd = self.version.load(SeqCst) | 1;
        self.version.store(odd, SeqCst);
        self.tsc_timestamp.store(tsc_timestamp, Release);
        self.system_time.store(system_time, Release);
        self.tsc_to_system_mul.store(mul, Release);
        self.tsc_shift.store(shift, Release);
        self.flags.store(flags, Release);
        self.version.store(odd.wrapping_add(1), SeqCst);
    }

    crate::__clockhal_const_fn! {
        /// A zeroed area (version 0, mul 0: "not yet written").
        /// Interrupt-safe: yes.
        pub fn new() -> Self {
            PvclockVcpuTimeInfo {
                version: AtomicU32::new(0),
                pad0: AtomicU32::new(0),
                tsc_timestamp: AtomicU64::new(0),
                system_time: AtomicU64::new(0),
                tsc_to_system_mul: AtomicU32::new(0),
                tsc_shift: AtomicI8::new(0),
                flags: AtomicU8::new(0),
                pad: [AtomicU8::new(0), AtomicU8::new(0)],
            }
        }
    }
}

/// Hyper-V reference TSC page (one 4 KiB page).
///
/// `time = ((tsc * scale) >> 64) + offset` in 100 ns units while
/// `sequence` is neither 0 nor `0xFFFF_FFFF`.
#[repr(C, align(4096))]
#[derive(Debug)]
pub struct HvReferenceTscPage {
    /// Changes on every update; 0 (or the old 0xFFFFFFFF) = invalid.
    pub sequence: AtomicU32,
    /// Reserved.
    pub reserved0: AtomicU32,
    /// 64.64 fixed-point multiplier.
    pub scale: AtomicU64,
    /// Signed offset in 100 ns units.
    pub offset: AtomicI64,
    /// Rest of the page (reserved).
    pub reserved: [AtomicU64; 509],
}

// The ABI layouts (loom's atomics, for the models only, are larger).
#[cfg(not(loom))]
const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<HvReferenceTscPage>() == 4096);
    assert!(align_of::<HvReferenceTscPage>() == 4096);
    assert!(offset_of!(HvReferenceTscPage, scale) == 8);
    assert!(offset_of!(HvReferenceTscPage, offset) == 16);
};

impl HvReferenceTscPage {
    /// Writes the page as Hyper-V does: sequence 0 (invalid) while `scale`
    /// and `offset` change, then `sequence` (a host picks the next valid
    /// one, e.g. `clockhal_x86::paravirt::hv_next_sequence`). For
    /// simulators, benchmarks and tests that play the host.
    /// Interrupt-safe: yes.
    pub fn publish(&self, sequence: u32, scale: u64, offset: i64) {
        use Ordering::{Release, SeqCst};
        self.sequence.store(0, SeqCst);
        self.scale.store(scale, Release);
        self.offset.store(offset, Release);
        self.sequence.store(sequence, SeqCst);
    }

    crate::__clockhal_const_fn! {
        /// A zeroed (invalid) page.
        /// Interrupt-safe: yes.
        pub fn new() -> Self {
            HvReferenceTscPage {
                sequence: AtomicU32::new(0),
                reserved0: AtomicU32::new(0),
                scale: AtomicU64::new(0),
                offset: AtomicI64::new(0),
                reserved: crate::__clockhal_array![AtomicU64::new(0); 509],
            }
        }
    }
}

impl Default for HvReferenceTscPage {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether a pvclock `(mul, shift)` pair is one a host can have written:
/// `mul != 0` (0 = "not yet written") and `shift` in `-32..=32`.
/// Interrupt-safe: yes.
///
/// ```
/// use clockhal_user::paravirt::pvclock_params_valid;
/// assert!(pvclock_params_valid(1 << 31, -1));
/// assert!(!pvclock_params_valid(0, 0));
/// assert!(!pvclock_params_valid(1 << 31, 40));
/// ```
#[inline(always)]
pub const fn pvclock_params_valid(mul: u32, shift: i8) -> bool {
    mul != 0 && shift >= -32 && shift <= 32
}

/// The exact TSC rate a pvclock area's `tsc_to_system_mul`/`tsc_shift`
/// describe, as `(numerator, denominator)` Hz (feed it to
/// `clockhal_core::Frequency::from_ratio`).
///
/// The area converts `d` ticks to `(d·2^shift · mul) / 2^32` ns, so one tick
/// is `mul·2^shift / 2^32` ns and the rate is `10^9·2^32 / (mul·2^shift)` Hz
/// (FreeBSD's `pvclock_tsc_freq`, kept as a fraction instead of rounded).
///
/// `None` for values no host writes (see [`pvclock_params_valid`]). Both
/// parts stay below 2^95.
/// Interrupt-safe: yes.
///
/// ```
/// use clockhal_user::paravirt::pvclock_tsc_hz_ratio;
/// // A 2 GHz TSC: 0.5 ns per tick = 2^31 / 2^32 with shift 0.
/// let (num, den) = pvclock_tsc_hz_ratio(1 << 31, 0).unwrap();
/// assert_eq!(num / den, 2_000_000_000);
/// assert_eq!(pvclock_tsc_hz_ratio(0, 0), None);
/// assert_eq!(pvclock_tsc_hz_ratio(1 << 31, 40), None);
/// ```
pub const fn pvclock_tsc_hz_ratio(mul: u32, shift: i8) -> Option<(u128, u128)> {
    if !pvclock_params_valid(mul, shift) {
        return None;
    }
    let num = 1_000_000_000u128 << 32;
    if shift >= 0 {
        Some((num, (mul as u128) << shift))
    } else {
        Some((num << -shift, mul as u128))
    }
}

/// Nanoseconds in `delta` TSC ticks for a pvclock `(mul, shift)` pair:
/// `((delta << shift, or >> -shift) * mul) >> 32`.
///
/// The right shift truncates first, exactly as the ABI (and the host's own
/// computation) does. The left shift is computed without the silent 64-bit
/// overflow of a C implementation: the result is exact, and saturates at
/// `u64::MAX` when it does not fit. Defined for every `shift` in `i8`.
/// Interrupt-safe: yes.
///
/// ```
/// use clockhal_user::paravirt::pvclock_scale_delta;
/// // 2.6 GHz as KVM encodes it: shift -1, mul = 2^32 * 1e9 / 1.3e9.
/// let mul = ((1_000_000_000u64 << 32) / 1_300_000_000) as u32;
/// assert_eq!(pvclock_scale_delta(2_600_000_000, mul, -1), 999_999_999);
/// assert_eq!(pvclock_scale_delta(u64::MAX, u32::MAX, 127), u64::MAX);
/// assert_eq!(pvclock_scale_delta(u64::MAX, u32::MAX, -128), 0);
/// ```
#[inline(always)]
pub const fn pvclock_scale_delta(delta: u64, mul: u32, shift: i8) -> u64 {
    if shift <= 0 {
        // The common case (TSCs above ~1 GHz): the product is below 2^96,
        // so `>> 32` always fits and needs no saturation check.
        let s = shift.unsigned_abs() as u32;
        let d = if s >= 64 { 0 } else { delta >> s };
        return ((d as u128 * mul as u128) >> 32) as u64;
    }
    // At most 2^96 before the left shift.
    let p = delta as u128 * mul as u128;
    let up = shift as u32;
    let r = if up <= 32 {
        p >> (32 - up)
    } else {
        let l = up - 32;
        if p != 0 && p.leading_zeros() < l + 64 {
            // p << l would need more than 64 bits: saturate.
            return u64::MAX;
        }
        p << l
    };
    if r > u64::MAX as u128 {
        u64::MAX
    } else {
        r as u64
    }
}

/// Hyper-V reference time runs at 10 MHz (100 ns units).
pub const HV_REFERENCE_HZ: u64 = 10_000_000;

/// Nanoseconds per Hyper-V reference time unit.
pub const HV_NS_PER_UNIT: u64 = 1_000_000_000 / HV_REFERENCE_HZ;

/// Hyper-V reference time from a TSC value and the reference TSC page's
/// `(scale, offset)`: `((tsc * scale) >> 64) + offset` in 100 ns units,
/// wrapping as the TLFS arithmetic does (never overflows or panics).
/// Interrupt-safe: yes.
///
/// ```
/// use clockhal_user::paravirt::hv_scale_tsc;
/// // 2.4 GHz TSC: scale = 2^64 * 10^7 / 2.4e9.
/// let scale = ((10_000_000u128 << 64) / 2_400_000_000) as u64;
/// assert_eq!(hv_scale_tsc(2_400_000_000, scale, 5), 9_999_999 + 5);
/// ```
#[inline(always)]
pub const fn hv_scale_tsc(tsc: u64, scale: u64, offset: i64) -> u64 {
    (((tsc as u128 * scale as u128) >> 64) as u64).wrapping_add(offset as u64)
}

/// Whether a reference TSC page `sequence` marks the page valid: neither 0
/// (current TLFS and Linux) nor `0xFFFF_FFFF` (older TLFS text).
/// Interrupt-safe: yes.
#[inline(always)]
pub const fn hv_sequence_valid(sequence: u32) -> bool {
    sequence != 0 && sequence != u32::MAX
}

/// Whether a reference TSC page `scale` can describe a running clock
/// (0 would stop it at `offset`).
/// Interrupt-safe: yes.
#[inline(always)]
pub const fn hv_scale_valid(scale: u64) -> bool {
    scale != 0
}

/// The TSC rate a reference TSC page `scale` implies, as an exact fraction
/// `(numerator, denominator)` in Hz: `10^7 * 2^64 / scale`. `None` for a
/// zero scale.
/// Interrupt-safe: yes.
pub const fn hv_tsc_hz_from_scale(scale: u64) -> Option<(u128, u128)> {
    if !hv_scale_valid(scale) {
        return None;
    }
    Some(((HV_REFERENCE_HZ as u128) << 64, scale as u128))
}

/// How many samples a decoder takes of a page whose version/sequence is odd
/// or changes under it before giving up. A host update takes well under a
/// microsecond; 64 attempts with a `pause` between them last a few
/// microseconds, so a stuck host cannot hang a reader.
pub const PAGE_READ_ATTEMPTS: u32 = 64;

/// Why a hypervisor page gave no time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageFault {
    /// pvclock: `tsc_to_system_mul` is 0 (the host has not written it).
    PvclockNotWritten,
    /// pvclock: `tsc_shift` outside -32..=32.
    PvclockShiftOutOfRange(i8),
    /// pvclock: the host does not (or no longer) set the TSC-stable flag,
    /// so readings on different CPUs may disagree.
    PvclockNotStable,
    /// pvclock: version odd or changing for [`PAGE_READ_ATTEMPTS`] samples.
    PvclockBusy,
    /// Hyper-V: sequence 0 or `0xFFFFFFFF` (page invalid, e.g. during a
    /// migration).
    HvInvalidSequence,
    /// Hyper-V: scale 0.
    HvZeroScale,
    /// Hyper-V: sequence changing for [`PAGE_READ_ATTEMPTS`] samples.
    HvBusy,
}

/// One consistent copy of a pvclock area and a TSC value read inside its
/// seqlock window ([`PvclockVcpuTimeInfo::try_sample`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PvclockSample {
    /// The (even) version the copy was read under.
    pub version: u32,
    /// TSC value at `system_time`.
    pub tsc_timestamp: u64,
    /// Nanoseconds at `tsc_timestamp`.
    pub system_time: u64,
    /// 32.32 multiplier.
    pub mul: u32,
    /// Pre-shift.
    pub shift: i8,
    /// Flags.
    pub flags: u8,
    /// The TSC value read inside the window.
    pub tsc: u64,
}

impl PvclockVcpuTimeInfo {
    /// One seqlock attempt: `None` if the version was odd or changed.
    /// `rdtsc` runs between the two version loads (an ordered read, so it
    /// cannot run before the first); the re-check's address depends on
    /// the TSC value, so it cannot run before the TSC read either. Relaxed
    /// loads and explicit fences: the area may be a read-only mapping (a
    /// vDSO page), where Rust only guarantees relaxed loads.
    /// Interrupt-safe: yes.
    #[inline(always)]
    pub fn try_sample(&self, rdtsc: &mut impl FnMut() -> u64) -> Option<PvclockSample> {
        use Ordering::{Acquire, Relaxed};
        let version = self.version.load(Relaxed);
        fence(Acquire);
        if version & 1 != 0 {
            return None;
        }
        let tsc_timestamp = self.tsc_timestamp.load(Relaxed);
        let system_time = self.system_time.load(Relaxed);
        let mul = self.tsc_to_system_mul.load(Relaxed);
        let shift = self.tsc_shift.load(Relaxed);
        let flags = self.flags.load(Relaxed);
        let tsc = rdtsc();
        // Field loads above must complete before the version re-check.
        // (`clockhal_loom_mutant`: the fence removed; the loom models must
        // then find a torn read.)
        #[cfg(not(clockhal_loom_mutant))]
        fence(Acquire);
        if load_after(&self.version, tsc) != version {
            return None;
        }
        Some(PvclockSample {
            version,
            tsc_timestamp,
            system_time,
            mul,
            shift,
            flags,
            tsc,
        })
    }
}

/// Host nanoseconds from a pvclock area, requiring the stable flag: the
/// seqlock read (bounded), the checks of the kernel's read path, exact
/// scaling. `rdtsc` runs between the version loads and must be ordered.
///
/// A TSC behind the area's timestamp counts as no time elapsed; the sum
/// saturates (as the kernel's kvmclock backend computes it).
#[inline(always)]
pub(crate) fn pvclock_ns(
    area: &PvclockVcpuTimeInfo,
    rdtsc: &mut impl FnMut() -> u64,
) -> Result<u64, PageFault> {
    for _ in 0..PAGE_READ_ATTEMPTS {
        if let Some(s) = area.try_sample(rdtsc) {
            if s.mul == 0 {
                return Err(PageFault::PvclockNotWritten);
            }
            if !pvclock_params_valid(s.mul, s.shift) {
                return Err(PageFault::PvclockShiftOutOfRange(s.shift));
            }
            if s.flags & PVCLOCK_TSC_STABLE_BIT == 0 {
                return Err(PageFault::PvclockNotStable);
            }
            let delta = s.tsc.saturating_sub(s.tsc_timestamp);
            return Ok(s
                .system_time
                .saturating_add(pvclock_scale_delta(delta, s.mul, s.shift)));
        }
        core::hint::spin_loop();
    }
    Err(PageFault::PvclockBusy)
}

/// One consistent copy of a Hyper-V reference page and a TSC value read
/// inside its window ([`HvReferenceTscPage::try_sample`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HvSample {
    /// The (valid) sequence the copy was read under.
    pub sequence: u32,
    /// 64.64 scale.
    pub scale: u64,
    /// Offset, 100 ns units.
    pub offset: i64,
    /// The TSC value read inside the window.
    pub tsc: u64,
}

/// What one seqlock attempt on a Hyper-V page found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HvAttempt {
    /// A consistent copy.
    Value(HvSample),
    /// The page holds no usable value (sequence 0 or `0xFFFFFFFF`).
    Invalid,
    /// The sequence changed while reading: try again.
    Changed,
}

impl HvReferenceTscPage {
    /// One seqlock attempt; `rdtsc` (ordered) runs between the two
    /// sequence loads, and the re-check's address depends on its value.
    /// Relaxed loads and explicit fences: the page may be mapped read-only
    /// (a user-space reader), where Rust only guarantees relaxed loads.
    /// Interrupt-safe: yes.
    #[inline(always)]
    pub fn try_sample(&self, rdtsc: &mut impl FnMut() -> u64) -> HvAttempt {
        use Ordering::{Acquire, Relaxed};
        let sequence = self.sequence.load(Relaxed);
        fence(Acquire);
        if !hv_sequence_valid(sequence) {
            return HvAttempt::Invalid;
        }
        let scale = self.scale.load(Relaxed);
        let offset = self.offset.load(Relaxed);
        let tsc = rdtsc();
        // The field loads complete before the sequence re-check
        // (`clockhal_loom_mutant`: removed; the loom models must then fail).
        #[cfg(not(clockhal_loom_mutant))]
        fence(Acquire);
        if load_after(&self.sequence, tsc) != sequence {
            return HvAttempt::Changed;
        }
        HvAttempt::Value(HvSample {
            sequence,
            scale,
            offset,
            tsc,
        })
    }
}

/// Hyper-V reference time (100 ns units) from a reference TSC page: the
/// sequence read (bounded) and the checks of the kernel's read path.
#[inline(always)]
pub(crate) fn hv_units(
    page: &HvReferenceTscPage,
    rdtsc: &mut impl FnMut() -> u64,
) -> Result<u64, PageFault> {
    for _ in 0..PAGE_READ_ATTEMPTS {
        match page.try_sample(rdtsc) {
            HvAttempt::Invalid => return Err(PageFault::HvInvalidSequence),
            HvAttempt::Value(s) if !hv_scale_valid(s.scale) => return Err(PageFault::HvZeroScale),
            HvAttempt::Value(s) => return Ok(hv_scale_tsc(s.tsc, s.scale, s.offset)),
            HvAttempt::Changed => core::hint::spin_loop(),
        }
    }
    Err(PageFault::HvBusy)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference: the mathematically exact value, in a wide integer
    /// emulated with (hi, lo) u128 pairs where needed.
    fn reference(delta: u64, mul: u32, shift: i8) -> u64 {
        let d: u128 = if shift < 0 {
            let s = -(shift as i32);
            if s >= 64 {
                0
            } else {
                (delta >> s) as u128
            }
        } else {
            delta as u128
        };
        let p = d * mul as u128;
        if shift <= 0 {
            return (p >> 32) as u64;
        }
        // p * 2^shift / 2^32; compare bit lengths to detect overflow.
        let bits = 128 - p.leading_zeros() as i32;
        if p == 0 {
            return 0;
        }
        if bits + shift as i32 - 32 > 64 {
            return u64::MAX;
        }
        if shift as i32 >= 32 {
            (p << (shift as i32 - 32)) as u64
        } else {
            (p >> (32 - shift as i32)) as u64
        }
    }

    #[test]
    fn every_shift_matches_reference() {
        let deltas = [
            0u64,
            1,
            2,
            1000,
            2_600_000_000,
            1 << 32,
            (1 << 40) + 12345,
            u64::MAX >> 1,
            u64::MAX,
        ];
        let muls = [0u32, 1, 3, 1 << 31, 0xC4EC_4EC4, u32::MAX];
        for shift in i8::MIN..=i8::MAX {
            for &d in &deltas {
                for &m in &muls {
                    assert_eq!(
                        pvclock_scale_delta(d, m, shift),
                        reference(d, m, shift),
                        "d={d} m={m} s={shift}"
                    );
                }
            }
        }
    }

    #[test]
    fn hyperv_math_is_total() {
        for (t, s, o) in [
            (u64::MAX, u64::MAX, i64::MIN),
            (0, 0, i64::MAX),
            (u64::MAX, 1, -1),
        ] {
            let _ = hv_scale_tsc(t, s, o);
        }
        assert_eq!(hv_scale_tsc(10, 0, -1), u64::MAX);
        assert!(!hv_sequence_valid(0) && !hv_sequence_valid(u32::MAX) && hv_sequence_valid(7));
        assert_eq!(hv_tsc_hz_from_scale(0), None);
        assert!(!hv_scale_valid(0) && hv_scale_valid(1));
    }

    #[test]
    fn pvclock_validity_is_the_shift_window_and_a_written_mul() {
        for shift in i8::MIN..=i8::MAX {
            assert_eq!(
                pvclock_params_valid(1, shift),
                (-32..=32).contains(&shift),
                "{shift}"
            );
            assert!(!pvclock_params_valid(0, shift));
        }
    }

    #[test]
    fn decoders_apply_the_kernels_checks() {
        let area = PvclockVcpuTimeInfo::new();
        let mut tsc = || 3_000u64;
        assert_eq!(
            pvclock_ns(&area, &mut tsc),
            Err(PageFault::PvclockNotWritten)
        );
        area.publish(1_000, 5_000, 1 << 31, 40, PVCLOCK_TSC_STABLE_BIT);
        assert_eq!(
            pvclock_ns(&area, &mut tsc),
            Err(PageFault::PvclockShiftOutOfRange(40))
        );
        area.publish(1_000, 5_000, 1 << 31, 0, 0);
        assert_eq!(
            pvclock_ns(&area, &mut tsc),
            Err(PageFault::PvclockNotStable)
        );
        area.publish(1_000, 5_000, 1 << 31, 0, PVCLOCK_TSC_STABLE_BIT);
        assert_eq!(pvclock_ns(&area, &mut tsc), Ok(5_000 + 1_000));
        // A TSC behind the timestamp: no time elapsed, never a wrap.
        assert_eq!(pvclock_ns(&area, &mut || 10), Ok(5_000));
        area.version.store(7, Ordering::Relaxed); // stuck mid-update
        assert_eq!(pvclock_ns(&area, &mut tsc), Err(PageFault::PvclockBusy));

        let page = HvReferenceTscPage::new();
        assert_eq!(hv_units(&page, &mut tsc), Err(PageFault::HvInvalidSequence));
        page.publish(u32::MAX, 1 << 63, 0);
        assert_eq!(hv_units(&page, &mut tsc), Err(PageFault::HvInvalidSequence));
        page.publish(3, 0, 0);
        assert_eq!(hv_units(&page, &mut tsc), Err(PageFault::HvZeroScale));
        page.publish(4, 1 << 63, -10);
        assert_eq!(hv_units(&page, &mut tsc), Ok(1_490));
        // The sequence changes under every sample: bounded, then Busy.
        let mut n = 0u32;
        let mut bumping = || {
            n += 1;
            page.sequence.store(5 + n, Ordering::Relaxed);
            0
        };
        assert_eq!(hv_units(&page, &mut bumping), Err(PageFault::HvBusy));
        assert_eq!(n, PAGE_READ_ATTEMPTS);
    }
}
