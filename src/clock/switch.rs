//! Who is the current source: selection, demotion, forcing and
//! switching, in one place. The ranking itself is `crate::select`; the
//! vote that finds a source wrong is `clockhal_core::consensus` (through
//! the watchdog, `watchdog.rs`). Every switch here continues the timeline
//! above every instant returned so far.

use super::watchdog::State;
use super::{Clock, SWITCH_MARGIN_NS};
use crate::{Demotion, Report, SourceId, MAX_CANDIDATES};
use clockhal_x86::Hardware;
use core::sync::atomic::Ordering;

impl<H: Hardware + Clone> Clock<H> {
    /// Makes `id` the current source whatever its rating or verdict (for
    /// experiments and comparisons, like [`Policy::force`](crate::Policy::force)
    /// at run time), continuing the timeline above every instant returned
    /// so far. The watchdog still checks it but never switches away; a
    /// supervised TSC stays even without ticks. `Err` if that source was
    /// not constructed.
    /// Interrupt-safe: no (waits for the watchdog lock).
    pub fn force(&self, id: SourceId) -> Result<(), crate::Rejection> {
        if self.scale_of(id.index()).is_none() || self.backends.source(id).is_none() {
            return Err(crate::Rejection::NotConfigured("source not constructed"));
        }
        self.read_before_switch();
        self.locked(|_| {
            self.forced.store(true, Ordering::Release);
            self.switch_to(id);
            self.deadline.store(u64::MAX, Ordering::Release);
        });
        Ok(())
    }

    /// Back to automatic selection after [`force`](Self::force) (or a
    /// forced policy): switches to the best eligible source.
    /// Interrupt-safe: no (waits for the watchdog lock).
    pub fn unforce(&self) {
        self.forced.store(false, Ordering::Release);
        self.read_before_switch();
        self.locked(|_| {
            self.reselect_held();
            // A supervised TSC that stays current is supervised again.
            let cur = self.source_id();
            if !self.supervised() && self.is_supervised(cur) && self.has_watchdog_reference(cur) {
                let now = self.now_ns();
                let timeout = self.settings.supervision_timeout.as_nanos();
                self.deadline
                    .store(now.saturating_add(timeout), Ordering::Release);
            }
        });
    }

    /// Marks `id` demoted in the live report.
    pub(crate) fn demote(&self, id: SourceId, reason: Demotion) {
        if self.backends.raw_tsc(id) {
            // Demoted for its own fault, or unverified (a supervised TSC
            // whose ticks stopped may have changed rate since): it
            // measures no gaps until re-admitted.
            self.tsc_faulted.store(true, Ordering::Release);
        }
        if let Some(c) = self.report.lock().get_mut(id) {
            c.demote(reason);
        }
    }

    /// Demotes `id` (the current source) and switches to the best remaining
    /// eligible source; the new current source, or `None` if the clock is
    /// forced or nothing else is eligible (then it stays).
    pub(super) fn demote_and_switch(
        &self,
        st: &State,
        id: SourceId,
        reason: Demotion,
    ) -> Option<SourceId> {
        let no_reading = matches!(reason, Demotion::Jumped { .. });
        self.demote_and_switch_from(st, id, reason, no_reading)
    }

    /// [`demote_and_switch`](Self::demote_and_switch); `no_reading`: the
    /// old source's reading here is no evidence of the time (it jumped, or
    /// it serves no reads on this CPU and would give a held value).
    pub(super) fn demote_and_switch_from(
        &self,
        st: &State,
        id: SourceId,
        reason: Demotion,
        no_reading: bool,
    ) -> Option<SourceId> {
        self.demote(id, reason);
        if self.forced.load(Ordering::Acquire) {
            return None;
        }
        let to = self.best_counting(id)?;
        if no_reading {
            // The new source starts from what the floors and the anchor's
            // independent counter say.
            let start = self.trusted_now(st).saturating_add(SWITCH_MARGIN_NS);
            self.start_source(to, start);
            self.switches.fetch_add(1, Ordering::Release);
        } else {
            // Drift, a stop, host faults: the old source's reading now is
            // off by what accumulated since the last round at most, and
            // the timeline continues from it without a step.
            self.switch_to(to);
        }
        Some(to)
    }

    /// The best eligible source other than `id` that counts: a device
    /// found stopped (firmware halted it while no round read it) is
    /// demoted as the watchdog would have and the next best is taken.
    fn best_counting(&self, id: SourceId) -> Option<SourceId> {
        for _ in 0..MAX_CANDIDATES {
            let report: Report = *self.report.lock();
            let to = crate::select::best(&report, |c| c.id != id)?;
            if self.backends.raw_tsc(to) || self.counting(to) {
                return Some(to);
            }
            let fault = clockhal_core::Fault::Stopped;
            self.demote(to, Demotion::Watchdog { fault, against: id });
        }
        None
    }

    /// From a read path (no watchdog tick at hand): demotes the current
    /// source and switches, if the watchdog lock is free (a tick that runs
    /// meanwhile will judge it anyway).
    #[cold]
    pub(crate) fn demote_current(&self, reason: Demotion) {
        self.try_locked(|st| {
            let cur = self.source_id();
            if self.usable_now(cur) && self.demote_and_switch(st, cur, reason).is_some() {
                st.core = None;
            }
        });
    }

    /// Selection again (after a rating changed): switches if the best
    /// eligible source is not the current one.
    pub(crate) fn reselect(&self) {
        self.locked(|_| self.reselect_held());
    }

    /// A reading before taking the lock for a switch: after an idle longer
    /// than `max_jump` it is above the jump check's ceiling, which only
    /// the check can raise, and the check cannot run under the lock the
    /// switch holds (the switch's own reading would hold, and the idle be
    /// lost). Read here, the check runs and the ceiling moves.
    fn read_before_switch(&self) {
        let _ = self.now_ns();
    }

    /// [`reselect`](Self::reselect) with the watchdog lock held.
    pub(crate) fn reselect_held(&self) {
        if self.forced.load(Ordering::Acquire) {
            return;
        }
        let report: Report = *self.report.lock();
        if let Some(best) = crate::select::best(&report, |_| true) {
            if best != self.source_id() {
                self.switch_to(best);
            }
        }
    }

    /// Makes `to` current, continuing the timeline just above every instant
    /// returned so far (on any CPU). Only with the watchdog lock held.
    pub(super) fn switch_to(&self, to: SourceId) {
        // The old source's reading now, and every floor: the new source
        // starts above all of them.
        let old = self.now_ns();
        let start = old.max(self.high_water()).saturating_add(SWITCH_MARGIN_NS);
        self.start_source(to, start);
        self.switches.fetch_add(1, Ordering::Release);
    }
}
