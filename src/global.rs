//! One clock for code that has no handle to it: log and `defmt`
//! timestamps, libraries, drivers.
//!
//! The OS [`install`]s its `&'static` [`Clock`] once; from then
//! on [`now`] (and [`unix_time_ns`]) read it from anywhere. **Before
//! `install`, [`now`] is `None`** (not 0: a timestamp of 0 would look like
//! the clock's first nanosecond), so a caller decides what to print.
//!
//! No allocation and no `unsafe`: the clock is stored as a
//! `&'static dyn ClockNow` in a [`spin::Once`](https://docs.rs/spin/0.10/spin/once/struct.Once.html) (one acquire load and a
//! dynamic call per read). The first `install` wins, for the life of the
//! program; later ones are refused with [`AlreadyInstalled`].
//!
//! ```
//! # #[cfg(feature = "kvmclock")] {
//! use clockhal::{global, Platform};
//! use clockhal_sim::SimMachine;
//!
//! assert_eq!(global::now(), None); // nothing installed yet
//!
//! let m: &'static SimMachine = Box::leak(Box::new(SimMachine::kvm()));
//! let platform = Platform::new()
//!     .pvclock_areas(m.alloc_pvclock_areas(1))
//!     .pvclock_wall_clock(m.alloc_wall_clock());
//! let clock = clockhal::probe(m, platform).into_clock().unwrap();
//! let clock = Box::leak(Box::new(clock)); // a kernel: a `static` Once
//! global::install(clock).unwrap();
//!
//! let t = global::now().unwrap(); // from anywhere, no handle
//! assert!(t <= clock.now());
//! assert!(global::unix_time_ns().is_some()); // kvmclock's wall clock
//! assert_eq!(global::install(clock), Err(global::AlreadyInstalled));
//! # }
//! ```
//!
//! A `defmt` timestamp (µs, 0 before the clock is installed):
//!
//! ```ignore
//! defmt::timestamp!("{=u64:us}", clockhal::global::now().map_or(0, |t| t.as_nanos() / 1_000));
//! ```

use crate::Clock;
use clockhal_core::{Duration, Instant};
use clockhal_x86::Hardware;
use core::fmt;

/// What the global clock (and `Delay`, feature `embedded-hal`) needs of
/// a clock: its reading and, if known, the wall time. Implemented by every
/// [`Clock`]; an OS may implement it for a clock of its own.
///
/// ```
/// use clockhal::{ClockNow, Instant};
/// use std::sync::atomic::{AtomicU64, Ordering};
///
/// /// An OS's tick counter, 1 ms per tick.
/// struct Jiffies(AtomicU64);
///
/// impl ClockNow for Jiffies {
///     fn now(&self) -> Instant {
///         Instant::from_nanos(self.0.load(Ordering::Relaxed) * 1_000_000)
///     }
/// }
///
/// static JIFFIES: Jiffies = Jiffies(AtomicU64::new(3));
/// clockhal::global::install(&JIFFIES).unwrap();
/// assert_eq!(clockhal::global::now(), Some(Instant::from_nanos(3_000_000)));
/// assert_eq!(clockhal::global::unix_time_ns(), None); // the default
/// ```
pub trait ClockNow: Sync {
    /// The current instant (monotonic, as [`Clock::now`]).
    /// Interrupt-safe: yes.
    fn now(&self) -> Instant;
    /// Unix time now in ns, if known (as [`Clock::unix_time_ns`]).
    /// Interrupt-safe: yes.
    fn unix_time_ns(&self) -> Option<u64> {
        None
    }
    /// The largest step between two readings (a coarse counter's tick, a
    /// clamp granule): a reading may lie up to this far below the true
    /// time, so a wait adds it to end no earlier than asked. The default,
    /// 1 ns, is right for a clock whose readings are exact to the ns.
    ///
    /// Interrupt-safe: yes (an implementation must be).
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }
    /// The ns the clock's timeline has stepped forward in all without that
    /// time passing (a switch starts the new source a margin above every
    /// floor): a wait that sees it grow adds the growth, to end no earlier
    /// than asked. The default, 0, is right for a clock that never steps.
    ///
    /// Interrupt-safe: yes (an implementation must be).
    fn stepped_ns(&self) -> u64 {
        0
    }
}

impl<H: Hardware + Clone> ClockNow for Clock<H> {
    #[inline]
    fn now(&self) -> Instant {
        Clock::now(self)
    }
    fn unix_time_ns(&self) -> Option<u64> {
        Clock::unix_time_ns(self)
    }
    fn resolution(&self) -> Duration {
        Duration::from_nanos(self.resolution_ns())
    }
    fn stepped_ns(&self) -> u64 {
        Clock::stepped_ns(self)
    }
}

/// [`install`] was called before: the first clock stays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct AlreadyInstalled;

impl fmt::Display for AlreadyInstalled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a global clock is already installed")
    }
}

impl core::error::Error for AlreadyInstalled {}

static GLOBAL: spin::Once<&'static dyn ClockNow> = spin::Once::new();

/// Makes `clock` the global clock, for the life of the program. Call it
/// once, after [`Probed::into_clock`](crate::Probed::into_clock) (the clock
/// in a `static`); any CPU may read it afterwards. `Err` if a clock is
/// already installed (it stays).
/// Interrupt-safe: no (`spin::Once`: may wait for the interrupted code).
///
/// ```
/// # #[cfg(feature = "tsc")] {
/// use clockhal::{global, Clock, Platform};
/// use clockhal_sim::SimMachine;
/// use std::sync::OnceLock;
///
/// static MACHINE: OnceLock<SimMachine> = OnceLock::new();
/// static CLOCK: OnceLock<Clock<&SimMachine>> = OnceLock::new();
/// let m = MACHINE.get_or_init(SimMachine::bare_metal);
/// let clock = CLOCK.get_or_init(|| clockhal::probe(m, Platform::new()).into_clock().unwrap());
/// assert_eq!(global::install(clock), Ok(()));
/// assert_eq!(global::install(clock), Err(global::AlreadyInstalled));
/// # }
/// ```
pub fn install<C: ClockNow>(clock: &'static C) -> Result<(), AlreadyInstalled> {
    let mut ours = false;
    GLOBAL.call_once(|| {
        ours = true;
        clock
    });
    if ours {
        Ok(())
    } else {
        Err(AlreadyInstalled)
    }
}

/// The installed clock, `None` before [`install`] (e.g. to hand it on as
/// a `&dyn ClockNow`).
/// Interrupt-safe: yes.
///
/// ```
/// assert!(clockhal::global::clock().is_none());
/// ```
#[inline]
pub fn clock() -> Option<&'static dyn ClockNow> {
    GLOBAL.get().copied()
}

/// The installed clock's [`now`](ClockNow::now); `None` before [`install`].
/// Interrupt-safe: yes.
///
/// ```
/// // A log line's timestamp, "-" until the clock is installed:
/// let stamp = clockhal::global::now().map(|t| t.as_nanos());
/// assert_eq!(stamp, None);
/// ```
#[inline]
pub fn now() -> Option<Instant> {
    clock().map(|c| c.now())
}

/// The installed clock's Unix time in ns; `None` before [`install`] or
/// while no wall time is known.
/// Interrupt-safe: yes.
///
/// ```
/// assert_eq!(clockhal::global::unix_time_ns(), None);
/// ```
pub fn unix_time_ns() -> Option<u64> {
    clock().and_then(|c| c.unix_time_ns())
}
