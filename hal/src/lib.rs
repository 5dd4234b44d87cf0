//! # clockhal-core
//!
//! The hardware-free half of clockhal: what a clock *is* ([`ClockSource`]),
//! how its ticks become nanoseconds exactly ([`Frequency`], [`Scale`]), how a
//! narrow counter is widened ([`WrapExtender`]), how a source that may step
//! back across CPUs is kept monotonic ([`MonotonicClamp`], and
//! [`MonotonicGuard`] for clocks with a trusted fast path), the nanosecond
//! timeline ([`Instant`], [`Duration`]), and how sources are ranked
//! ([`select`]) and cross-checked at run time ([`Watchdog`]).
//!
//! This crate contains no `unsafe` and touches no hardware; backends live in
//! their own crates and implement [`ClockSource`].
//!
//! ```
//! use clockhal_core::{Frequency, Scale};
//! // HPET with the classic 69,841,279 fs period, kept exact.
//! let f = Frequency::from_period_fs(69_841_279).unwrap();
//! let scale = Scale::new(f);
//! // 14,318,180 ticks of 69.841279 ns are 1.000000004 s, exactly.
//! assert_eq!(scale.ticks_to_ns_exact(14_318_180), 1_000_000_004);
//! ```
#![no_std]
#![forbid(unsafe_code)]

#[cfg(test)]
extern crate std;

mod bracket;
mod cell;
mod clamp;
mod extend;
mod frequency;
#[cfg(target_has_atomic = "64")]
mod guard;
mod map;
mod policy;
mod scale;
pub mod select;
#[cfg(target_has_atomic = "64")]
mod slot;
mod source;
mod sync;
mod time;
mod update;
mod watchdog;

pub use bracket::{ppm, Bracketed};
#[cfg(target_has_atomic = "64")]
pub use cell::AtomicCell;
pub use cell::{Cell64, CriticalSectionCell, DefaultCell};
pub use clamp::MonotonicClamp;
pub use extend::WrapExtender;
pub use frequency::{Frequency, FrequencyError};
#[cfg(target_has_atomic = "64")]
pub use guard::MonotonicGuard;
pub use map::TscMap;
pub use policy::{Migration, Policy};
pub use scale::Scale;
#[cfg(target_has_atomic = "64")]
pub use slot::{CachedRead, MapSlot, PerCpuSlots, SlotEntry, PER_CPU_SLOTS};
pub use source::{ClockSource, Quality, ReadCost, Stability};
pub use time::{Duration, DurationOverflow, Instant};
pub use update::{judge_update, UpdateBounds, UpdateFault, UpdateVerdict};
pub use watchdog::{
    CounterDomain, Fault, Judgement, Member, MemberVerdict, Outcome, Round, Watchdog,
    WatchdogConfig, MAX_MEMBERS,
};
