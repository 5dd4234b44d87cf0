#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![no_std]
#![forbid(unsafe_code)]

mod civil;
mod decode;
mod error;

pub use decode::{Century, RtcFormat, RtcTime, PIVOT_YEAR};
pub use error::{Field, RtcError};

use clockhal_x86::cmos::{self, NmiBit};
use clockhal_x86::Hardware;
use decode::Raw;

/// CMOS register indices.
mod reg {
    pub const SECONDS: u8 = 0x00;
    pub const MINUTES: u8 = 0x02;
    pub const HOURS: u8 = 0x04;
    pub const DAY: u8 = 0x07;
    pub const MONTH: u8 = 0x08;
    pub const YEAR: u8 = 0x09;
    pub const STATUS_A: u8 = 0x0A;
    pub const STATUS_B: u8 = 0x0B;
    pub const STATUS_D: u8 = 0x0D;
    /// First index past the clock and status registers.
    pub const RAM_START: u8 = 0x0E;
}

/// Status A bit 7: update in progress.
const A_UIP: u8 = 0x80;
/// Status B bit 7: updates inhibited.
const B_SET: u8 = 0x80;
/// Status D bit 7: valid RAM and time.
const D_VRT: u8 = 0x80;

/// How long before an update UIP rises: 8 periods of the 32.768 kHz time
/// base, 244.140625 µs (MC146818 data sheet; QEMU's `UIP_HOLD_LENGTH`).
pub const UIP_LEAD_NS: u64 = 244_141;

/// UIP polls before [`RtcError::UpdateStuck`]: UIP stays up at most
/// 244 + 1984 µs, and one poll (two port accesses) takes at least ~0.1 µs
/// (QEMU TCG: ~56 ns per access; an ISA bus: ~1 µs).
const MAX_UIP_POLLS: u32 = 50_000;
/// Full register reads before [`RtcError::Unstable`].
const MAX_SNAPSHOTS: u32 = 8;
/// UIP polls while waiting for a second edge: a backstop behind the
/// caller's deadline (a second is ~9,000,000 polls under QEMU TCG).
const MAX_EDGE_POLLS: u32 = 100_000_000;
/// Second edges a preemption may hide (two polls further apart than
/// [`UIP_LEAD_NS`] while waiting for UIP to rise) that
/// [`Rtc::read_at_second_edge`] waits past, a second each, beyond the
/// caller's wait.
pub const MAX_HIDDEN_EDGES: u32 = 2;
const NS_PER_S: u64 = 1_000_000_000;
/// Polls after which a caller's clock that has not moved counts as stopped
/// (≥ 11 ms even at TCG's ~112 ns per poll).
const STOPPED_CLOCK_POLLS: u32 = 100_000;

/// How to read the RTC.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RtcOptions {
    /// CMOS index of the century register: the FADT's CENTURY field
    /// (`clockhal_x86::acpi::discover(..).rtc`), `None` when it is 0 or
    /// there are no ACPI tables.
    pub century_index: Option<u8>,
    /// Bit 7 of every index write (NMI disable).
    pub nmi: NmiBit,
}

/// A second edge of the RTC, timed on the caller's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RtcEdge {
    /// The second that began at the edge.
    pub time: RtcTime,
    /// The caller's clock (ns) at the edge: the midpoint of the polls that
    /// saw UIP rise, plus [`UIP_LEAD_NS`] (or of those between which the
    /// seconds changed, where UIP does not rise).
    pub at_ns: u64,
    /// Half the width of that window: the edge is within
    /// `at_ns ± uncertainty_ns`.
    pub uncertainty_ns: u64,
}

impl RtcEdge {
    /// Unix time in ns at instant `t_ns` of the caller's clock (the clock
    /// [`Rtc::read_at_second_edge`] was given): the edge's second plus the
    /// time elapsed since [`at_ns`](Self::at_ns). Saturates at 0.
    /// Interrupt-safe: yes.
    pub fn unix_ns_at(&self, t_ns: u64) -> u64 {
        let at_edge = self.time.unix_seconds().saturating_mul(1_000_000_000);
        if t_ns >= self.at_ns {
            at_edge.saturating_add(t_ns - self.at_ns)
        } else {
            at_edge.saturating_sub(self.at_ns - t_ns)
        }
    }
}

/// A second edge of the RTC timed on a counter of unknown rate
/// ([`Rtc::second_edge_on`]): the RTC began showing the new second (UIP
/// low, the seconds register changed) between `from` and `by`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CounterEdge {
    /// The second that began at the edge.
    pub time: RtcTime,
    /// The counter just before the last poll that showed the old second
    /// (or UIP up).
    pub from: u64,
    /// The counter just after the first poll that showed the new second.
    pub by: u64,
}

/// What showed a second edge, between two of the caller's times.
enum Marker {
    /// UIP rose ([`UIP_LEAD_NS`] before the edge).
    Rise(u64, u64),
    /// The seconds register changed, UIP low.
    Change(u64, u64),
}

/// The CMOS RTC.
#[derive(Debug)]
pub struct Rtc<H: Hardware> {
    hw: H,
    options: RtcOptions,
}

impl<H: Hardware> Rtc<H> {
    /// An RTC reader. Touches no hardware; fails only when
    /// `options.century_index` is not a CMOS RAM register (0x0E..=0x7F):
    /// pass `None` to fall back to the [`PIVOT_YEAR`] rule.
    /// Interrupt-safe: yes.
    pub fn new(hw: H, options: &RtcOptions) -> Result<Rtc<H>, RtcError> {
        if let Some(i) = options.century_index {
            if !(reg::RAM_START..0x80).contains(&i) {
                return Err(RtcError::BadCenturyIndex(i));
            }
        }
        Ok(Rtc {
            hw,
            options: *options,
        })
    }

    /// The hardware handle.
    /// Interrupt-safe: yes.
    pub fn hardware(&self) -> &H {
        &self.hw
    }

    /// Reads the date and time (see the crate docs for the rules). Takes
    /// a few dozen port accesses, plus up to 2.2 ms when an update is in
    /// progress.
    /// Interrupt-safe: no (CMOS index/data pairs: not atomic).
    pub fn read(&self) -> Result<RtcTime, RtcError> {
        self.check_state()?;
        let mut prev = self.snapshot()?;
        for _ in 1..MAX_SNAPSHOTS {
            let next = self.snapshot()?;
            if next == prev {
                return decode::decode(&next, self.options.century_index);
            }
            prev = next;
        }
        Err(RtcError::Unstable)
    }

    /// Waits for the RTC's next second edge and returns the second that
    /// began there with the instant, on the caller's clock `now_ns`
    /// (nanoseconds, e.g. the selected clock's `now()`), at which it began.
    ///
    /// Method: wait until UIP is low, poll until it rises (taking `now_ns`
    /// around every poll), place the edge [`UIP_LEAD_NS`] after the middle
    /// of the rise window, then [`read`](Self::read). Where UIP never rises
    /// (QEMU stops emulating it once status C's update and alarm flags are
    /// set and nobody clears them; clockhal never reads status C), the
    /// edge is the middle of the polls between which the seconds register
    /// changed with UIP low. Gives up with
    /// [`RtcError::NoUpdateEdge`] after `max_wait_ns` of the caller's clock
    /// (pass a bit over a second) — plus a second for each edge a
    /// preemption may have hidden (two polls more than [`UIP_LEAD_NS`]
    /// apart while UIP was low: its whole rise may lie between them), at
    /// most [`MAX_HIDDEN_EDGES`] —, when that clock stands still for
    /// 100,000 polls, or after 100,000,000 polls; and with
    /// [`RtcError::EdgeLost`] if the read ended too late to be sure it
    /// shows the edge's second.
    ///
    /// Interrupt-safe: no (waits up to seconds; the OS's CMOS driver must
    /// be kept off meanwhile).
    pub fn read_at_second_edge(
        &self,
        mut now_ns: impl FnMut() -> u64,
        max_wait_ns: u64,
    ) -> Result<RtcEdge, RtcError> {
        self.check_state()?;
        let start = now_ns();
        let deadline = core::cell::Cell::new(start.saturating_add(max_wait_ns));
        let (mut polls, mut moved_at, mut last) = (0u32, 0u32, start);
        let mut hidden = 0u32;
        // A second and a lead without a rise: UIP is not emulated (see
        // `next_edge`); the seconds register is watched from then on, and
        // one more second waited for.
        let mut watching = false;
        let watch_seconds = |t: u64| {
            if !watching && t.saturating_sub(start) > NS_PER_S + UIP_LEAD_NS {
                watching = true;
                deadline.set(deadline.get().saturating_add(NS_PER_S));
            }
            watching
        };
        // `rising`: the poll is one of those waiting for UIP to rise, after
        // one that read it low.
        let give_up = |t: u64, rising: bool| {
            polls += 1;
            // Two polls further apart than UIP's lead (a preempted vCPU)
            // may have missed its whole rise: that edge was bad luck, so
            // the next is waited for too (bounded).
            if rising && t.saturating_sub(last) > UIP_LEAD_NS && hidden < MAX_HIDDEN_EDGES {
                hidden += 1;
                deadline.set(deadline.get().saturating_add(NS_PER_S));
            }
            if t != last {
                (moved_at, last) = (polls, t);
            }
            polls > MAX_EDGE_POLLS || polls - moved_at > STOPPED_CLOCK_POLLS || t > deadline.get()
        };
        let (from, by, lead) = match self.next_edge(&mut now_ns, true, watch_seconds, give_up)? {
            Marker::Rise(from, by) => (from, by, UIP_LEAD_NS),
            Marker::Change(from, by) => (from, by, 0),
        };
        let half = (by - from) / 2;
        let at_ns = from.saturating_add(half).saturating_add(lead);
        let time = self.read()?;
        // The read must have finished before the next rise could have
        // started another update.
        let next_rise = at_ns.saturating_add(1_000_000_000 - UIP_LEAD_NS);
        if now_ns().saturating_add(half) >= next_rise {
            return Err(RtcError::EdgeLost);
        }
        Ok(RtcEdge {
            time,
            at_ns,
            uncertainty_ns: half,
        })
    }

    /// Waits for the RTC's next second edge, timed on a counter of
    /// unknown rate (the TSC, for its calibration where nothing else gives
    /// a rate): the first poll with UIP low that shows the new second.
    /// That is a fixed time after the edge on any one RTC (in QEMU the edge
    /// itself, on an MC146818 the end of its 1984 µs update cycle), so the
    /// differences between edges are exact to the poll windows; the
    /// counter's units are unknown here, so a read delayed past the next
    /// edge is not detected: compare several edges.
    /// Gives up with [`RtcError::NoUpdateEdge`] after `max_counts` of the
    /// counter, when it stands still for 100,000 polls, or after
    /// 100,000,000 polls.
    ///
    /// ```
    /// use clockhal_rtc::{Rtc, RtcOptions};
    /// use clockhal_sim::SimMachine;
    /// use clockhal_x86::Hardware;
    /// let m = SimMachine::bare_metal(); // TSC at 2.592 GHz
    /// let rtc = Rtc::new(&m, &RtcOptions::default()).unwrap();
    /// let a = rtc.second_edge_on(|| m.rdtsc(), 10_000_000_000).unwrap();
    /// let b = rtc.second_edge_on(|| m.rdtsc(), 10_000_000_000).unwrap();
    /// assert_eq!(b.time.unix_seconds(), a.time.unix_seconds() + 1);
    /// let ticks = (b.from + b.by) / 2 - (a.from + a.by) / 2;
    /// assert!(ticks.abs_diff(m.config().tsc_hz) < 100_000, "{ticks}");
    /// ```
    ///
    /// Interrupt-safe: no (waits up to a second; the OS's CMOS driver must
    /// be kept off meanwhile).
    pub fn second_edge_on(
        &self,
        mut counter: impl FnMut() -> u64,
        max_counts: u64,
    ) -> Result<CounterEdge, RtcError> {
        self.check_state()?;
        let start = counter();
        let (mut polls, mut moved_at, mut last) = (0u32, 0u32, start);
        let give_up = |t: u64, _rising: bool| {
            polls += 1;
            if t != last {
                (moved_at, last) = (polls, t);
            }
            polls > MAX_EDGE_POLLS
                || polls - moved_at > STOPPED_CLOCK_POLLS
                || t.wrapping_sub(start) > max_counts
        };
        let (Marker::Change(from, by) | Marker::Rise(from, by)) =
            self.next_edge(&mut counter, false, |_| true, give_up)?;
        Ok(CounterEdge {
            time: self.read()?,
            from,
            by,
        })
    }

    /// Polls until the RTC shows its next second edge, by either marker:
    /// UIP rising (it leads the edge by [`UIP_LEAD_NS`]; skipped when
    /// `rise_counts` is false) or, with UIP low, the seconds register
    /// changing. QEMU emulates UIP only while its update timer runs, which
    /// it stops once the update and alarm flags of status C are set and
    /// nobody clears them (clockhal never reads status C): then the
    /// seconds change is the only marker, and in QEMU it is the edge itself
    /// (its registers follow the host clock on every read). The caller's
    /// times are those just before the last poll that did not see the
    /// marker and just after the first that did. `give_up(t, rising)` ends
    /// the wait with [`RtcError::NoUpdateEdge`].
    fn next_edge(
        &self,
        now: &mut impl FnMut() -> u64,
        rise_counts: bool,
        mut watch_seconds: impl FnMut(u64) -> bool,
        mut give_up: impl FnMut(u64, bool) -> bool,
    ) -> Result<Marker, RtcError> {
        // UIP low first, so that its rise is seen. `before` is the time
        // just before the latest poll that saw no marker.
        let mut before = loop {
            let t = now();
            if !self.uip() {
                break t;
            }
            if give_up(t, false) {
                return Err(RtcError::NoUpdateEdge);
            }
        };
        // The seconds register is read (with UIP just seen low) only once
        // `watch_seconds` says so: each read widens the rise's window.
        let mut second = None;
        let mut low = true;
        loop {
            let t = now();
            if self.uip() {
                if rise_counts && low {
                    let by = now();
                    return Ok(Marker::Rise(before.min(by), by));
                }
                low = false;
            } else {
                low = true;
                if watch_seconds(t) {
                    let s = self.cmos(reg::SECONDS);
                    if second.is_some_and(|old| old != s) {
                        let by = now();
                        return Ok(Marker::Change(before.min(by), by));
                    }
                    second = Some(s);
                }
            }
            before = t;
            if give_up(t, low) {
                return Err(RtcError::NoUpdateEdge);
            }
        }
    }

    fn cmos(&self, index: u8) -> u8 {
        // Every index used here is below 0x80 and not status C.
        cmos::read(&self.hw, index, self.options.nmi).unwrap_or(0xFF)
    }

    fn uip(&self) -> bool {
        self.cmos(reg::STATUS_A) & A_UIP != 0
    }

    /// Present, powered and running.
    fn check_state(&self) -> Result<(), RtcError> {
        let (a, b) = (self.cmos(reg::STATUS_A), self.cmos(reg::STATUS_B));
        if a == 0xFF && b == 0xFF {
            return Err(RtcError::NoDevice);
        }
        if self.cmos(reg::STATUS_D) & D_VRT == 0 {
            return Err(RtcError::InvalidTime);
        }
        if b & B_SET != 0 {
            return Err(RtcError::Halted);
        }
        Ok(())
    }

    /// Waits (bounded) for UIP low, then reads every register: inside the
    /// 244 µs that UIP low guarantees before the next update.
    fn snapshot(&self) -> Result<Raw, RtcError> {
        if !(0..MAX_UIP_POLLS).any(|_| !self.uip()) {
            return Err(RtcError::UpdateStuck);
        }
        Ok(Raw {
            second: self.cmos(reg::SECONDS),
            minute: self.cmos(reg::MINUTES),
            hour: self.cmos(reg::HOURS),
            day: self.cmos(reg::DAY),
            month: self.cmos(reg::MONTH),
            year: self.cmos(reg::YEAR),
            century: self.options.century_index.map(|i| self.cmos(i)),
            status_b: self.cmos(reg::STATUS_B),
        })
    }
}
