//! Run-time cross-checking of clock sources against each other.
//!
//! Each round reads the *reference* (the best trusted source other than the
//! current one), then every other member, then the reference again: all
//! readings lie inside that window, so its width is the round's timing
//! uncertainty (the reference's own read-back delay, a few microseconds
//! for an emulated HPET or PM timer, far more if the vCPU was descheduled).
//! Linux's watchdog ignored this and demoted good TSCs in VMs because its
//! HPET/PM reads were slow; this one counts the window in every
//! comparison, and judges a round whose window exceeds
//! [`WatchdogConfig::max_read_delay`] only over an interval long enough
//! that the windows weigh no more than two fast rounds' over
//! [`WatchdogConfig::min_interval`] (discarded until then: where every read
//! traps slowly, every round is slow, and they are still judged).
//!
//! # Who is wrong
//! Over the interval between two rounds (measured on the reference's
//! timeline) each member's elapsed time is compared with every other's.
//! Two members *agree* when their rates differ by at most
//! [`WatchdogConfig::max_skew_ppm`] plus the rounds' uncertainty. The rule
//! below is [`consensus::decide`](crate::consensus::decide), the one the
//! probe's self-check uses too; the watchdog adds strikes, pauses and the
//! reference's own failures.
//!
//! - **Three or more members:** the watchdog looks for the largest group of
//!   members that agree among themselves, counting *independent* evidence:
//!   members that read the same hardware counter ([`CounterDomain`]: the
//!   TSC, kvmclock and the Hyper-V page all count the TSC) count once.
//!   When that group spans at least two domains, every member outside it
//!   is at fault — the current source, a voter, or the reference. So a
//!   drifting HPET is blamed by kvmclock and the PM timer, never the other
//!   way round.
//! - **Two members** (or no independent majority): a disagreement alone
//!   cannot tell who is wrong. The watchdog blames a member only on
//!   evidence pointing at it: it stepped back, it stopped while the other
//!   advanced, or its correctness rests on an unverified claim
//!   ([`Member::conditional`]: a TSC kept under supervision, an estimated
//!   rate) while the other's does not. Otherwise it reports
//!   [`Outcome::Disagreement`] and demotes nobody.
//!
//! A member at fault is reported once per round; an unconditional member
//! must be at fault for [`WatchdogConfig::strikes`] consecutive rounds (a
//! single outlier round is a jump, not drift), a conditional one, one that
//! stepped back or stopped, or one off by at least
//! [`WatchdogConfig::immediate_skew_ppm`] at once.
//!
//! A reference that stops (its interval stays below
//! [`WatchdogConfig::min_interval`] while the others measure many times
//! that) is reported as [`Outcome::ReferenceFailed`] instead of being
//! waited for for ever. A host pause in the interval (the caller says so)
//! shortens the evidence but does not erase it: a member off the
//! reference by as much as a step (at least
//! [`WatchdogConfig::immediate_skew_ppm`]: it did not count the pause, or
//! counted it while the reference did not) sits that interval out; the
//! others are judged over it as usual, except that nothing is at fault at
//! once (strikes only). So a guest paused in every interval is still
//! judged.
//!
//! A pause nobody reports (QEMU's stop/cont without kvmclock: the HPET and
//! the PM timer freeze with QEMU's virtual clock, the TSC counts on) is
//! recognised by what it leaves: the members that counted more than the
//! others (by more than [`WatchdogConfig::max_skew_ppm`]) all read the
//! TSC ([`Watchdog::set_counter`] says which do). That interval is judged
//! as paused, never two in a row: a TSC whose rate is off shows it again
//! in the next interval and is at fault there (its strikes count through
//! both). A device counter ahead of the others jumped; it is judged as
//! before.

pub use crate::consensus::CounterDomain;
use crate::consensus::{decide, Decision, Vote};
use crate::{ppm, Bracketed, Duration, Frequency, Scale};

/// Most members one watchdog can compare.
pub const MAX_MEMBERS: usize = 16;

/// Tuning for a [`Watchdog`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct WatchdogConfig {
    /// Largest tolerated rate difference, in ppm (default 500: Linux warns
    /// about CPUID TSC rates at ~490 ppm).
    pub max_skew_ppm: u64,
    /// A member off by at least this much (default 50,000 ppm = 5%) is at
    /// fault at once, without waiting for strikes.
    pub immediate_skew_ppm: u64,
    /// A round whose reference read-back window is wider (default 100 us)
    /// is slow: judged only over an interval of at least `min_interval`
    /// per `max_read_delay` of the two windows' mean, discarded before.
    pub max_read_delay: Duration,
    /// Intervals shorter than this are not judged (default 100 ms): the
    /// read-back uncertainty would dominate.
    pub min_interval: Duration,
    /// Consecutive rounds at fault before an unconditional member is
    /// demoted (default 3).
    pub strikes: u32,
    /// A reference whose interval stays below `min_interval` while another
    /// member measures this many times `min_interval` is taken as stopped
    /// (default 10).
    pub stopped_factor: u32,
}

impl Default for WatchdogConfig {
    fn default() -> Self {
        WatchdogConfig::new()
    }
}

impl WatchdogConfig {
    /// The defaults.
    /// Interrupt-safe: yes.
    pub const fn new() -> WatchdogConfig {
        WatchdogConfig {
            max_skew_ppm: 500,
            immediate_skew_ppm: 50_000,
            max_read_delay: Duration::from_micros(100),
            min_interval: Duration::from_millis(100),
            strikes: 3,
            stopped_factor: 10,
        }
    }

    /// Sets [`max_skew_ppm`](Self::max_skew_ppm).
    /// Interrupt-safe: yes.
    pub const fn max_skew_ppm(mut self, ppm: u64) -> Self {
        self.max_skew_ppm = ppm;
        self
    }

    /// Sets [`min_interval`](Self::min_interval).
    /// Interrupt-safe: yes.
    pub const fn min_interval(mut self, d: Duration) -> Self {
        self.min_interval = d;
        self
    }

    /// Sets [`strikes`](Self::strikes).
    /// Interrupt-safe: yes.
    pub const fn strikes(mut self, n: u32) -> Self {
        self.strikes = n;
        self
    }

    /// Sets [`max_read_delay`](Self::max_read_delay).
    /// Interrupt-safe: yes.
    pub const fn max_read_delay(mut self, d: Duration) -> Self {
        self.max_read_delay = d;
        self
    }
}

/// One source as the watchdog sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Member {
    /// Its exact tick rate.
    pub rate: Frequency,
    /// The counter it reads.
    pub domain: CounterDomain,
    /// Its correctness rests on a claim nobody verified beforehand (a TSC
    /// selected under supervision, a rate clockhal estimated): in a
    /// two-way disagreement with a member that is not conditional, it is
    /// the one blamed.
    pub conditional: bool,
}

/// One round: every member's reading (`None`: not read this round), taken
/// between two readings of the reference member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Round {
    /// Reference ticks before the other members were read.
    pub ref_before: u64,
    /// Reference ticks after.
    pub ref_after: u64,
    /// Each member's ticks, by member index; the reference's own entry is
    /// ignored (its reading is the window's midpoint).
    pub ticks: [Option<u64>; MAX_MEMBERS],
}

impl Round {
    /// A round with no member readings yet.
    /// Interrupt-safe: yes.
    pub const fn new(ref_before: u64, ref_after: u64) -> Round {
        Round {
            ref_before,
            ref_after,
            ticks: [None; MAX_MEMBERS],
        }
    }

    /// The reference's read-back window (its midpoint stands for the
    /// reference's reading).
    const fn window(&self) -> Bracketed {
        Bracketed {
            before: self.ref_before,
            inner: 0,
            after: self.ref_after,
        }
    }
}

/// Why a member is at fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Fault {
    /// Its rate differs from the others' by `skew_ppm` (positive: fast).
    Drift {
        /// Skew relative to the consensus (or the other member), ppm.
        skew_ppm: i64,
    },
    /// A later reading was smaller than an earlier one.
    SteppedBack,
    /// It did not advance while the others did.
    Stopped,
}

/// One member's state after a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum MemberVerdict {
    /// Not compared this round.
    NotJudged,
    /// Agrees with the consensus (skew relative to the reference).
    Ok {
        /// Skew relative to the reference, ppm.
        skew_ppm: i64,
    },
    /// At fault this round, not (yet) for enough rounds to act.
    Suspect {
        /// Skew relative to the consensus, ppm.
        skew_ppm: i64,
        /// Consecutive rounds at fault so far.
        strikes: u32,
    },
    /// At fault: demote it (or, for the reference, stop using it).
    Faulty(Fault),
}

/// What one [`Watchdog::check`] concluded as a whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Outcome {
    /// First usable round (or first after a restart): nothing to compare.
    Started,
    /// Not enough reference time since the last judged round.
    TooSoon,
    /// The reference took too long to read around the others; the round is
    /// discarded (the `Duration` is the observed window).
    Discarded(Duration),
    /// The round was skipped (a host pause, a gap that may have hidden a
    /// counter wrap); strikes are kept.
    Skipped,
    /// Judged: see the member verdicts.
    Judged,
    /// Two members disagree and nothing says which one is wrong.
    Disagreement {
        /// Skew of the current member relative to the reference, ppm.
        skew_ppm: i64,
    },
    /// The reference itself failed; it is reported in the verdicts (or
    /// stopped: the others advanced while it did not).
    ReferenceFailed(Fault),
}

/// Result of one round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Judgement {
    /// The round as a whole.
    pub outcome: Outcome,
    /// Per member, by index.
    pub verdicts: [MemberVerdict; MAX_MEMBERS],
    /// Read-back uncertainty of this interval, ppm.
    pub uncertainty_ppm: u64,
}

impl Judgement {
    const fn only(outcome: Outcome) -> Judgement {
        Judgement {
            outcome,
            verdicts: [MemberVerdict::NotJudged; MAX_MEMBERS],
            uncertainty_ppm: 0,
        }
    }

    /// The members found at fault this round, with why.
    /// Interrupt-safe: yes.
    pub fn faulty(&self) -> impl Iterator<Item = (usize, Fault)> + '_ {
        self.verdicts
            .iter()
            .enumerate()
            .filter_map(|(i, v)| match v {
                MemberVerdict::Faulty(f) => Some((i, *f)),
                _ => None,
            })
    }

    /// The verdict of member `i`.
    /// Interrupt-safe: yes.
    pub fn verdict(&self, i: usize) -> MemberVerdict {
        self.verdicts
            .get(i)
            .copied()
            .unwrap_or(MemberVerdict::NotJudged)
    }
}

/// Compares up to [`MAX_MEMBERS`] sources over successive rounds and says
/// which of them is wrong (see the module docs for the rules).
///
/// ```
/// use clockhal_core::*;
/// let hz = |f| Frequency::from_hz(f).unwrap();
/// let m = |rate, domain| Member { rate, domain, conditional: false };
/// // Member 0: kvmclock (ns), 1: HPET at 100 MHz (1000 ppm fast), 2: PM timer.
/// let members = [
///     m(hz(1_000_000_000), CounterDomain::Tsc),
///     m(hz(100_000_000), CounterDomain::Hpet),
///     m(hz(3_579_545), CounterDomain::AcpiPm),
/// ];
/// let mut w = Watchdog::new(&members, WatchdogConfig::default());
/// let round = |s: u64| {
///     // PM timer is the reference (member 2), read around the others.
///     let mut r = Round::new(3_579_545 * s, 3_579_545 * s + 4);
///     r.ticks[0] = Some(1_000_000_000 * s);
///     r.ticks[1] = Some(100_100_000 * s);
///     r
/// };
/// assert_eq!(w.check(&round(0), 2, 0, false).outcome, Outcome::Started);
/// let j = w.check(&round(1), 2, 0, false);
/// assert!(matches!(j.verdict(0), MemberVerdict::Ok { .. }));   // kvmclock is fine
/// assert!(matches!(j.verdict(1), MemberVerdict::Suspect { .. })); // the HPET drifts
/// ```
#[derive(Clone, Debug)]
pub struct Watchdog {
    config: WatchdogConfig,
    members: [Option<(Member, Scale)>; MAX_MEMBERS],
    base: Option<(Round, usize)>,
    strikes: [u32; MAX_MEMBERS],
    /// The counter each member physically reads, where it is not the
    /// domain it votes in ([`set_counter`](Watchdog::set_counter)).
    counters: [Option<CounterDomain>; MAX_MEMBERS],
    /// The last interval was taken for a pause nobody reported.
    inferred_pause: bool,
    /// The longest pause nobody reported that is taken for one, ns.
    pause_limit_ns: u64,
}

/// Whether an interval of `ref_ns` whose ends were read in windows of
/// `base_ns` and `now_ns` is judged although one window is wider than
/// `max_delay`: the windows' mean is at most `max_delay` per `min_ns` of
/// interval, the bound two fast rounds `min_ns` apart keep (so the
/// uncertainty counted against the members is never larger than theirs).
fn slow_round_fits(base_ns: u64, now_ns: u64, ref_ns: u64, max_delay: u64, min_ns: u64) -> bool {
    let mean = (base_ns as u128 + now_ns as u128) / 2;
    ref_ns >= min_ns && mean * min_ns.max(1) as u128 <= max_delay as u128 * ref_ns as u128
}

/// Whether the interval looks like a pause of the guest's devices while
/// the TSC ran on: the members that counted more than the others by more
/// than the tolerance (`step_ppm`), and by at most `limit_ns`, are all TSC
/// readers, on one side of the reference: a member more than the
/// reference, or the reference more than every other member (each of
/// which still advanced: one that stood still is a stopped counter,
/// judged as such). A device counter that ran on while the others froze
/// is no pause: it jumped.
fn looks_paused(
    elapsed: &[Elapsed; MAX_MEMBERS],
    domains: &[Option<CounterDomain>; MAX_MEMBERS],
    reference: usize,
    ref_ns: u64,
    step_ppm: u64,
    limit_ns: u64,
) -> bool {
    let step = |longer: u64, shorter: u64| {
        longer > shorter
            && longer - shorter <= limit_ns
            && ppm((longer - shorter) as i128, shorter).unsigned_abs() >= step_ppm
    };
    let tsc = |i: usize| domains[i] == Some(CounterDomain::Tsc);
    let others = (0..MAX_MEMBERS)
        .filter(|&i| i != reference)
        .filter_map(|i| match elapsed[i] {
            Elapsed::Ns(n) => Some((i, n)),
            _ => None,
        });
    let (mut any, mut counted_on, mut device_on, mut all_froze) = (false, false, false, true);
    for (i, n) in others {
        any = true;
        if step(n, ref_ns) {
            counted_on = true;
            device_on |= !tsc(i);
        }
        all_froze &= n > 0 && step(ref_ns, n);
    }
    (counted_on && !device_on) || (any && all_froze && tsc(reference))
}

/// [`Watchdog::set_pause_limit`]'s default.
const DEFAULT_PAUSE_LIMIT_NS: u64 = 10_000_000_000;

/// Elapsed ns of one member over the interval, or why not.
#[derive(Clone, Copy)]
enum Elapsed {
    Ns(u64),
    Backwards,
    Missing,
}

impl Watchdog {
    /// A watchdog over `members` (at most [`MAX_MEMBERS`]; extra ones are
    /// ignored), indexed by their position.
    /// Interrupt-safe: yes.
    pub fn new(members: &[Member], config: WatchdogConfig) -> Watchdog {
        let mut m = [None; MAX_MEMBERS];
        for (slot, member) in m.iter_mut().zip(members) {
            *slot = Some((*member, Scale::new(member.rate)));
        }
        Watchdog {
            config,
            members: m,
            base: None,
            strikes: [0; MAX_MEMBERS],
            counters: core::array::from_fn(|i| members.get(i).map(|m| m.domain)),
            inferred_pause: false,
            pause_limit_ns: DEFAULT_PAUSE_LIMIT_NS,
        }
    }

    /// The longest excess only the TSC readers counted that is taken for
    /// a pause nobody reported (default 10 s, the facade's default
    /// `max_jump`); a longer one is judged as a rate (and, in the facade,
    /// its readings are refused as a jump).
    /// Interrupt-safe: yes.
    pub fn set_pause_limit(&mut self, limit: Duration) {
        self.pause_limit_ns = limit.as_nanos();
    }

    /// Says which counter `member` physically reads where that is not the
    /// domain it votes in (a TSC calibrated against the HPET votes as the
    /// HPET but counts TSC ticks): what a pause of the guest's devices
    /// leaves behind depends on the counter, not on the vote.
    /// Interrupt-safe: yes.
    pub fn set_counter(&mut self, member: usize, counter: CounterDomain) {
        if let Some(c) = self.counters.get_mut(member) {
            *c = Some(counter);
        }
    }

    /// The configuration.
    /// Interrupt-safe: yes.
    pub fn config(&self) -> &WatchdogConfig {
        &self.config
    }

    /// Forgets the baseline and the strikes (after a legitimate
    /// discontinuity, e.g. a resume, or a change of members).
    /// Interrupt-safe: yes.
    pub fn restart(&mut self) {
        self.base = None;
        self.strikes = [0; MAX_MEMBERS];
        self.inferred_pause = false;
    }

    /// Forgets one member's strikes (it was demoted, or replaced).
    /// Interrupt-safe: yes.
    pub fn clear_strikes(&mut self, member: usize) {
        if let Some(s) = self.strikes.get_mut(member) {
            *s = 0;
        }
    }

    /// Judges `round`, taken around `reference`, for the benefit of the
    /// `current` member (the one a two-way disagreement is about).
    /// `paused`: the host paused the guest since the last round: members
    /// that may have a step from it sit the interval out, the others are
    /// judged with strikes only (see the module docs).
    ///
    /// Interrupt-safe: yes (no lock; the caller owns the watchdog).
    pub fn check(
        &mut self,
        round: &Round,
        reference: usize,
        current: usize,
        paused: bool,
    ) -> Judgement {
        let Some((_, ref_scale)) = self.member(reference) else {
            return Judgement::only(Outcome::Skipped);
        };
        let Some(window) = round.window().width() else {
            return Judgement::only(Outcome::Discarded(Duration::MAX));
        };
        let window_ns = ref_scale.ticks_to_ns(window);
        let max_delay = self.config.max_read_delay.as_nanos();
        let Some((base, _)) = self.base.filter(|(_, r)| *r == reference) else {
            // The first round is the baseline even when slow: where every
            // read is slow (a hypervisor that traps each instruction) no
            // fast one comes.
            self.base = Some((*round, reference));
            return Judgement::only(Outcome::Started);
        };
        let min_ns = self.config.min_interval.as_nanos();
        // The reference's interval, and every other member's.
        let (ref_ns, ref_back) = match round.window().mid().checked_sub(base.window().mid()) {
            Some(t) => (ref_scale.ticks_to_ns(t), false),
            None => (0, true),
        };
        let base_window_ns = ref_scale.ticks_to_ns(base.window().width().unwrap_or(0));
        if !ref_back
            && (window_ns > max_delay || base_window_ns > max_delay)
            && !slow_round_fits(base_window_ns, window_ns, ref_ns, max_delay, min_ns)
        {
            // A slow end of the interval: judged only once the interval is
            // long enough that the windows weigh no more than two fast
            // rounds' over `min_interval`. Until then the baseline stays,
            // unless this round is fast and can replace a slow one.
            if window_ns <= max_delay {
                self.base = Some((*round, reference));
                return Judgement::only(Outcome::Started);
            }
            return Judgement::only(Outcome::Discarded(Duration::from_nanos(window_ns)));
        }
        let mut elapsed = [Elapsed::Missing; MAX_MEMBERS];
        for (i, e) in elapsed.iter_mut().enumerate() {
            if i == reference {
                *e = if ref_back {
                    Elapsed::Backwards
                } else {
                    Elapsed::Ns(ref_ns)
                };
                continue;
            }
            let (Some((_, scale)), Some(now), Some(then)) =
                (self.member(i), round.ticks[i], base.ticks[i])
            else {
                continue;
            };
            *e = match now.checked_sub(then) {
                Some(t) => Elapsed::Ns(scale.ticks_to_ns(t)),
                None => Elapsed::Backwards,
            };
        }
        // A guest paused with its devices while the TSC ran on (QEMU's
        // stop/cont without kvmclock, whose flag would say so) leaves one
        // interval that the TSC readers counted longer than the others:
        // taken for a pause, as if the caller had said so, but never twice
        // in a row: a wrong rate shows again in the next interval and is
        // judged there.
        let inferred = !paused
            && !ref_back
            && ref_ns >= min_ns
            && !self.inferred_pause
            && looks_paused(
                &elapsed,
                &self.counters,
                reference,
                ref_ns,
                self.config.max_skew_ppm,
                self.pause_limit_ns,
            );
        self.inferred_pause = inferred;
        let paused = paused || inferred;
        if ref_back && !paused {
            self.base = Some((*round, reference));
            return Judgement::only(Outcome::ReferenceFailed(Fault::SteppedBack));
        }
        if paused && (ref_back || ref_ns < min_ns) {
            // Too short (or broken by the pause) to say anything.
            self.base = Some((*round, reference));
            return Judgement::only(Outcome::Skipped);
        }
        if ref_ns < min_ns {
            let longest_other = elapsed
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != reference)
                .filter_map(|(_, e)| match e {
                    Elapsed::Ns(n) => Some(*n),
                    _ => None,
                })
                .max()
                .unwrap_or(0);
            let stopped = min_ns.saturating_mul(self.config.stopped_factor.max(2) as u64);
            if longest_other >= stopped && ref_ns.saturating_mul(10) < longest_other {
                self.base = Some((*round, reference));
                let mut j = Judgement::only(Outcome::ReferenceFailed(Fault::Stopped));
                j.verdicts[reference] = MemberVerdict::Faulty(Fault::Stopped);
                return j;
            }
            return Judgement::only(Outcome::TooSoon);
        }
        self.base = Some((*round, reference));

        // Every rate as ppm of skew against the reference. Each end of the
        // interval is placed at its window's midpoint, off by at most half
        // that window.
        let unc = ppm(((base_window_ns + window_ns) / 2) as i128, ref_ns).unsigned_abs();
        let mut skew = [None::<i64>; MAX_MEMBERS];
        let mut verdicts = [MemberVerdict::NotJudged; MAX_MEMBERS];
        let mut fault = [None::<Fault>; MAX_MEMBERS];
        for i in 0..MAX_MEMBERS {
            match elapsed[i] {
                Elapsed::Ns(n) => {
                    // The reference advanced min_interval or more (ref_ns >=
                    // min_ns here); this member did not.
                    if n == 0 {
                        fault[i] = Some(Fault::Stopped);
                    }
                    skew[i] = Some(ppm(n as i128 - ref_ns as i128, ref_ns));
                }
                Elapsed::Backwards => fault[i] = Some(Fault::SteppedBack),
                Elapsed::Missing => {}
            }
            // A host pause in the interval may be a step in any member's
            // count (one that did not count the pause: kvmclock after
            // QEMU's stop/cont, a TSC that stopped): a member off the
            // reference by a step's size sits this interval out. One that
            // agrees within that counted the pause like the reference, and
            // its rate is judged over the interval as usual.
            if paused && i != reference {
                let excused = match (elapsed[i], skew[i]) {
                    (Elapsed::Backwards, _) => true,
                    (_, Some(s)) => s.unsigned_abs() >= self.config.immediate_skew_ppm,
                    _ => false,
                };
                if excused {
                    skew[i] = None;
                    fault[i] = None;
                }
            }
        }
        let tol = self.config.max_skew_ppm.saturating_add(unc);
        let votes: [Option<Vote>; MAX_MEMBERS] = core::array::from_fn(|i| {
            let (m, _) = self.member(i)?;
            let skew_ppm = skew[i].filter(|_| fault[i].is_none())?;
            Some(Vote {
                skew_ppm,
                uncertainty_ppm: 0,
                domain: m.domain,
                conditional: m.conditional,
            })
        });
        let pair = (current != reference).then_some((current, reference));
        let consensus = decide(&votes, tol, Some(reference), pair);
        let mut outcome = Outcome::Judged;
        match consensus.decision {
            Decision::Majority { anchor } => {
                let centre = skew[anchor].unwrap_or(0);
                for i in (0..MAX_MEMBERS).filter(|&i| consensus.outvoted[i]) {
                    let s = skew[i].unwrap_or(0).saturating_sub(centre);
                    fault[i] = Some(Fault::Drift { skew_ppm: s });
                }
            }
            // The reference's skew is 0: the current member's is the
            // disagreement.
            Decision::TwoWay { loser, winner } => {
                let s = skew[loser]
                    .unwrap_or(0)
                    .saturating_sub(skew[winner].unwrap_or(0));
                fault[loser] = Some(Fault::Drift { skew_ppm: s });
            }
            Decision::Undecided => {
                outcome = Outcome::Disagreement {
                    skew_ppm: skew[current].unwrap_or(0),
                };
            }
            Decision::NoFault => {}
        }

        for i in 0..MAX_MEMBERS {
            let Some((m, _)) = self.member(i) else {
                continue;
            };
            match fault[i] {
                None => {
                    self.strikes[i] = 0;
                    if let Some(s) = skew[i] {
                        verdicts[i] = MemberVerdict::Ok { skew_ppm: s };
                    }
                }
                Some(f) => {
                    self.strikes[i] = self.strikes[i].saturating_add(1);
                    // In an interval with a pause nothing is at fault at
                    // once: a small step the pause left is not ruled out.
                    let at_once = !paused
                        && match f {
                            Fault::Drift { skew_ppm } => {
                                m.conditional
                                    || skew_ppm.unsigned_abs().saturating_sub(unc)
                                        >= self.config.immediate_skew_ppm
                            }
                            Fault::SteppedBack | Fault::Stopped => true,
                        };
                    verdicts[i] = if at_once || self.strikes[i] >= self.config.strikes.max(1) {
                        self.strikes[i] = 0;
                        MemberVerdict::Faulty(f)
                    } else {
                        let s = match f {
                            Fault::Drift { skew_ppm } => skew_ppm,
                            _ => 0,
                        };
                        MemberVerdict::Suspect {
                            skew_ppm: s,
                            strikes: self.strikes[i],
                        }
                    };
                }
            }
        }
        if let MemberVerdict::Faulty(f) = verdicts[reference] {
            outcome = Outcome::ReferenceFailed(f);
        }
        Judgement {
            outcome,
            verdicts,
            uncertainty_ppm: unc,
        }
    }

    fn member(&self, i: usize) -> Option<(Member, Scale)> {
        self.members.get(i).copied().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_domains_against_two_is_no_majority() {
        let hz = |f| Frequency::from_hz(f).unwrap();
        let m = |rate, domain| Member {
            rate,
            domain,
            conditional: false,
        };
        let members = [
            m(hz(1_000_000_000), CounterDomain::Tsc),
            m(hz(100_000_000), CounterDomain::Hpet),
            m(hz(3_579_545), CounterDomain::AcpiPm),
            m(hz(1_000_000_000), CounterDomain::Other(9)),
        ];
        let mut w = Watchdog::new(&members, WatchdogConfig::default());
        // The HPET (the reference) and the PM timer both run 1000 ppm fast.
        let round = |t: u64| {
            let hpet = |ns: u64| ns * 1_001 / 1_000 / 10;
            let ns = t * 250_000_000;
            let mut r = Round::new(hpet(ns), hpet(ns + 2_000));
            r.ticks[0] = Some(ns + 1_000);
            r.ticks[2] =
                Some(((ns + 1_000) as u128 * 1_001 * 3_579_545 / 1_000 / 1_000_000_000) as u64);
            r.ticks[3] = Some(ns + 1_000);
            r
        };
        assert_eq!(w.check(&round(0), 1, 0, false).outcome, Outcome::Started);
        for k in 1..=4 {
            let j = w.check(&round(k), 1, 0, false);
            assert!(j.faulty().next().is_none(), "demoted on a 2-2 split: {j:?}");
            assert!(
                !matches!(j.verdict(0), MemberVerdict::Suspect { .. }),
                "{:?}",
                j.verdict(0)
            );
        }
    }
    extern crate std;
    use std::vec;
    use std::vec::Vec;

    const NS: u64 = 1_000_000_000;

    fn hz(f: u64) -> Frequency {
        Frequency::from_hz(f).unwrap()
    }

    fn member(rate: u64, domain: CounterDomain, conditional: bool) -> Member {
        Member {
            rate: hz(rate),
            domain,
            conditional,
        }
    }

    /// Members with rates in Hz and their true ppm error; builds rounds at
    /// `t` seconds of true time with the reference read around them.
    struct Sim {
        rates: Vec<u64>,
        ppm: Vec<i64>,
        stopped: Vec<bool>,
    }

    impl Sim {
        /// `members` (whole-Hz rates) off by `ppm` each, none stopped.
        fn new(members: &[Member], ppm: &[i64]) -> Sim {
            assert_eq!(members.len(), ppm.len());
            let rates = members
                .iter()
                .map(|m| {
                    assert_eq!(m.rate.denominator(), 1);
                    m.rate.numerator()
                })
                .collect();
            Sim {
                rates,
                ppm: ppm.to_vec(),
                stopped: vec![false; members.len()],
            }
        }
        /// A watchdog over `members` that has taken its first round (true
        /// time 0) around `reference`.
        fn start(&self, members: &[Member], cfg: WatchdogConfig, reference: usize) -> Watchdog {
            let mut w = Watchdog::new(members, cfg);
            assert_eq!(
                w.check(&self.round(reference, 0), reference, 0, false)
                    .outcome,
                Outcome::Started
            );
            w
        }
        fn ticks(&self, i: usize, t_ns: u64) -> u64 {
            if self.stopped[i] {
                return 1_000;
            }
            let ns = t_ns as i128 + t_ns as i128 * self.ppm[i] as i128 / 1_000_000;
            (ns as u128 * self.rates[i] as u128 / NS as u128) as u64
        }
        fn round(&self, reference: usize, t_ns: u64) -> Round {
            let mut r = Round::new(
                self.ticks(reference, t_ns),
                self.ticks(reference, t_ns + 2_000),
            );
            for i in 0..self.rates.len() {
                r.ticks[i] = Some(self.ticks(i, t_ns + 1_000));
            }
            r
        }
    }

    fn kvm_hpet_pm() -> [Member; 3] {
        [
            member(NS, CounterDomain::Tsc, false),
            member(100_000_000, CounterDomain::Hpet, false),
            member(3_579_545, CounterDomain::AcpiPm, false),
        ]
    }

    #[test]
    fn majority_blames_the_drifting_reference_not_the_current_source() {
        // HPET 1000 ppm fast, kvmclock and PM agree; HPET is the reference.
        let sim = Sim::new(&kvm_hpet_pm(), &[0, 1000, 0]);
        let mut w = sim.start(&kvm_hpet_pm(), WatchdogConfig::default(), 1);
        let mut last = None;
        for k in 1..=3u64 {
            let j = w.check(&sim.round(1, k * 250_000_000), 1, 0, false);
            assert!(matches!(j.verdict(0), MemberVerdict::Ok { .. }), "{j:?}");
            assert!(matches!(j.verdict(2), MemberVerdict::Ok { .. }), "{j:?}");
            last = Some(j);
        }
        let j = last.unwrap();
        // The others run 999 ppm slow on the HPET's (1000 ppm fast) timeline.
        assert_eq!(
            j.outcome,
            Outcome::ReferenceFailed(Fault::Drift { skew_ppm: 999 })
        );
        assert_eq!(
            j.verdict(1),
            MemberVerdict::Faulty(Fault::Drift { skew_ppm: 999 })
        );
    }

    #[test]
    fn a_stopped_reference_is_detected_and_the_drift_found_with_the_next() {
        // HPET (reference) stops; kvmclock drifts 1000 ppm; PM fine.
        let mut sim = Sim::new(&kvm_hpet_pm(), &[1000, 0, 0]);
        sim.stopped[1] = true;
        let cfg = WatchdogConfig::default();
        let mut w = sim.start(&kvm_hpet_pm(), cfg, 1);
        let mut outcome = None;
        for k in 1..=20u64 {
            let j = w.check(&sim.round(1, k * 250_000_000), 1, 0, false);
            if let Outcome::ReferenceFailed(f) = j.outcome {
                outcome = Some((k, f));
                break;
            }
            assert_eq!(j.outcome, Outcome::TooSoon);
        }
        let (k, f) = outcome.expect("stopped reference never reported");
        assert_eq!(f, Fault::Stopped);
        assert!(k * 250 >= 1000 && k * 250 <= 1500, "after {k} rounds");
        // With the PM timer as reference, kvmclock vs PM alone: kvmclock is
        // not conditional, so only a disagreement... unless a third voter
        // exists: add the TSC (independent of a lying page's rate).
        let members = [
            member(NS, CounterDomain::Tsc, false),
            member(3_579_545, CounterDomain::AcpiPm, false),
        ];
        let sim2 = Sim::new(&members, &[1000, 0]);
        let mut w = sim2.start(&members, cfg, 1);
        let j = w.check(&sim2.round(1, 250_000_000), 1, 0, false);
        assert_eq!(j.outcome, Outcome::Disagreement { skew_ppm: 1000 });
        assert!(j.faulty().next().is_none());
    }

    #[test]
    fn three_members_find_a_drifting_current_source() {
        let sim = Sim::new(&kvm_hpet_pm(), &[1000, 0, 0]);
        let mut w = sim.start(&kvm_hpet_pm(), WatchdogConfig::default(), 1);
        let v: Vec<_> = (1..=3u64)
            .map(|k| {
                w.check(&sim.round(1, k * 250_000_000), 1, 0, false)
                    .verdict(0)
            })
            .collect();
        assert!(
            matches!(v[0], MemberVerdict::Suspect { strikes: 1, .. }),
            "{v:?}"
        );
        assert!(
            matches!(v[1], MemberVerdict::Suspect { strikes: 2, .. }),
            "{v:?}"
        );
        assert_eq!(v[2], MemberVerdict::Faulty(Fault::Drift { skew_ppm: 1000 }));
    }

    #[test]
    fn same_domain_members_count_once() {
        // kvmclock (current) and the raw TSC both drift (the TSC slowed);
        // HPET and PM agree: two independent domains against one.
        let members = [
            member(NS, CounterDomain::Tsc, false),
            member(2_000_000_000, CounterDomain::Tsc, false),
            member(100_000_000, CounterDomain::Hpet, false),
            member(3_579_545, CounterDomain::AcpiPm, false),
        ];
        let sim = Sim::new(&members, &[-2000, -2000, 0, 0]);
        let mut w = sim.start(&members, WatchdogConfig::default().strikes(1), 2);
        let j = w.check(&sim.round(2, 250_000_000), 2, 0, false);
        assert!(
            matches!(j.verdict(0), MemberVerdict::Faulty(Fault::Drift { .. })),
            "{j:?}"
        );
        assert!(
            matches!(j.verdict(1), MemberVerdict::Faulty(Fault::Drift { .. })),
            "{j:?}"
        );
        assert!(matches!(j.verdict(3), MemberVerdict::Ok { .. }));
    }

    #[test]
    fn two_way_blames_only_the_conditional_member_without_strikes() {
        // A supervised TSC (conditional) against the PM timer. The first
        // interval it is ahead in could be a pause only the TSC counted
        // (one strike); the second proves a rate, and it is at fault
        // without waiting for the third strike.
        let members = [
            member(2_000_000_000, CounterDomain::Tsc, true),
            member(3_579_545, CounterDomain::AcpiPm, false),
        ];
        let sim = Sim::new(&members, &[800, 0]);
        let mut w = sim.start(&members, WatchdogConfig::default(), 1);
        let j = w.check(&sim.round(1, 250_000_000), 1, 0, false);
        assert_eq!(
            j.verdict(0),
            MemberVerdict::Suspect {
                skew_ppm: 800,
                strikes: 1
            }
        );
        let j = w.check(&sim.round(1, 500_000_000), 1, 0, false);
        assert_eq!(
            j.verdict(0),
            MemberVerdict::Faulty(Fault::Drift { skew_ppm: 800 })
        );
    }

    #[test]
    fn a_device_ahead_of_the_tsc_is_no_pause() {
        // The PM timer (the reference) counted more than the TSC: not the
        // signature of a pause (the TSC runs on through one), so the
        // conditional TSC is at fault at once.
        let members = [
            member(2_000_000_000, CounterDomain::Tsc, true),
            member(3_579_545, CounterDomain::AcpiPm, false),
        ];
        let sim = Sim::new(&members, &[-800, 0]);
        let mut w = sim.start(&members, WatchdogConfig::default(), 1);
        let j = w.check(&sim.round(1, 250_000_000), 1, 0, false);
        assert!(
            matches!(
                j.verdict(0),
                MemberVerdict::Faulty(Fault::Drift {
                    skew_ppm: -801..=-799
                })
            ),
            "{j:?}"
        );
    }

    #[test]
    fn pauses_skip_rounds_but_keep_strikes() {
        let sim = Sim::new(&kvm_hpet_pm(), &[1000, 0, 0]);
        let mut w = sim.start(&kvm_hpet_pm(), WatchdogConfig::default(), 1);
        let mut t = 0u64;
        let mut verdicts = Vec::new();
        for k in 0..6 {
            t += 250_000_000;
            let paused = k % 2 == 1;
            let j = w.check(&sim.round(1, t), 1, 0, paused);
            verdicts.push(j.verdict(0));
        }
        // Rounds 1, 3, 5 skipped; 0, 2, 4 judged: third judged round demotes.
        assert!(
            verdicts.contains(&MemberVerdict::Faulty(Fault::Drift { skew_ppm: 1000 })),
            "{verdicts:?}"
        );
    }

    #[test]
    fn a_pause_in_every_interval_still_judges_and_excuses_a_step() {
        // Issue 26: kvmclock 1000 ppm fast, a pause in every interval.
        let sim = Sim::new(&kvm_hpet_pm(), &[1000, 0, 0]);
        let mut w = sim.start(&kvm_hpet_pm(), WatchdogConfig::default(), 1);
        let v: Vec<_> = (1..=3u64)
            .map(|k| {
                w.check(&sim.round(1, k * 250_000_000), 1, 0, true)
                    .verdict(0)
            })
            .collect();
        assert_eq!(
            v[2],
            MemberVerdict::Faulty(Fault::Drift { skew_ppm: 1000 }),
            "{v:?}"
        );
        // A member that did not count a 100 ms pause (a 40% step) sits the
        // interval out; the others are judged.
        let sim = Sim::new(&kvm_hpet_pm(), &[0, 0, 0]);
        let mut w = sim.start(&kvm_hpet_pm(), WatchdogConfig::default(), 1);
        let mut r = sim.round(1, 250_000_000);
        r.ticks[0] = Some(150_000_000);
        let j = w.check(&r, 1, 0, true);
        assert_eq!(j.verdict(0), MemberVerdict::NotJudged, "{j:?}");
        assert!(matches!(j.verdict(2), MemberVerdict::Ok { .. }), "{j:?}");
        assert!(j.faulty().next().is_none(), "{j:?}");
    }

    #[test]
    fn slow_reference_reads_do_not_blame_a_good_source() {
        // 80 us read-back windows, the others read anywhere inside.
        let members = [
            member(NS, CounterDomain::Tsc, true),
            member(100_000_000, CounterDomain::Hpet, false),
        ];
        let mut w = Watchdog::new(&members, WatchdogConfig::default());
        for k in 0..=10u64 {
            let r0 = k * 10_000_000; // 100 ms of 100 MHz ticks
            let mut r = Round::new(r0, r0 + 8_000);
            r.ticks[0] = Some(r0 * 10 + if k % 2 == 0 { 80_000 } else { 0 });
            let j = w.check(&r, 1, 0, false);
            assert!(j.faulty().next().is_none(), "round {k}: {j:?}");
        }
    }

    /// Rounds of a machine where every reference read is slow (300 us
    /// windows, 250 ms ticks; this project's KVM host traps each guest
    /// instruction): the rate of TSC ticks per HPET tick, and every
    /// round's outcome.
    fn slow_rounds(tsc_per_hpet_ppm: u64) -> std::vec::Vec<Judgement> {
        let members = [
            member(NS, CounterDomain::Tsc, true),
            member(100_000_000, CounterDomain::Hpet, false),
        ];
        let mut w = Watchdog::new(&members, WatchdogConfig::default());
        (0..8u64)
            .map(|k| {
                let r0 = k * 25_000_000;
                let mut r = Round::new(r0, r0 + 30_000);
                let t = (r0 + 15_000) * 10;
                r.ticks[0] = Some(t + t / 1_000_000 * tsc_per_hpet_ppm);
                w.check(&r, 1, 0, false)
            })
            .collect()
    }

    #[test]
    fn slow_rounds_are_judged_over_a_long_enough_interval() {
        let good = slow_rounds(0);
        assert_eq!(good[0].outcome, Outcome::Started);
        // 300 us windows over 250 ms weigh more than 100 us over 100 ms.
        assert_eq!(
            good[1].outcome,
            Outcome::Discarded(Duration::from_micros(300))
        );
        // Over 500 ms they do not: judged, and the good TSC passes.
        for (k, j) in good.iter().enumerate().skip(2).step_by(2) {
            assert!(
                matches!(j.verdict(0), MemberVerdict::Ok { .. }),
                "round {k}: {j:?}"
            );
        }
        // A TSC off by 3000 ppm is still caught there: suspect in the
        // first judged round, at fault on its strikes.
        let bad = slow_rounds(3_000);
        assert_eq!(
            bad[1].outcome,
            Outcome::Discarded(Duration::from_micros(300))
        );
        assert!(
            matches!(
                bad[2].verdict(0),
                MemberVerdict::Suspect { skew_ppm: 3000, .. }
            ),
            "{:?}",
            bad[2]
        );
        assert!(
            matches!(
                bad[4].verdict(0),
                MemberVerdict::Faulty(Fault::Drift { .. })
            ),
            "{:?}",
            bad[4]
        );
    }

    #[test]
    fn a_fast_round_replaces_a_slow_baseline() {
        let members = [
            member(NS, CounterDomain::Tsc, false),
            member(100_000_000, CounterDomain::Hpet, false),
        ];
        let mut w = Watchdog::new(&members, WatchdogConfig::default());
        let mut r = Round::new(0, 100_000); // a 1 ms window
        r.ticks[0] = Some(500_000);
        assert_eq!(w.check(&r, 1, 0, false).outcome, Outcome::Started);
        // 100 ms later, a fast round: too soon against 1 ms, the new base.
        let mut r = Round::new(10_000_000, 10_000_010);
        r.ticks[0] = Some(100_000_050);
        assert_eq!(w.check(&r, 1, 0, false).outcome, Outcome::Started);
        // Judged against it 100 ms on (against the slow one it would be
        // too soon: 1 ms needs 1 s).
        let mut r = Round::new(20_000_000, 20_000_010);
        r.ticks[0] = Some(200_000_050);
        let j = w.check(&r, 1, 0, false);
        assert_eq!(j.outcome, Outcome::Judged, "{j:?}");
        assert!(matches!(j.verdict(0), MemberVerdict::Ok { .. }), "{j:?}");
    }

    #[test]
    fn discards_backwards_and_stopped_members() {
        let members = [
            member(NS, CounterDomain::Tsc, false),
            member(100_000_000, CounterDomain::Hpet, false),
        ];
        let mut w = Watchdog::new(&members, WatchdogConfig::default());
        let mut r = Round::new(0, 10);
        r.ticks[0] = Some(500);
        assert_eq!(w.check(&r, 1, 0, false).outcome, Outcome::Started);
        let mut r2 = Round::new(20_000_000, 20_000_010);
        r2.ticks[0] = Some(100);
        let j = w.check(&r2, 1, 0, false);
        assert_eq!(j.verdict(0), MemberVerdict::Faulty(Fault::SteppedBack));
        let mut r3 = Round::new(40_000_000, 40_000_010);
        r3.ticks[0] = Some(100);
        assert_eq!(
            w.check(&r3, 1, 0, false).verdict(0),
            MemberVerdict::Faulty(Fault::Stopped)
        );
    }
}
