//! The one rule that says which clock is wrong: the probe's self-check and
//! the run-time watchdog both ask it.
//!
//! Each voter has measured one interval, expressed as its rate difference
//! from a common pacer in ppm (`skew_ppm`), with the part of that figure its
//! read-back windows can explain (`uncertainty_ppm`). Two voters *agree*
//! when their skews differ by at most the tolerance plus both
//! uncertainties.
//!
//! - **A majority** is the largest group of voters that agree with one
//!   voter (the group's *anchor*), weighed in *independent counter
//!   domains* (voters reading the same hardware counter count once, see
//!   [`CounterDomain`]). It decides when it spans at least two domains and
//!   no disjoint group that disagrees with it spans as many (two against
//!   two decides nothing). Every voter outside it is outvoted.
//! - **Otherwise** a disagreement alone cannot say who is wrong. Only the
//!   caller's pair (the current source and the watchdog's reference; the
//!   two candidates when the self-check measured exactly two) is looked at:
//!   when they disagree and exactly one of them is *conditional* (its
//!   correctness rests on a claim nobody verified: an estimated rate, a
//!   supervised TSC), that one loses; else it is reported undecided.
//!
//! The function is pure: no hardware, no state, no allocation.

/// The hardware counter a voter's readings come from: voters of one
/// domain can fail together (the TSC stops in a deep C-state: the TSC,
/// kvmclock and the Hyper-V page all stop), so they count as one vote.
///
/// The HPET, the PM timer and the PIT count as three although a PC clocks
/// them from one 14.318 MHz crystal and a hypervisor emulates them from
/// one host clock: what they vote on (a wrong period register, a counter
/// that stopped, tore or skipped) fails per counter, while what they
/// share cannot outvote anyone: a crystal's error (about ±100 ppm) is
/// below the watchdog's 500 ppm tolerance, and a pause of the guest that
/// freezes them together is measured by the caller as a gap (the
/// self-check's pacer, the watchdog's pause check) and never judged as a
/// rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum CounterDomain {
    /// The CPU's time-stamp counter (TSC, kvmclock, Hyper-V page).
    Tsc,
    /// The HPET main counter.
    Hpet,
    /// The ACPI PM timer.
    AcpiPm,
    /// The 8254 PIT.
    Pit,
    /// The hypervisor's partition reference counter (Hyper-V MSR).
    HypervisorCounter,
    /// The host OS's clock (hosted mode).
    HostOs,
    /// A counter clockhal does not know (OS-supplied source), numbered by
    /// the caller so that distinct ones count separately.
    Other(u8),
}

/// One voter's measurement of the common interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Vote {
    /// Its rate relative to the pacer, ppm.
    pub skew_ppm: i64,
    /// How much of `skew_ppm` its read-back windows can explain.
    pub uncertainty_ppm: u64,
    /// The counter domain whose rate its rate rests on (a TSC calibrated
    /// against the HPET votes as the HPET: it agrees with it by
    /// construction).
    pub domain: CounterDomain,
    /// Its correctness rests on an unverified claim: it loses a two-way
    /// disagreement with a voter that is not conditional.
    pub conditional: bool,
}

/// What [`decide`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Decision {
    /// A majority: `anchor` is the voter it formed around.
    Majority {
        /// The voter the winning group agrees with.
        anchor: usize,
    },
    /// No majority; of the caller's pair, `loser` (conditional)
    /// disagreed with `winner` (not conditional).
    TwoWay {
        /// The conditional member of the pair.
        loser: usize,
        /// The other member of the pair.
        winner: usize,
    },
    /// No majority, and the pair disagrees with nothing to say who is
    /// wrong.
    Undecided,
    /// No majority, and the pair (if any) agrees or did not both vote.
    NoFault,
}

/// The outcome for every voter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Consensus<const N: usize> {
    /// How the verdict was reached.
    pub decision: Decision,
    /// The voters found wrong (a majority outvoted them, or the two-way
    /// rule blamed them).
    pub outvoted: [bool; N],
}

impl<const N: usize> Consensus<N> {
    /// The voter the others were measured against: the majority's anchor,
    /// or the two-way winner.
    ///
    /// Interrupt-safe: yes (pure).
    pub const fn anchor(&self) -> Option<usize> {
        match self.decision {
            Decision::Majority { anchor } => Some(anchor),
            Decision::TwoWay { winner, .. } => Some(winner),
            Decision::Undecided | Decision::NoFault => None,
        }
    }
}

/// Decides which voters are wrong (see the module docs).
///
/// `votes[i]`: voter `i`'s measurement, `None` for one that did not vote.
/// `tolerance_ppm`: the disagreement tolerated on top of the voters'
/// uncertainties. `prefer`: wins ties for the anchor (the watchdog's
/// reference); other ties go to the lowest index, so callers list voters
/// best first. `pair`: the two voters the two-way rule looks at when there
/// is no majority.
///
/// Interrupt-safe: yes (pure).
pub fn decide<const N: usize>(
    votes: &[Option<Vote>; N],
    tolerance_ppm: u64,
    prefer: Option<usize>,
    pair: Option<(usize, usize)>,
) -> Consensus<N> {
    let agree = |a: usize, b: usize| match (votes[a], votes[b]) {
        (Some(x), Some(y)) => {
            x.skew_ppm.abs_diff(y.skew_ppm)
                <= tolerance_ppm
                    .saturating_add(x.uncertainty_ppm)
                    .saturating_add(y.uncertainty_ppm)
        }
        _ => false,
    };
    let voted = |i: usize| votes[i].is_some();
    let weight = |pick: &dyn Fn(usize) -> bool| {
        let mut seen = [None::<CounterDomain>; N];
        let mut n = 0;
        for v in (0..N).filter(|&i| pick(i)).filter_map(|i| votes[i]) {
            if !seen[..n].contains(&Some(v.domain)) {
                seen[n] = Some(v.domain);
                n += 1;
            }
        }
        n
    };

    let mut outvoted = [false; N];
    // The largest agreeing group, by independent domains.
    let mut best: Option<(usize, usize)> = None;
    for seed in (0..N).filter(|&i| voted(i)) {
        let w = weight(&|j| agree(seed, j));
        let better = match best {
            None => true,
            Some((_, bw)) => w > bw || (w == bw && Some(seed) == prefer),
        };
        if better {
            best = Some((seed, w));
        }
    }
    if let Some((anchor, w)) = best.filter(|&(_, w)| w >= 2) {
        // A majority needs no rival: a disjoint group, disagreeing with
        // it, of as many domains.
        let rivalled = (0..N)
            .filter(|&j| voted(j) && !agree(anchor, j))
            .any(|j| weight(&|k| agree(j, k) && !agree(anchor, k)) >= w);
        if !rivalled {
            for (i, o) in outvoted.iter_mut().enumerate() {
                *o = voted(i) && !agree(anchor, i);
            }
            return Consensus {
                decision: Decision::Majority { anchor },
                outvoted,
            };
        }
    }
    let decision = match pair {
        Some((a, b)) if a != b && voted(a) && voted(b) && !agree(a, b) => {
            let cond = |i: usize| votes[i].is_some_and(|v| v.conditional);
            match (cond(a), cond(b)) {
                (true, false) => Decision::TwoWay {
                    loser: a,
                    winner: b,
                },
                (false, true) => Decision::TwoWay {
                    loser: b,
                    winner: a,
                },
                _ => Decision::Undecided,
            }
        }
        _ => Decision::NoFault,
    };
    if let Decision::TwoWay { loser, .. } = decision {
        outvoted[loser] = true;
    }
    Consensus { decision, outvoted }
}

#[cfg(test)]
mod tests {
    use super::*;
    use CounterDomain::*;

    fn v(skew_ppm: i64, domain: CounterDomain) -> Option<Vote> {
        Some(Vote {
            skew_ppm,
            uncertainty_ppm: 0,
            domain,
            conditional: false,
        })
    }

    fn cond(mut v: Option<Vote>) -> Option<Vote> {
        if let Some(v) = v.as_mut() {
            v.conditional = true;
        }
        v
    }

    #[test]
    fn the_odd_one_out_is_outvoted() {
        let c = decide(&[v(0, Tsc), v(1000, Hpet), v(10, AcpiPm)], 500, None, None);
        assert_eq!(c.decision, Decision::Majority { anchor: 0 });
        assert_eq!(c.outvoted, [false, true, false]);
    }

    #[test]
    fn one_domain_read_twice_is_one_vote() {
        // kvmclock and a TSC rated from it against one HPET: no majority.
        let c = decide(
            &[v(0, Tsc), v(0, Tsc), v(-50_000, Hpet)],
            10_000,
            None,
            None,
        );
        assert_eq!(c.decision, Decision::NoFault);
        assert_eq!(c.outvoted, [false; 3]);
        // A second independent domain siding with the HPET decides.
        let c = decide(
            &[v(0, Tsc), v(0, Tsc), v(-50_000, Hpet), v(-50_010, AcpiPm)],
            10_000,
            None,
            None,
        );
        assert_eq!(c.decision, Decision::Majority { anchor: 2 });
        assert_eq!(c.outvoted, [true, true, false, false]);
    }

    #[test]
    fn two_domains_against_two_decide_nothing() {
        let c = decide(
            &[v(0, Tsc), v(5, Pit), v(2000, Hpet), v(2005, AcpiPm)],
            500,
            Some(0),
            Some((0, 2)),
        );
        assert_eq!(c.decision, Decision::Undecided);
        assert_eq!(c.outvoted, [false; 4]);
    }

    #[test]
    fn the_larger_group_wins_even_against_a_chained_minority() {
        // Three domains agree; two others agree with each other only.
        let c = decide(
            &[
                v(0, Tsc),
                v(0, Hpet),
                v(0, AcpiPm),
                v(15_000, Pit),
                v(25_000, Other(1)),
            ],
            10_000,
            None,
            None,
        );
        assert_eq!(c.decision, Decision::Majority { anchor: 0 });
        assert_eq!(c.outvoted, [false, false, false, true, true]);
    }

    #[test]
    fn the_two_way_rule_blames_only_a_conditional_member() {
        let pair = Some((0, 1));
        let c = decide(&[cond(v(0, Tsc)), v(-50_000, Hpet)], 10_000, None, pair);
        assert_eq!(
            c.decision,
            Decision::TwoWay {
                loser: 0,
                winner: 1
            }
        );
        assert_eq!(c.outvoted, [true, false]);
        let c = decide(&[v(0, Tsc), cond(v(-50_000, Hpet))], 10_000, None, pair);
        assert_eq!(
            c.decision,
            Decision::TwoWay {
                loser: 1,
                winner: 0
            }
        );
        let c = decide(&[v(0, Tsc), v(-50_000, Hpet)], 10_000, None, pair);
        assert_eq!(c.decision, Decision::Undecided);
        let c = decide(
            &[cond(v(0, Tsc)), cond(v(-50_000, Hpet))],
            10_000,
            None,
            pair,
        );
        assert_eq!(c.decision, Decision::Undecided);
        // Agreement is a majority of two domains; a pair member that did
        // not vote: no fault.
        let c = decide(&[cond(v(0, Tsc)), v(50, Hpet)], 10_000, None, pair);
        assert_eq!(c.decision, Decision::Majority { anchor: 0 });
        assert_eq!(c.outvoted, [false; 2]);
        let c = decide(&[cond(v(0, Tsc)), None], 10_000, None, pair);
        assert_eq!(c.decision, Decision::NoFault);
    }

    #[test]
    fn uncertainty_widens_agreement() {
        let mut votes = [v(0, Tsc), v(0, Hpet), v(10_500, AcpiPm)];
        let c = decide(&votes, 10_000, None, None);
        assert_eq!(c.outvoted, [false, false, true]);
        votes[2].as_mut().unwrap().uncertainty_ppm = 600;
        let c = decide(&votes, 10_000, None, None);
        assert_eq!(c.outvoted, [false; 3]);
    }

    #[test]
    fn the_preferred_voter_wins_ties_for_the_anchor() {
        let votes = [v(0, Tsc), v(300, Hpet), v(600, AcpiPm)];
        // 0 and 2 each agree with 1 only... every seed's group: 0:{0,1},
        // 1:{0,1,2}, 2:{1,2}. 1 wins on weight whatever is preferred.
        assert_eq!(decide(&votes, 400, Some(0), None).anchor(), Some(1));
        let votes = [v(0, Tsc), v(0, Hpet), v(0, AcpiPm)];
        assert_eq!(decide(&votes, 400, None, None).anchor(), Some(0));
        assert_eq!(decide(&votes, 400, Some(2), None).anchor(), Some(2));
    }

    #[test]
    fn nobody_voted() {
        let c = decide::<4>(&[None; 4], 500, Some(0), Some((0, 1)));
        assert_eq!(c.decision, Decision::NoFault);
        assert_eq!(c.outvoted, [false; 4]);
    }
}
