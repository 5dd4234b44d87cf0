//! How the clock reads a TSC-based source: its token and validated map
//! per CPU (implemented by the probe's adapters, read by `clock::read`).

use crate::SourceId;
use clockhal_core::TscMap;

/// A validated map of a TSC-based source now.
pub(crate) struct MapNow {
    /// The source's token it is valid for.
    pub(crate) tag: u32,
    /// TSC ticks to the source's own nanoseconds.
    pub(crate) map: TscMap,
    /// The source orders readings across CPUs itself.
    pub(crate) ordered: bool,
    /// The TSC value sampled with it.
    pub(crate) tsc: u64,
}

/// A TSC-based source as the clock reads it.
pub(crate) trait Mapped {
    /// The source's current token for `cpu` (one load), `None` if it has
    /// none (no area).
    fn tag(&self, cpu: usize) -> Option<u32>;
    /// Its validated map now (the backend judges new parameters);
    /// `returned`: the highest value the clock gave from the source's
    /// earlier parameters, in the source's nanoseconds (`None`: not known
    /// here), so that new parameters are a step back only against it.
    fn map_now(&self, cpu: usize, returned: Option<u64>) -> Option<MapNow>;
    /// Whether the source serves CPU `cpu` at all (a kvmclock area is
    /// registered for it): a CPU it does not serve holds without counting
    /// against the source.
    fn serves(&self, _cpu: usize) -> bool {
        true
    }
    /// The best value without a map, in the source's own nanoseconds (the
    /// Hyper-V page's MSR fallback), if any.
    fn fallback_ns(&self, cpu: usize) -> Option<u64>;
    /// The source whose counter [`fallback_ns`](Self::fallback_ns) reads:
    /// it cannot vouch for its own readings in the jump check.
    const FALLBACK_ORIGIN: Option<SourceId> = None;
}
