//! Ranking clock sources.
//!
//! Order, best first (each rule breaks ties of the previous one):
//! 1. higher [`Quality`](crate::Quality); sources rated `<= 0` are never
//!    chosen by [`best`];
//! 2. fewer hypervisor exits per read ([`ReadCost`](crate::ReadCost));
//! 3. monotonic across CPUs, then migration-safe, then not
//!    software-extended (each a [`Stability`] flag);
//! 4. higher frequency (finer resolution);
//! 5. earlier in the candidate list (the caller's order).
//!
//! ```
//! use clockhal_core::{select, ClockSource, Frequency, Quality, ReadCost, Stability};
//! struct Fake(&'static str, i32, ReadCost);
//! impl ClockSource for Fake {
//!     fn name(&self) -> &'static str { self.0 }
//!     fn read(&self) -> u64 { 0 }
//!     fn frequency(&self) -> Frequency { Frequency::from_hz(1_000_000).unwrap() }
//!     fn quality(&self) -> Quality { Quality::new(self.1) }
//!     fn stability(&self) -> Stability { Stability::empty() }
//!     fn read_cost(&self) -> ReadCost { self.2 }
//! }
//! let hpet = Fake("hpet", 250, ReadCost::OneTrap);
//! let kvm = Fake("kvmclock", 400, ReadCost::NoTrap);
//! let broken = Fake("tsc", -100, ReadCost::NoTrap);
//! let c: [&dyn ClockSource; 3] = [&hpet, &broken, &kvm];
//! assert_eq!(select::best(&c), Some(2));
//! ```

use crate::{ClockSource, Stability};
use core::cmp::Ordering;

/// Compares two sources: `Less` means `a` ranks *before* (is better than) `b`.
/// Rule 5 (list order) is left to the caller's stable sort.
pub fn compare(a: &dyn ClockSource, b: &dyn ClockSource) -> Ordering {
    let flags = |s: &dyn ClockSource| {
        let f = s.stability();
        (
            f.contains(Stability::MONOTONIC_ACROSS_CPUS),
            f.contains(Stability::SURVIVES_MIGRATION),
            !f.contains(Stability::SOFTWARE_EXTENDED),
        )
    };
    b.quality()
        .cmp(&a.quality())
        .then_with(|| a.read_cost().cmp(&b.read_cost()))
        .then_with(|| flags(b).cmp(&flags(a)))
        .then_with(|| {
            // Compare num_a/den_a with num_b/den_b without division.
            let (fa, fb) = (a.frequency(), b.frequency());
            let l = fa.numerator() as u128 * fb.denominator() as u128;
            let r = fb.numerator() as u128 * fa.denominator() as u128;
            r.cmp(&l)
        })
}

/// Index of the best auto-selectable candidate, or `None` if every one is
/// rated `<= 0` (or the list is empty).
pub fn best(candidates: &[&dyn ClockSource]) -> Option<usize> {
    best_by(candidates.len(), |i| Some(candidates[i]))
}

/// Like [`best`], over `n` slots where `get(i)` returns `None` for a slot the
/// caller excludes (rejected or demoted candidates).
pub fn best_by<'a>(
    n: usize,
    mut get: impl FnMut(usize) -> Option<&'a dyn ClockSource>,
) -> Option<usize> {
    let mut best: Option<(usize, &'a dyn ClockSource)> = None;
    for i in 0..n {
        let Some(s) = get(i) else { continue };
        if !s.quality().auto_selectable() {
            continue;
        }
        match best {
            Some((_, b)) if compare(s, b) != Ordering::Less => {}
            _ => best = Some((i, s)),
        }
    }
    best.map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Frequency, Quality, ReadCost};

    struct F(i32, ReadCost, Stability, u64);
    impl ClockSource for F {
        fn name(&self) -> &'static str {
            "f"
        }
        fn read(&self) -> u64 {
            0
        }
        fn frequency(&self) -> Frequency {
            Frequency::from_hz(self.3).unwrap()
        }
        fn quality(&self) -> Quality {
            Quality::new(self.0)
        }
        fn stability(&self) -> Stability {
            self.2
        }
        fn read_cost(&self) -> ReadCost {
            self.1
        }
    }

    #[test]
    fn tie_rules_in_order() {
        let e = Stability::empty();
        let trap = F(300, ReadCost::OneTrap, e, 10);
        let notrap = F(300, ReadCost::NoTrap, e, 10);
        assert_eq!(best(&[&trap, &notrap]), Some(1));
        let smp = F(300, ReadCost::NoTrap, Stability::MONOTONIC_ACROSS_CPUS, 10);
        assert_eq!(best(&[&notrap, &smp]), Some(1));
        let fast = F(300, ReadCost::NoTrap, e, 20);
        assert_eq!(best(&[&notrap, &fast]), Some(1));
        let twin = F(300, ReadCost::NoTrap, e, 10);
        assert_eq!(
            best(&[&notrap, &twin]),
            Some(0),
            "list order breaks full ties"
        );
        let ext = F(300, ReadCost::NoTrap, Stability::SOFTWARE_EXTENDED, 1000);
        assert_eq!(best(&[&ext, &notrap]), Some(1));
    }

    #[test]
    fn never_selects_non_positive() {
        let z = F(0, ReadCost::NoTrap, Stability::empty(), 10);
        let n = F(-100, ReadCost::NoTrap, Stability::empty(), 10);
        assert_eq!(best(&[&z, &n]), None);
        assert_eq!(best(&[]), None);
        assert_eq!(
            best_by(2, |i| if i == 0 {
                None
            } else {
                Some(&z as &dyn ClockSource)
            }),
            None
        );
    }
}
