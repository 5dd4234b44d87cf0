//! The run-time tunables a `Clock` takes from its `Platform`.

use clockhal_core::{Duration, WatchdogConfig};
#[cfg(feature = "kvmclock")]
use clockhal_x86::paravirt::{KvmStealTime, PhysMapped};

/// The run-time tunables of a `Clock` (from the `Platform`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settings {
    /// Steal-time memory, registered when the clock is built.
    pub(crate) steal: StealSetup,
    pub(crate) watchdog: WatchdogConfig,
    /// A supervised TSC stays current only this long after the last
    /// watchdog tick.
    pub(crate) supervision_timeout: Duration,
    /// Readings beyond the last verified instant plus this are checked
    /// against an independent reference before being returned.
    pub(crate) max_jump: Duration,
    /// Resolution of the global clamp.
    pub(crate) clamp_granule: clockhal_core::ClampGranule,
}

impl Settings {
    pub(crate) fn from_platform(p: &crate::Platform<'_>) -> Settings {
        Settings {
            steal: StealSetup::from_platform(p),
            watchdog: p.watchdog,
            supervision_timeout: p.supervision_timeout,
            max_jump: p.max_jump,
            clamp_granule: p.clamp_granule,
        }
    }
}

/// What the platform gave for steal time.
#[cfg(feature = "kvmclock")]
#[derive(Clone, Copy, Debug)]
pub(crate) struct StealSetup {
    pub(crate) areas: Option<(
        PhysMapped<[KvmStealTime]>,
        &'static clockhal_kvmclock::StealState,
    )>,
    /// The pvclock areas' physical range (the two must not overlap).
    pub(crate) pvclock: Option<(u64, u64)>,
}

#[cfg(feature = "kvmclock")]
impl StealSetup {
    fn from_platform(p: &crate::Platform<'_>) -> StealSetup {
        StealSetup {
            areas: p.steal,
            pvclock: p.pvclock_areas.map(|a| phys_range(a.phys(), a.len(), 32)),
        }
    }
}

/// Steal time needs the `kvmclock` feature.
#[cfg(not(feature = "kvmclock"))]
#[derive(Clone, Copy, Debug)]
pub(crate) struct StealSetup;

#[cfg(not(feature = "kvmclock"))]
impl StealSetup {
    fn from_platform(_: &crate::Platform<'_>) -> StealSetup {
        StealSetup
    }
}

/// The physical range of `len` areas of `size` bytes from `phys`.
#[cfg(feature = "kvmclock")]
pub(crate) fn phys_range(phys: u64, len: usize, size: u64) -> (u64, u64) {
    (phys, phys.saturating_add((len as u64).saturating_mul(size)))
}
