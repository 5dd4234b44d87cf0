//! The checks, one module each (monotonic and resolution share a loop,
//! rate and agreement share their measurement).

pub(crate) mod cost;
pub(crate) mod monotonic;
pub(crate) mod pause;
pub(crate) mod rate;
pub(crate) mod selection;
pub(crate) mod steal;
pub(crate) mod timer;
pub(crate) mod warp;
pub(crate) mod wrap;
