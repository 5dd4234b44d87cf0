//! # clockhal-linux
//!
//! clockhal's Linux user-space pieces, kept out of the crates every kernel
//! links:
//!
//! - [`live_pvclock`] and [`live_tsc_rate`]: the live KVM pvclock page that
//!   Linux maps into every process for its vDSO, and the exact TSC rate it
//!   implies;
//! - [`HostedHw`] and [`OsClock`]: the hardware of a process (the real TSC
//!   and CPUID, no MSRs or ports) and its `CLOCK_MONOTONIC_RAW`, on which
//!   `clockhal::hosted` runs the ordinary probe.
//!
//! Like the hardware seam, this crate holds `unsafe` (reading the vDSO page,
//! one system call to test that it is readable); each use says why it is
//! sound.

mod hosted;
mod pvclock;

pub use hosted::{HostedHw, OsClock};
pub use pvclock::*;
