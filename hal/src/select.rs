//! Ranking clock sources.
//!
//! Order, best first (each rule breaks ties of the previous one):
//! 1. higher [`Quality`]; sources rated `<= 0` are never
//!    chosen by [`best`];
//! 2. fewer hypervisor exits per read ([`ReadCost`]);
//! 3. monotonic across CPUs, then migration-safe, then not
//!    software-extended (each a [`Stability`] flag);
//! 4. higher frequency (finer resolution);
//! 5. earlier in the candidate list (the caller's order).
//!
//! ```
//! use clockhal_core::select::{self, Descriptor};
//! use clockhal_core::{Frequency, Quality, ReadCost, Stability};
//! let d = |rating, read_cost| Descriptor {
//!     rating: Quality::new(rating),
//!     read_cost,
//!     stability: Stability::empty(),
//!     frequency: Frequency::from_hz(1_000_000).unwrap(),
//! };
//! let hpet = d(250, ReadCost::OneTrap);
//! let kvm = d(400, ReadCost::NoTrap);
//! let broken = d(-100, ReadCost::NoTrap);
//! assert_eq!(select::best(&[hpet, broken, kvm]), Some(2));
//! ```

use crate::{Frequency, Quality, ReadCost, Stability};
use core::cmp::Ordering;

/// What ranking needs to know of a source: its rating, exit cost,
/// stability flags and rate. Selection ranks descriptors, never the
/// sources themselves, so a probe report can be ranked without the
/// backends (and without reading anything). A source's own is
/// [`ClockSource::descriptor`](crate::ClockSource::descriptor).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Descriptor {
    /// Rating (see [`Quality`] for the bands).
    pub rating: Quality,
    /// Hypervisor exits per read.
    pub read_cost: ReadCost,
    /// What the source guarantees.
    pub stability: Stability,
    /// Exact tick rate.
    pub frequency: Frequency,
}

/// Compares two sources: `Less` means `a` ranks *before* (is better than) `b`.
/// Rule 5 (list order) is left to the caller's stable sort.
/// Interrupt-safe: yes.
pub fn compare(a: &Descriptor, b: &Descriptor) -> Ordering {
    let flags = |d: &Descriptor| {
        let f = d.stability;
        (
            f.contains(Stability::MONOTONIC_ACROSS_CPUS),
            f.contains(Stability::SURVIVES_MIGRATION),
            !f.contains(Stability::SOFTWARE_EXTENDED),
        )
    };
    b.rating
        .cmp(&a.rating)
        .then_with(|| a.read_cost.cmp(&b.read_cost))
        .then_with(|| flags(b).cmp(&flags(a)))
        .then_with(|| {
            // Compare num_a/den_a with num_b/den_b without division.
            let (fa, fb) = (a.frequency, b.frequency);
            let l = fa.numerator() as u128 * fb.denominator() as u128;
            let r = fb.numerator() as u128 * fa.denominator() as u128;
            r.cmp(&l)
        })
}

/// Index of the best auto-selectable candidate, or `None` if every one is
/// rated `<= 0` (or the list is empty).
/// Interrupt-safe: yes.
pub fn best(candidates: &[Descriptor]) -> Option<usize> {
    best_by(candidates.len(), |i| Some(candidates[i]))
}

/// Like [`best`], over `n` slots where `get(i)` returns `None` for a slot the
/// caller excludes (rejected or demoted candidates).
/// Interrupt-safe: yes.
pub fn best_by(n: usize, mut get: impl FnMut(usize) -> Option<Descriptor>) -> Option<usize> {
    let mut best: Option<(usize, Descriptor)> = None;
    for i in 0..n {
        let Some(d) = get(i) else { continue };
        if !d.rating.auto_selectable() {
            continue;
        }
        match best {
            Some((_, b)) if compare(&d, &b) != Ordering::Less => {}
            _ => best = Some((i, d)),
        }
    }
    best.map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(rating: i32, read_cost: ReadCost, stability: Stability, hz: u64) -> Descriptor {
        Descriptor {
            rating: Quality::new(rating),
            read_cost,
            stability,
            frequency: Frequency::from_hz(hz).unwrap(),
        }
    }

    #[test]
    fn tie_rules_in_order() {
        let e = Stability::empty();
        let trap = f(300, ReadCost::OneTrap, e, 10);
        let notrap = f(300, ReadCost::NoTrap, e, 10);
        assert_eq!(best(&[trap, notrap]), Some(1));
        let smp = f(300, ReadCost::NoTrap, Stability::MONOTONIC_ACROSS_CPUS, 10);
        assert_eq!(best(&[notrap, smp]), Some(1));
        let fast = f(300, ReadCost::NoTrap, e, 20);
        assert_eq!(best(&[notrap, fast]), Some(1));
        let twin = f(300, ReadCost::NoTrap, e, 10);
        assert_eq!(
            best(&[notrap, twin]),
            Some(0),
            "list order breaks full ties"
        );
        let ext = f(300, ReadCost::NoTrap, Stability::SOFTWARE_EXTENDED, 1000);
        assert_eq!(best(&[ext, notrap]), Some(1));
    }

    #[test]
    fn never_selects_non_positive() {
        let z = f(0, ReadCost::NoTrap, Stability::empty(), 10);
        let n = f(-100, ReadCost::NoTrap, Stability::empty(), 10);
        assert_eq!(best(&[z, n]), None);
        assert_eq!(best(&[]), None);
        assert_eq!(best_by(2, |i| if i == 0 { None } else { Some(z) }), None);
    }
}
