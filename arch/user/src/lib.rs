#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod abi;
pub mod paravirt;
mod reader;
#[doc(hidden)]
pub mod sync;
mod tsc;
mod writer;

pub use abi::{AskReason, ClockPage, WindowLayout};
pub use reader::{
    tsc_map, tsc_map_scaled, AskKernel, ClockReader, PageError, Reading, Source, TscScale,
    UserClock, READ_ATTEMPTS,
};
pub use tsc::TscRead;
pub use writer::{
    tsc_mul, ClockPageWriter, PageSource, PageUpdate, Publication, PublishError, Published,
};
