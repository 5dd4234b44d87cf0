//! The [`Suite`] builder and the state its checks share.

use crate::config::{Config, MAX_SOURCES};
use crate::result::{detail, Check, CheckResult, Detail, Sink, Status, Summary, Value};
use crate::{checks, Cpus, PauseClock, PauseHost, StealTime, Timers};
use clockhal_core::{ClockSource, Scale};

/// Reads of an unchanged reference after which a wait gives up.
const REFERENCE_STUCK_READS: u32 = 1_000_000;
/// With a wait function: time asked of it, beyond the wait itself, without
/// the reference moving, after which the wait gives up.
const REFERENCE_STUCK_WAIT_NS: u64 = 1_000_000_000;
/// Reference/source/reference brackets tried per timestamp (tightest kept).
const BRACKET_TRIES: u32 = 3;

/// One run of the conformance checks over a set of clock sources.
///
/// Give it the sources, a reference to time them against (normally one of
/// them, the same object: a fixed-rate device such as the HPET or the PM
/// timer when the machine has one; it is recognised by identity, not name), a cycle counter for read costs, and optionally a way to
/// wait, a second-CPU runner and the name of the source the OS selected.
/// [`run`](Self::run) sends every result to a [`Sink`] and returns the
/// counts. See the crate docs for a worked example.
pub struct Suite<'a> {
    sources: &'a [&'a dyn ClockSource],
    reference: &'a dyn ClockSource,
    cycles: &'a dyn Fn() -> u64,
    wait: Option<&'a dyn Fn(u64)>,
    cpus: Option<&'a dyn Cpus>,
    selection: Option<Option<&'a str>>,
    steal: Option<&'a dyn StealTime>,
    pause: Option<(&'a dyn PauseClock, &'a dyn PauseHost)>,
    timers: Option<Timers<'a>>,
    config: Config,
}

impl<'a> Suite<'a> {
    /// A run over `sources`, timed against `reference`; `cycles` returns a
    /// cycle counter (the TSC) for the read-cost check.
    ///
    /// At most [`MAX_SOURCES`] sources are checked; further ones get one
    /// skipped result each.
    pub fn new(
        sources: &'a [&'a dyn ClockSource],
        reference: &'a dyn ClockSource,
        cycles: &'a dyn Fn() -> u64,
    ) -> Suite<'a> {
        Suite {
            sources,
            reference,
            cycles,
            wait: None,
            cpus: None,
            selection: None,
            steal: None,
            pause: None,
            timers: None,
            config: Config::default(),
        }
    }

    /// Tolerances and durations (default: [`Config::default`]).
    pub fn config(mut self, config: Config) -> Suite<'a> {
        self.config = config;
        self
    }

    /// A way to let time pass: `wait(ns)` should return after roughly `ns`
    /// nanoseconds (or earlier). Without it the suite spins on the reference.
    /// Either way the reference decides when an interval is over.
    pub fn wait_with(mut self, wait: &'a dyn Fn(u64)) -> Suite<'a> {
        self.wait = Some(wait);
        self
    }

    /// Enables the cross-CPU (warp) test on the kernel's CPUs. Without it,
    /// or with a single CPU, that check is skipped with the reason.
    pub fn cpus(mut self, cpus: &'a dyn Cpus) -> Suite<'a> {
        self.cpus = Some(cpus);
        self
    }

    /// The name of the source the OS selected (`None`: it selected nothing),
    /// checked by [`Check::Selected`]. Without this call that check is not
    /// run. A name that several different sources carry (the reference
    /// included) fails that check: it does not say which one was selected.
    pub fn selected(mut self, name: Option<&'a str>) -> Suite<'a> {
        self.selection = Some(name);
        self
    }

    /// Runs the steal-time check ([`Check::StealTime`]) on the calling CPU
    /// over `steal`: it never decreases and never grows faster than the
    /// reference (skipped, with the reason `steal` gives, where there is
    /// none). Without this call that check is not run.
    ///
    /// Interrupt-safe: yes (stores the reference).
    pub fn steal(mut self, steal: &'a dyn StealTime) -> Suite<'a> {
        self.steal = Some(steal);
        self
    }

    /// Runs the pause check ([`Check::Pause`]) last: samples `clock` on the
    /// calling CPU, tells `host` it is ready to be paused, and after the
    /// host resumed the guest checks that the clock never went back, kept
    /// its source, and counted no fault or demotion over the pause. Skipped,
    /// with the reason `host` gives, where no pause is planned. Without
    /// this call that check is not run.
    ///
    /// Interrupt-safe: yes (stores the references).
    pub fn pause(mut self, clock: &'a dyn PauseClock, host: &'a dyn PauseHost) -> Suite<'a> {
        self.pause = Some((clock, host));
        self
    }

    /// Runs the timer checks ([`Check::TimerDeadlines`], [`Check::TimerPast`],
    /// [`Check::TimerCancel`], [`Check::TimerLong`] per device,
    /// [`Check::TimerSelected`]) over the kernel's timer devices. Without
    /// this call they are all skipped ("the kernel gives the suite no
    /// timer interrupts"), one per name in
    /// [`TIMER_DEVICES`](crate::TIMER_DEVICES).
    ///
    /// Interrupt-safe: yes (stores the references).
    pub fn timers(mut self, timers: Timers<'a>) -> Suite<'a> {
        self.timers = Some(timers);
        self
    }

    /// Runs every check and reports each result to `sink`.
    pub fn run(&self, sink: &mut dyn Sink) -> Summary {
        let n = self.sources.len().min(MAX_SOURCES);
        let ctx = Ctx {
            sources: &self.sources[..n],
            reference: self.reference,
            ref_scale: Scale::new(self.reference.frequency()),
            cycles: self.cycles,
            wait: self.wait,
            config: self.config,
        };
        let mut rep = Reporter {
            sink,
            summary: Summary::default(),
            failed: [false; MAX_SOURCES],
            unverified: [false; MAX_SOURCES],
            cost: [None; MAX_SOURCES],
            step_ns: [None; MAX_SOURCES],
        };
        for s in &self.sources[n..] {
            rep.report(
                None,
                s.name(),
                Check::Monotonic,
                Status::Skip,
                Value::None,
                "-",
                &detail!("not checked: the suite handles at most {MAX_SOURCES} sources"),
            );
        }
        checks::monotonic::run(&ctx, &mut rep);
        checks::cost::run(&ctx, &mut rep);
        checks::rate::run(&ctx, &mut rep);
        checks::wrap::run(&ctx, &mut rep);
        checks::warp::run(&ctx, &mut rep, self.cpus);
        if let Some(selected) = self.selection {
            checks::selection::run(&ctx, &mut rep, selected);
        }
        if let Some(steal) = self.steal {
            checks::steal::run(&ctx, &mut rep, steal);
        }
        checks::timer::run(&ctx, &mut rep, self.timers.as_ref());
        if let Some((clock, host)) = self.pause {
            checks::pause::run(&ctx, &mut rep, clock, host);
        }
        rep.summary
    }
}

/// What every check needs.
pub(crate) struct Ctx<'a> {
    pub sources: &'a [&'a dyn ClockSource],
    pub reference: &'a dyn ClockSource,
    pub ref_scale: Scale,
    pub cycles: &'a dyn Fn() -> u64,
    pub wait: Option<&'a dyn Fn(u64)>,
    pub config: Config,
}

/// A source reading placed on the reference's nanosecond timeline.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Stamp {
    /// The source's reading.
    pub ticks: u64,
    /// Reference time of the reading (ns since the run's epoch): the middle
    /// of the tightest reference bracket around it.
    pub at_ns: u64,
}

/// Whether `a` and `b` are the same source object. Names do not tell
/// sources apart (two HPET blocks share their backend's name), so this
/// compares addresses; the name must match too, so that a wrapper holding
/// another source at its start is not taken for it.
pub(crate) fn same_source(a: &dyn ClockSource, b: &dyn ClockSource) -> bool {
    core::ptr::addr_eq(a as *const dyn ClockSource, b as *const dyn ClockSource)
        && a.name() == b.name()
}

impl Ctx<'_> {
    /// Whether `s` is the reference object itself (not merely named like it).
    pub fn is_reference(&self, s: &dyn ClockSource) -> bool {
        same_source(s, self.reference)
    }

    pub fn reference_in_list(&self) -> bool {
        self.sources.iter().any(|s| self.is_reference(*s))
    }

    /// How many distinct source objects, among the checked ones and the
    /// reference, are called `name`. Results are keyed by name, so above
    /// one a name does not say which source it means.
    pub fn objects_named(&self, name: &str) -> usize {
        let listed = self
            .sources
            .iter()
            .enumerate()
            .filter(|(i, s)| {
                s.name() == name && !self.sources[..*i].iter().any(|t| same_source(*t, **s))
            })
            .count();
        let reference = self.reference.name() == name && !self.reference_in_list();
        listed + reference as usize
    }

    /// Reads `src` between two reference reads, keeping the tightest of a
    /// few brackets so a preempted read does not skew the timestamp.
    pub fn stamp(&self, src: &dyn ClockSource, epoch: u64) -> Stamp {
        let mut best: Option<(u64, u64, u64)> = None; // (width, r0, ticks)
        for _ in 0..BRACKET_TRIES {
            let r0 = self.reference.read();
            let t = src.read();
            let r1 = self.reference.read();
            let width = if r1 >= r0 { r1 - r0 } else { u64::MAX };
            if best.is_none_or(|(w, _, _)| width < w) {
                best = Some((width, r0, t));
            }
        }
        let (width, r0, ticks) = best.unwrap_or((0, epoch, 0));
        let half = if width == u64::MAX {
            0
        } else {
            self.ref_scale.ticks_to_ns(width) / 2
        };
        Stamp {
            ticks,
            at_ns: self
                .ref_scale
                .ticks_to_ns(r0.saturating_sub(epoch))
                .saturating_add(half),
        }
    }

    /// Lets `ns` nanoseconds pass by the reference. Returns `false` if the
    /// reference stopped advancing or went backwards (no wait happened).
    pub fn wait_ns(&self, ns: u64) -> bool {
        let start = self.reference.read();
        let target = self.ref_scale.ns_to_ticks(ns).max(1);
        // An extended reference must be read often enough not to lose wraps.
        let chunk_ns = match self.reference.max_read_interval() {
            Some(m) => (self.ref_scale.ticks_to_ns(m) / 2).max(1),
            None => u64::MAX,
        };
        let mut last = start;
        let mut unchanged = 0u32;
        // Nanoseconds asked of `wait` since the reference last moved.
        let mut waited = 0u64;
        loop {
            let now = self.reference.read();
            if now < start {
                return false;
            }
            let elapsed = now - start;
            if elapsed >= target {
                return true;
            }
            if now == last {
                unchanged += 1;
                if unchanged > REFERENCE_STUCK_READS
                    || waited > ns.saturating_add(REFERENCE_STUCK_WAIT_NS)
                {
                    return false;
                }
            } else {
                unchanged = 0;
                waited = 0;
                last = now;
            }
            match self.wait {
                Some(w) => {
                    let remaining = self.ref_scale.ticks_to_ns(target - elapsed).max(1);
                    let d = remaining.min(chunk_ns);
                    waited = waited.saturating_add(d);
                    w(d);
                }
                None => core::hint::spin_loop(),
            }
        }
    }
}

/// Counts results, remembers failures and read costs per source, forwards
/// to the sink.
pub(crate) struct Reporter<'s> {
    sink: &'s mut dyn Sink,
    pub summary: Summary,
    pub failed: [bool; MAX_SOURCES],
    /// A check that decides whether the source passed could not run (its
    /// rate, with the reference broken): it did not pass everything.
    pub unverified: [bool; MAX_SOURCES],
    pub cost: [Option<u64>; MAX_SOURCES],
    /// The smallest step each source was seen to take, in ns (the
    /// resolution check): what one reading can be off by.
    pub step_ns: [Option<u64>; MAX_SOURCES],
}

impl Reporter<'_> {
    /// Reports one result; `index` is the source's slot (for failure
    /// tracking), `None` for results about no particular slot.
    #[allow(clippy::too_many_arguments)]
    pub fn report(
        &mut self,
        index: Option<usize>,
        source: &str,
        check: Check,
        status: Status,
        value: Value,
        unit: &'static str,
        detail: &Detail,
    ) {
        if status == Status::Fail {
            if let Some(i) = index {
                self.failed[i] = true;
            }
        }
        self.summary.add(status);
        self.sink.record(&CheckResult {
            source,
            check,
            status,
            value,
            unit,
            detail: detail.as_str(),
        });
    }
}
