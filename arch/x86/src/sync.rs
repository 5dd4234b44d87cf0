//! The atomics this crate uses: `core`'s, or loom's under `cfg(loom)`, so
//! that the loom models of clockhal-kvmclock and clockhal-hyperv check the
//! real host writers (`publish`) against the real readers.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::*;

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::*;

/// `const fn` normally; a plain `fn` under loom, whose atomics cannot be
/// created in const context.
macro_rules! const_fn {
    ($(#[$m:meta])* $vis:vis fn $($rest:tt)*) => {
        #[cfg(not(loom))]
        $(#[$m])* $vis const fn $($rest)*
        #[cfg(loom)]
        $(#[$m])* $vis fn $($rest)*
    };
}
pub(crate) use const_fn;

/// `[$e; $n]` for a non-`Copy` `$e` (atomics): `[const { $e }; $n]`
/// normally, built element by element under loom.
macro_rules! array {
    ($e:expr; $n:expr) => {{
        #[cfg(not(loom))]
        let a = [const { $e }; $n];
        #[cfg(loom)]
        let a = core::array::from_fn(|_| $e);
        a
    }};
}
pub(crate) use array;
