//! What the OS tells clockhal about itself.

use crate::Duration;

/// Whether this guest may be live-migrated to another host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Migration {
    /// The guest may move to a host with another TSC rate (the safe default):
    /// migration-safe paravirtual clocks outrank the raw TSC.
    #[default]
    May,
    /// The OS promises it will not be migrated (or that the TSC is scaled in
    /// hardware): an invariant, synchronised, exactly-rated TSC may outrank
    /// paravirtual clocks.
    WillNot,
}

/// The OS's choices that affect probing and ranking.
///
/// ```
/// use clockhal_core::{Duration, Migration, Policy};
/// let p = Policy::new()
///     .migration(Migration::WillNot)
///     .calibration_budget(Duration::from_millis(20));
/// assert_eq!(p.migration, Migration::WillNot);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct Policy {
    /// Live-migration stance (default [`Migration::May`]).
    pub migration: Migration,
    /// Longest time the TSC calibration may spin (default 50 ms).
    pub calibration_budget: Duration,
    /// Force the source with this name regardless of rating (for
    /// experiments); `None` selects automatically.
    pub force: Option<&'static str>,
}

impl Default for Policy {
    fn default() -> Self {
        Policy::new()
    }
}

impl Policy {
    /// The defaults: may migrate, 50 ms calibration, automatic selection.
    /// Interrupt-safe: yes.
    pub const fn new() -> Policy {
        Policy {
            migration: Migration::May,
            calibration_budget: Duration::from_millis(50),
            force: None,
        }
    }
    /// Sets the migration stance.
    /// Interrupt-safe: yes.
    pub const fn migration(mut self, m: Migration) -> Policy {
        self.migration = m;
        self
    }
    /// Sets the calibration budget.
    /// Interrupt-safe: yes.
    pub const fn calibration_budget(mut self, d: Duration) -> Policy {
        self.calibration_budget = d;
        self
    }
    /// Forces a source by name.
    /// Interrupt-safe: yes.
    pub const fn force(mut self, name: &'static str) -> Policy {
        self.force = Some(name);
        self
    }
}
