//! Re-admission of a demoted candidate: a supervised TSC that went
//! unsupervised only because the watchdog ticks stopped (interrupts off
//! during a driver's init) comes back once it verifies again, as Linux
//! re-selects the best clocksource when its watchdog clears one.
//!
//! Only that demotion is forgiven: it says nothing against the source. A
//! source demoted for a fault of its own (drift, a step back, a stop, a
//! jump, host faults, stuck reads) stays out. Re-admission needs fresh
//! evidence — [`READMIT_ROUNDS`] consecutive rounds in agreement with an
//! independent reference, judged by a watchdog of their own in which the
//! candidate is the conditional member (blamed at once on any
//! disagreement) — and happens at most [`MAX_READMISSIONS`] times per
//! source, so an OS whose ticks keep stopping cannot make the clock flap.

use super::Clock;
use crate::{Demotion, SourceId, Verdict, MAX_CANDIDATES};
use clockhal_core::{Member, MemberVerdict, Watchdog};
use clockhal_x86::Hardware;

/// Consecutive agreeing rounds (after the first, which only starts the
/// comparison) before a candidate is re-admitted: 1 s at 250 ms ticks.
pub const READMIT_ROUNDS: u32 = 4;

/// Re-admissions of one source per clock, at most.
pub const MAX_READMISSIONS: u8 = 3;

/// One candidate on probation: it, the reference it is compared with, the
/// comparison, and its agreeing rounds so far.
pub(crate) struct Probation {
    candidate: SourceId,
    reference: SourceId,
    watchdog: Watchdog,
    good: u32,
}

/// Re-admission state, under the watchdog lock.
pub(crate) struct Readmission {
    probation: Option<Probation>,
    readmitted: [u8; MAX_CANDIDATES],
}

impl Readmission {
    pub(crate) const fn new() -> Readmission {
        Readmission {
            probation: None,
            readmitted: [0; MAX_CANDIDATES],
        }
    }

    /// Forgets the comparison (its reference's count may have reset); the
    /// counts of re-admissions stay.
    pub(crate) fn restart(&mut self) {
        self.probation = None;
    }
}

/// Whether a candidate demoted for `reason` may come back on fresh
/// evidence: only when the demotion says nothing against the source.
pub(crate) fn forgivable(reason: Demotion) -> bool {
    matches!(reason, Demotion::Unsupervised)
}

impl<H: Hardware + Clone> Clock<H> {
    /// One probation round for the first forgivable demoted candidate,
    /// against `reference` (this tick's, a member that needs no
    /// supervision); re-admits it and selects again once it agreed for
    /// [`READMIT_ROUNDS`] rounds. The re-admitted source, if any.
    /// `same_tsc`: this tick's TSC compares with the last tick's (else a
    /// raw TSC's interval is no evidence).
    pub(crate) fn probation_round(
        &self,
        readmission: &mut Readmission,
        reference: SourceId,
        paused: bool,
        same_tsc: bool,
    ) -> Option<SourceId> {
        let report = *self.report.lock();
        let cur = self.source_id();
        let readmitted = readmission.readmitted;
        let candidate = report.candidates().find_map(|c| match c.verdict {
            Verdict::Demoted { descriptor, reason }
                if forgivable(reason)
                    && readmitted[c.id.index()] < MAX_READMISSIONS
                    && c.id != reference
                    && can_be_member(c.id, cur)
                    && self.domain_now(c.id) != self.domain_now(reference) =>
            {
                Some((c.id, descriptor))
            }
            _ => None,
        });
        let Some((id, descriptor)) = candidate else {
            readmission.probation = None;
            return None;
        };
        let ref_rate = report.get(reference)?.frequency()?;
        let sources = self.backends.sources();
        sources[id.index()]?;
        let ref_src = sources[reference.index()]?;
        let cpu = self.hw.cpu_index();
        if !self.backends.serves(id, cpu) || !self.backends.serves(reference, cpu) {
            return None;
        }
        let fresh = !readmission
            .probation
            .as_ref()
            .is_some_and(|p| p.candidate == id && p.reference == reference);
        if fresh {
            let members = [
                Member {
                    rate: descriptor.frequency,
                    domain: self.domain_now(id),
                    conditional: true,
                },
                Member {
                    rate: ref_rate,
                    domain: self.domain_now(reference),
                    conditional: false,
                },
            ];
            readmission.probation = Some(Probation {
                candidate: id,
                reference,
                watchdog: Watchdog::new(&members, self.settings.watchdog),
                good: 0,
            });
        }
        let ids = [Some(id), Some(reference)];
        let served = |s: SourceId| {
            self.backends.serves(s, cpu) && (same_tsc || self.compares_across_cpus(s))
        };
        let round = self.take_round(ref_src, 1, &ids, &sources, &served)?;
        let p = readmission.probation.as_mut()?;
        let j = p.watchdog.check(&round, 1, 0, paused);
        match j.verdict(0) {
            MemberVerdict::Ok { .. } => p.good += 1,
            MemberVerdict::NotJudged => {}
            _ => p.good = 0,
        }
        if p.good < READMIT_ROUNDS {
            return None;
        }
        readmission.probation = None;
        readmission.readmitted[id.index()] += 1;
        if let Some(c) = self.report.lock().get_mut(id) {
            c.readmit();
        }
        if self.backends.raw_tsc(id) {
            self.tsc_faulted
                .store(false, core::sync::atomic::Ordering::Release);
        }
        self.reselect_held();
        Some(id)
    }
}

/// Whether `id` can be a watchdog member while `current` is the clock's
/// source. The PIT's 16-bit count wraps every 54.9 ms: only the current
/// source's reads (an OS that committed to reading its clock that often)
/// keep it extended. Not current — a calibration reference, a probe-time
/// witness, a committed clock of last resort while another source is
/// current — no tick can judge it, nor supervise anything with it.
pub(crate) fn can_be_member(id: SourceId, current: SourceId) -> bool {
    id != SourceId::Pit || id == current
}
