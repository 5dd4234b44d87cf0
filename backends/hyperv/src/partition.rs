//! Probing a Hyper-V partition: identity, page, MSR, TSC rate.

use crate::{read_reference_page, HypervError, HypervMsrClock, HypervPageClock, PageError};
use clockhal_core::{Frequency, Policy};
use clockhal_x86::cpuid::{self, HypervFeatures};
use clockhal_x86::paravirt::{
    hv_disable_reference_tsc, hv_enable_reference_tsc, hv_set_guest_os_id, HvReferenceTscPage,
    PhysMapped,
};
use clockhal_x86::{Hardware, Msr};

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

/// The guest OS identity clockhal writes when the OS gives none and the MSR
/// reads 0, in the TLFS encoding for open-source OSes:
///
/// | bits | field | value |
/// |---|---|---|
/// | 63 | open source | 1 |
/// | 62:56 | OS type | 0: none of the allocated types (Linux 1, FreeBSD 2, Xen 3, Illumos 4) — clockhal claims no one else's |
/// | 55:48 | OS ID | 0 |
/// | 47:16 | version | clockhal's version as `major << 16 \| minor << 8 \| patch` |
/// | 15:0 | build | 0 |
///
/// For clockhal 0.1.0 that is `0x8000_0000_0100_0000`. An OS with its own
/// identity passes it in [`HypervConfig::guest_os_id`].
pub const DEFAULT_GUEST_OS_ID: u64 = {
    let major = parse_u64(env!("CARGO_PKG_VERSION_MAJOR"));
    let minor = parse_u64(env!("CARGO_PKG_VERSION_MINOR"));
    let patch = parse_u64(env!("CARGO_PKG_VERSION_PATCH"));
    let version = (major & 0xFF) << 16 | (minor & 0xFF) << 8 | (patch & 0xFF);
    1 << 63 | version << 16
};

/// What the OS hands to [`Hyperv::probe`].
#[derive(Clone, Copy, Debug, Default)]
pub struct HypervConfig {
    /// A 4 KiB page for the reference TSC page; `None`: MSR only.
    pub tsc_page: Option<PhysMapped<HvReferenceTscPage>>,
    /// The guest OS identity to write if the MSR reads 0; `None`:
    /// [`DEFAULT_GUEST_OS_ID`]. Never written over a non-zero value (the OS
    /// or its loader already identified itself).
    pub guest_os_id: Option<u64>,
}

impl HypervConfig {
    /// MSR only, default identity.
    pub const fn new() -> Self {
        HypervConfig {
            tsc_page: None,
            guest_os_id: None,
        }
    }

    /// Offers a page for the reference TSC page.
    pub const fn with_tsc_page(mut self, page: PhysMapped<HvReferenceTscPage>) -> Self {
        self.tsc_page = Some(page);
        self
    }

    /// Sets the guest OS identity to write if the MSR reads 0.
    pub const fn with_guest_os_id(mut self, id: u64) -> Self {
        self.guest_os_id = Some(id);
        self
    }
}

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
    /// Finds Hyper-V, identifies the guest OS if nobody has, enables and
    /// checks the reference TSC page when offered and given, and reads the
    /// TSC frequency MSR when offered.
    ///
    /// The page is checked right after enabling: its sequence must be valid,
    /// its scale non-zero, and (with TIME_REF_COUNT) its reading within
    /// [`PAGE_TOLERANCE`] of the MSR; otherwise it is disabled again and the
    /// reason is kept in [`page_error`](Self::page_error). `policy` does not
    /// change the ratings; it is taken for uniformity with other backends.
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
        let wanted_id = config.guest_os_id.unwrap_or(DEFAULT_GUEST_OS_ID);
        if wanted_id == 0 {
            return Err(HypervError::InvalidGuestOsId);
        }
        // "Hv#1" promises the guest OS ID MSR; the TLFS: write it if it is 0.
        let mut guest_os_id = hw.rdmsr(Msr::HV_GUEST_OS_ID);
        if guest_os_id == 0 {
            hv_set_guest_os_id(&hw, wanted_id);
            guest_os_id = wanted_id;
        }
        let tsc_hz = features
            .frequency_msrs()
            .then(|| Frequency::from_hz(hw.rdmsr(Msr::HV_TSC_FREQUENCY)).ok())
            .flatten();

        let msr = HypervMsrClock::new(hw);
        let page = match (features.reference_tsc(), config.tsc_page) {
            (false, _) => Err(PageError::NotOffered),
            (true, None) => Err(PageError::NoMemory),
            (true, Some(page)) => enable_page(&msr.hw, page, time_ref_count).map(|()| page),
        };
        let (clocks, page_error) = match page {
            Ok(page) => (
                Clocks::Page(HypervPageClock::new(msr, page, time_ref_count)),
                None,
            ),
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
    pub fn page(&self) -> Option<&HypervPageClock<H>> {
        match &self.clocks {
            Clocks::Page(p) => Some(p),
            Clocks::MsrOnly(_) => None,
        }
    }

    /// The "hyperv-msr" clock, if TIME_REF_COUNT is offered.
    pub fn msr(&self) -> Option<&HypervMsrClock<H>> {
        match &self.clocks {
            Clocks::Page(p) if self.time_ref_count => Some(&p.msr),
            Clocks::Page(_) => None,
            Clocks::MsrOnly(m) => Some(m),
        }
    }

    /// Why there is no page clock (`None` when there is one).
    pub fn page_error(&self) -> Option<PageError> {
        self.page_error
    }

    /// The exact TSC rate from MSR 0x40000022, read at probe time when the
    /// frequency MSRs are offered (CPUID 0x40000003 EAX bit 11 and EDX bit
    /// 8); for the TSC backend.
    pub fn tsc_frequency(&self) -> Option<Frequency> {
        self.tsc_hz
    }

    /// The partition's feature words.
    pub fn features(&self) -> HypervFeatures {
        self.features
    }

    /// The guest OS identity in effect (the one found, or the one written).
    pub fn guest_os_id(&self) -> u64 {
        self.guest_os_id
    }

    /// Disables the page (if enabled) and drops the clocks (same as `drop`).
    pub fn shutdown(self) {
        drop(self)
    }
}

/// Enables the page and checks it; disables it again if it is unusable.
fn enable_page<H: Hardware>(
    hw: &H,
    page: PhysMapped<HvReferenceTscPage>,
    time_ref_count: bool,
) -> Result<(), PageError> {
    hv_enable_reference_tsc(hw, page).map_err(|_| PageError::Misaligned)?;
    let checked = check_page(hw, page.get(), time_ref_count);
    if checked.is_err() {
        hv_disable_reference_tsc(hw);
    }
    checked
}

/// The page must read sanely and, when the MSR exists, agree with it.
fn check_page<H: Hardware>(
    hw: &H,
    page: &HvReferenceTscPage,
    time_ref_count: bool,
) -> Result<(), PageError> {
    let before = read_reference_page(page, || hw.rdtsc_ordered())?;
    if !time_ref_count {
        return Ok(());
    }
    let msr = hw.rdmsr(Msr::HV_TIME_REF_COUNT);
    let after = read_reference_page(page, || hw.rdtsc_ordered())?;
    // before <= msr <= after, up to the tolerance (wrapping-safe).
    if before > msr.saturating_add(PAGE_TOLERANCE) || msr > after.saturating_add(PAGE_TOLERANCE) {
        return Err(PageError::Disagrees { page: before, msr });
    }
    Ok(())
}
