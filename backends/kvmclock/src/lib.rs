//! # clockhal-kvmclock
//!
//! KVM's paravirtual clock (pvclock): nanoseconds of host time from one
//! 32-byte area per vCPU that the host keeps up to date, read with `rdtsc`
//! and a few loads — no VM exit per read, and correct across live migration
//! (the host rewrites the areas for the new machine's TSC).
//!
//! ```
//! use clockhal_core::{ClockSource, Policy};
//! use clockhal_kvmclock::{Kvmclock, KvmclockConfig};
//! use clockhal_sim::SimMachine;
//!
//! let m = SimMachine::kvm();
//! let areas = m.alloc_pvclock_areas(1); // the OS's memory, one area per CPU
//! let clock = Kvmclock::probe(&m, KvmclockConfig::new(areas), &Policy::new()).unwrap();
//! let a = clock.read();
//! m.advance(1_000_000);
//! assert!(clock.read() - a >= 1_000_000);
//! assert_eq!(clock.name(), "kvmclock");
//! ```
//!
//! ## Probing
//! [`Kvmclock::probe`] needs the hypervisor bit, the KVM signature at any
//! hypervisor CPUID base (0x40000100 when Hyper-V enlightenments own
//! 0x40000000), and CLOCKSOURCE2 (new MSRs, preferred) or CLOCKSOURCE (old
//! MSRs). It registers the calling CPU's area, and rejects an area the host
//! did not fill: multiplier 0, shift outside -32..=32, an implied TSC rate
//! outside 1 Hz ..= 2^40 Hz, or a version that never settles. Each reason is
//! its own [`KvmclockError`]; after an error nothing stays registered.
//!
//! ## SMP: registration and shutdown
//! The system-time MSR is per vCPU. The OS passes one area per CPU
//! (`areas[Hardware::cpu_index()]`); [`Kvmclock::probe`] registers the
//! probing CPU, and every AP must call [`Kvmclock::register_this_cpu`]
//! before it reads. Before the areas' memory is reused (kexec, shutdown),
//! every AP calls [`Kvmclock::unregister_this_cpu`], then the last CPU drops
//! the clock or calls [`Kvmclock::shutdown`], which unregisters **the
//! calling CPU only** — an MSR of another vCPU cannot be written from here.
//!
//! ## Reading
//! A read takes the calling CPU's area under its seqlock (version loaded
//! with Acquire; odd or changed → retry), reads the TSC *inside* the window
//! with an ordered `rdtsc`, and re-checks `cpu_index()` so a migration
//! mid-read retries. Scaling is exact
//! ([`pvclock_scale_delta`](clockhal_x86::paravirt::pvclock_scale_delta),
//! 128-bit).
//!
//! - **Stable bit trusted** (the host sets `PVCLOCK_TSC_STABLE_BIT` *and*
//!   KVM's CPUID grants `CLOCKSOURCE_STABLE_BIT`, re-checked on every read):
//!   the host orders readings across vCPUs, so the read only *loads* the
//!   shared floor (no shared write but a high-water mark recorded once per
//!   [`GUARD_SLACK_NS`]). A reading more than [`GUARD_SLACK_NS`] below
//!   that mark — the host stepped back — is repaired like a clamped one; a
//!   trusted host that steps back by less is believed (as Linux's vDSO
//!   believes it).
//! - **Otherwise** (flag off, or no CPUID permission — the flag alone is not
//!   trusted, rust-lang/rust#86470): every reading goes through a global
//!   clamp (Linux's `pvclock_clocksource_read` last-value cmpxchg), which is
//!   what makes an unstable kvmclock `MONOTONIC_ACROSS_CPUS`.
//! - **No usable sample** (version odd or changing for
//!   [`MAX_READ_ATTEMPTS`] samples, or the CPU's area unusable): the read
//!   returns in bounded time the **held value** — the clamp's last value,
//!   or up to [`GUARD_SLACK_NS`] past the last recorded fast-path reading:
//!   never earlier than anything returned before — and counts it
//!   in [`Kvmclock::stats`] (`busy_reads`, `invalid_reads`), which the OS can
//!   poll.
//!
//! Accuracy against the host's clock: exact scaling leaves the host's own
//! rounding of `mul` (relative error below 2^-31, i.e. < 0.5 ns per second
//! since the last update) plus 1 ns of truncation. A clamped value may lead
//! the calling vCPU's area by the hosts' per-vCPU disagreement; a repaired or
//! held value may lead true time by at most [`GUARD_SLACK_NS`].
//!
//! `GUEST_STOPPED` (the host paused the guest): a read that sees it clears it
//! in the area, as Linux does, and latches it; the OS polls
//! [`Kvmclock::take_guest_stopped`] to tell its watchdogs that the following
//! jump is legitimate.
//!
//! ## Rating
//! kvmclock is rated **400** ([`RATING`]): no exit per read and
//! migration-safe, the 400..=499 band of
//! [`Quality`](clockhal_core::Quality). The rating does not change with the
//! stable bit: without it the clamp keeps readings monotonic across CPUs, at
//! the cost of a shared cache line. The TSC backend may outrank kvmclock
//! only when the OS promises no migration (`Policy::migration ==
//! Migration::WillNot`) *and* the TSC is proven invariant and synchronised;
//! that decision lives in the TSC backend, which can take its exact rate
//! from [`Kvmclock::tsc_frequency`]. (Linux instead lowers kvm-clock to 299
//! when the TSC is constant and nonstop.)
//!
//! ## Without a `Kvmclock`
//! [`read_area`] decodes any area read-only (no MSR, no write): e.g. the
//! page a Linux KVM guest maps into its vDSO.
#![no_std]
#![forbid(unsafe_code)]

mod area;
mod clock;
mod error;
mod registry;
mod sync;
mod wall;

pub use area::{area_tsc_frequency, read_area, PvclockError, PvclockTime, MAX_READ_ATTEMPTS};
pub use clock::{
    AreaMap, Kvmclock, KvmclockConfig, KvmclockStats, ReadMiss, RATING, REVALIDATE_NS, STABILITY,
    STABLE_AGREEMENT_NS,
};
pub use error::KvmclockError;
pub use registry::MAX_CPUS;
pub use wall::WallClock;
