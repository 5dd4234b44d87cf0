//! # clockhal
//!
//! The fastest correct clock for a hobby OS or unikernel on x86_64: one
//! call probes kvmclock, the Hyper-V reference TSC page and MSR, the TSC,
//! the HPET and the ACPI PM timer, checks each, picks the best, and tells
//! you why.
//!
//! - [`probe`] takes what only the OS knows ([`Platform`]: ACPI tables,
//!   the HPET mapping, memory to share with the hypervisor, TSC sync
//!   results, a [`Policy`]) and a [`Hardware`](clockhal_x86::Hardware)
//!   implementation ([`Native`](clockhal_x86::Native) in a kernel,
//!   `&SimMachine` in tests). It returns a [`Probed`]: the constructed
//!   backends and a [`Report`] with every candidate's verdict.
//! - [`Probed::into_clock`] gives the ready [`Clock`], which owns the
//!   machine's clock hardware from then on: [`Clock::now`] returns an
//!   [`Instant`] that never goes backwards (see [`Clock`] for exactly what
//!   is guaranteed across CPUs), [`Clock::watchdog_tick`] cross-checks the
//!   current source against every other one at run time and switches away
//!   from a faulty one without a backward step. [`Clock::stamp`] is the
//!   tracing read: one unordered `rdtsc`, turned into an [`Instant`] later
//!   by a [`StampConverter`].
//! - The report prints like FreeBSD's `kern.timecounter.choice`, with
//!   reasons: `kvmclock(400, selected) tsc(290, rate from pvclock,
//!   supervised) hpet(250, traps) acpi-pm(120, verified mode)`, and as a
//!   table ([`Report::table`]).
//!
//! No allocation, no `unsafe` (the OS's promises are the `unsafe`
//! constructors of [`Native`](clockhal_x86::Native),
//! [`MmioRegion`](clockhal_x86::MmioRegion) and
//! [`PhysMapped`](clockhal_x86::paravirt::PhysMapped)).
//!
//! ## Quick start (kernel)
//!
//! The same as the README's; `Boot` stands for what the loader gives.
//!
//! ```rust,no_run
//! use clockhal::x86::acpi::find_rsdp;
//! use clockhal::x86::paravirt::{PhysMapped, PvclockPage};
//! use clockhal::x86::{CpuIndex, MmioRegion, Native, OffsetMapping};
//! use clockhal::{Clock, Platform, Policy};
//! use spin::Once; // or any once-cell the kernel has
//!
//! static CLOCK: Once<Clock<Native<ThisCpu>>> = Once::new();
//! static PVCLOCK: PvclockPage = PvclockPage::new(); // one 32-byte area per vCPU, one frame
//!
//! /// What the loader and the kernel's memory manager tell us (a stand-in:
//! /// fill it from the boot info).
//! struct Boot {
//!     phys_offset: u64,  // all physical memory is mapped at this virtual offset
//!     rsdp: Option<u64>, // the loader's RSDP; None: search the BIOS areas
//!     cpus: usize,
//! }
//! /// The executing CPU's index (e.g. a `gs:`-relative per-CPU field): a type,
//! /// so every clock read inlines it.
//! #[derive(Clone, Copy, Debug)]
//! struct ThisCpu;
//! impl CpuIndex for ThisCpu {
//!     fn index(&self) -> usize { 0 }
//! }
//! fn virt_to_phys<T>(_: &T) -> u64 { unimplemented!("the kernel's page-table walk") }
//! fn map_uncached(_phys: u64, _len: usize) -> usize { unimplemented!("the kernel's MMIO mapping") }
//!
//! fn init_time(boot: &Boot) -> &'static Clock<Native<ThisCpu>> {
//!     // SAFETY: CPL0; clockhal may use the clock MSRs and ports; `ThisCpu`
//!     // names the executing CPU for the whole of a clock read.
//!     let hw = unsafe { Native::new() }.with_cpu(ThisCpu);
//!     // SAFETY: physical memory below 4 GiB is mapped at `phys_offset`, and
//!     // reading the firmware tables there has no side effects.
//!     let phys_mem = unsafe { OffsetMapping::new(boot.phys_offset, 1 << 32) };
//!     // SAFETY: PVCLOCK's guest-physical address, memory reserved for the host.
//!     let page = unsafe { PhysMapped::new(&PVCLOCK, virt_to_phys(&PVCLOCK)) };
//!     // SAFETY: `map_uncached` maps the HPET's registers uncached.
//!     let mut map_hpet = |phys, len| unsafe { MmioRegion::new(map_uncached(phys, len), len) };
//!     let mut platform = Platform::new()
//!         .hpet_mapper(&mut map_hpet)
//!         .pvclock_page(page)
//!         .cpus(boot.cpus)
//!         .policy(Policy::new()); // may live-migrate (the safe default)
//!     if let Some(rsdp) = boot.rsdp.or_else(|| find_rsdp(&phys_mem).ok()) {
//!         platform = platform.acpi(rsdp, &phys_mem); // the HPET, the PM timer, the CPU count
//!     }
//!     let probed = clockhal::probe(hw, platform);
//!     // println!("{}", probed.report());   // kvmclock(400, selected) tsc(290, ...) hpet(250, traps) ...
//!     // println!("{}", probed.report().table());
//!     CLOCK.call_once(|| probed.into_clock().expect("no usable clock"))
//! }
//!
//! fn main() {
//!     let clock = init_time(&Boot { phys_offset: 0xFFFF_8000_0000_0000, rsdp: None, cpus: 1 });
//!     // Each AP, before its first read (its kvmclock area, its TSC_ADJUST):
//!     let _ = clock.register_this_cpu();
//!     // From a periodic timer interrupt, every 100-500 ms:
//!     let _event = clock.watchdog_tick();
//!
//!     let t0 = clock.now();
//!     // ... work ...
//!     let _took = clock.elapsed(t0);
//! }
//! ```
//!
//!
//! ## Lifecycle
//!
//! | when | call |
//! |---|---|
//! | boot CPU, once | [`probe`], then [`Probed::into_clock`]; keep the [`Clock`] in a `static` |
//! | each AP, before its first read | [`Clock::register_this_cpu`] |
//! | after the OS's TSC warp test | [`Clock::set_tsc_sync`] (or [`Platform::tsc_sync`] before the probe) |
//! | timer interrupt, every 100-500 ms | [`Clock::watchdog_tick`] (a TSC selected without a hypervisor's promise is *supervised*: it stays current only while ticks arrive) |
//! | CPU going offline | [`Clock::unregister_this_cpu`] |
//! | after suspend/resume or live migration | [`Clock::resume`] on the boot CPU, [`Clock::resume_this_cpu`] on the others |
//!
//! ## Features
//!
//! | feature | default | what |
//! |---|---|---|
//! | `kvmclock`, `hyperv`, `tsc`, `hpet`, `acpi-pm`, `pit` | yes | the backends (re-exported as [`kvmclock`], [`hyperv`], ...); a disabled one is listed as rejected, "feature disabled" |
//! | `defmt` | no | `defmt::Format` for every public type (core and arch too) |
//! | `embedded-time` | no | [`Clock`] implements `embedded_time::Clock` (nanoseconds, `u64`) |
//! | `fugit` | no | `Instant`/`Duration` convert to and from fugit's nanosecond types, `Clock::now_fugit` |
//! | `embedded-hal` | no | `Clock::delay()`: an embedded-hal 1.0 `DelayNs` (`Delay`) |
//! | `rtc` | no | wall time from the CMOS RTC: `Clock::set_wall_clock_from_rtc` (ports 0x70/0x71: opt-in) |
//! | `x86_64` | no | rust-osdev `x86_64` types taken as they are (`x86::paging`: `OffsetMapping::from_x86_64`, `PhysMapped::translated`, `map_mmio`) |
//! | `std` | no | hosted mode for Linux user space ([`hosted`]) |
//!
// Links to items a feature set leaves out point at the features table
// instead of rendering raw (`RUSTDOCFLAGS="-D warnings"` in every set).
#![cfg_attr(not(feature = "kvmclock"), doc = "[`kvmclock`]: #features")]
#![cfg_attr(not(feature = "hyperv"), doc = "[`hyperv`]: #features")]
#![cfg_attr(
    not(all(feature = "std", target_arch = "x86_64")),
    doc = "[`hosted`]: #features"
)]
#![cfg_attr(
    not(feature = "tsc"),
    doc = "[`Clock::set_tsc_sync`]: #features\n[`Platform::tsc_sync`]: #features"
)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![no_std]
#![forbid(unsafe_code)]

#[cfg(feature = "std")]
extern crate std;

pub mod boot;
mod candidate;
mod check;
mod clock;
mod cpu_error;
#[cfg(feature = "embedded-hal")]
mod delay;
#[cfg(feature = "embassy")]
#[cfg_attr(docsrs, doc(cfg(feature = "embassy")))]
pub mod embassy;
#[cfg(feature = "embedded-time")]
mod embedded;
#[cfg(feature = "fugit")]
mod fugit_types;
pub mod global;
#[cfg(all(feature = "std", target_arch = "x86_64"))]
pub mod hosted;
pub mod lapic;
mod platform;
mod probe;
mod probe_cost;
mod report;
mod select;
mod settings;
pub mod timer;
mod wait;
#[cfg(feature = "rtc")]
mod wall_clock;
mod wall_time;

pub use candidate::{Candidate, Demotion, Note, Rejection, SourceId, Verdict, MAX_CANDIDATES};
pub use check::SelfCheck;
pub use clock::{
    Clock, CpuError, NoClock, NoClockReason, Stamp, StampConverter, WatchdogEvent,
    MAX_READMISSIONS, READMIT_ROUNDS, STAMP_AGREEMENT_NS, STUCK_READS, SWITCH_MARGIN_NS,
};
#[cfg(feature = "embedded-hal")]
pub use delay::Delay;
#[cfg(feature = "fugit")]
pub use fugit_types::{FugitDuration, FugitInstant};
pub use global::ClockNow;
pub use platform::{ExtraTscSource, HpetAccess, Platform};
pub use probe::{probe, Probed, HPET_REGION_LEN};
pub use probe_cost::ProbeCost;
pub use report::{Report, Table};
pub use wait::{Stalled, STALL_READS};
pub use wall_time::{ImplausibleWallTime, PLAUSIBLE_UNIX_SECONDS};

/// The hardware-free core (trait, scaling, selection, watchdog).
#[doc(inline)]
pub use clockhal_core as core_api;
pub use clockhal_core::{
    ClampGranule, ClockSource, Duration, Fault, Frequency, Instant, MemberVerdict, Migration,
    Outcome, Policy, Quality, ReadCost, Scale, Stability, UpdateBounds, WatchdogConfig,
};
/// Linux user-space pieces used by hosted mode (the live pvclock page).
#[cfg(all(feature = "std", target_arch = "x86_64"))]
#[doc(inline)]
pub use clockhal_linux as linux;
/// The x86_64 hardware seam (`Native`, `MmioRegion`, `PhysMapped`).
#[doc(inline)]
pub use clockhal_x86 as x86;

/// The ACPI PM timer backend.
#[cfg(feature = "acpi-pm")]
#[doc(inline)]
pub use clockhal_acpi_pm as acpi_pm;
/// The HPET backend.
#[cfg(feature = "hpet")]
#[doc(inline)]
pub use clockhal_hpet as hpet;
/// The Hyper-V backend.
#[cfg(feature = "hyperv")]
#[doc(inline)]
pub use clockhal_hyperv as hyperv;
/// The kvmclock backend.
#[cfg(feature = "kvmclock")]
#[doc(inline)]
pub use clockhal_kvmclock as kvmclock;
/// The PIT backend.
#[cfg(feature = "pit")]
#[doc(inline)]
pub use clockhal_pit as pit;
/// The CMOS RTC reader (wall time: [`Clock::set_wall_clock_from_rtc`]).
#[cfg(feature = "rtc")]
#[doc(inline)]
pub use clockhal_rtc as rtc;
/// The TSC backend.
#[cfg(feature = "tsc")]
#[doc(inline)]
pub use clockhal_tsc as tsc;

/// Compile-time check: every public type implements `defmt::Format`.
#[cfg(feature = "defmt")]
const _: fn() = || {
    fn is_format<T: defmt::Format + ?Sized>() {}
    is_format::<Candidate>();
    is_format::<Demotion>();
    is_format::<Note>();
    is_format::<Rejection>();
    is_format::<SourceId>();
    is_format::<Verdict>();
    is_format::<SelfCheck>();
    #[cfg(target_arch = "x86_64")]
    is_format::<Clock<clockhal_x86::Native>>();
    is_format::<WatchdogEvent>();
    is_format::<Stalled>();
    is_format::<global::AlreadyInstalled>();
    is_format::<lapic::LapicRate>();
    is_format::<lapic::LapicRateOrigin>();
    is_format::<lapic::LapicError>();
    #[cfg(feature = "embedded-hal")]
    is_format::<Delay<'static>>();
    is_format::<HpetAccess<'static>>();
    is_format::<Platform<'static>>();
    is_format::<Report>();
    is_format::<ProbeCost>();
    is_format::<Table<'static>>();
    #[cfg(target_arch = "x86_64")]
    is_format::<Probed<clockhal_x86::Native>>();
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    {
        is_format::<hosted::HostedError>();
        is_format::<hosted::RateOrigin>();
    }
};
