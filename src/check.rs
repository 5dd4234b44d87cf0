//! The probe-time self-check: does each candidate advance, stay monotonic
//! over a few reads, and tick at roughly the rate the others measure?
//!
//! Everything is bounded by read counts and by time: the advance check of
//! a software-extended counter by the longest time it may legitimately
//! hold (at most 2.5 s, timed by another candidate), the rate check by [`SelfCheck::rate_interval`]
//! of the fastest-to-read candidate.
//!
//! The rate check reads every eligible candidate at the start and the end
//! of one common interval, each read bracketed by two reads of a *pacer*
//! (the best no-trap candidate). A bracket wider than
//! [`SelfCheck::max_window`] (the vCPU was descheduled, an emulated device
//! was slow) is retried; the remaining width is counted as uncertainty, so a
//! slow read never fails a good clock. Each candidate's rate is expressed
//! relative to the pacer; two candidates agree when their relative rates
//! differ by at most the tolerance plus both uncertainties. Agreement is
//! counted by the domain whose rate a candidate's rests on (the TSC,
//! kvmclock and the Hyper-V page count one TSC: a TSC rated from pvclock
//! agrees with kvmclock by construction; a TSC calibrated against the HPET
//! counts as the HPET): a candidate that agrees with no other domain while
//! two domains agree among themselves is demoted. The PIT, where it was
//! probed as a calibration reference (no stated TSC rate, both an HPET and
//! a PM timer), is measured as a witness: with it, two device counters
//! that disagree are decided by the majority; so, where the TSC has a
//! stated rate and there is one device counter, are the two. With only two
//! candidates that disagree, the TSC (calibrated or stated) or an
//! OS-supplied source loses ([`SourceId::rate_is_estimated`]); otherwise
//! nobody is demoted and the run-time watchdog has the last word. The vote is [`clockhal_core::consensus::decide`], the
//! watchdog's own rule.

use crate::candidate::Sources;
use crate::{Demotion, Report, SourceId, Verdict, MAX_CANDIDATES};
use clockhal_core::consensus::{decide, Vote};
use clockhal_core::{ppm, Bracketed, ClockSource, CounterDomain, Duration, ReadCost, Scale};

/// Tuning for the probe-time self-check.
///
/// ```
/// use clockhal::SelfCheck;
/// use clockhal_core::Duration;
/// let c = SelfCheck::new().rate_interval(Duration::from_millis(2));
/// assert_eq!(c.rate_tolerance_ppm, 10_000);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct SelfCheck {
    /// Back-to-back reads allowed for the counter to change at all
    /// (default 2000), else it is demoted as not advancing. A
    /// software-extended counter read more than half a wrap late holds
    /// until its count passes the old value (the PIT up to 27.5 ms, a
    /// 24-bit PM timer up to 2.34 s): where another candidate with a rate
    /// (the TSC) can time it, its check goes on past this count until half
    /// its wrap plus 1 ms passed (at most 2.5 s). Otherwise it is a read
    /// count: 2,000 reads of a no-trap source take some 40 µs, so an
    /// OS-supplied source ([`Platform::extra`](crate::Platform::extra))
    /// that counts more slowly than that (a 1 kHz tick) needs more reads
    /// here. kvmclock is checked with exact readings whatever
    /// [`Platform::clamp_granule`](crate::Platform::clamp_granule) says.
    pub advance_reads: u32,
    /// Consecutive reads that must not decrease (default 16).
    pub monotonic_reads: u32,
    /// Length of the common rate-check interval, measured by the pacer
    /// (default 5 ms). [`Duration::ZERO`] skips the rate check.
    pub rate_interval: Duration,
    /// Largest rate disagreement tolerated, in ppm, on top of the measured
    /// uncertainty (default 10,000 = 1%: catches wrong units, stuck or
    /// half-rate counters; fine drift is the watchdog's job). A calibration
    /// reference wrong by less than this passes its error to the TSC
    /// calibrated from it, and the watchdog cannot tell two disagreeing
    /// device counters apart without a third: it demotes neither.
    pub rate_tolerance_ppm: u64,
    /// Brackets wider than this are retried and, if always too wide, make
    /// that candidate's rate check inconclusive (default 20 us).
    pub max_window: Duration,
    /// Retries per bracket (default 8).
    pub bracket_tries: u32,
    /// Cap on pacer reads while waiting out the interval (default 10^7).
    pub max_pacing_reads: u64,
}

impl Default for SelfCheck {
    fn default() -> Self {
        SelfCheck::new()
    }
}

impl SelfCheck {
    /// The defaults.
    /// Interrupt-safe: yes.
    pub const fn new() -> SelfCheck {
        SelfCheck {
            advance_reads: 2_000,
            monotonic_reads: 16,
            rate_interval: Duration::from_millis(5),
            rate_tolerance_ppm: 10_000,
            max_window: Duration::from_micros(20),
            bracket_tries: 8,
            max_pacing_reads: 10_000_000,
        }
    }

    /// Sets [`rate_interval`](Self::rate_interval).
    /// Interrupt-safe: yes.
    pub const fn rate_interval(mut self, d: Duration) -> SelfCheck {
        self.rate_interval = d;
        self
    }

    /// Sets [`rate_tolerance_ppm`](Self::rate_tolerance_ppm).
    /// Interrupt-safe: yes.
    pub const fn rate_tolerance_ppm(mut self, ppm: u64) -> SelfCheck {
        self.rate_tolerance_ppm = ppm;
        self
    }
}

/// How much wider than [`SelfCheck::max_window`] the bracket of a read
/// that takes several exits may be (the PIT's latch and two bytes, the PM
/// timer's paired or verified read; the pacer's own rate may be the one
/// in question).
const SEVERAL_TRAPS_WINDOW_FACTOR: u64 = 8;

/// While pacing, the software-extended candidates are read every this
/// many pacer reads (microseconds apart, whatever the pacer's rate claims):
/// no wrap of a short counter (the PIT's 16 bits: 54.9 ms) is lost over a
/// long interval.
const FEED_EVERY_READS: u64 = 1_024;

/// Runs every check and records demotions in `report`.
pub(crate) fn run(report: &mut Report, sources: &Sources<'_>, cfg: &SelfCheck) {
    for id in SourceId::ALL {
        let (Some(c), Some(s)) = (report.get(id), sources[id.index()]) else {
            continue;
        };
        if !matches!(c.verdict, Verdict::Usable(_)) {
            continue;
        }
        let outcome = advances(s, timer(report, sources, id), cfg)
            .and_then(|()| monotonic(s, cfg.monotonic_reads));
        if let (Err(d), Some(c)) = (outcome, report.get_mut(id)) {
            c.demote(d);
        }
    }
    if cfg.rate_interval == Duration::ZERO {
        return;
    }
    rate_check(report, sources, cfg);
}

/// Added to the half wrap a software-extended counter may legitimately
/// stand still (read more than half a wrap after its previous read, it
/// holds until its count passes the old value again: less than half a
/// wrap, the PIT's 27.5 ms, a 24-bit PM timer's 2.34 s).
const ADVANCE_MARGIN_NS: u64 = 1_000_000;
/// Longest hold waited out: a 24-bit PM timer's half wrap (2.34 s) and
/// margin. A stuck counter costs at most this much boot time; a longer hold
/// (a 32-bit HPET read 21 s late) still fails the check.
const MAX_HOLD_WAIT_NS: u64 = 2_500_000_000;
/// Reads of the candidate per read of the timer while waiting out a hold.
const TIMER_EVERY_READS: u64 = 64;

/// What times [`advances`]: the best eligible candidate on another counter
/// (the TSC where it has a rate), with its rate.
fn timer<'a>(
    report: &Report,
    sources: &Sources<'a>,
    id: SourceId,
) -> Option<(&'a dyn ClockSource, Scale)> {
    let own = crate::candidate::domain_in(sources, id);
    let t = crate::select::best(report, |c| {
        c.id != id
            && crate::candidate::domain_in(sources, c.id) != own
            && sources[c.id.index()].is_some()
    })?;
    Some((sources[t.index()]?, Scale::new(report.get(t)?.frequency()?)))
}

/// Whether `s` advances: within [`SelfCheck::advance_reads`] reads, or,
/// for a software-extended counter where `timer` (another counter) shows
/// time passing, within its longest legitimate hold by that timer (half its
/// wrap plus [`ADVANCE_MARGIN_NS`], at most [`MAX_HOLD_WAIT_NS`]) —
/// a read count alone punished a
/// PIT read 27-55 ms after its previous read (a vCPU preempted on a loaded
/// host), held for up to 27 ms while 2,000 reads take a few. Bounded by
/// [`SelfCheck::max_pacing_reads`] reads too.
fn advances(
    s: &dyn ClockSource,
    timer: Option<(&dyn ClockSource, Scale)>,
    cfg: &SelfCheck,
) -> Result<(), Demotion> {
    let half_wrap_ns = s
        .max_read_interval()
        .map(|ticks| Scale::new(s.frequency()).ticks_to_ns(ticks));
    // Only a software-extended counter holds after a late read.
    let timer = timer.filter(|_| half_wrap_ns.is_some());
    let hold_ns = half_wrap_ns
        .unwrap_or(0)
        .saturating_add(ADVANCE_MARGIN_NS)
        .min(MAX_HOLD_WAIT_NS);
    // The timer's reading when the current hold may have begun, and at
    // its last read.
    let t0 = timer.map(|(t, _)| t.read());
    let (mut since, mut last) = (t0.unwrap_or(0), t0.unwrap_or(0));
    let first = s.read();
    let mut prev = first;
    let mut reads = 0u64;
    loop {
        let v = s.read();
        reads += 1;
        if v < prev {
            return Err(Demotion::WentBackwards);
        }
        if v > first {
            return Ok(());
        }
        prev = v;
        let check = reads % TIMER_EVERY_READS == 0 || reads == cfg.advance_reads as u64;
        if !check {
            continue;
        }
        // Goes on past the read count only while the timer shows less than
        // the hold since its start. A gap of more than half a wrap between
        // two timer reads (a preemption) may start a new hold: counted
        // from there. A timer that stands still shows no time at all.
        let in_hold = match (timer, t0) {
            (Some((t, scale)), Some(t0)) => {
                let now = t.read();
                if half_wrap_ns.is_some_and(|h| scale.ticks_to_ns(now.saturating_sub(last)) > h) {
                    since = now;
                }
                last = now;
                now > t0 && scale.ticks_to_ns(now.saturating_sub(since)) < hold_ns
            }
            _ => false,
        };
        if reads >= cfg.max_pacing_reads || (reads >= cfg.advance_reads as u64 && !in_hold) {
            return Err(Demotion::NotAdvancing {
                reads: u32::try_from(reads).unwrap_or(u32::MAX),
            });
        }
    }
}

fn monotonic(s: &dyn ClockSource, reads: u32) -> Result<(), Demotion> {
    let mut prev = s.read();
    for _ in 0..reads {
        let v = s.read();
        if v < prev {
            return Err(Demotion::WentBackwards);
        }
        prev = v;
    }
    Ok(())
}

/// The narrowest of up to `tries` brackets of `s` by `pacer`, and whether
/// it is narrow enough. The pacer measured against itself is exact.
fn bracket(
    pacer: &Pacing<'_>,
    s: &dyn ClockSource,
    same: bool,
    max_ticks: u64,
    tries: u32,
) -> (Bracketed, bool) {
    if same {
        let v = pacer.read(pacer.max_step);
        return (
            Bracketed {
                before: v,
                inner: v,
                after: v,
            },
            true,
        );
    }
    // The first pacer read of a try follows the previous read closely; the
    // second may be as far from it as the window allows.
    let mut opening = false;
    let outer = || {
        opening = !opening;
        pacer.read(if opening { pacer.max_step } else { max_ticks })
    };
    match Bracketed::tightest(tries, max_ticks, outer, || s.read()) {
        Some(b) => (b, b.width().is_some_and(|w| w <= max_ticks)),
        None => (Bracketed::default(), false),
    }
}

/// Attempts at a rate-check interval without a gap of the pacer.
const INTERVAL_TRIES: u32 = 3;

/// The pacer's reads, with the sum of its steps wider than they may be
/// (`gaps`, pacer ticks): time the pacer counted between two of its reads
/// that a candidate read only at the ends of the interval may not have.
struct Pacing<'a> {
    pacer: &'a dyn ClockSource,
    max_step: u64,
    last: core::cell::Cell<Option<u64>>,
    gaps: core::cell::Cell<u64>,
}

impl<'a> Pacing<'a> {
    fn new(pacer: &'a dyn ClockSource, max_step: u64) -> Self {
        Pacing {
            pacer,
            max_step,
            last: core::cell::Cell::new(None),
            gaps: core::cell::Cell::new(0),
        }
    }

    /// A read at most `limit` ticks after the previous one, or a gap.
    fn read(&self, limit: u64) -> u64 {
        let v = self.pacer.read();
        if let Some(step) = self.last.get().and_then(|l| v.checked_sub(l)) {
            if step > limit {
                self.gaps.set(self.gaps.get().saturating_add(step));
            }
        }
        self.last.set(Some(v));
        v
    }
}

/// Every candidate bracketed at the start and the end of one interval.
struct Interval {
    start: [(Bracketed, bool); MAX_CANDIDATES],
    end: [(Bracketed, bool); MAX_CANDIDATES],
    gaps: u64,
}

fn interval(
    pacing: &Pacing<'_>,
    pacer_id: SourceId,
    ids: &[SourceId],
    sources: &Sources<'_>,
    window: &dyn Fn(SourceId) -> u64,
    pscale: Scale,
    cfg: &SelfCheck,
) -> Interval {
    let brackets = || {
        let mut b = [(Bracketed::default(), false); MAX_CANDIDATES];
        for &id in ids {
            if let Some(s) = sources[id.index()] {
                b[id.index()] = bracket(pacing, s, id == pacer_id, window(id), cfg.bracket_tries);
            }
        }
        b
    };
    let start = brackets();
    let p0 = pacing.read(pacing.max_step);
    let mut reads = 0u64;
    let mut limit = pacing.max_step;
    while reads < cfg.max_pacing_reads {
        reads += 1;
        if pscale.ticks_to_ns(pacing.read(limit).saturating_sub(p0)) >= cfg.rate_interval.as_nanos()
        {
            break;
        }
        limit = pacing.max_step;
        if reads % FEED_EVERY_READS == 0 {
            // The next step spans these reads too.
            limit = pacing.max_step.saturating_mul(SEVERAL_TRAPS_WINDOW_FACTOR);
            for &id in ids.iter().filter(|&&id| id != pacer_id) {
                if let Some(s) = sources[id.index()].filter(|s| s.max_read_interval().is_some()) {
                    let _ = s.read();
                }
            }
        }
    }
    let end = brackets();
    Interval {
        start,
        end,
        gaps: pacing.gaps.get(),
    }
}

/// A candidate's measured rate relative to the pacer.
#[derive(Clone, Copy)]
struct Relative {
    id: SourceId,
    /// (rate / pacer rate - 1) in ppm.
    ppm: i64,
    /// How much of `ppm` the bracket widths can explain.
    uncertainty_ppm: u64,
}

fn rate_check(report: &mut Report, sources: &Sources<'_>, cfg: &SelfCheck) {
    // Eligible candidates with a backend, in rank order (best first), and
    // the PIT as a witness even where it is only a calibration reference:
    // a third independent rate (its 1.193182 MHz is the specification's)
    // decides between two device counters that disagree.
    let eligible = |id: SourceId| report.get(id).is_some_and(|c| c.is_eligible());
    let (hpet, pm) = (eligible(SourceId::Hpet), eligible(SourceId::AcpiPm));
    // The PIT decides where two rates alone could not: an HPET against a
    // PM timer, or the TSC against the one device counter.
    let tsc = eligible(SourceId::Tsc) || eligible(SourceId::Extra);
    let undecided = (hpet && pm) || (tsc && hpet != pm);
    let mut ids = [SourceId::Extra; MAX_CANDIDATES];
    let mut n = 0;
    for c in report.ranked() {
        // Only where it can decide (`undecided`).
        let witness = undecided && c.id == SourceId::Pit && matches!(c.verdict, Verdict::Usable(_));
        if (c.is_eligible() || witness) && sources[c.id.index()].is_some() {
            ids[n] = c.id;
            n += 1;
        }
    }
    if n < 2 {
        return;
    }
    let ids = &ids[..n];
    let Some(pacer_id) = crate::select::best(report, |c| ids.contains(&c.id)) else {
        return;
    };
    let (Some(pacer), Some(pacer_freq)) = (
        sources[pacer_id.index()],
        report.get(pacer_id).and_then(|c| c.frequency()),
    ) else {
        return;
    };
    let pscale = Scale::new(pacer_freq);
    let max_window = pscale.ns_to_ticks(cfg.max_window.as_nanos());

    // A read of several exits has a wider window, counted as its
    // uncertainty like any other.
    let window = |id: SourceId| match sources[id.index()].map(|s| s.read_cost()) {
        Some(ReadCost::SeveralTraps) => max_window.saturating_mul(SEVERAL_TRAPS_WINDOW_FACTOR),
        _ => max_window,
    };
    // A step of the pacer wider than a bracket may be between two of its
    // reads is a gap the other candidates may not have seen (a guest
    // paused with its devices, the TSC running on): it is measured again,
    // and the gaps of the attempt kept count as every voter's uncertainty.
    let mut best: Option<Interval> = None;
    for _ in 0..INTERVAL_TRIES {
        let pacing = Pacing::new(pacer, max_window);
        let i = interval(&pacing, pacer_id, ids, sources, &window, pscale, cfg);
        if best.as_ref().is_none_or(|b| i.gaps < b.gaps) {
            best = Some(i);
        }
        if best.as_ref().is_some_and(|b| b.gaps == 0) {
            break;
        }
    }
    let Some(Interval { start, end, gaps }) = best else {
        return;
    };

    let mut rel: [Option<Relative>; MAX_CANDIDATES] = [None; MAX_CANDIDATES];
    for &id in ids {
        let ((s, s_ok), (e, e_ok)) = (start[id.index()], end[id.index()]);
        if e.inner < s.inner {
            if let Some(c) = report.get_mut(id) {
                c.demote(Demotion::WentBackwards);
            }
            continue;
        }
        let ref_ns = pscale.ticks_to_ns(e.mid().saturating_sub(s.mid()));
        let Some(freq) = report.get(id).and_then(|c| c.frequency()) else {
            continue;
        };
        if !(s_ok && e_ok) || ref_ns == 0 {
            continue; // inconclusive: no verdict either way
        }
        let src_ns = Scale::new(freq).ticks_to_ns(e.inner - s.inner);
        let width = |b: &Bracketed| pscale.ticks_to_ns(b.width().unwrap_or(0));
        let half_windows = (width(&s) + width(&e)) / 2 + pscale.ticks_to_ns(gaps);
        rel[id.index()] = Some(Relative {
            id,
            ppm: ppm(src_ns as i128 - ref_ns as i128, ref_ns),
            uncertainty_ppm: ppm(half_windows as i128, ref_ns).unsigned_abs(),
        });
    }
    let domains = rate_domains(report);
    judge(report, &rel, &domains, ids, cfg.rate_tolerance_ppm);
}

/// [`rate_domain`] of every id, by index.
fn rate_domains(report: &Report) -> [CounterDomain; MAX_CANDIDATES] {
    core::array::from_fn(|i| {
        SourceId::from_index(i).map_or(CounterDomain::Other(i as u8), |id| report.rate_domain(id))
    })
}

/// Demotes the candidates the measurements single out: the consensus
/// rule the watchdog uses too ([`clockhal_core::consensus`]), over the
/// candidates in rank order, with the estimated rate as the conditional
/// side of a two-way disagreement when exactly two were measured.
fn judge(
    report: &mut Report,
    rel: &[Option<Relative>; MAX_CANDIDATES],
    domains: &[CounterDomain; MAX_CANDIDATES],
    ranked: &[SourceId],
    tol: u64,
) {
    let mut votes = [None::<Vote>; MAX_CANDIDATES];
    let mut measured = [0usize; MAX_CANDIDATES];
    let mut n = 0;
    for (k, id) in ranked.iter().enumerate().take(MAX_CANDIDATES) {
        votes[k] = rel[id.index()].map(|r| Vote {
            skew_ppm: r.ppm,
            uncertainty_ppm: r.uncertainty_ppm,
            domain: domains[id.index()],
            conditional: id.rate_is_estimated(),
        });
        if votes[k].is_some() {
            measured[n] = k;
            n += 1;
        }
    }
    let pair = (n == 2).then_some((measured[0], measured[1]));
    let c = decide(&votes, tol, None, pair);
    let Some(anchor) = c.anchor().and_then(|k| rel[ranked[k].index()]) else {
        return;
    };
    for (k, id) in ranked.iter().enumerate().take(MAX_CANDIDATES) {
        if let (true, Some(loser)) = (c.outvoted[k], rel[id.index()]) {
            demote(report, loser, &anchor);
        }
    }
}

fn demote(report: &mut Report, loser: Relative, anchor: &Relative) {
    if let Some(c) = report.get_mut(loser.id) {
        c.demote(Demotion::RateDisagrees {
            ppm: relative_ppm(loser.ppm, anchor.ppm),
            against: anchor.id,
        });
    }
}

/// The rate of `l` relative to `a`, in ppm, from both rates relative to
/// the pacer (in ppm): `(1 + l)/(1 + a) - 1`, exact also for large skews
/// (a plain `l - a` would claim rates below -100 %).
fn relative_ppm(l: i64, a: i64) -> i64 {
    let den = (1_000_000i128 + a as i128).max(1) as u64;
    ppm(l as i128 - a as i128, den)
}

#[cfg(test)]
mod tests {
    #[test]
    fn relative_rates_stay_above_minus_100_percent() {
        use super::relative_ppm;
        // A TSC stated 3x too fast paces the check: the HPET looks -666,667
        // ppm slow, the TSC itself 0; the TSC relative to the HPET is +2x.
        assert_eq!(relative_ppm(0, -666_667), 2_000_003);
        assert_eq!(relative_ppm(-666_667, 0), -666_667);
        assert_eq!(relative_ppm(100, 0), 100);
        // A stopped source: -100 %, not less.
        assert_eq!(relative_ppm(-1_000_000, 0), -1_000_000);
        assert_eq!(relative_ppm(-1_000_000, 50_000), -1_000_000);
    }

    use super::*;
    use crate::{Candidate, Note};
    use clockhal_core::{Frequency, Quality, ReadCost, Stability};

    fn rel(id: SourceId, ppm: i64) -> Option<Relative> {
        Some(Relative {
            id,
            ppm,
            uncertainty_ppm: 10,
        })
    }

    struct Fixed(Frequency);
    impl ClockSource for Fixed {
        fn name(&self) -> &'static str {
            "fixed"
        }
        fn read(&self) -> u64 {
            0
        }
        fn frequency(&self) -> Frequency {
            self.0
        }
        fn quality(&self) -> Quality {
            Quality::new(100)
        }
        fn stability(&self) -> Stability {
            Stability::empty()
        }
        fn read_cost(&self) -> ReadCost {
            ReadCost::NoTrap
        }
    }

    fn report(ids: &[SourceId]) -> Report {
        let mut r = Report::new();
        let f = Fixed(Frequency::from_hz(1_000).unwrap());
        for &id in ids {
            r.insert(Candidate::usable(id, &f, Note::None));
        }
        r
    }

    fn judge_all(
        r: &mut Report,
        rel: &[Option<Relative>; MAX_CANDIDATES],
        ids: &[SourceId],
        tol: u64,
    ) {
        let d = rate_domains(r);
        judge(r, rel, &d, ids, tol);
    }

    fn rels(v: &[(SourceId, i64)]) -> [Option<Relative>; MAX_CANDIDATES] {
        let mut out = [None; MAX_CANDIDATES];
        for &(id, p) in v {
            out[id.index()] = rel(id, p);
        }
        out
    }

    #[test]
    #[cfg(feature = "tsc")]
    fn a_tsc_calibrated_against_the_hpet_is_no_second_vote_for_it() {
        use SourceId::*;
        // Found by red-team round 8: the HPET's period register claims
        // 10 MHz for a 100 MHz counter; the TSC calibrated against it is as
        // wrong, and their two "domains" outvoted the honest PM timer.
        let with = |pit: bool| {
            let mut r = Report::new();
            let f = Fixed(Frequency::from_hz(1_000).unwrap());
            let calibrated = Note::Tsc {
                rate: clockhal_tsc::RateProvenance::Calibrated {
                    reference: "hpet",
                    uncertainty_ppm: 50,
                },
                unusable: None,
                supervised: true,
                unwatched: false,
            };
            r.insert(Candidate::usable(Tsc, &f, calibrated));
            r.insert(Candidate::usable(Hpet, &f, Note::None));
            r.insert(Candidate::usable(AcpiPm, &f, Note::None));
            let mut rates = std::vec![(Tsc, 0), (Hpet, 0), (AcpiPm, -900_000)];
            let mut ids = std::vec![Tsc, Hpet, AcpiPm];
            if pit {
                r.insert(Candidate::usable(Pit, &f, Note::None));
                rates.push((Pit, -900_010));
                ids.push(Pit);
            }
            assert_eq!(r.rate_domain(Tsc), CounterDomain::Hpet);
            judge_all(&mut r, &rels(&rates), &ids, 10_000);
            r
        };
        // Two rate domains that disagree: nothing says which is right.
        let r = with(false);
        for id in [Tsc, Hpet, AcpiPm] {
            assert!(r.get(id).unwrap().is_eligible(), "{id} demoted");
        }
        // The PIT as a third witness sides with the PM timer: the HPET, and
        // the TSC calibrated from it, lose.
        let r = with(true);
        assert!(r.get(AcpiPm).unwrap().is_eligible());
        for id in [Tsc, Hpet] {
            assert!(
                matches!(
                    r.get(id).unwrap().demotion(),
                    Some(Demotion::RateDisagrees { .. })
                ),
                "{id}: {:?}",
                r.get(id).unwrap().verdict
            );
        }
    }

    #[test]
    fn majority_demotes_the_odd_one_out() {
        use SourceId::*;
        let ids = [Kvmclock, Tsc, Hpet, AcpiPm];
        let mut r = report(&ids);
        judge_all(
            &mut r,
            &rels(&[(Kvmclock, 0), (Tsc, 0), (Hpet, 25_000), (AcpiPm, 40)]),
            &ids,
            10_000,
        );
        assert_eq!(
            r.get(Hpet).unwrap().demotion(),
            Some(Demotion::RateDisagrees {
                ppm: 25_000,
                against: Kvmclock
            })
        );
        for id in [Kvmclock, Tsc, AcpiPm] {
            assert!(r.get(id).unwrap().is_eligible(), "{id}");
        }
    }

    #[test]
    fn one_counter_read_twice_is_one_vote() {
        use SourceId::*;
        // kvmclock and a TSC rated from it agree by construction; the one
        // device counter disagrees: nothing says who is wrong.
        let ids = [Kvmclock, Tsc, Hpet];
        let mut r = report(&ids);
        judge_all(
            &mut r,
            &rels(&[(Kvmclock, 0), (Tsc, 0), (Hpet, -50_000)]),
            &ids,
            10_000,
        );
        for id in ids {
            assert!(r.get(id).unwrap().is_eligible(), "{id} demoted");
        }
        // A second independent counter siding with the HPET decides.
        let ids = [Kvmclock, Tsc, Hpet, AcpiPm];
        let mut r = report(&ids);
        judge_all(
            &mut r,
            &rels(&[(Kvmclock, 0), (Tsc, 0), (Hpet, -50_000), (AcpiPm, -50_010)]),
            &ids,
            10_000,
        );
        assert!(r.get(Hpet).unwrap().is_eligible() && r.get(AcpiPm).unwrap().is_eligible());
        assert!(!r.get(Kvmclock).unwrap().is_eligible() && !r.get(Tsc).unwrap().is_eligible());
    }

    #[test]
    fn two_disagreeing_estimated_rate_loses_else_nobody() {
        use SourceId::*;
        let ids = [Tsc, Hpet];
        let mut r = report(&ids);
        judge_all(&mut r, &rels(&[(Tsc, 0), (Hpet, -50_000)]), &ids, 10_000);
        // The TSC relative to the HPET: 1 / 0.95 - 1.
        assert_eq!(
            r.get(Tsc).unwrap().demotion(),
            Some(Demotion::RateDisagrees {
                ppm: 52_631,
                against: Hpet
            })
        );
        assert!(r.get(Hpet).unwrap().is_eligible());

        let ids = [Kvmclock, Hpet];
        let mut r = report(&ids);
        judge_all(
            &mut r,
            &rels(&[(Kvmclock, 0), (Hpet, -50_000)]),
            &ids,
            10_000,
        );
        assert!(r.candidates().all(|c| c.is_eligible()));
    }

    #[test]
    fn uncertainty_widens_agreement() {
        use SourceId::*;
        let ids = [Tsc, Hpet, AcpiPm];
        let mut r = report(&ids);
        let mut v = rels(&[(Tsc, 0), (Hpet, 0), (AcpiPm, 10_500)]);
        v[AcpiPm.index()].as_mut().unwrap().uncertainty_ppm = 600;
        judge_all(&mut r, &v, &ids, 10_000);
        assert!(r.candidates().all(|c| c.is_eligible()));
    }
}
