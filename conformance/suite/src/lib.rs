//! # clockhal-conformance
//!
//! A `no_std`, allocation-free conformance suite for [`ClockSource`]s, that
//! any kernel can link and run on any machine (clockhal's QEMU test kernel,
//! your own OS, or a host test over the simulated machine).
//!
//! You give it:
//! - the sources to check (`&[&dyn ClockSource]`) and a **reference** to time
//!   them against, normally one of them: prefer a fixed-rate device that does
//!   not depend on the TSC (HPET, then the ACPI PM timer);
//! - a **cycle counter** (`&dyn Fn() -> u64`, usually `rdtsc`) for read costs;
//! - optionally a way to **wait** ([`Suite::wait_with`]; otherwise it spins on
//!   the reference), a **second-CPU runner** ([`Cpus`], for the warp test) and
//!   the **name of the selected source** ([`Suite::selected`]);
//! - a [`Sink`] that receives one [`CheckResult`] per check and source.
//!
//! The checks ([`Check`]), each with a measured value:
//!
//! | check | value | passes when |
//! |---|---|---|
//! | `monotonic` | worst backward step, ns | no read of many consecutive ones went back |
//! | `resolution` | smallest nonzero step, ns | the source advances, in steps <= [`config::RESOLUTION_LIMIT_NS`] |
//! | `read-cost` | median cycles per read | <= [`config::READ_COST_LIMIT_CYCLES`] |
//! | `rate` | median error vs the reference, ppm (detail: measured vs claimed Hz) | 3 of 5 intervals within [`config::RATE_TOLERANCE_PPM`] |
//! | `agreement` | median deviation from the median of all sources, ppm | 3 of 5 intervals within [`config::AGREEMENT_TOLERANCE_PPM`] |
//! | `wrap` (software-extended sources only) | error over >= 1 wrap, ppm | no step back, within tolerance; skipped if a wrap exceeds [`config::WRAP_BUDGET`] |
//! | `cross-cpu` | worst warp, ns | no backward step between CPUs; skipped on one CPU |
//! | `selected` | selected source's read cost, cycles | it passed everything and is the fastest passing source (within [`config::SELECTION_COST_MARGIN_PERCENT`]) or outranks it by [`clockhal_core::select`]'s documented ranking |
//!
//! Timing checks never trust one sample: every timestamp is bracketed by two
//! reference reads (tightest of three brackets kept), and verdicts need a
//! majority of intervals, because a vCPU can be descheduled mid-interval.
//!
//! [`line`](mod@line) defines the text format the test kernel prints and the matrix
//! runner parses. With the `clockhal` feature, [`probed`] runs the suite over
//! what a clockhal probe found and writes its `SOURCE` lines.
//!
//! ## Worked example
//!
//! A hosted run over two software clocks, one of them 2% fast, which must
//! fail `rate` and `agreement`:
//!
//! ```
//! use clockhal_conformance::{Check, CheckResult, Config, Status, Suite};
//! use clockhal_core::{ClockSource, Frequency, Quality, ReadCost, Stability};
//! use std::time::Instant;
//!
//! /// Nanoseconds since `start`, optionally claiming a wrong frequency.
//! struct Ns { name: &'static str, start: Instant, claimed_hz: u64 }
//! impl ClockSource for Ns {
//!     fn name(&self) -> &'static str { self.name }
//!     fn read(&self) -> u64 { self.start.elapsed().as_nanos() as u64 }
//!     fn frequency(&self) -> Frequency { Frequency::from_hz(self.claimed_hz).unwrap() }
//!     fn quality(&self) -> Quality { Quality::new(300) }
//!     fn stability(&self) -> Stability { Stability::MONOTONIC_PER_CPU }
//!     fn read_cost(&self) -> ReadCost { ReadCost::NoTrap }
//! }
//!
//! let start = Instant::now();
//! let good = Ns { name: "good", start, claimed_hz: 1_000_000_000 };
//! // Ticks at 1 GHz but claims 980 MHz: its nanoseconds run 2% fast.
//! let fast = Ns { name: "fast", start, claimed_hz: 980_000_000 };
//! let sources: [&dyn ClockSource; 2] = [&good, &fast];
//! let cycles = || start.elapsed().as_nanos() as u64; // stands in for rdtsc
//!
//! let mut failures = Vec::new();
//! let summary = Suite::new(&sources, &good, &cycles)
//!     .config(Config::quick())
//!     .selected(Some("good"))
//!     .run(&mut |r: &CheckResult<'_>| {
//!         println!("{r}");
//!         if r.status == Status::Fail {
//!             failures.push((r.source.to_string(), r.check));
//!         }
//!     });
//! assert!(failures.contains(&("fast".into(), Check::Rate)));
//! assert!(failures.contains(&("fast".into(), Check::Agreement)));
//! assert!(failures.iter().all(|(s, _)| s == "fast"));
//! println!("{summary}"); // "N passed, 2 failed, M skipped"
//! ```
//!
//! In a kernel, `cycles` is `|| hw.rdtsc()`, the sink prints
//! [`line::write_check`] lines, and [`Cpus`] starts work on a second CPU.
#![no_std]
#![forbid(unsafe_code)]

#[cfg(test)]
extern crate std;

mod checks;
pub mod config;
mod cpus;
pub mod line;
mod math;
#[cfg(feature = "clockhal")]
pub mod probed;
mod result;
mod suite;

pub use clockhal_core::ClockSource;
pub use config::Config;
pub use cpus::Cpus;
pub use result::{Check, CheckResult, Sink, Status, Summary, Value, DETAIL_CAPACITY};
pub use suite::Suite;
