//! The reference TSC page: decoding it, and the "hyperv-page" clock.

use crate::sync::{
    fence, AtomicU64,
    Ordering::{Acquire, Relaxed},
};
use crate::{HypervMsrClock, PageError, HV_RATE};
use clockhal_core::{ClockSource, Frequency, Quality, ReadCost, Stability};
use clockhal_x86::paravirt::{
    hv_disable_reference_tsc, hv_scale_tsc, hv_sequence_valid, HvReferenceTscPage, PhysMapped,
};
use clockhal_x86::Hardware;

/// How many times a read samples a page whose sequence changes under it
/// before falling back to TIME_REF_COUNT (or holding).
pub const MAX_READ_ATTEMPTS: u32 = 64;

/// "hyperv-page" rating: no exit per read, migration-safe.
pub const PAGE_QUALITY: Quality = Quality::new(450);

/// What the page clock guarantees (the guard keeps it monotonic across CPUs
/// and across page/MSR switches). It stops while the partition is saved, so
/// not `COUNTS_WHILE_PAUSED`.
pub const PAGE_STABILITY: Stability = Stability::MONOTONIC_PER_CPU
    .union(Stability::MONOTONIC_ACROSS_CPUS)
    .union(Stability::INVARIANT_RATE)
    .union(Stability::SURVIVES_MIGRATION);

/// One sampling attempt of the page.
enum Attempt {
    /// A consistent reading, in 100 ns units.
    Value(u64),
    /// The page holds no usable value (sequence invalid, scale 0).
    Unusable(PageError),
    /// The sequence changed while reading: try again.
    Changed,
}

/// One seqlock attempt; `rdtsc` runs between the two sequence loads.
#[inline(always)]
fn try_read(page: &HvReferenceTscPage, rdtsc: &mut impl FnMut() -> u64) -> Attempt {
    let seq = page.sequence.load(Acquire);
    if !hv_sequence_valid(seq) {
        return Attempt::Unusable(PageError::Invalid);
    }
    let scale = page.scale.load(Relaxed);
    let offset = page.offset.load(Relaxed);
    let tsc = rdtsc();
    // The field loads complete before the sequence re-check
    // (`clockhal_loom_mutant`: removed; the loom model must then fail).
    #[cfg(not(clockhal_loom_mutant))]
    fence(Acquire);
    if page.sequence.load(Relaxed) != seq {
        return Attempt::Changed;
    }
    if scale == 0 {
        return Attempt::Unusable(PageError::ZeroScale);
    }
    Attempt::Value(hv_scale_tsc(tsc, scale, offset))
}

/// Reads any reference TSC page: `((tsc * scale) >> 64) + offset` in 100 ns
/// units, under the sequence check (bounded retries). Read-only.
///
/// Errors: [`PageError::Invalid`] (sequence 0 or `0xFFFFFFFF`: read
/// TIME_REF_COUNT instead), [`PageError::ZeroScale`], [`PageError::Busy`].
/// Hostile scales and offsets give a defined (wrapping) value, never a panic.
///
/// ```
/// use clockhal_hyperv::read_reference_page;
/// use clockhal_x86::paravirt::HvReferenceTscPage;
/// use core::sync::atomic::Ordering::Relaxed;
/// let page = HvReferenceTscPage::new();
/// page.scale.store(1 << 63, Relaxed); // half a unit per tick
/// page.offset.store(-10, Relaxed);
/// page.sequence.store(1, Relaxed);
/// assert_eq!(read_reference_page(&page, || 1_000), Ok(490));
/// ```
pub fn read_reference_page(
    page: &HvReferenceTscPage,
    mut rdtsc: impl FnMut() -> u64,
) -> Result<u64, PageError> {
    for _ in 0..MAX_READ_ATTEMPTS {
        match try_read(page, &mut rdtsc) {
            Attempt::Value(v) => return Ok(v),
            Attempt::Unusable(e) => return Err(e),
            Attempt::Changed => core::hint::spin_loop(),
        }
    }
    Err(PageError::Busy)
}

/// Counters of page reads that did not come from the page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PageStats {
    /// Reads served by TIME_REF_COUNT (page invalid, scale 0, or sequence
    /// changing for [`MAX_READ_ATTEMPTS`] samples).
    pub msr_fallbacks: u64,
    /// Reads that could use neither page nor MSR and returned the held value.
    pub held_reads: u64,
    /// Samples retried because the sequence changed.
    pub retries: u64,
}

/// The "hyperv-page" clock: the reference TSC page, 10 MHz.
///
/// Reads cost `rdtsc` and three loads; while the host marks the page invalid
/// (sequence 0, e.g. around a live migration) a read takes TIME_REF_COUNT
/// instead (one exit). Both paths share one never-backwards guard with the
/// "hyperv-msr" clock, so switching between them never steps back.
///
/// Dropping it disables the page (partition-wide).
#[derive(Debug)]
pub struct HypervPageClock<H: Hardware> {
    pub(crate) msr: HypervMsrClock<H>,
    page: PhysMapped<HvReferenceTscPage>,
    msr_fallback: bool,
    msr_fallbacks: AtomicU64,
    held_reads: AtomicU64,
    retries: AtomicU64,
}

impl<H: Hardware> HypervPageClock<H> {
    /// A clock over an enabled, checked page. `msr_fallback`: whether
    /// TIME_REF_COUNT may be read when the page is invalid.
    pub(crate) fn new(
        msr: HypervMsrClock<H>,
        page: PhysMapped<HvReferenceTscPage>,
        msr_fallback: bool,
    ) -> Self {
        HypervPageClock {
            msr,
            page,
            msr_fallback,
            msr_fallbacks: AtomicU64::new(0),
            held_reads: AtomicU64::new(0),
            retries: AtomicU64::new(0),
        }
    }

    /// Reference time in 100 ns units: never earlier than any value either
    /// Hyper-V clock returned before. Bounded.
    #[inline]
    pub fn read_100ns(&self) -> u64 {
        let page = self.page.get();
        let hw = &self.msr.hw;
        for _ in 0..MAX_READ_ATTEMPTS {
            match try_read(page, &mut || hw.rdtsc_ordered()) {
                Attempt::Value(v) => return self.msr.guard.fast(v),
                Attempt::Unusable(_) => return self.fallback(),
                Attempt::Changed => {
                    self.retries.fetch_add(1, Relaxed);
                    core::hint::spin_loop();
                }
            }
        }
        self.fallback()
    }

    /// TIME_REF_COUNT when offered (one exit), else the held value.
    #[cold]
    fn fallback(&self) -> u64 {
        if self.msr_fallback {
            self.msr_fallbacks.fetch_add(1, Relaxed);
            self.msr.read_100ns()
        } else {
            self.held_reads.fetch_add(1, Relaxed);
            self.msr.guard.hold()
        }
    }

    /// Counters of reads that did not come from the page.
    pub fn stats(&self) -> PageStats {
        PageStats {
            msr_fallbacks: self.msr_fallbacks.load(Relaxed),
            held_reads: self.held_reads.load(Relaxed),
            retries: self.retries.load(Relaxed),
        }
    }

    /// Readings raised to keep time from going backwards, shared with the
    /// MSR clock.
    pub fn raised_count(&self) -> u64 {
        self.msr.guard.raised_count()
    }

    /// The page's memory.
    pub fn page(&self) -> &'static HvReferenceTscPage {
        self.page.get()
    }
}

impl<H: Hardware> Drop for HypervPageClock<H> {
    fn drop(&mut self) {
        hv_disable_reference_tsc(&self.msr.hw);
    }
}

impl<H: Hardware> ClockSource for HypervPageClock<H> {
    fn name(&self) -> &'static str {
        "hyperv-page"
    }
    #[inline]
    fn read(&self) -> u64 {
        self.read_100ns()
    }
    fn frequency(&self) -> Frequency {
        HV_RATE
    }
    fn quality(&self) -> Quality {
        PAGE_QUALITY
    }
    fn stability(&self) -> Stability {
        PAGE_STABILITY
    }
    fn read_cost(&self) -> ReadCost {
        ReadCost::NoTrap
    }
}
