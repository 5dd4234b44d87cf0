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
//! A read uses the calling CPU's own area and a per-CPU slot (one cache
//! line) holding the *validated map* of that area: TSC ticks to
//! nanoseconds, the area version it is valid for, and the CPU's floor.
//! The fast path loads the area's version (Acquire), reads the TSC with an
//! ordered `rdtsc`, applies the cached map (one 128-bit multiply,
//! [`TscMap`](clockhal_core::TscMap)) and re-checks the version and
//! `cpu_index()`: a host update or a migration mid-read retries.
//!
//! - **Every host update is judged once**, when a CPU first sees its new
//!   version ([`clockhal_core::judge_update`], bounds from
//!   [`KvmclockConfig::with_bounds`]): an implausible one (multiplier 0,
//!   shift outside -32..=32, an implied TSC rate outside 1 Hz..=2^40 Hz
//!   or more than 4x away from the previous) is rejected and the previous
//!   parameters stay in use; one whose time is discontinuous (more than
//!   60 s forward or 1 ms back of the previous parameters at the same TSC)
//!   is *reanchored*: its rate is used, continuing the previous timeline.
//!   Both count in [`Kvmclock::stats`] and [`KvmclockStats::faults`], which
//!   the facade's watchdog holds against the source. A cached map is
//!   re-validated at least every [`REVALIDATE_NS`], so no single value is
//!   trusted for ever.
//! - **Stable bit trusted** (the host sets `PVCLOCK_TSC_STABLE_BIT` *and*
//!   KVM's CPUID grants `CLOCKSOURCE_STABLE_BIT` — the flag alone is not
//!   trusted, rust-lang/rust#86470 — and every registered area agrees with
//!   the boot CPU's within [`STABLE_AGREEMENT_NS`]): the host orders
//!   readings across vCPUs, so the read writes only the CPU's own floor.
//! - **Otherwise** every reading also goes through a global clamp (Linux's
//!   `pvclock_clocksource_read` last-value rule), which is what makes an
//!   unstable kvmclock `MONOTONIC_ACROSS_CPUS`. A revoked stable bit
//!   ([`Kvmclock::distrust_stable`]) switches every CPU to the clamp,
//!   starting above every value returned so far.
//! - **No usable sample** (version odd or changing for
//!   [`MAX_READ_ATTEMPTS`] samples with no earlier parameters, or an
//!   unregistered CPU): the read returns in bounded time the **held
//!   value** — never earlier than anything returned before on that CPU —
//!   and counts it (`busy_reads`, `unregistered_reads`).
//!
//! Accuracy against the host's clock: exact scaling leaves the host's own
//! rounding of `mul` (relative error below 2^-31, i.e. < 0.5 ns per second
//! since the last update) plus 1 ns of truncation. A clamped value may lead
//! the calling vCPU's area by the hosts' per-vCPU disagreement.
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
mod wall;

pub use area::{area_tsc_frequency, read_area, PvclockError, PvclockTime, MAX_READ_ATTEMPTS};
pub use clock::{
    AreaMap, Kvmclock, KvmclockConfig, KvmclockStats, ReadMiss, RATING, REVALIDATE_NS, STABILITY,
    STABLE_AGREEMENT_NS,
};
pub use error::KvmclockError;
pub use registry::MAX_CPUS;
pub use wall::WallClock;
