//! # clockhal-hyperv
//!
//! Hyper-V reference time (TLFS "Timers"): a 10 MHz partition-wide clock,
//! read either from the **reference TSC page** ("hyperv-page": `rdtsc`,
//! a 64.64 multiply and a signed offset, no exit) or from the
//! **TIME_REF_COUNT MSR** ("hyperv-msr": one exit per read).
//!
//! ```
//! use clockhal_core::{ClockSource, Policy};
//! use clockhal_hyperv::{Hyperv, HypervConfig, DEFAULT_GUEST_OS_ID};
//! use clockhal_sim::SimMachine;
//!
//! let m = SimMachine::hyperv();
//! let page = m.alloc_hv_page(); // the OS's memory, 4 KiB aligned
//! let config = HypervConfig::new()
//!     .with_tsc_page(page)
//!     .with_guest_os_id(DEFAULT_GUEST_OS_ID); // we may identify the guest
//! let hv = Hyperv::probe(&m, config, &Policy::new()).unwrap();
//! let clock = hv.page().unwrap();
//! m.reset_traps();
//! let a = clock.read(); // ns
//! m.advance(1_000_000); // 1 ms
//! assert!(clock.read() - a >= 1_000_000);
//! assert_eq!(m.traps().msr_reads, 0); // no exits on the page path
//! assert_eq!(clock.name(), "hyperv-page");
//! assert_eq!(hv.msr().unwrap().name(), "hyperv-msr");
//! ```
//!
//! ## Probing
//! [`Hyperv::probe`] needs the hypervisor bit, the "Microsoft Hv" signature,
//! the "Hv#1" interface and at least one of TIME_REF_COUNT (CPUID 0x40000003
//! EAX bit 1) and the reference TSC page (bit 9). It writes the guest OS
//! identity only if the MSR reads 0 ([`DEFAULT_GUEST_OS_ID`] unless the OS
//! passes its own). The page is enabled at the OS's page with the TLFS's
//! reserved bits preserved, then checked (valid sequence, non-zero scale,
//! agreement with TIME_REF_COUNT within [`PAGE_TOLERANCE`]); a page that is
//! not offered, not given or fails the check is disabled and reported by
//! [`Hyperv::page_error`], leaving the MSR clock (**MSR-only mode**).
//!
//! ## Reading the page
//! Sequence loaded with Acquire; 0 (or the old `0xFFFFFFFF`) means invalid —
//! that read comes from TIME_REF_COUNT, exactly one exit; otherwise scale,
//! offset and an ordered `rdtsc`, then the sequence again: a change retries,
//! at most [`MAX_READ_ATTEMPTS`] times, then the read falls back to the MSR.
//! Without TIME_REF_COUNT a fallback returns the held value instead
//! (counted in [`PageStats::held_reads`]). Hostile scales and offsets give
//! defined values (64.64 math in 128 bits, wrapping offset): no panic.
//!
//! Page and MSR readings share one never-backwards guard
//! ([`MonotonicGuard`](clockhal_core::MonotonicGuard)): page reads
//! only load it (no shared write but a high-water mark every
//! [`GUARD_SLACK`] units), MSR reads clamp. A switch from page to MSR may
//! step time forward by up to [`GUARD_SLACK`] (4.1 us), never backwards; a
//! page that jumps back by more than that is repaired the same way.
//!
//! ## Ratings
//! "hyperv-page" **450** ([`PAGE_RATING`], no exit, migration-safe) and
//! "hyperv-msr" **280** ([`MSR_RATING`], one exit per read but exact and
//! migration-safe), in the bands of [`Quality`](clockhal_core::Quality).
//! Neither counts while the partition is saved. The TSC backend may take the
//! exact TSC rate from [`Hyperv::tsc_frequency`] (MSR 0x40000022).
//!
//! ## Shutdown
//! Dropping the [`Hyperv`] (or [`Hyperv::shutdown`]) disables the reference
//! TSC page (partition-wide) so its memory can be reused.
#![no_std]
#![forbid(unsafe_code)]

mod error;
mod msr;
mod page;
mod partition;
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
