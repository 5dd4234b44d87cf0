//! # clockhal-bench
//!
//! Host tool (std, Linux x86_64, not published): measures what one clock
//! read costs through clockhal's backends next to `rdtsc`, the vDSO, `std`,
//! `quanta` and `minstant` (`cargo run -p clockhal-bench --release`, see
//! `bench/README.md`), and holds the helpers its live tests use to check the
//! kvmclock read path against the kernel's real pvclock page.
//!
//! - [`host`]: CLOCK_MONOTONIC_RAW, CPU pinning, and TSC calibration
//!   against CLOCK_MONOTONIC_RAW.
//! - [`measure`]: batched timing and the median/min/max statistics.
//! - [`report`]: the human table and `read-cost.json`.
//! - [`support`]: helpers of the criterion benches in `benches/`.

pub mod host;
pub mod hw;
pub mod measure;
pub mod report;
pub mod support;
