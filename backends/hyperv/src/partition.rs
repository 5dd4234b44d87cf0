//! Probing a Hyper-V partition: identity, page, MSR, TSC rate.

use crate::page::scaled_sample;
use crate::{read_reference_page, HypervError, HypervMsrClock, HypervPageClock, PageError};
use clockhal_core::{Frequency, Policy, TscMap, UpdateBounds};
use clockhal_x86::cpuid::{self, HypervFeatures};
use clockhal_x86::paravirt::{
    hv_disable_reference_tsc, hv_enable_reference_tsc, hv_scale_tsc, hv_set_guest_os_id,
    HvReferenceTscPage, PhysMapped,
};
use clockhal_x86::{rdmsr_checked, Hardware, Msr};

/// How far (in 100 ns units, i.e. 1 ms) the page may disagree with
/// TIME_REF_COUNT when it is checked after enabling.
pub const PAGE_TOLERANCE: u64 = 10_000;

const fn parse_u64(s: &str) -> u64 {
    let b = s.as_bytes();
    let mut v = 0u64;
    let mut i = 0;
    while i < b.len() {
        v = v * 10 + (b[i] - b'0') as u64;
        i += 1;
    }
    v
}

/// A guest OS identity an OS without its own may pass to
/// [`HypervConfig::with_guest_os_id`], in the TLFS encoding for open-source
/// OSes:
///
/// | bits | field | value |
/// |---|---|---|
/// | 63 | open source | 1 |
/// | 62:56 | OS type | 0: none of the allocated types (Linux 1, FreeBSD 2, Xen 3, Illumos 4) — clockhal claims no one else's |
/// | 55:48 | OS ID | 0 |
/// | 47:16 | version | clockhal's version as `major << 16 \| minor << 8 \| patch` |
/// | 15:0 | build | 0 |
///
/// For clockhal 0.1.0 that is `0x8000_0000_0100_0000`. clockhal writes an
/// identity only when the OS asks it to.
pub const DEFAULT_GUEST_OS_ID: u64 = {
    let major = parse_u64(env!("CARGO_PKG_VERSION_MAJOR"));
    let minor = parse_u64(env!("CARGO_PKG_VERSION_MINOR"));
    let patch = parse_u64(env!("CARGO_PKG_VERSION_PATCH"));
    let version = (major & 0xFF) << 16 | (minor & 0xFF) << 8 | (patch & 0xFF);
    1 << 63 | version << 16
};

/// What the OS hands to [`Hyperv::probe`].
#[derive(Clone, Copy, Debug, Default)]
#[non_exhaustive]
pub struct HypervConfig {
    /// A 4 KiB page for the reference TSC page; `None`: MSR only.
    pub tsc_page: Option<PhysMapped<HvReferenceTscPage>>,
    /// The guest OS identity clockhal may write if the MSR reads 0 (opt-in:
    /// identifying the OS is the OS's decision). `None`: never write it;
    /// with an identity of 0 the page is then not enabled
    /// ([`PageError::NoGuestOsId`]) and only TIME_REF_COUNT is used. Never
    /// written over a non-zero value (the OS or its loader already
    /// identified itself).
    pub guest_os_id: Option<u64>,
    /// What a host update of the page may do before it is not believed.
    pub bounds: UpdateBounds,
}

impl HypervConfig {
    /// MSR only, no identity written.
    /// Interrupt-safe: yes.
    pub const fn new() -> Self {
        HypervConfig {
            tsc_page: None,
            guest_os_id: None,
            bounds: UpdateBounds::new(),
        }
    }

    /// Offers a page for the reference TSC page.
    /// Interrupt-safe: yes.
    pub const fn with_tsc_page(mut self, page: PhysMapped<HvReferenceTscPage>) -> Self {
        self.tsc_page = Some(page);
        self
    }

    /// Lets clockhal write this guest OS identity if the MSR reads 0
    /// ([`DEFAULT_GUEST_OS_ID`] is one an OS without its own may use).
    /// Interrupt-safe: yes.
    pub const fn with_guest_os_id(mut self, id: u64) -> Self {
        self.guest_os_id = Some(id);
        self
    }

    /// Sets the update bounds.
    /// Interrupt-safe: yes.
    pub const fn with_bounds(mut self, bounds: UpdateBounds) -> Self {
        self.bounds = bounds;
        self
    }
}

// One per partition, built once at probe; no allocator to box the page
// clock (its per-CPU-line-aligned update record makes it the larger one).
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Clocks<H: Hardware> {
    /// The page clock, with the MSR clock inside it.
    Page(HypervPageClock<H>),
    /// No usable page: the MSR clock alone.
    MsrOnly(HypervMsrClock<H>),
}

/// Hyper-V reference time on one partition: the "hyperv-page" and
/// "hyperv-msr" clocks, whichever the partition offers, and the TSC rate.
#[derive(Debug)]
pub struct Hyperv<H: Hardware> {
    clocks: Clocks<H>,
    features: HypervFeatures,
    time_ref_count: bool,
    page_error: Option<PageError>,
    tsc_hz: Option<Frequency>,
    guest_os_id: u64,
}

impl<H: Hardware> Hyperv<H> {
    /// Finds Hyper-V, identifies the guest OS if nobody has and the OS
    /// allowed it, enables and checks the reference TSC page when offered
    /// and given, and reads the TSC frequency MSR when offered. Every MSR
    /// that CPUID promises is read with [`rdmsr_checked`]: where the OS can
    /// recover from a #GP, a partition whose CPUID lies gives
    /// [`HypervError::MsrFault`] instead of a crash.
    ///
    /// The page is checked right after enabling: its sequence must be valid,
    /// its scale non-zero, and (with TIME_REF_COUNT) its reading within
    /// [`PAGE_TOLERANCE`] of the MSR; otherwise it is disabled again and the
    /// reason is kept in [`page_error`](Self::page_error). `policy` does not
    /// change the ratings; it is taken for uniformity with other backends.
    /// Interrupt-safe: no (one-time probe: busy-waits for ms).
    pub fn probe(hw: H, config: HypervConfig, policy: &Policy) -> Result<Self, HypervError> {
        let _ = policy;
        if !cpuid::hypervisor_present(&hw) {
            return Err(HypervError::NoHypervisor);
        }
        cpuid::find_hypervisor(&hw, cpuid::HYPERV_SIGNATURE)
            .ok_or(HypervError::NoHypervSignature)?;
        let (_, features) = cpuid::hyperv(&hw).ok_or(HypervError::NoHvInterface)?;
        let time_ref_count = features.time_ref_count();
        if !time_ref_count && !features.reference_tsc() {
            return Err(HypervError::NoTimeSource);
        }
        if config.guest_os_id == Some(0) {
            return Err(HypervError::InvalidGuestOsId);
        }
        let checked = |msr| rdmsr_checked(&hw, msr).ok_or(HypervError::MsrFault(msr));
        // "Hv#1" promises the guest OS ID MSR; the TLFS: write it if it is 0.
        let mut guest_os_id = checked(Msr::HV_GUEST_OS_ID)?;
        if guest_os_id == 0 {
            if let Some(id) = config.guest_os_id {
                hv_set_guest_os_id(&hw, id);
                guest_os_id = id;
            }
        }
        if time_ref_count {
            checked(Msr::HV_TIME_REF_COUNT)?;
        }
        let tsc_hz = if features.frequency_msrs() {
            Frequency::from_hz(checked(Msr::HV_TSC_FREQUENCY)?).ok()
        } else {
            None
        };

        let msr = HypervMsrClock::new(hw);
        let page = match (features.reference_tsc(), config.tsc_page) {
            (false, _) => Err(PageError::NotOffered),
            (true, None) => Err(PageError::NoMemory),
            (true, Some(_)) if guest_os_id == 0 => Err(PageError::NoGuestOsId),
            (true, Some(page)) => enable_page(&msr.hw, page, time_ref_count).map(|m| (page, m)),
        };
        let (clocks, page_error) = match page {
            Ok((page, probe_map)) => {
                match HypervPageClock::new(msr, page, time_ref_count, probe_map, config.bounds) {
                    Ok(clock) => (Clocks::Page(clock), None),
                    Err(msr) => {
                        hv_disable_reference_tsc(&msr.hw);
                        if !time_ref_count {
                            return Err(HypervError::Page(PageError::NoPerCpuMemory));
                        }
                        (Clocks::MsrOnly(msr), Some(PageError::NoPerCpuMemory))
                    }
                }
            }
            Err(e) if time_ref_count => (Clocks::MsrOnly(msr), Some(e)),
            Err(e) => return Err(HypervError::Page(e)),
        };
        Ok(Hyperv {
            clocks,
            features,
            time_ref_count,
            page_error,
            tsc_hz,
            guest_os_id,
        })
    }

    /// The "hyperv-page" clock, if the page is offered, given and sane.
    /// Interrupt-safe: yes.
    pub fn page(&self) -> Option<&HypervPageClock<H>> {
        match &self.clocks {
            Clocks::Page(p) => Some(p),
            Clocks::MsrOnly(_) => None,
        }
    }

    /// The "hyperv-msr" clock, if TIME_REF_COUNT is offered.
    /// Interrupt-safe: yes.
    pub fn msr(&self) -> Option<&HypervMsrClock<H>> {
        match &self.clocks {
            Clocks::Page(p) if self.time_ref_count => Some(&p.msr),
            Clocks::Page(_) => None,
            Clocks::MsrOnly(m) => Some(m),
        }
    }

    /// Why there is no page clock (`None` when there is one).
    /// Interrupt-safe: yes.
    pub fn page_error(&self) -> Option<PageError> {
        self.page_error
    }

    /// The exact TSC rate from MSR 0x40000022, read at probe time when the
    /// frequency MSRs are offered (CPUID 0x40000003 EAX bit 11 and EDX bit
    /// 8); for the TSC backend.
    /// Interrupt-safe: yes.
    pub fn tsc_frequency(&self) -> Option<Frequency> {
        self.tsc_hz
    }

    /// The partition's feature words.
    /// Interrupt-safe: yes.
    pub fn features(&self) -> HypervFeatures {
        self.features
    }

    /// The guest OS identity in effect (the one found, or the one written).
    /// Interrupt-safe: yes.
    pub fn guest_os_id(&self) -> u64 {
        self.guest_os_id
    }

    /// After a restore: the host forgot the page registration. Enables the
    /// page again (if one is in use) and forgets the continuity of its
    /// parameters and the clocks' floors (the restored partition's
    /// reference time may lie before the old one; a `Clock` on top rebases
    /// its own timeline).
    /// Interrupt-safe: no (a per-CPU lifecycle step).
    pub fn resume(&self) {
        match &self.clocks {
            Clocks::Page(p) => {
                let _ =
                    clockhal_x86::paravirt::hv_enable_reference_tsc(&p.msr.hw, p.page_mapping());
                p.reset_monotonic();
            }
            Clocks::MsrOnly(m) => m.reset_monotonic(),
        }
    }

    /// Disables the page (if enabled) and drops the clocks (same as `drop`).
    /// Interrupt-safe: no (a per-CPU lifecycle step).
    pub fn shutdown(self) {
        drop(self)
    }
}

/// Enables the page and checks it; disables it again if it is unusable.
/// Returns the page's map at probe time (the rate later updates are judged
/// against).
fn enable_page<H: Hardware>(
    hw: &H,
    page: PhysMapped<HvReferenceTscPage>,
    time_ref_count: bool,
) -> Result<TscMap, PageError> {
    hv_enable_reference_tsc(hw, page).map_err(PageError::Refused)?;
    let checked = check_page(hw, page.get(), time_ref_count);
    if checked.is_err() {
        hv_disable_reference_tsc(hw);
    }
    checked
}

/// The page must read sanely and, when the MSR exists, agree with it.
/// Returns the map of the (consistent) parameters it read first.
fn check_page<H: Hardware>(
    hw: &H,
    page: &HvReferenceTscPage,
    time_ref_count: bool,
) -> Result<TscMap, PageError> {
    let first = scaled_sample(page, || hw.rdtsc_ordered())?;
    let map = TscMap::hyperv(first.scale, first.offset);
    if !time_ref_count {
        return Ok(map);
    }
    let before = hv_scale_tsc(first.tsc, first.scale, first.offset);
    let msr = rdmsr_checked(hw, Msr::HV_TIME_REF_COUNT).ok_or(PageError::Invalid)?;
    let after = read_reference_page(page, || hw.rdtsc_ordered())?;
    // before <= msr <= after, up to the tolerance (wrapping-safe).
    if before > msr.saturating_add(PAGE_TOLERANCE) || msr > after.saturating_add(PAGE_TOLERANCE) {
        return Err(PageError::Disagrees { page: before, msr });
    }
    Ok(map)
}
