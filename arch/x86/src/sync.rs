//! The atomics this crate uses: `core`'s, or loom's under `cfg(loom)` (the
//! shim lives in clockhal-user, whose page layouts need it too).

#[allow(unused_imports)]
pub(crate) use clockhal_user::sync::*;
pub(crate) use clockhal_user::{__clockhal_array as array, __clockhal_const_fn as const_fn};
