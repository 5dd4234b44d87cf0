//! What the kernel offers for the steal-time check.

use core::fmt;

/// The calling CPU's steal time (KVM's `MSR_KVM_STEAL_TIME`), as the OS
/// reads it: implemented for clockhal's `Clock` (feature `clockhal`), or
/// by a kernel over its own reader.
///
/// ```
/// use clockhal_conformance::StealTime;
/// use core::fmt;
/// /// A machine without steal time.
/// struct None_;
/// impl StealTime for None_ {
///     fn steal_ns(&self, why: &mut dyn fmt::Write) -> Option<u64> {
///         let _ = why.write_str("not a KVM guest");
///         None
///     }
/// }
/// ```
pub trait StealTime {
    /// Steal time of the calling CPU in ns (any origin: the check uses
    /// differences), or `None` after writing why there is none to `why`.
    ///
    /// Interrupt-safe: as the implementation's reader (the suite calls it from its own loop).
    fn steal_ns(&self, why: &mut dyn fmt::Write) -> Option<u64>;
}
