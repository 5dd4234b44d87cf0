//! # clockhal-bench
//!
//! Host tool (std, Linux x86_64, not published): measures what one clock
//! read costs through clockhal's backends and `Clock::now()` next to
//! `rdtsc`, the vDSO, `std`, `quanta` and `minstant`, in time and in
//! instructions (`cargo run -p clockhal-bench --release`, see
//! `bench/README.md`), checks clockhal's fast paths against their
//! instruction budgets (`clockhal-read-count --check`), and holds the
//! helpers its live tests use to check the kvmclock read path against the
//! kernel's real pvclock page.
//!
//! - [`host`]: CLOCK_MONOTONIC_RAW, CPU pinning, and TSC calibration
//!   against CLOCK_MONOTONIC_RAW.
//! - [`hw`]: the user-space stand-in for a hypervisor the rows probe on.
//! - [`rows`]: every measured operation.
//! - [`lean`]: the least a checked read costs (issue 27's reference rows).
//! - [`measure`]: batched timing and the median/min/max statistics.
//! - [`count`]: instructions per read, counted by valgrind's callgrind.
//! - [`budget`]: the instruction budgets and their check.
//! - [`report`]: the human table, the Markdown table and `read-cost.json`.

pub mod budget;
pub mod count;
pub mod host;
pub mod hw;
pub mod lean;
pub mod measure;
pub mod report;
pub mod rows;
