#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![no_std]
#![forbid(unsafe_code)]

#[cfg(test)]
extern crate std;

mod checks;
pub mod config;
mod cpus;
pub mod line;
mod math;
mod pause;
#[cfg(feature = "clockhal")]
pub mod probed;
mod result;
mod steal;
mod suite;
mod timer;

pub use clockhal_core::ClockSource;
pub use config::Config;
pub use cpus::Cpus;
pub use pause::{PauseClock, PauseHost, PauseTick};
pub use result::{Check, CheckResult, Sink, Status, Summary, Value, DETAIL_CAPACITY};
pub use steal::StealTime;
pub use suite::Suite;
pub use timer::{Deliveries, TimerSlot, TimerUnderTest, Timers, TIMER_DEVICES};
