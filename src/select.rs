//! Choosing among candidates: clockhal_core's ranking plus the facade's
//! hard rule that a trapping source never wins while a no-trap one is
//! eligible.

use crate::{Candidate, Report, SourceId, MAX_CANDIDATES};
use clockhal_core::{select, ClockSource, Frequency, Quality, ReadCost, Stability};
use core::cmp::Ordering;

/// A candidate's descriptors seen as a [`ClockSource`], so that
/// `clockhal_core::select` can rank report entries without the backends.
struct Descriptor<'a>(&'a Candidate);

/// 1 Hz, spelled so that no `unwrap` is needed.
pub(crate) const ONE_HZ: Frequency = match Frequency::from_hz(1) {
    Ok(f) => f,
    Err(_) => panic!("1 Hz is in range"),
};

impl ClockSource for Descriptor<'_> {
    fn name(&self) -> &'static str {
        self.0.name
    }
    fn read(&self) -> u64 {
        0
    }
    fn frequency(&self) -> Frequency {
        // Rejected candidates are never ranked; 1 Hz is a harmless filler.
        self.0.frequency.unwrap_or(ONE_HZ)
    }
    fn quality(&self) -> Quality {
        self.0.rating.unwrap_or(Quality::UNUSABLE)
    }
    fn stability(&self) -> Stability {
        self.0.stability
    }
    fn read_cost(&self) -> ReadCost {
        self.0.read_cost.unwrap_or(ReadCost::SeveralTraps)
    }
}

/// `Less` when `a` ranks before (is better than) `b`.
pub(crate) fn compare(a: &Candidate, b: &Candidate) -> Ordering {
    select::compare(&Descriptor(a), &Descriptor(b))
}

/// The best eligible candidate for which `allowed` holds: among no-trap
/// candidates if any is eligible, otherwise among all.
pub(crate) fn best(report: &Report, allowed: impl Fn(&Candidate) -> bool) -> Option<SourceId> {
    let descriptors: [Option<Descriptor<'_>>; MAX_CANDIDATES] = core::array::from_fn(|i| {
        report.slots()[i]
            .as_ref()
            .filter(|c| c.is_eligible() && allowed(c))
            .map(Descriptor)
    });
    let pick = |no_trap_only: bool| {
        select::best_by(MAX_CANDIDATES, |i| {
            let d = descriptors[i].as_ref()?;
            if no_trap_only && d.0.read_cost != Some(ReadCost::NoTrap) {
                return None;
            }
            Some(d as &dyn ClockSource)
        })
    };
    pick(true)
        .or_else(|| pick(false))
        .and_then(SourceId::from_index)
}
