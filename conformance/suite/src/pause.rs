//! What the kernel offers for the pause check: the clock it samples and
//! the host that pauses the guest (QEMU `stop`/`cont` through QMP).

use core::fmt;

/// What one watchdog tick did, as the pause check needs to know it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PauseTick {
    /// The tick was told the host paused the guest since the previous one
    /// (kvmclock's `GUEST_STOPPED`) and skipped the interval.
    GuestStopped,
    /// Anything else (judged, nothing to compare, busy, ...). A switch or a
    /// demotion shows in [`PauseClock::current_source`] and
    /// [`PauseClock::demotions`].
    Other,
}

/// The clock the pause check samples: implemented for clockhal's `Clock`
/// (feature `clockhal`), or by a kernel over its own clock.
pub trait PauseClock {
    /// The clock's current instant, in ns (any origin).
    ///
    /// Interrupt-safe: as the implementation's read path.
    fn now_ns(&self) -> u64;

    /// The name of the source the clock reads now.
    ///
    /// Interrupt-safe: as the implementation.
    fn current_source(&self) -> &'static str;

    /// How many times the clock switched source (or rebased) so far.
    ///
    /// Interrupt-safe: as the implementation.
    fn switch_count(&self) -> u32;

    /// Host updates the clock counted as faults so far (kvmclock: rejected
    /// and reanchored parameter updates); 0 where nothing counts them.
    ///
    /// Interrupt-safe: as the implementation.
    fn host_faults(&self) -> u64;

    /// Runs one watchdog tick, as an OS's timer would.
    ///
    /// Interrupt-safe: as the implementation's watchdog.
    fn tick(&self) -> PauseTick;

    /// How many sources are demoted now; writes them (name and reason) to
    /// `list`.
    ///
    /// Interrupt-safe: as the implementation (clockhal's takes a lock).
    fn demotions(&self, list: &mut dyn fmt::Write) -> u32;
}

/// The host side of the pause check: whether a pause will come, the
/// marker that tells the host to pause now, and the host's word that it
/// resumed the guest. A kernel implements it over its command line and
/// console (clockhal's conformance kernel: `clockhal.pause_ms=N` on the
/// command line, a `CLOCKHAL-PAUSE ready` line on the serial console, and
/// one byte back on the serial line after `cont`).
pub trait PauseHost {
    /// How long the host will hold the guest stopped, in ns, once told the
    /// check is sampling; `None` (after writing why to `why`) where no
    /// pause will come: the check is skipped with that reason.
    ///
    /// Interrupt-safe: as the implementation.
    fn planned_hold_ns(&self, why: &mut dyn fmt::Write) -> Option<u64>;

    /// Tells the host that the check is sampling: pause the guest now.
    ///
    /// Interrupt-safe: as the implementation (a console write).
    fn ready(&self);

    /// Whether the host has resumed the guest after its pause (polled about
    /// every millisecond of clock time).
    ///
    /// Interrupt-safe: as the implementation.
    fn resumed(&self) -> bool;
}
