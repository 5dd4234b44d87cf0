#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![no_std]
#![forbid(unsafe_code)]

#[cfg(test)]
extern crate std;

mod bracket;
mod cell;
mod clamp;
pub mod consensus;
mod extend;
mod frequency;
#[cfg(feature = "fugit")]
mod fugit_types;
#[cfg(target_has_atomic = "64")]
mod map;
mod policy;
mod scale;
pub mod select;
#[cfg(target_has_atomic = "64")]
mod slot;
mod source;
mod sync;
mod time;
pub mod timeline;
pub mod timer;
mod update;
mod watchdog;

pub use bracket::{ppm, Bracketed};
#[cfg(target_has_atomic = "64")]
pub use cell::AtomicCell;
pub use cell::{Cell64, CriticalSectionCell, DefaultCell};
pub use clamp::{ClampGranule, MonotonicClamp};
pub use consensus::{decide, Consensus, Decision, Vote};
pub use extend::{Estimate, Extended, Placement, WrapExtender};
pub use frequency::{Frequency, FrequencyError};
#[cfg(feature = "fugit")]
pub use fugit_types::{FugitDuration, FugitInstant};
#[cfg(target_has_atomic = "64")]
pub use map::TscMap;
pub use policy::{Migration, Policy};
pub use scale::Scale;
#[cfg(target_has_atomic = "64")]
pub use slot::{
    CachedRead, MapSlot, PerCpuSlots, SlotEntry, SlotPool, SlotSet, PER_CPU_SLOTS, REVALIDATE_NS,
    SLOT_SETS,
};
pub use source::{ClockSource, Quality, ReadCost, Stability};
pub use time::{Duration, DurationOverflow, Instant};
pub use timeline::{
    DynTscSource, LastMap, MapMiss, MapNow, ReadHw, ReadState, Standalone, Timeline, TimelineOwner,
    TscSource,
};
pub use update::{
    judge_update, judge_update_after, UpdateBounds, UpdateFault, UpdateJudge, UpdateVerdict,
};
pub use watchdog::{
    CounterDomain, Fault, Judgement, Member, MemberVerdict, Outcome, Round, Watchdog,
    WatchdogConfig, MAX_MEMBERS,
};
