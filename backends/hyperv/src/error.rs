//! Why Hyper-V reference time (or its TSC page) is unusable.

use core::fmt;

/// Why [`Hyperv::probe`](crate::Hyperv::probe) failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum HypervError {
    /// CPUID.1:ECX bit 31 is clear: not running under a hypervisor.
    NoHypervisor,
    /// No "Microsoft Hv" signature at any hypervisor CPUID base.
    NoHypervSignature,
    /// The signature is there but not the "Hv#1" interface (or its feature
    /// leaf 0x40000003).
    NoHvInterface,
    /// The partition offers neither TIME_REF_COUNT nor the reference TSC page.
    NoTimeSource,
    /// The OS asked for guest OS ID 0, which the TLFS reserves.
    InvalidGuestOsId,
    /// An MSR that CPUID promises raised #GP (the partition's CPUID lied).
    MsrFault(clockhal_x86::Msr),
    /// Only the page is offered (no TIME_REF_COUNT) and it is unusable.
    Page(PageError),
}

impl fmt::Display for HypervError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HypervError::NoHypervisor => f.write_str("no hypervisor (CPUID.1:ECX[31] clear)"),
            HypervError::NoHypervSignature => f.write_str("no \"Microsoft Hv\" signature"),
            HypervError::NoHvInterface => f.write_str("no \"Hv#1\" interface"),
            HypervError::NoTimeSource => {
                f.write_str("neither TIME_REF_COUNT nor the reference TSC page offered")
            }
            HypervError::InvalidGuestOsId => f.write_str("guest OS ID 0 is reserved"),
            HypervError::MsrFault(m) => write!(f, "{m:?} raised #GP although CPUID offers it"),
            HypervError::Page(e) => write!(f, "reference TSC page only, and unusable: {e}"),
        }
    }
}

/// Why the reference TSC page is not used (or a page read found no value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PageError {
    /// CPUID does not offer the reference TSC page.
    NotOffered,
    /// The OS passed no page.
    NoMemory,
    /// The page's guest-physical address is not 4 KiB aligned, or the page
    /// is simulated memory offered to real hardware.
    Refused(clockhal_x86::paravirt::RegisterError),
    /// The guest OS ID is 0 and the OS did not let clockhal set one
    /// ([`HypervConfig::guest_os_id`](crate::HypervConfig::guest_os_id)):
    /// the TLFS wants it set before the page is enabled.
    NoGuestOsId,
    /// The sequence is 0 (or the old `0xFFFFFFFF`): the host marks the page
    /// invalid (briefly around migration, or for good on some hosts).
    Invalid,
    /// The scale is 0: every reading would be the bare offset.
    ZeroScale,
    /// After enabling, the page disagreed with TIME_REF_COUNT by more than
    /// [`PAGE_TOLERANCE`](crate::PAGE_TOLERANCE) (100 ns units).
    Disagrees {
        /// Page reading.
        page: u64,
        /// TIME_REF_COUNT reading.
        msr: u64,
    },
    /// The page's parameters were never plausible (see
    /// `clockhal_core::judge_update`).
    Implausible(clockhal_core::UpdateFault),
    /// The sequence kept changing for
    /// [`MAX_READ_ATTEMPTS`](crate::MAX_READ_ATTEMPTS) samples.
    Busy,
}

impl fmt::Display for PageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PageError::NotOffered => f.write_str("reference TSC page not offered"),
            PageError::NoMemory => f.write_str("no page given"),
            PageError::Refused(e) => write!(f, "page refused: {e}"),
            PageError::NoGuestOsId => f.write_str("guest OS ID is 0 and clockhal may not set one"),
            PageError::Invalid => f.write_str("page invalid (sequence 0)"),
            PageError::ZeroScale => f.write_str("page scale is 0"),
            PageError::Disagrees { page, msr } => {
                write!(f, "page ({page}) disagrees with TIME_REF_COUNT ({msr})")
            }
            PageError::Busy => f.write_str("page sequence kept changing"),
            PageError::Implausible(u) => write!(f, "implausible page parameters ({u:?})"),
        }
    }
}

impl core::error::Error for HypervError {}

impl core::error::Error for PageError {}
