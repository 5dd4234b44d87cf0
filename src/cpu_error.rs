//! Why a per-CPU lifecycle step failed.

use core::fmt;

/// Why a per-CPU lifecycle step failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CpuError {
    /// kvmclock refused this CPU (its index is taken by another CPU, has no
    /// area, or the host did not fill it).
    #[cfg(feature = "kvmclock")]
    Kvmclock(clockhal_kvmclock::KvmclockError),
    /// KVM steal time refused this CPU (its index is taken by another CPU,
    /// has no area, or the host left the area odd).
    #[cfg(feature = "kvmclock")]
    StealTime(clockhal_kvmclock::StealError),
    /// This CPU's `IA32_TSC_ADJUST` differs from the boot CPU's: the TSCs
    /// are out of step by `difference` ticks (the TSC is no longer
    /// auto-selected).
    TscAdjust {
        /// |this CPU's TSC_ADJUST - the boot CPU's|.
        difference: u64,
    },
}

impl fmt::Display for CpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            #[cfg(feature = "kvmclock")]
            CpuError::Kvmclock(e) => write!(f, "kvmclock: {e}"),
            #[cfg(feature = "kvmclock")]
            CpuError::StealTime(e) => write!(f, "steal time: {e}"),
            CpuError::TscAdjust { difference } => {
                write!(
                    f,
                    "IA32_TSC_ADJUST differs from the boot CPU's by {difference}"
                )
            }
        }
    }
}

impl core::error::Error for CpuError {}
