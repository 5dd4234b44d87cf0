//! The atomics the page layouts use: `core`'s, or loom's under `cfg(loom)`,
//! so that the loom models of clockhal-kvmclock and clockhal-hyperv check
//! the real host writers (`publish`) against the real readers. (Not part of
//! the API: clockhal-x86 shares it.)

#[cfg(loom)]
pub use loom::sync::atomic::*;

#[cfg(not(loom))]
pub use core::sync::atomic::*;

/// `const fn` normally; a plain `fn` under loom, whose atomics cannot be
/// created in const context.
#[doc(hidden)]
#[macro_export]
macro_rules! __clockhal_const_fn {
    ($(#[$m:meta])* $vis:vis fn $($rest:tt)*) => {
        #[cfg(not(loom))]
        $(#[$m])* $vis const fn $($rest)*
        #[cfg(loom)]
        $(#[$m])* $vis fn $($rest)*
    };
}

/// `[$e; $n]` for a non-`Copy` `$e` (atomics): `[const { $e }; $n]`
/// normally, built element by element under loom.
#[doc(hidden)]
#[macro_export]
macro_rules! __clockhal_array {
    ($e:expr; $n:expr) => {{
        #[cfg(not(loom))]
        let a = [const { $e }; $n];
        #[cfg(loom)]
        let a = core::array::from_fn(|_| $e);
        a
    }};
}
