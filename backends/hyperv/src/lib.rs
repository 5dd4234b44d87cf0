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
//! identity only if the MSR reads 0 *and* the OS passed one
//! ([`HypervConfig::with_guest_os_id`], e.g. [`DEFAULT_GUEST_OS_ID`]): the
//! identity is the OS's to declare, and the TLFS forbids enabling the page
//! before it is set ([`PageError::NoGuestOsId`]). Every MSR CPUID promises
//! is read with a #GP-recovering read where the OS offers one
//! ([`HypervError::MsrFault`]). The page is enabled at the OS's page with
//! the TLFS's reserved bits preserved, then checked (valid sequence,
//! non-zero scale, agreement with TIME_REF_COUNT within
//! [`PAGE_TOLERANCE`]); a page that is not offered, not given or fails the
//! check is disabled and reported by [`Hyperv::page_error`], leaving the
//! MSR clock (**MSR-only mode**).
//!
//! ## Reading the page
//! Reads run in nanoseconds (the page's 100 ns units, interpolated by the
//! TSC). Each CPU caches the *validated map* of the page (sequence, TSC to
//! ns, its floor) in its own cache line; the fast path loads the sequence
//! (Acquire), reads the TSC ordered, applies the map and re-checks the
//! sequence. Every host update of scale or offset is judged once
//! ([`clockhal_core::judge_update`]): an implausible one (scale 0, a rate
//! far off the previous) is rejected and the previous map stays in use, a
//! discontinuous one is reanchored onto the previous timeline; both count
//! in [`PageStats`] and against the source in the facade's watchdog. A
//! cached map is re-validated at least every [`REVALIDATE_NS`].
//!
//! Sequence 0 (or the old `0xFFFFFFFF`) means invalid: that read comes from
//! TIME_REF_COUNT, exactly one exit; a sequence that keeps changing for
//! [`MAX_READ_ATTEMPTS`] samples falls back the same way. Without
//! TIME_REF_COUNT a fallback returns the held value instead (counted in
//! [`PageStats::held_reads`]). Readings never go below the CPU's floor;
//! across CPUs they are ordered by the hypervisor's promise, or by a
//! global clamp after [`HypervPageClock::distrust_order`] (the OS's warp
//! test found the TSCs out of step). A switch between page and MSR steps
//! forward, never back.
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
