//! The run-time tunables a `Clock` takes from its `Platform`.

use clockhal_core::{Duration, WatchdogConfig};

/// The run-time tunables of a `Clock` (from the `Platform`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Settings {
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
            watchdog: p.watchdog,
            supervision_timeout: p.supervision_timeout,
            max_jump: p.max_jump,
            clamp_granule: p.clamp_granule,
        }
    }
}
