//! clockhal facade (see README). Filled in by the facade work.
#![no_std]
pub use clockhal_core as core_api;
