//! `Clock::watchdog_tick()`: cross-checking every source at run time, and
//! switching away from one that fails.
//!
//! Each tick reads every constructed, non-demoted source once, between two
//! readings of a *reference* (the best other source whose correctness does
//! not rest on supervision), and hands the round to
//! [`clockhal_core::Watchdog`], which decides *who* is wrong (see its docs:
//! a majority of independent counters with three or more members; with
//! two, only evidence that points at one of them). Reading every source
//! each tick also keeps every software-extended counter fed: an OS that
//! ticks at the documented period and otherwise idles loses no wrap.

use super::read::BEFORE_ZERO;
use super::Clock;
use crate::{Demotion, SourceId, Verdict, MAX_CANDIDATES};
use clockhal_core::{
    CounterDomain, Fault, Judgement, Member, MemberVerdict, Outcome, Round, Stability, Watchdog,
    MAX_MEMBERS,
};
use clockhal_x86::Hardware;
use core::sync::atomic::Ordering;

/// The watchdog's state, under the clock's watchdog lock.
/// Which source each member is, and what the watchdog was told about it
/// (a changed domain, e.g. the Hyper-V page falling back to the MSR,
/// starts a new comparison).
pub(crate) type MemberKey = (
    [Option<SourceId>; MAX_MEMBERS],
    [Option<CounterDomain>; MAX_MEMBERS],
);

/// A 64-bit counter's reading, and which counter.
type WideReading = Option<(SourceId, u64)>;

pub(crate) struct State {
    /// The comparison over the current members, and which source each is.
    pub(crate) core: Option<(Watchdog, MemberKey)>,
    /// Backend host-fault counters at the previous tick.
    faults_seen: [u64; MAX_CANDIDATES],
    /// For the jump check: a clock instant and an independent 64-bit
    /// reference's ticks then.
    anchor: Option<(u64, SourceId, u64)>,
    /// The TSC rate refinement's baseline: the reference it was taken
    /// against and the sample (`refine.rs`).
    #[cfg_attr(not(feature = "tsc"), allow(dead_code))]
    pub(crate) refine: Option<(SourceId, clockhal_core::Bracketed)>,
    /// A demoted candidate's way back (`readmit.rs`).
    pub(crate) readmission: super::readmit::Readmission,
    /// The TSC, the CPU and the anchor's 64-bit counter at the previous
    /// tick: the gap since, for members whose extension it may have
    /// outlasted.
    last_tick: Option<(u64, usize, WideReading)>,
    /// The clock's timeline at the last round that read the members.
    last_round_ns: Option<u64>,
    /// Members whose wraps over a gap nothing could place, with their
    /// extension's value then: out of the rounds until it moves on from
    /// it (until then its count may hold, which is no "stopped").
    unplaced: Held,
    /// Per software-extended member that gives the rounds no count (held
    /// across a gap, unplaced): the ticks since and their measured gaps.
    out_for: OutFor,
}

impl State {
    pub(crate) const fn new() -> State {
        State {
            core: None,
            faults_seen: [0; MAX_CANDIDATES],
            anchor: None,
            refine: None,
            readmission: super::readmit::Readmission::new(),
            last_tick: None,
            last_round_ns: None,
            unplaced: [None; MAX_CANDIDATES],
            out_for: [None; MAX_CANDIDATES],
        }
    }
}

/// What one [`Clock::watchdog_tick`] did.
///
/// One event per tick: a tick that demotes several sources reports the
/// current source's switch if there is one, else the first demotion;
/// [`Clock::report`] lists every demotion with its reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum WatchdogEvent {
    /// Another `watchdog_tick` is running (on another CPU): nothing done.
    /// Also while a lifecycle call (`force`, `resume`, ...) holds the
    /// watchdog lock, and for a tick in an interrupt handler that arrived
    /// inside a tick or such a call: the tick returns instead of waiting.
    Busy,
    /// Fewer than two sources to compare: nothing checked (the current
    /// source's counter was still read, so its extension stays fed).
    Inactive,
    /// The tick ran on a CPU the current source does not serve (a CPU
    /// whose kvmclock area is not registered): nothing judged, the other
    /// counters were read (their extensions stay fed). Tick on a CPU the
    /// current source serves; other members not served here sit the round
    /// out and are never blamed for it.
    NotServed {
        /// The current source.
        source: SourceId,
    },
    /// The hypervisor paused the guest: this interval was skipped (the
    /// jump is legitimate), strikes were kept.
    GuestStopped,
    /// The baseline was restarted (on request, or after a change of the
    /// sources compared).
    Restarted,
    /// A source demoted only for want of watchdog ticks (a supervised TSC)
    /// agreed with the reference again for
    /// [`READMIT_ROUNDS`](crate::READMIT_ROUNDS) rounds and is eligible
    /// again (selection ran: see [`Clock::source_id`]). At most
    /// [`MAX_READMISSIONS`](crate::MAX_READMISSIONS) times per source; a
    /// source demoted for a fault of its own never comes back.
    Readmitted {
        /// The re-admitted source.
        source: SourceId,
    },
    /// The TSC's calibrated rate was refined over a long baseline (its
    /// rating may have risen: selection ran again, see
    /// [`Clock::source_id`]).
    RateRefined {
        /// The refined source (the TSC).
        source: SourceId,
        /// The refined rate's bound, ppm.
        uncertainty_ppm: u32,
    },
    /// A round was judged.
    Judged {
        /// The current source.
        source: SourceId,
        /// The round's reference.
        reference: SourceId,
        /// The round's outcome.
        outcome: Outcome,
        /// The current source's verdict.
        verdict: MemberVerdict,
    },
    /// The current source was demoted and the clock switched to another,
    /// continuing above every instant returned so far.
    Switched {
        /// The demoted source.
        from: SourceId,
        /// The new current source.
        to: SourceId,
        /// Why `from` was demoted.
        reason: Demotion,
    },
    /// Another source (a voter or the reference) was found at fault and
    /// demoted: it will not be selected, and the next round uses another
    /// reference.
    Demoted {
        /// The demoted source.
        source: SourceId,
        /// Why.
        reason: Demotion,
        /// It was this round's reference.
        was_reference: bool,
    },
}

pub(crate) use super::readmit::can_be_member;

/// Reads of the jump check's anchor device that decide it stopped, at
/// most, and the TSC time they may take ([`Clock::counting`]): a
/// 10 MHz counter (the Hyper-V MSR's, the slowest wide one) ticks 1,000
/// times in it.
const ALIVE_READS: u32 = 64;
const ALIVE_WAIT_NS: u64 = 100_000;

/// How much longer than a wrap a software-extended member may give the
/// rounds no count before it is taken as stopped: a tick period; and in
/// at least this many ticks in a row (where ticks come further apart than
/// half its wrap, an honest one held across a gap may miss a few).
const OUT_MARGIN_NS: u64 = 250_000_000;
const OUT_TICKS: u32 = 8;

/// Per candidate: an unplaced member's extension value when it went out.
type Held = [Option<u64>; MAX_CANDIDATES];
/// Per candidate: the ticks a member has been out and their gaps' ns.
type OutFor = [Option<(u32, u64)>; MAX_CANDIDATES];

/// What the jump check's anchor device counted since the anchor.
enum Elapsed {
    Ns(u64),
    /// The device or its scale is gone.
    NoDevice,
    /// It counted back (reset, or garbage): it witnesses nothing.
    Back,
}

impl<H: Hardware + Clone> Clock<H> {
    /// The counter `id` reads now: the Hyper-V page reads the MSR while it
    /// falls back to it (then the two are one vote, not two).
    pub(crate) fn domain_now(&self, id: SourceId) -> CounterDomain {
        self.backends.domain(id)
    }

    /// The domain `id`, reading `counter` now ([`domain_now`](Self::domain_now)),
    /// votes in: its counter's, except a TSC calibrated or refined against
    /// another member, whose rate is that member's by construction
    /// (`check::rate_domain`): it cannot vouch for it (with it, an HPET 1 %
    /// slow and its TSC outvoted an honest PM timer). Counters stay
    /// counters for the reference and the jump check's anchor.
    fn vote_domain(report: &crate::Report, id: SourceId, counter: CounterDomain) -> CounterDomain {
        match counter {
            CounterDomain::Tsc => report.rate_domain(id),
            d => d,
        }
    }

    /// Cross-checks every source and acts on the verdict.
    ///
    /// Call it periodically from one place (a timer), every 100 ms to 1 s
    /// (250 ms is a good period): at least every
    /// [`WatchdogConfig::min_interval`](clockhal_core::WatchdogConfig) for a
    /// round to be judged, and more often than every software-extended
    /// counter's read interval (a 24-bit PM timer: 2.3 s; a 32-bit HPET at
    /// 100 MHz: 21 s; see the report's `ext` flag and
    /// [`ClockSource::max_read_interval`](clockhal_core::ClockSource::max_read_interval))
    /// — each tick reads every counter, so an OS that ticks and otherwise
    /// idles loses no time. A supervised TSC stays selected only while the
    /// ticks come ([`Platform::supervision_timeout`](crate::Platform::supervision_timeout)).
    ///
    /// Any CPU may tick; on a CPU the current source does not serve (its
    /// kvmclock area unregistered) the tick judges nothing
    /// ([`WatchdogEvent::NotServed`]), and members not served there sit
    /// the round out.
    ///
    /// The raw TSC, where the TSCs are not known to agree across CPUs
    /// (no warp test, or found out of step), is judged only over intervals
    /// between two ticks on the same CPU: tick on one CPU for it to be
    /// judged (it sits out a tick on another CPU than the last).
    ///
    /// After a gap in the ticks longer than a member's read interval (a
    /// 24-bit PM timer's 2.3 s: interrupts off), the wraps it hid are
    /// recovered from the TSC; a source demoted only because the ticks
    /// stopped comes back once it verifies again
    /// ([`WatchdogEvent::Readmitted`]); a host pause in the interval
    /// shortens the evidence but does not erase it.
    ///
    /// Concurrent calls return [`WatchdogEvent::Busy`] rather than wait.
    /// Bounded: one read per source, three tries at the reference window,
    /// and on a switch two more reads.
    /// Interrupt-safe: yes (returns `Busy` when the watchdog lock is taken).
    pub fn watchdog_tick(&self) -> WatchdogEvent {
        self.try_locked(|st| self.tick_held(st))
            .unwrap_or(WatchdogEvent::Busy)
    }

    /// [`watchdog_tick`](Self::watchdog_tick) with the lock held.
    fn tick_held(&self, st: &mut State) -> WatchdogEvent {
        // Every tick that may read the members measures the gap since the
        // previous one (never longer than since their last read).
        let (gap_ns, same_tsc, tick_tsc) = self.tick_gap(st);
        // On a CPU the current source does not serve, nothing is judged,
        // and nothing a judged tick needs is taken: the restart request,
        // the guest-stopped latches and the host-fault counts stay for the
        // next tick that can use them.
        let cpu = self.hw.cpu_index();
        let served = |id: SourceId| self.backends.serves(id, cpu);
        let cur = self.source_id();
        if !served(cur) {
            self.backends.each(|b| b.tick());
            let sources = self.backends.sources();
            for id in SourceId::ALL.into_iter().filter(|id| served(*id)) {
                if let Some(s) = sources[id.index()] {
                    let _ = s.read();
                }
            }
            return WatchdogEvent::NotServed { source: cur };
        }
        let mut paused = false;
        self.backends.each(|b| {
            b.tick();
            paused |= b.take_paused();
        });
        self.follow_backend_epochs();
        if self.page_stale.load(Ordering::Acquire) {
            self.publish_page();
        }
        if self.restoring.swap(false, Ordering::AcqRel) {
            // The restore's findings, up to this tick (`resume_this_cpu`).
            self.forgive_host_faults(st);
        }
        // Host faults the backends counted since the last tick.
        if let Some(e) = self.judge_host_faults(st) {
            return e;
        }
        // A counter read on each CPU's own TSC (one not known to agree
        // across CPUs) measures no interval that began on another CPU: it
        // sits out a tick on another CPU than the last one.
        let served = |id: SourceId| served(id) && (same_tsc || self.compares_across_cpus(id));
        let restart = self.restart.swap(false, Ordering::AcqRel);
        let report = *self.report.lock();
        // (Again: the steps above may have switched.)
        let cur = self.source_id();
        // The members: every constructed, non-demoted source with a rate.
        let sources = self.backends.sources();
        let mut ids = [None; MAX_MEMBERS];
        let mut members = [None; MAX_MEMBERS];
        // Each member's counter now (one Hyper-V page sample each, once).
        let mut counters = [CounterDomain::Tsc; MAX_MEMBERS];
        let mut n = 0;
        for c in report.candidates() {
            let (Verdict::Usable(d), Some(_)) = (c.verdict, sources[c.id.index()]) else {
                continue;
            };
            if !can_be_member(c.id, cur) {
                continue;
            }
            if n == MAX_MEMBERS {
                break;
            }
            ids[n] = Some(c.id);
            counters[n] = self.domain_now(c.id);
            members[n] = Some(Member {
                rate: d.frequency,
                domain: Self::vote_domain(&report, c.id, counters[n]),
                conditional: self.conditional(c.id),
            });
            n += 1;
        }
        // What this CPU cannot read (an unregistered kvmclock area holds
        // its value) is not evidence: it sits the round out.
        let Some(cur_m) = ids.iter().position(|i| *i == Some(cur)) else {
            // The current source is demoted (forced): just keep it fed.
            self.feed_current();
            return WatchdogEvent::Inactive;
        };
        let Some(first) = members[0].filter(|_| n >= 2) else {
            self.feed_current();
            st.core = None;
            // Nothing else to compare, but a demoted candidate can still
            // verify against the current source.
            if !restart && !self.conditional(cur) {
                if let Some(source) =
                    self.probation_round(&mut st.readmission, cur, paused, same_tsc)
                {
                    return WatchdogEvent::Readmitted { source };
                }
            }
            return WatchdogEvent::Inactive;
        };
        // The first `n` are the members (the rest repeat the first, unused).
        let members = members.map(|m| m.unwrap_or(first));
        let key: MemberKey = (
            ids,
            core::array::from_fn(|i| (i < n).then(|| members[i].domain)),
        );
        let same = st.core.as_ref().is_some_and(|(_, k)| *k == key);
        if !same || restart {
            let mut w = Watchdog::new(&members[..n], self.settings.watchdog);
            for (i, &c) in counters[..n].iter().enumerate() {
                w.set_counter(i, c);
            }
            // A longer pause nobody reported is a jump (`max_jump`).
            w.set_pause_limit(self.settings.max_jump);
            st.core = Some((w, key));
        }
        // The reference: the best other member that needs no supervision,
        // preferring another *counter* than the current one's (by counter,
        // not vote: a TSC calibrated against the HPET is judged against the
        // HPET, with which it agrees by construction, and a disagreeing PM
        // timer then finds no majority instead of blaming the TSC).
        let reference = (0..n)
            .filter(|&i| i != cur_m && ids[i].is_some_and(served))
            .max_by_key(|&i| {
                let id = ids[i].unwrap_or(SourceId::Extra);
                let m = members[i];
                let rating = report
                    .get(id)
                    .and_then(|c| c.rating())
                    .map_or(i32::MIN, |q| q.get());
                (!m.conditional, counters[i] != counters[cur_m], rating)
            })
            .unwrap_or(0);
        let (Some(ref_id), Some((core, _))) = (ids[reference], st.core.as_mut()) else {
            return WatchdogEvent::Inactive;
        };
        let Some(ref_src) = sources[ref_id.index()] else {
            return WatchdogEvent::Inactive;
        };
        let (unplaced, fresh, tick_gap) = self.span_gap(
            (&mut st.last_round_ns, &mut st.unplaced, &st.out_for),
            (gap_ns, tick_tsc),
            &ids[..n],
            cur,
            &sources,
        );
        // A member whose wraps over the gap nothing could place sits the
        // round out (its count now is no count of the interval); the
        // reference cannot.
        let readable = served;
        let served = |id: SourceId| readable(id) && !unplaced[id.index()];
        let round = (!unplaced[ref_id.index()])
            .then(|| self.take_round(ref_src, reference, &ids[..n], &sources, &served))
            .flatten();
        // Members this CPU can read that gave no count of now (held, or
        // unplaced): out of the round, for a while at most.
        let mut out = [false; MAX_CANDIDATES];
        for (m, id) in ids[..n].iter().enumerate() {
            let Some(id) = *id else { continue };
            out[id.index()] = readable(id)
                && sources[id.index()].is_some_and(|s| s.max_read_interval().is_some())
                && match &round {
                    Some(r) if m != reference => r.ticks[m].is_none(),
                    Some(_) => false,
                    None => m == reference,
                };
        }
        self.out_too_long(
            &mut st.out_for,
            &mut st.unplaced,
            (&out, &fresh, tick_gap),
            cur,
        );
        let Some(round) = round else {
            // The reference is held across a gap nothing measured: no count
            // of now to judge against, and none to start from.
            core.restart();
            self.renew_supervision(st);
            return WatchdogEvent::Judged {
                source: cur,
                reference: ref_id,
                outcome: Outcome::Skipped,
                verdict: MemberVerdict::NotJudged,
            };
        };
        // A tick that took longer than an eighth of a member's wrap (a vCPU
        // preempted or paused inside it) read the members after a gap it
        // did not measure: an interval with a pause in it.
        let round_end = self.hw.rdtsc_ordered();
        let paused = paused || self.took_a_pause(tick_tsc, round_end, &ids[..n], &sources);
        // The next tick's gap starts at the members' reads, not at this
        // tick's start (a pause in between is this interval's).
        if let Some(last) = st.last_tick.as_mut() {
            last.0 = round_end;
        }
        let j = core.check(&round, reference, cur_m, paused);
        if restart || paused {
            self.renew_supervision(st);
        }
        let mut event = if restart {
            WatchdogEvent::Restarted
        } else {
            // A pause shortens the evidence, it does not erase it: the
            // round is judged (a step the pause left excuses a member).
            match self.after_round(st, &j, &ids, cur, cur_m, ref_id, reference, &round) {
                WatchdogEvent::Judged { .. } if paused => WatchdogEvent::GuestStopped,
                e => e,
            }
        };
        // A demoted candidate's probation, against a reference that needs
        // no supervision and was not found at fault this round.
        let ref_sound = !members[reference].conditional
            && !matches!(j.verdict(reference), MemberVerdict::Faulty(_))
            && !matches!(event, WatchdogEvent::Switched { .. });
        if !restart && ref_sound {
            if let Some(source) =
                self.probation_round(&mut st.readmission, ref_id, paused, same_tsc)
            {
                if matches!(
                    event,
                    WatchdogEvent::Judged { .. } | WatchdogEvent::GuestStopped
                ) {
                    event = WatchdogEvent::Readmitted { source };
                }
            }
        }
        // A plain judgement gives way to a refinement's news.
        #[cfg(feature = "tsc")]
        if !restart
            && matches!(
                event,
                WatchdogEvent::Judged { .. } | WatchdogEvent::GuestStopped
            )
        {
            if let Some(e) = self.refine_tsc(st, ref_id, ref_src, paused || !same_tsc) {
                return e;
            }
        }
        event
    }

    /// The time since the previous tick (0 at the first): by the jump
    /// check's 64-bit anchor counter (no extension the gap could fool; or
    /// the current source's, when it is such a counter) and
    /// by the TSC when its rate is known, the smaller of the two (a TSC
    /// that jumped ahead must not add wraps to an honest counter: too short
    /// a gap only leaves wraps lost, as without a measure); `None` when
    /// nothing independent spans the gap. And whether this tick's TSC
    /// compares with the previous tick's (the same CPU, or TSCs that
    /// agree), and the TSC it was measured at.
    fn tick_gap(&self, st: &mut State) -> (Option<u64>, bool, u64) {
        let tsc = self.hw.rdtsc_ordered();
        // The anchor's counter, else the current source's when it is one
        // (a 64-bit HPET on a CPU without a TSC).
        let cur = self.source_id();
        let wide_id = st.anchor.map(|(_, id, _)| id).or_else(|| {
            (self.is_wide(cur) && self.domain_now(cur) != CounterDomain::Tsc).then_some(cur)
        });
        let wide = wide_id.and_then(|id| Some((id, self.backends.source(id)?.read())));
        let cpu = self.hw.cpu_index();
        let then = st.last_tick.replace((tsc, cpu, wide));
        let (then_tsc, then_cpu, then_wide) = then.unwrap_or((tsc, cpu, wide));
        // Two CPUs' TSCs measure a gap only where they agree.
        let same_tsc = then_cpu == cpu || self.tscs_agree();
        let by_tsc = self
            .gap_tsc_scale()
            .filter(|_| same_tsc)
            .map(|s| s.ticks_to_ns(tsc.saturating_sub(then_tsc)));
        let by_wide = match (then_wide, wide) {
            (Some((a, t0)), Some((b, t1))) if a == b => self
                .scale_of(a.index())
                .map(|s| s.ticks_to_ns(t1.saturating_sub(t0))),
            _ => None,
        };
        let gap = match (by_tsc, by_wide) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        (gap, same_tsc, tsc)
    }

    /// The tick came (the interval only was skipped): a supervised TSC
    /// stays current as long as ticks arrive.
    fn renew_supervision(&self, st: &mut State) {
        // (Not for a forced source, nor one with nothing to supervise it.)
        if self.supervised() {
            let now = self.trusted_now(st);
            self.deadline.store(
                now.saturating_add(self.settings.supervision_timeout.as_nanos()),
                Ordering::Release,
            );
        }
    }

    /// Whether more time passed from `since` (this CPU's TSC at the
    /// tick's start) to `until` than an eighth of a software-extended
    /// member's wrap
    /// ([`took_a_pause`](super::gap_witness::took_a_pause)): its reading
    /// may have been placed without the time that passed.
    /// `false` where the TSC's rate is unknown (nothing can tell).
    fn took_a_pause(
        &self,
        since: u64,
        until: u64,
        ids: &[Option<SourceId>],
        sources: &crate::candidate::Sources<'_>,
    ) -> bool {
        let Some(tsc_scale) = self.tsc_scale() else {
            return false;
        };
        let took_ns = tsc_scale.ticks_to_ns(until.saturating_sub(since));
        ids.iter().flatten().any(|id| {
            let (Some(src), Some(scale)) = (sources[id.index()], self.scale_of(id.index())) else {
                return false;
            };
            src.max_read_interval().is_some_and(|half| {
                super::gap_witness::took_a_pause(took_ns, scale.ticks_to_ns(half))
            })
        })
    }

    /// One reading of the current source, which keeps a device's
    /// software extension fed (and its gap measure with it).
    fn feed_current(&self) {
        let cur = self.source_id();
        if let Some(s) = self.backends.source(cur) {
            let _ = self.read_current_device(cur.index(), s);
        }
    }

    /// Members whose software extension the gap since the last tick
    /// outlasted (`gap_ns`, by the TSC): each is read once with the gap in
    /// its own ticks, which recovers the wraps it hid (their previous read
    /// was the last tick's round). The current source, which `now()` reads
    /// between ticks, measures its gap from the clock's own last reading
    /// ([`read_current_device`](Clock::read_current_device)). Without a
    /// measure of the gap ([`tick_gap`](Self::tick_gap)), the clock's own
    /// timeline since the last such round measures it, where its readings
    /// compare across CPUs (the current device's gap was recovered on this
    /// CPU's own TSC). Returns the members that sit this round out (held
    /// since a gap too long to place, or one this tick: its error past an
    /// eighth of a wrap), those this tick put out afresh, and the gap's
    /// measure (for [`out_too_long`](Self::out_too_long)).
    fn span_gap(
        &self,
        (last_round_ns, held, out_for): (&mut Option<u64>, &mut Held, &OutFor),
        (gap_ns, tick_tsc): (Option<u64>, u64),
        ids: &[Option<SourceId>],
        cur: SourceId,
        sources: &crate::candidate::Sources<'_>,
    ) -> ([bool; MAX_CANDIDATES], [bool; MAX_CANDIDATES], Option<u64>) {
        let mut unplaced = [false; MAX_CANDIDATES];
        let mut fresh = [false; MAX_CANDIDATES];
        if !self.mapped[cur.index()] {
            self.feed_current();
        }
        // Members out since a gap: back once their count moved on.
        for (i, h) in held.iter_mut().enumerate() {
            let Some(was) = *h else { continue };
            if i == cur.index() {
                // Current now: its reads keep it fed.
                *h = None;
                continue;
            }
            let src = SourceId::from_index(i).and_then(|id| sources[id.index()]);
            match src.map(|s| s.read_near(None)) {
                Some(r) if !r.current || r.ticks == was => unplaced[i] = true,
                _ => *h = None,
            }
        }
        let timeline = self
            .verified_now_ns()
            .filter(|_| self.compares_across_cpus(cur));
        let then = core::mem::replace(last_round_ns, timeline);
        let by_timeline = timeline
            .zip(then)
            .map(|(now, then)| now.saturating_sub(then));
        let Some(g) = gap_ns.or(by_timeline) else {
            return (unplaced, fresh, None);
        };
        let tsc_scale = self.gap_tsc_scale();
        for id in ids.iter().flatten().copied().filter(|id| *id != cur) {
            let (Some(src), Some(scale)) = (sources[id.index()], self.scale_of(id.index())) else {
                continue;
            };
            let Some(interval) = src.max_read_interval() else {
                continue;
            };
            // The gap to this read: the tick's, and the time since it was
            // measured (a vCPU paused inside the tick).
            let since = tsc_scale.map_or(0, |s| {
                s.ticks_to_ns(self.hw.rdtsc_ordered().saturating_sub(tick_tsc))
            });
            // A member out of the rounds was last placed where it went
            // out: its span is from there (the measured gaps since).
            let out_ns = out_for[id.index()].map_or(0, |(_, ns)| ns);
            let span_ns = g.saturating_add(since).saturating_add(out_ns);
            let span = scale.ns_to_ticks(span_ns);
            if span >= interval {
                // The span is measured from the last tick, not from the
                // member's last value (a round that held it is older): it
                // is placed within an eighth of a wrap, and only where the
                // TSC rate's error over it is below that (a span an hour
                // long by a stepped TSC places no wraps).
                let eighth = interval / 4;
                let rate_error = super::read::estimate_within(span_ns, super::read::READ_SKEW_NS);
                if scale.ns_to_ticks(rate_error) <= eighth {
                    let v = src.read_spanning(span, eighth);
                    if held[id.index()].is_some_and(|was| v != was) {
                        // Placed again (ticks further apart than half its
                        // wrap leave it held without a span): back in.
                        held[id.index()] = None;
                        unplaced[id.index()] = false;
                    }
                } else {
                    // Too long to place its wraps: read as it comes (its
                    // next intervals start where it counts again), sitting
                    // the rounds out until then.
                    held[id.index()] = Some(src.read_forward());
                    unplaced[id.index()] = true;
                    fresh[id.index()] = true;
                }
            }
        }
        (unplaced, fresh, Some(g))
    }

    /// Members `out` of this round: an honest extension held across a gap
    /// counts again within a wrap (its raw count catches up with its last
    /// value), so one that has given no count for longer than a wrap (and
    /// a tick) of measured tick gaps, over [`OUT_TICKS`] ticks in a row,
    /// stopped: demoted as the watchdog would have, never left out of the
    /// rounds for good. The count starts at the tick it went out, and again
    /// at each new gap too long to place (`fresh`): those gaps are not
    /// time it failed to count.
    fn out_too_long(
        &self,
        out_for: &mut OutFor,
        unplaced: &mut Held,
        (out, fresh, tick_gap): (
            &[bool; MAX_CANDIDATES],
            &[bool; MAX_CANDIDATES],
            Option<u64>,
        ),
        cur: SourceId,
    ) {
        for (i, entry) in out_for.iter_mut().enumerate() {
            if !out[i] {
                *entry = None;
                continue;
            }
            let (ticks, ns) = match *entry {
                Some(e) if !fresh[i] => e,
                _ => {
                    *entry = Some((0, 0));
                    continue;
                }
            };
            let (ticks, ns) = (ticks + 1, ns.saturating_add(tick_gap.unwrap_or(0)));
            *entry = Some((ticks, ns));
            let Some(id) = SourceId::from_index(i) else {
                continue;
            };
            let wrap_ns = self
                .backends
                .source(id)
                .and_then(|s| s.max_read_interval())
                .zip(self.scale_of(i))
                .map_or(u64::MAX, |(half, scale)| {
                    scale.ticks_to_ns(half.saturating_mul(2))
                });
            if ticks >= OUT_TICKS && ns > wrap_ns.saturating_add(OUT_MARGIN_NS) {
                *entry = None;
                unplaced[i] = None;
                let fault = Fault::Stopped;
                self.demote(
                    id,
                    Demotion::Watchdog {
                        fault,
                        against: cur,
                    },
                );
            }
        }
    }

    /// One round: the reference, every other member, the reference; the
    /// tightest window of three tries.
    pub(super) fn take_round(
        &self,
        reference: &dyn clockhal_core::ClockSource,
        ref_index: usize,
        ids: &[Option<SourceId>],
        sources: &crate::candidate::Sources<'_>,
        served: &dyn Fn(SourceId) -> bool,
    ) -> Option<Round> {
        let mut best: Option<Round> = None;
        for _ in 0..3 {
            let before = reference.read_near(None);
            let mut r = Round::new(before.ticks, before.ticks);
            for (i, id) in ids.iter().enumerate() {
                if i == ref_index {
                    continue;
                }
                // A software-extended member held across a gap nothing
                // measured gives no count of now: it sits the round out
                // (never "stopped" for a tick gap longer than its wrap).
                r.ticks[i] = id
                    .filter(|id| served(*id))
                    .and_then(|id| sources[id.index()])
                    .map(|s| s.read_near(None))
                    .and_then(|r| r.current.then_some(r.ticks));
            }
            let after = reference.read_near(None);
            if !before.current || !after.current {
                return None;
            }
            r.ref_after = after.ticks;
            let w = r.ref_after.wrapping_sub(r.ref_before);
            if best.is_none_or(|b| w < b.ref_after.wrapping_sub(b.ref_before)) {
                best = Some(r);
            }
            if w <= 64 {
                break;
            }
        }
        best
    }

    /// Whether `id`'s correctness rests on an unverified claim (a
    /// supervised TSC, a rate clockhal estimated, an OS-supplied source).
    pub(crate) fn conditional(&self, id: SourceId) -> bool {
        self.backends.conditional(id)
    }

    #[allow(clippy::too_many_arguments)]
    fn after_round(
        &self,
        st: &mut State,
        j: &Judgement,
        ids: &[Option<SourceId>; MAX_MEMBERS],
        cur: SourceId,
        cur_m: usize,
        ref_id: SourceId,
        ref_m: usize,
        round: &Round,
    ) -> WatchdogEvent {
        let mut event = WatchdogEvent::Judged {
            source: cur,
            reference: ref_id,
            outcome: j.outcome,
            verdict: j.verdict(cur_m),
        };
        let mut demoted_other = None;
        for (m, fault) in j.faulty() {
            let Some(id) = ids[m] else { continue };
            let against = if m == ref_m { cur } else { ref_id };
            let reason = Demotion::Watchdog { fault, against };
            if id == cur {
                continue;
            }
            self.demote(id, reason);
            if let Some((core, _)) = st.core.as_mut() {
                core.clear_strikes(m);
            }
            demoted_other = demoted_other.or(Some(WatchdogEvent::Demoted {
                source: id,
                reason,
                was_reference: m == ref_m,
            }));
        }
        if let MemberVerdict::Faulty(fault) = j.verdict(cur_m) {
            let reason = Demotion::Watchdog {
                fault,
                against: ref_id,
            };
            st.core = None;
            return match self.demote_and_switch(st, cur, reason) {
                Some(to) => WatchdogEvent::Switched {
                    from: cur,
                    to,
                    reason,
                },
                None => event,
            };
        }
        if let Some(e) = demoted_other {
            event = e;
        }
        // The current source passed: its instant now is verified.
        if matches!(j.verdict(cur_m), MemberVerdict::Ok { .. }) {
            // The round vouches for the source's reading now: the ceiling
            // moves to it first, so the read below is not held by the jump
            // check (which cannot run while this tick holds the lock).
            if let Some(v) = self.verified_now_ns() {
                self.raise_ceiling(v.saturating_add(self.settings.max_jump.as_nanos()));
            }
            let now = self.now_ns();
            self.raise_ceiling(now.saturating_add(self.settings.max_jump.as_nanos()));
            self.refresh_anchor(st, now, round, ids, ref_m);
            if self.supervised() {
                self.deadline.store(
                    now.saturating_add(self.settings.supervision_timeout.as_nanos()),
                    Ordering::Release,
                );
            }
        }
        event
    }

    /// Keeps the jump check's anchor: the clock now and an independent
    /// 64-bit counter's reading (the HPET or the Hyper-V MSR) from this
    /// round, when there is one other than the current source's domain.
    fn refresh_anchor(
        &self,
        st: &mut State,
        now: u64,
        round: &Round,
        ids: &[Option<SourceId>; MAX_MEMBERS],
        ref_m: usize,
    ) {
        let cur = self.source_id();
        let cur_domain = self.domain_now(cur);
        st.anchor = None;
        for (m, id) in ids.iter().enumerate() {
            let Some(id) = *id else { continue };
            if id == cur || self.domain_now(id) == cur_domain || !self.is_wide(id) {
                continue;
            }
            let ticks = if m == ref_m {
                Some(round.ref_after)
            } else {
                round.ticks[m]
            };
            if let Some(t) = ticks {
                st.anchor = Some((now, id, t));
                return;
            }
        }
    }

    /// A 64-bit counter (no software extension that could hide a wrap)
    /// whose readings on different CPUs compare (a device, or a TSC-based
    /// source ordered across CPUs): a measure that begins on one CPU and
    /// ends on another.
    fn is_wide(&self, id: SourceId) -> bool {
        self.compares_across_cpus(id)
            && self
                .backends
                .source(id)
                .is_some_and(|s| !s.stability().contains(Stability::SOFTWARE_EXTENDED))
    }

    /// Whether `id`'s readings on two CPUs compare: all but the raw TSC's
    /// where the TSCs are not known to agree (a device is one counter for
    /// all; kvmclock and the Hyper-V page correct each CPU's TSC).
    pub(super) fn compares_across_cpus(&self, id: SourceId) -> bool {
        !self.backends.raw_tsc(id) || self.tscs_agree()
    }

    /// A reading `v` above the ceiling: does the anchor's reference say
    /// that much time passed? `Err(Some(excess))` when it does not by more
    /// than 1% + 1 s; `Err(None)` when it cannot be told now (a watchdog
    /// tick or a switch holds the lock: the read holds, the next one asks
    /// again, and when `v` is a reading of the reference's own counter
    /// (`origin`: a fallback), which cannot confirm itself). Without any
    /// independent counter the reading is taken, and the ceiling moves.
    pub(crate) fn verify_jump(&self, v: u64, origin: Option<SourceId>) -> Result<(), Option<u64>> {
        // (`try_locked`: a wall time or page publication an interrupt
        // asked for meanwhile is published when this lets go.)
        self.try_locked(|st| self.verify_jump_locked(st, v, origin))
            .unwrap_or(Err(None))
    }

    fn verify_jump_locked(
        &self,
        st: &mut State,
        v: u64,
        origin: Option<SourceId>,
    ) -> Result<(), Option<u64>> {
        let max_jump = self.settings.max_jump.as_nanos();
        let Some((then, id, ticks)) = st.anchor else {
            self.raise_ceiling(v.saturating_add(max_jump));
            return Ok(());
        };
        if origin == Some(id) {
            // The reading comes from the reference itself: not confirmed.
            return Err(None);
        }
        let ref_ns = match self.anchor_elapsed(id, ticks) {
            Elapsed::Ns(ns) => ns,
            Elapsed::NoDevice => return Ok(()),
            Elapsed::Back => {
                // A witness that went back can convict no one: the
                // reading is taken as without an anchor.
                self.anchor_failed(st, id, Fault::SteppedBack);
                self.raise_ceiling(v.saturating_add(max_jump));
                return Ok(());
            }
        };
        let allowed = ref_ns
            .saturating_add(ref_ns / 100)
            .saturating_add(1_000_000_000);
        let claimed = v.saturating_sub(then);
        if claimed > allowed && self.counting(id) {
            return Err(Some(claimed - allowed));
        }
        if claimed > allowed {
            // No witness left: as without an anchor.
            self.anchor_failed(st, id, Fault::Stopped);
        }
        self.raise_ceiling(v.saturating_add(max_jump));
        Ok(())
    }

    /// A supervised TSC's reading `v` is past its deadline: did the ticks
    /// really stop for that long? The jump check's anchor (an independent
    /// 64-bit counter, read at the round that set the deadline or before)
    /// says how much time passed for the devices. A guest paused with its
    /// devices while the TSC counted on (QEMU's stop/cont without
    /// kvmclock) is past the deadline on the TSC alone: the deadline moves
    /// by what the devices did not see (at most `max_jump`), and the next
    /// tick judges the TSC. `true`: past it (the ticks stopped, nothing
    /// can tell, or the TSC ran further than a pause explains).
    /// Interrupt-safe: yes (try-lock; bounded device reads).
    pub(crate) fn deadline_passed(&self, v: u64) -> bool {
        // A tick is running (the lock is held): ticks have not stopped.
        self.try_locked(|st| self.deadline_passed_locked(st, v))
            .unwrap_or(false)
    }

    fn deadline_passed_locked(&self, st: &mut State, v: u64) -> bool {
        let Some((then, id, ticks)) = st.anchor else {
            return true;
        };
        let device_ns = match self.anchor_elapsed(id, ticks) {
            Elapsed::Ns(ns) => ns,
            Elapsed::NoDevice => return true,
            Elapsed::Back => {
                self.anchor_failed(st, id, Fault::SteppedBack);
                return true;
            }
        };
        let timeout = self.settings.supervision_timeout.as_nanos();
        let base = self
            .deadline
            .load(Ordering::Acquire)
            .saturating_sub(timeout);
        // The devices' time since the deadline's base, and the TSC's.
        let devices = device_ns.saturating_sub(base.saturating_sub(then));
        let tsc = v.saturating_sub(base);
        if devices >= timeout {
            return true;
        }
        if tsc.saturating_sub(devices) > self.settings.max_jump.as_nanos() {
            // Unverified either way; a stopped device must not be where
            // the clock goes next.
            if !self.counting(id) {
                self.anchor_failed(st, id, Fault::Stopped);
            }
            return true;
        }
        self.deadline
            .store(v.saturating_add(timeout - devices), Ordering::Release);
        false
    }

    /// The ns the anchor's device `id` counted since its reading `ticks`
    /// (the jump check's, the supervision deadline's and `trusted_now`'s
    /// one question). A 64-bit counter left near 2^64 (a hostile or
    /// long-running HPET) wraps to small values: that is forward, by the
    /// wrapping difference; only a difference past half the range is a
    /// count back.
    /// Interrupt-safe: yes (one device read).
    fn anchor_elapsed(&self, id: SourceId, ticks: u64) -> Elapsed {
        let (Some(src), Some(scale)) = (self.backends.source(id), self.scale_of(id.index())) else {
            return Elapsed::NoDevice;
        };
        let d = src.read().wrapping_sub(ticks);
        if d > BEFORE_ZERO {
            Elapsed::Back
        } else {
            Elapsed::Ns(scale.ticks_to_ns(d))
        }
    }

    /// Whether the counter `id` (the anchor's device, which counted less
    /// than the current source claims; a switch's target) is counting at
    /// all: its reading changes within 100 µs by the TSC (at most
    /// [`ALIVE_READS`] reads). A stopped anchor witnesses nothing: it is
    /// [`anchor_failed`](Self::anchor_failed). Without a TSC rate to bound
    /// the wait it is taken as counting.
    /// Interrupt-safe: yes (bounded device reads).
    #[cold]
    pub(super) fn counting(&self, id: SourceId) -> bool {
        let (Some(src), Some(tsc)) = (self.backends.source(id), self.tsc_scale()) else {
            return true;
        };
        // What this CPU cannot read (an unregistered kvmclock area), and a
        // software extension that holds across a gap (its raw count
        // behind its last value), tell nothing: taken as counting.
        if !self.backends.serves(id, self.hw.cpu_index()) {
            return true;
        }
        let first = src.read_near(None);
        if !first.current {
            return true;
        }
        let start = self.hw.rdtsc();
        for _ in 0..ALIVE_READS {
            let r = src.read_near(None);
            if !r.current || r.ticks != first.ticks {
                return true;
            }
            if tsc.ticks_to_ns(self.hw.rdtsc().wrapping_sub(start)) >= ALIVE_WAIT_NS {
                break;
            }
        }
        false
    }

    /// The anchor's device `id` stopped or counted back (`fault`): it can
    /// neither confirm nor refute a reading, and no switch may land on it.
    /// Demoted as the watchdog would have, and the anchor dropped until a
    /// round sets a new one.
    #[cold]
    fn anchor_failed(&self, st: &mut State, id: SourceId, fault: Fault) {
        st.anchor = None;
        let against = self.source_id();
        self.demote(id, Demotion::Watchdog { fault, against });
    }

    /// Sets the jump check's first anchor when the clock is built: the
    /// start of the timeline and an independent 64-bit counter's reading
    /// then, so a reading is checked before the first judged round too.
    /// The gap measure starts here too: every software-extended counter
    /// is read once and the first tick's gap is measured from now, so a
    /// pause before the first tick cannot hide a wrap.
    pub(crate) fn anchor_at_start(&self, start_ns: u64) {
        self.try_locked(|st| {
            self.anchor_at(st, start_ns);
            let sources = self.backends.sources();
            for s in sources.iter().flatten() {
                if s.max_read_interval().is_some() {
                    let _ = s.read();
                }
            }
            let _ = self.tick_gap(st);
        });
    }

    /// Forgets every baseline taken against a reference's count before a
    /// discontinuity the reference may have gone through (S3 resets the
    /// HPET and the PM timer): the jump check re-anchors at `now_ns` with
    /// a reading taken now, the rate refinement and the re-admission
    /// probations start again, the comparison restarts at the next tick.
    pub(crate) fn rebaseline(&self, st: &mut State, now_ns: u64) {
        self.anchor_at(st, now_ns);
        st.refine = None;
        st.core = None;
        st.last_round_ns = None;
        st.unplaced = [None; MAX_CANDIDATES];
        st.out_for = [None; MAX_CANDIDATES];
        st.readmission.restart();
    }

    /// The jump check's anchor: `at_ns` on the clock and an independent
    /// 64-bit counter's reading now (none without one).
    fn anchor_at(&self, st: &mut State, at_ns: u64) {
        let cur = self.source_id();
        let report = *self.report.lock();
        let anchor = report.candidates().find_map(|c| {
            let usable = matches!(c.verdict, Verdict::Usable(_));
            if !usable
                || c.id == cur
                || self.domain_now(c.id) == self.domain_now(cur)
                || !self.is_wide(c.id)
            {
                return None;
            }
            self.backends.source(c.id).map(|s| (at_ns, c.id, s.read()))
        });
        st.anchor = anchor;
    }

    /// Each backend's running count of implausible host updates, with the
    /// source it counts against (its first: the TSC-based one), `k` of them.
    fn host_fault_counts(
        &self,
    ) -> (
        [u64; MAX_CANDIDATES],
        [Option<SourceId>; MAX_CANDIDATES],
        usize,
    ) {
        let mut counts = [0u64; MAX_CANDIDATES];
        let mut owners = [None; MAX_CANDIDATES];
        let mut k = 0;
        self.backends.each(|b| {
            let mut s: crate::candidate::Sources<'_> = [None; MAX_CANDIDATES];
            b.sources(&mut s);
            let f = b.host_faults();
            if let Some(i) = s.iter().position(Option::is_some) {
                if k < MAX_CANDIDATES {
                    counts[k] = f;
                    owners[k] = SourceId::from_index(i);
                    k += 1;
                }
            }
        });
        (counts, owners, k)
    }

    /// Takes the host-fault counts as they stand as seen: after a restore,
    /// what reads between the host's restore and the CPUs' `resume` found
    /// discontinuous was the restore itself, not a faulty host.
    pub(crate) fn forgive_host_faults(&self, st: &mut State) {
        let (counts, owners, k) = self.host_fault_counts();
        for (f, id) in counts.iter().zip(owners).take(k) {
            if let Some(id) = id {
                st.faults_seen[id.index()] = *f;
            }
        }
    }

    /// Demotes sources whose backend counted implausible host updates since
    /// the last tick ("one bad value": it was not used, but a source that
    /// produces them is not trusted further). Returns the switch event if
    /// the current source was one.
    fn judge_host_faults(&self, st: &mut State) -> Option<WatchdogEvent> {
        let (counts, owners, k) = self.host_fault_counts();
        let mut event = None;
        for (f, id) in counts.iter().zip(owners).take(k) {
            let Some(id) = id else { continue };
            let seen = &mut st.faults_seen[id.index()];
            if *f > *seen {
                let count = *f - *seen;
                *seen = *f;
                let reason = Demotion::HostFaults { count };
                if id == self.source_id() {
                    if let Some(to) = self.demote_and_switch(st, id, reason) {
                        st.core = None;
                        event = Some(WatchdogEvent::Switched {
                            from: id,
                            to,
                            reason,
                        });
                    }
                } else {
                    self.demote(id, reason);
                }
            }
        }
        event
    }

    /// The time without reading the current source: the high-water mark of
    /// every floor, or further by the anchor's independent counter (the
    /// last verified instant plus the reference's elapsed time) when one
    /// exists.
    pub(super) fn trusted_now(&self, st: &State) -> u64 {
        let high = self.high_water();
        let Some((then, id, ticks)) = st.anchor else {
            return high;
        };
        match self.anchor_elapsed(id, ticks) {
            Elapsed::Ns(ns) => high.max(then.saturating_add(ns)),
            Elapsed::NoDevice | Elapsed::Back => high,
        }
    }
}
