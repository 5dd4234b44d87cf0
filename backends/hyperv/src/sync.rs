//! The atomics this crate uses: `core`'s, or loom's under `cfg(loom)`, so
//! that the loom models (`tests/loom_*.rs`) check the real code.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::*;

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::*;
