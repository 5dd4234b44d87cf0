#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![no_std]
#![forbid(unsafe_code)]

mod area;
mod clock;
mod error;
mod registry;
mod steal;
mod sync;
mod wall;

pub use area::{area_tsc_frequency, read_area, PvclockError, PvclockTime, MAX_READ_ATTEMPTS};
pub use clock::{
    AreaMap, Kvmclock, KvmclockConfig, KvmclockStats, ReadMiss, RATING, REVALIDATE_NS, STABILITY,
    STABLE_AGREEMENT_NS,
};
pub use error::KvmclockError;
pub use registry::MAX_CPUS;
pub use steal::{StealError, StealState, StealStats, StealTime, STEAL_MAX_CPUS};
pub use wall::WallClock;
