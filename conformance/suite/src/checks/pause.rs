//! A host pause (QEMU `stop`, a hold, `cont`) while the clock is sampled:
//! time never goes back across it, the clock keeps its source, the host's
//! updates count no fault, and no source is demoted for it. The value is
//! the clock's step over the pause (the sample interval in which the cycle
//! counter stepped most); the detail says how the guest saw the pause.
//!
//! QEMU restores kvmclock at `cont` where it was at `stop` (and sets
//! `GUEST_STOPPED`) while the TSC counts on; under TCG every clock stops.
//! So the clock's step is small on kvmclock, the hold on a TSC that counted
//! through it, and nothing at all where the guest cannot see the pause:
//! the check states what was seen and fails only on what clockhal promises.

use crate::result::{detail, Check, Detail, Status, Value};
use crate::suite::{Ctx, Reporter};
use crate::{PauseClock, PauseHost, PauseTick};

/// Watchdog ticks while sampling (every 250 ms of clock time, as the
/// conformance kernel's settling ticks).
pub const TICK_NS: u64 = 250_000_000;
/// Sampling after the host said it resumed the guest (four ticks: the
/// watchdog judges the pause's interval and the ones after it).
pub const AFTER_NS: u64 = 1_000_000_000;
/// Most clock time waited for the host to pause and resume the guest.
pub const WAIT_LIMIT_NS: u64 = 30_000_000_000;
/// Between polls of the host.
const POLL_NS: u64 = 1_000_000;
/// Clock time over which the cycle counter's rate is measured first (to
/// state the counter's step over the pause in ns).
const CALIBRATE_NS: u64 = 50_000_000;
/// Identical readings in a row after which the clock counts as stopped.
const STALL_READS: u32 = 1_000_000;
/// With a wait function (host tests): time let pass between samples.
const SAMPLE_STEP_NS: u64 = 20_000;
/// Ticks in a row with the same source and demotions that count as settled.
pub const SETTLE_TICKS: u32 = 6;
/// Most ticks spent settling (10 s).
pub const MAX_SETTLE_TICKS: u32 = 40;

/// Ticks every [`TICK_NS`] until the source and the demotion count held
/// for [`SETTLE_TICKS`] ticks; `false` if they did not within
/// [`MAX_SETTLE_TICKS`] (or the clock stopped).
fn settle(clock: &dyn PauseClock, step: &dyn Fn()) -> bool {
    let mut last = (clock.current_source(), clock.demotions(&mut Detail::new()));
    let mut still = 0;
    for _ in 0..MAX_SETTLE_TICKS {
        let (from, mut same) = (clock.now_ns(), 0u32);
        loop {
            step();
            let n = clock.now_ns();
            if n.saturating_sub(from) >= TICK_NS {
                break;
            }
            same = if n <= from { same + 1 } else { 0 };
            if same > STALL_READS {
                return false;
            }
        }
        clock.tick();
        let now = (clock.current_source(), clock.demotions(&mut Detail::new()));
        still = if now == last { still + 1 } else { 0 };
        last = now;
        if still >= SETTLE_TICKS {
            return true;
        }
    }
    false
}

/// The sample interval in which the cycle counter stepped most.
#[derive(Clone, Copy, Default)]
struct Gap {
    cycles: u64,
    clock_ns: u64,
}

pub(crate) fn run(
    ctx: &Ctx<'_>,
    rep: &mut Reporter<'_>,
    clock: &dyn PauseClock,
    host: &dyn PauseHost,
) {
    let mut why = Detail::new();
    let Some(hold_ns) = host.planned_hold_ns(&mut why) else {
        let source = clock.current_source();
        return rep.report(
            None,
            source,
            Check::Pause,
            Status::Skip,
            Value::None,
            "ns",
            &detail!("{}", why.as_str()),
        );
    };
    let step = || {
        if let Some(w) = ctx.wait {
            w(SAMPLE_STEP_NS);
        }
    };
    // Settle first: after the suite's tickless checks the watchdog may
    // demote a supervised TSC for want of ticks and re-admit it rounds
    // later; the pause is judged against a clock whose source and
    // demotions held still for SETTLE_TICKS ticks.
    let settled = settle(clock, &step);
    let source = clock.current_source();
    let report = |rep: &mut Reporter<'_>, status, value, d: &Detail| {
        rep.report(None, source, Check::Pause, status, value, "ns", d)
    };
    if !settled {
        return report(
            rep,
            Status::Fail,
            Value::None,
            &detail!("the clock did not settle before the pause (its source or demotions changed within every {SETTLE_TICKS} ticks for {MAX_SETTLE_TICKS} ticks)"),
        );
    }
    let switches = clock.switch_count();
    let faults = clock.host_faults();
    let demoted = clock.demotions(&mut Detail::new());

    // The cycle counter's rate on the clock, before the pause.
    let (c0, n0) = ((ctx.cycles)(), clock.now_ns());
    let (mut c1, mut n1, mut same) = (c0, n0, 0u32);
    while n1.wrapping_sub(n0) < CALIBRATE_NS {
        step();
        let n = clock.now_ns();
        c1 = (ctx.cycles)();
        same = if n == n1 { same + 1 } else { 0 };
        if same > STALL_READS {
            return report(
                rep,
                Status::Fail,
                Value::None,
                &detail!("the clock stopped before the pause ({STALL_READS} identical readings)"),
            );
        }
        n1 = n1.max(n);
    }
    let cycles_to_ns = |c: u64| -> u64 {
        let (dc, dn) = (c1.wrapping_sub(c0), n1 - n0);
        if dc == 0 {
            return 0;
        }
        u64::try_from(u128::from(c) * u128::from(dn) / u128::from(dc)).unwrap_or(u64::MAX)
    };

    // The first sample comes before the marker, so a pause that lands
    // while the marker is being written is inside the first interval.
    let start = clock.now_ns();
    let (mut high, mut prev_c) = (start, (ctx.cycles)());
    host.ready();
    let (mut samples, mut backs, mut worst_back) = (0u64, 0u64, 0u64);
    let (mut ticks, mut stopped_ticks, mut same) = (0u32, 0u32, 0u32);
    let mut gap = Gap::default();
    let (mut next_tick, mut next_poll) = (start + TICK_NS, start);
    let mut resumed_at = None;
    // The first other source a tick found the clock on.
    let mut moved_to: Option<&'static str> = None;
    loop {
        step();
        let n = clock.now_ns();
        let c = (ctx.cycles)();
        samples += 1;
        if n < high {
            backs += 1;
            worst_back = worst_back.max(high - n);
        }
        let dc = c.wrapping_sub(prev_c);
        if dc > gap.cycles {
            gap = Gap {
                cycles: dc,
                clock_ns: n.saturating_sub(high),
            };
        }
        same = if n == high { same + 1 } else { 0 };
        if same > STALL_READS {
            return report(
                rep,
                Status::Fail,
                Value::None,
                &detail!(
                    "the clock stopped ({STALL_READS} identical readings after {samples} samples)"
                ),
            );
        }
        high = high.max(n);
        // Time is the highest reading (a reading that went back counts
        // above, and must not move the schedule).
        let t = high;
        if t >= next_tick {
            ticks += 1;
            if clock.tick() == PauseTick::GuestStopped {
                stopped_ticks += 1;
            }
            let now_on = clock.current_source();
            if now_on != source && moved_to.is_none() {
                moved_to = Some(now_on);
            }
            next_tick = t + TICK_NS;
        }
        match resumed_at {
            Some(r) if t - r >= AFTER_NS => break,
            Some(_) => {}
            None if t >= next_poll => {
                if host.resumed() {
                    resumed_at = Some(t);
                } else if t - start >= WAIT_LIMIT_NS {
                    return report(
                        rep,
                        Status::Fail,
                        Value::None,
                        &detail!(
                            "the host did not resume the guest within {} s of clock time",
                            WAIT_LIMIT_NS / 1_000_000_000
                        ),
                    );
                }
                next_poll = t + POLL_NS;
            }
            None => {}
        }
        prev_c = c;
    }

    let tsc_ns = cycles_to_ns(gap.cycles);
    let seen = if stopped_ticks > 0 {
        "seen by GUEST_STOPPED"
    } else if tsc_ns >= hold_ns / 2 {
        "seen by the cycle counter only"
    } else {
        "not seen (every clock the guest has stopped with it)"
    };
    let mut list = Detail::new();
    let now_demoted = clock.demotions(&mut list);
    let (now_source, now_switches, now_faults) = (
        clock.current_source(),
        clock.switch_count(),
        clock.host_faults(),
    );
    let hold_ms = hold_ns / 1_000_000;
    if backs > 0 {
        return report(
            rep,
            Status::Fail,
            Value::U64(worst_back),
            &detail!("{backs} of {samples} readings went back, worst by {worst_back} ns, around a {hold_ms} ms pause ({seen})"),
        );
    }
    // A switch away shows as another current source (at a tick or now);
    // switches that stay on the source are rebases (a refined TSC rate).
    if let Some(other) = moved_to.or((now_source != source).then_some(now_source)) {
        return report(
            rep,
            Status::Fail,
            Value::U64(gap.clock_ns),
            &detail!("the pause moved the clock from {source} to {other} ({seen}; now on {now_source}; demoted: {})", list.as_str()),
        );
    }
    if now_faults != faults {
        return report(
            rep,
            Status::Fail,
            Value::U64(gap.clock_ns),
            &detail!(
                "the host's updates over the pause counted {} faults ({seen})",
                now_faults.wrapping_sub(faults)
            ),
        );
    }
    if now_demoted > demoted {
        return report(
            rep,
            Status::Fail,
            Value::U64(gap.clock_ns),
            &detail!("the pause demoted a source ({seen}): {}", list.as_str()),
        );
    }
    report(
        rep,
        Status::Pass,
        Value::U64(gap.clock_ns),
        &detail!(
            "{seen}: clock +{} ns, cycle counter +{tsc_ns} ns (hold {hold_ms} ms); stopped in {stopped_ticks} of {ticks} ticks; {samples} samples never back; {source} kept ({} rebases), no fault or demotion",
            gap.clock_ns,
            now_switches.wrapping_sub(switches)
        ),
    )
}
