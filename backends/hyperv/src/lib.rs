#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![no_std]
#![forbid(unsafe_code)]

mod error;
mod msr;
mod page;
mod partition;
pub mod stimer;
mod sync;

pub use error::{HypervError, PageError};
pub use msr::{HypervMsrClock, MSR_RATING, MSR_STABILITY};
pub use page::{
    read_reference_page, HypervPageClock, PageMap, PageStats, MAX_READ_ATTEMPTS, PAGE_RATING,
    PAGE_STABILITY, REVALIDATE_NS,
};
pub use partition::{Hyperv, HypervConfig, DEFAULT_GUEST_OS_ID, PAGE_TOLERANCE};

use clockhal_core::Frequency;

/// Hyper-V reference time ticks: 10 MHz (100 ns).
const HV_RATE: Frequency = match Frequency::from_hz(clockhal_x86::paravirt::HV_REFERENCE_HZ) {
    Ok(f) => f,
    Err(_) => panic!("10 MHz is a valid rate"),
};
