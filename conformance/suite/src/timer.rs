//! What the kernel offers for the timer checks: one-shot deadlines on the
//! clock's timeline, delivered by the kernel's interrupt handler.

use core::fmt;

/// The timer devices the checks report on, by name (the `source` field of
/// their result lines): where a kernel offers none of them, each gets
/// skipped results with the reason.
pub const TIMER_DEVICES: [&str; 3] = ["lapic-tsc-deadline", "lapic-oneshot", "hpet-comparator"];

/// What the kernel's interrupt handler recorded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Deliveries {
    /// Deadlines delivered so far (the handler was told the deadline was
    /// reached: clockhal's `TimerEvent::Fired`).
    pub fired: u64,
    /// The last delivered deadline (clock ns).
    pub last_deadline_ns: u64,
    /// The clock's `now()` the handler read after the delivery (clock ns):
    /// never below the deadline.
    pub last_seen_ns: u64,
    /// How late the delivery was by the timer's own reading (`now -
    /// deadline` at the interrupt entry).
    pub last_late_ns: u64,
    /// Interrupts the device raised (deliveries, early fires and the
    /// pieces of a long deadline re-armed, spurious ones).
    pub interrupts: u64,
    /// Interrupts that came before the deadline and were re-armed.
    pub rearmed: u64,
    /// Interrupts with nothing armed.
    pub spurious: u64,
}

/// One timer device under test, driven through the OS's timer layer
/// (clockhal's `Timer`) and its interrupt vector.
///
/// The kernel routes the device's interrupt to a handler that calls the
/// timer's interrupt entry and records what it said ([`Deliveries`]).
pub trait TimerUnderTest {
    /// The device's name (`lapic-oneshot`, ...), the results' `source`.
    fn name(&self) -> &str;
    /// The clock's `now()` in ns: the timeline deadlines are on.
    fn now_ns(&self) -> u64;
    /// Arms a one-shot deadline (clock ns), replacing any armed one:
    /// `true` when programmed; `false` after writing why not to `why`.
    fn arm(&self, deadline_ns: u64, why: &mut dyn fmt::Write) -> bool;
    /// Cancels: `true` if a deadline was pending.
    fn cancel(&self) -> bool;
    /// What the handler recorded so far (counts are cumulative).
    fn deliveries(&self) -> Deliveries;
    /// Lets interrupts be taken (returns soon, never blocks for long: the
    /// checks poll with their own bound).
    fn wait(&self);
    /// Whether the device cannot be used right now, and why (written to
    /// `why`): its checks are then skipped. The default: always usable.
    /// (TSC-deadline while the clock reads a source with no TSC map.)
    fn unavailable(&self, why: &mut dyn fmt::Write) -> bool {
        let _ = why;
        false
    }
    /// The longest count the device takes in one piece, in ns (`None`:
    /// 64-bit reach, no deadline is longer).
    fn reach_ns(&self) -> Option<u64>;
    /// The same device with its reach capped at about `cap_ns` (the test
    /// setting of the long-deadline check), so a longer deadline is split
    /// into pieces; `None` writes why there is none (a 64-bit reach).
    fn capped(&self, why: &mut dyn fmt::Write) -> Option<&dyn TimerUnderTest>;
}

/// One timer device of the run: present (under test) or absent, with why.
#[derive(Clone, Copy)]
pub enum TimerSlot<'a> {
    /// The device exists and is driven by the kernel.
    Present(&'a dyn TimerUnderTest),
    /// The device is absent or unusable here, and why.
    Absent {
        /// Its name (one of [`TIMER_DEVICES`], or the OS's own).
        name: &'a str,
        /// Why it is absent.
        reason: &'a str,
    },
}

impl TimerSlot<'_> {
    /// The device's name.
    pub fn name(&self) -> &str {
        match self {
            TimerSlot::Present(t) => t.name(),
            TimerSlot::Absent { name, .. } => name,
        }
    }
}

/// The timers of a run, and the OS's selection among them.
#[derive(Clone, Copy)]
pub struct Timers<'a> {
    /// Every device considered (present or not).
    pub slots: &'a [TimerSlot<'a>],
    /// The device the OS selected (`None`: none), by name.
    pub selected: Option<&'a str>,
    /// Why (the OS's ranking with reasons).
    pub reason: &'a str,
    /// Called once before the timer checks start (after the suite's other
    /// checks, which may run for seconds): e.g. the OS's watchdog ticks
    /// until the clock's source holds, as its timer tick would have.
    pub prepare: Option<&'a dyn Fn()>,
}
