#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod hosted;
mod pvclock;

pub use hosted::{HostedHw, OsClock};
pub use pvclock::*;
