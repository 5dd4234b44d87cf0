//! The atomics this crate uses: `core`'s, or loom's under `cfg(loom)`, so
//! that the loom models (`tests/loom_*.rs`) check the real code.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::*;

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::*;

/// The per-CPU slots' atomics (`slot.rs`, and the floor [`ReadHw`] raises):
/// loom's only under `cfg(loom)` *and* `cfg(clockhal_loom_slots)`, for the
/// read loop's model (`tests/loom_timeline.rs`, built with clockhal-core
/// alone). Every other loom build (kvmclock's, Hyper-V's) compiles crates
/// whose `ReadHw` and `static` pools need core's atomics and `const` slots.
///
/// [`ReadHw`]: crate::ReadHw
pub(crate) mod slots {
    #[cfg(all(loom, clockhal_loom_slots))]
    pub(crate) use loom::sync::atomic::*;

    #[cfg(not(all(loom, clockhal_loom_slots)))]
    pub(crate) use core::sync::atomic::*;
}

/// `const fn` items that are plain `fn`s where [`slots`] are loom's (loom's
/// atomics have no `const` constructor).
macro_rules! slots_const_fn {
    ($(#[$m:meta])* $vis:vis const fn $name:ident() -> $ret:ty $body:block) => {
        #[cfg(not(all(loom, clockhal_loom_slots)))]
        $(#[$m])* $vis const fn $name() -> $ret $body
        #[cfg(all(loom, clockhal_loom_slots))]
        $(#[$m])* $vis fn $name() -> $ret $body
    };
}
pub(crate) use slots_const_fn;
