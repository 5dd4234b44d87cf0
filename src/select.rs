//! Choosing among candidates: clockhal_core's ranking of descriptors plus
//! the facade's hard rule that a trapping source never wins while a
//! no-trap one is eligible, and the probe's selection (the forced name,
//! else the best). At run time `clock/switch.rs` applies the same
//! ranking when it demotes, forces or switches.

use crate::{Candidate, Report, SourceId, MAX_CANDIDATES};
use clockhal_core::{select, ReadCost};
use core::cmp::Ordering;

/// `Less` when `a` ranks before (is better than) `b`; constructed
/// candidates before rejected ones.
pub(crate) fn compare(a: &Candidate, b: &Candidate) -> Ordering {
    match (a.descriptor(), b.descriptor()) {
        (Some(x), Some(y)) => select::compare(x, y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// The best eligible candidate for which `allowed` holds: among no-trap
/// candidates if any is eligible, otherwise among all.
pub(crate) fn best(report: &Report, allowed: impl Fn(&Candidate) -> bool) -> Option<SourceId> {
    let eligible = |i: usize, no_trap_only: bool| {
        let c = report.slots()[i].as_ref()?;
        if !c.is_eligible() || !allowed(c) {
            return None;
        }
        let d = *c.descriptor()?;
        (!no_trap_only || d.read_cost == ReadCost::NoTrap).then_some(d)
    };
    select::best_by(MAX_CANDIDATES, |i| eligible(i, true))
        .or_else(|| select::best_by(MAX_CANDIDATES, |i| eligible(i, false)))
        .and_then(SourceId::from_index)
}

/// Selection: the name forced by the policy if that candidate was
/// constructed, else the best eligible candidate (no-trap rule included).
pub(crate) fn reselect(report: &mut Report, sources: &crate::candidate::Sources<'_>) {
    let forced = report.force_request().and_then(|name| {
        report
            .candidates()
            .find(|c| c.is_constructed() && c.name == name && sources[c.id.index()].is_some())
            .map(|c| c.id)
    });
    match forced {
        Some(id) => report.set_selected(Some(id), true),
        None => {
            let best = best(report, |_| true);
            report.set_selected(best, false);
        }
    }
}
