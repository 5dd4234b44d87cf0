//! One-shot timer deadlines, per device, delivered through the kernel's
//! interrupt vector ([`TimerUnderTest`]):
//!
//! - `timer-deadlines`: [`config::TIMER_DEADLINES`] deadlines drawn
//!   log-uniformly between the shortest and longest (50 µs–10 ms), each
//!   armed after the previous was delivered (fewer if the 12 s budget runs
//!   out first: `deadlines=` in the detail); none may be delivered before
//!   `now()` reached it (the handler's own `now()` after the delivery is
//!   compared), none may be lost, none delivered twice. Value: the median
//!   lateness (ns, `now - deadline` at the interrupt entry); the detail has
//!   `median_ns=` and `max_ns=`. Lateness is measured, never bounded (it is
//!   the host's scheduling under emulation).
//! - `timer-past`: a deadline 1 ms in the past, then one at `now()`, are
//!   delivered at once: by the first interrupt, programmed as the device's
//!   shortest count, with no re-arm (how long that interrupt takes is the
//!   host's latency: measured, and bounded only by [`TIMER_LOST_AFTER`]).
//! - `timer-cancel`: a cancelled deadline is not delivered and the device
//!   raises no interrupt for it; the device still delivers afterwards.
//! - `timer-long`: with the device's reach capped at 1 ms (a test setting),
//!   a 5 ms deadline arrives, never early; the pieces re-armed are reported
//!   (normally 4; fewer when an interrupt came after the deadline already).
//!   Skipped for 64-bit reaches (no deadline is longer).
//! - `timer-selected`: the OS selected a present device whose deadlines
//!   passed, with its reasons.
//!
//! [`config::TIMER_DEADLINES`]: crate::config::TIMER_DEADLINES

use crate::config::{
    TIMER_CANCEL_AHEAD, TIMER_CANCEL_WAIT, TIMER_DEADLINES, TIMER_DEADLINES_BUDGET,
    TIMER_LOST_AFTER,
};
use crate::result::{detail, Check, Detail, Status, Value};
use crate::suite::{Ctx, Reporter};
use crate::timer::{Deliveries, TimerSlot, TimerUnderTest, Timers, TIMER_DEVICES};

/// The per-device checks, in run order.
const DEVICE_CHECKS: [Check; 4] = [
    Check::TimerDeadlines,
    Check::TimerPast,
    Check::TimerCancel,
    Check::TimerLong,
];

pub(crate) fn run(ctx: &Ctx<'_>, rep: &mut Reporter<'_>, timers: Option<&Timers<'_>>) {
    let Some(timers) = timers else {
        for name in TIMER_DEVICES {
            for c in DEVICE_CHECKS {
                skip(
                    rep,
                    name,
                    c,
                    "the kernel gives the suite no timer interrupts",
                );
            }
        }
        return skip(
            rep,
            "none",
            Check::TimerSelected,
            "the kernel gives the suite no timer interrupts",
        );
    };
    if let Some(prepare) = timers.prepare {
        prepare();
    }
    // Which present devices delivered their deadlines (for the selection);
    // `None`: not run (unavailable when the checks started).
    let mut good = [Some(false); 8];
    for (i, slot) in timers.slots.iter().enumerate() {
        match slot {
            TimerSlot::Absent { name, reason } => {
                for c in DEVICE_CHECKS {
                    skip(rep, name, c, reason);
                }
            }
            TimerSlot::Present(t) => {
                let mut why = Detail::new();
                if t.unavailable(&mut why) {
                    for c in DEVICE_CHECKS {
                        skip(rep, t.name(), c, why.as_str());
                    }
                    if let Some(g) = good.get_mut(i) {
                        *g = None;
                    }
                    continue;
                }
                let ok = deadlines(ctx, rep, *t);
                if let Some(g) = good.get_mut(i) {
                    *g = Some(ok);
                }
                past(rep, *t);
                cancel(rep, *t);
                long(ctx, rep, *t);
                t.cancel();
            }
        }
    }
    selected(rep, timers, &good);
}

fn skip(rep: &mut Reporter<'_>, name: &str, check: Check, why: &str) {
    rep.report(
        None,
        name,
        check,
        Status::Skip,
        Value::None,
        "-",
        &detail!("{why}"),
    );
}

/// Waits until a delivery after `before`, or until `deadline + lost`
/// (clock ns). `None`: lost.
fn await_delivery(
    t: &dyn TimerUnderTest,
    before: &Deliveries,
    deadline: u64,
) -> Option<Deliveries> {
    let give_up = deadline.saturating_add(TIMER_LOST_AFTER.as_nanos());
    loop {
        let d = t.deliveries();
        if d.fired > before.fired {
            return Some(d);
        }
        if t.now_ns() > give_up {
            return None;
        }
        t.wait();
    }
}

/// A xorshift64 sequence (fixed seed: every run draws the same deadlines).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// 2^(2^-k) in Q32, k = 1..=16.
const EXP2_FRAC_Q32: [u64; 16] = [
    6074001000, 5107605667, 4683695048, 4485121744, 4389014833, 4341736423, 4318288544, 4306612134,
    4300785774, 4297875550, 4296421177, 4295694175, 4295330720, 4295149004, 4295058149, 4295012722,
];

/// log2(num / den) in Q16 (`num >= den > 0`), by the integer part and
/// then one fractional bit per squaring of the mantissa.
fn log2_q16(num: u64, den: u64) -> u64 {
    let mut int = 0u64;
    while int < 63 && (den as u128) << (int + 1) <= num as u128 {
        int += 1;
    }
    // Mantissa in [1, 2) as Q32.
    let mut m = ((num as u128) << 32) / ((den as u128) << int);
    let mut frac = 0u64;
    for bit in (0..16).rev() {
        m = (m * m) >> 32;
        if m >= 2 << 32 {
            frac |= 1 << bit;
            m >>= 1;
        }
    }
    (int << 16) | frac
}

/// `base * 2^(x / 65536)` (x in Q16), rounded down.
fn mul_exp2_q16(base: u64, x: u64) -> u64 {
    let mut r: u128 = (base as u128) << 32;
    for (k, factor) in EXP2_FRAC_Q32.iter().enumerate() {
        if x & (1 << (15 - k)) != 0 {
            r = (r * *factor as u128) >> 32;
        }
    }
    let int = (x >> 16).min(63);
    ((r << int) >> 32).min(u64::MAX as u128) as u64
}

/// Draws one deadline, log-uniform in [lo, hi] ns: `lo · (hi/lo)^u`.
fn draw(rng: &mut Rng, lo: u64, hi: u64, span_q16: u64) -> u64 {
    let u = rng.next() % (span_q16 + 1);
    mul_exp2_q16(lo, u).clamp(lo, hi)
}

/// `timer-deadlines`; `true` when it passed.
fn deadlines(ctx: &Ctx<'_>, rep: &mut Reporter<'_>, t: &dyn TimerUnderTest) -> bool {
    let n = ctx.config.timer_deadlines.clamp(1, TIMER_DEADLINES);
    let lo = ctx.config.timer_shortest.as_nanos().max(1);
    let hi = ctx.config.timer_longest.as_nanos().max(lo);
    let span = log2_q16(hi, lo);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut late = [0u32; TIMER_DEADLINES];
    let start = t.deliveries();
    let started_ns = t.now_ns();
    let mut total_ns = 0u64;
    let fail = |rep: &mut Reporter<'_>, d: &Detail| {
        t.cancel();
        rep.report(
            None,
            t.name(),
            Check::TimerDeadlines,
            Status::Fail,
            Value::None,
            "ns",
            d,
        );
        false
    };
    let budget_end = started_ns.saturating_add(TIMER_DEADLINES_BUDGET.as_nanos());
    let mut done = 0;
    for (i, slot) in late.iter_mut().enumerate().take(n) {
        if t.now_ns() > budget_end {
            break;
        }
        done = i + 1;
        let delta = draw(&mut rng, lo, hi, span);
        total_ns += delta;
        let before = t.deliveries();
        let deadline = t.now_ns().saturating_add(delta);
        let mut why = Detail::new();
        if !t.arm(deadline, &mut why) {
            return fail(
                rep,
                &detail!("deadline {i} (+{delta} ns) not armed: {}", why.as_str()),
            );
        }
        let Some(d) = await_delivery(t, &before, deadline) else {
            let d = t.deliveries();
            return fail(
                rep,
                &detail!(
                    "deadline {i} (+{delta} ns) not delivered {} ms after it ({} interrupts, {} re-armed since the arm)",
                    TIMER_LOST_AFTER.as_nanos() / 1_000_000,
                    d.interrupts - before.interrupts,
                    d.rearmed - before.rearmed
                ),
            );
        };
        if d.fired != before.fired + 1 || d.last_deadline_ns != deadline {
            return fail(
                rep,
                &detail!(
                    "deadline {i}: {} deliveries, of deadline {} ns (armed {deadline} ns)",
                    d.fired - before.fired,
                    d.last_deadline_ns
                ),
            );
        }
        if d.last_seen_ns < deadline {
            return fail(
                rep,
                &detail!(
                    "deadline {i} (+{delta} ns) delivered {} ns early (now() {} < deadline {deadline})",
                    deadline - d.last_seen_ns,
                    d.last_seen_ns
                ),
            );
        }
        *slot = d.last_late_ns.min(u32::MAX as u64) as u32;
    }
    let end = t.deliveries();
    let elapsed_ms = t.now_ns().saturating_sub(started_ns) / 1_000_000;
    let late = &mut late[..done.max(1)];
    late.sort_unstable();
    let m = late.len();
    let median = u64::from(late[m / 2]);
    let max = u64::from(late[m - 1]);
    let p90 = u64::from(late[m * 9 / 10]);
    let cut = if done < n {
        detail!(
            " (budget of {} s reached)",
            TIMER_DEADLINES_BUDGET.as_nanos() / 1_000_000_000
        )
    } else {
        Detail::new()
    };
    rep.report(
        None,
        t.name(),
        Check::TimerDeadlines,
        Status::Pass,
        Value::U64(median),
        "ns",
        &detail!(
            "median_ns={median} max_ns={max} p90_ns={p90} deadlines={done} of {n} {lo}-{hi} ns log-uniform{} (sum {} ms, took {elapsed_ms} ms), none early or lost; {} early fires re-armed, {} spurious",
            cut.as_str(),
            total_ns / 1_000_000,
            end.rearmed - start.rearmed,
            end.spurious - start.spurious
        ),
    );
    true
}

/// `timer-past`.
fn past(rep: &mut Reporter<'_>, t: &dyn TimerUnderTest) {
    let mut worst = 0u64;
    for (what, back) in [("1 ms in the past", 1_000_000u64), ("at now()", 0)] {
        let before = t.deliveries();
        let armed_at = t.now_ns();
        let deadline = armed_at.saturating_sub(back);
        let mut why = Detail::new();
        // An arm refused as "in the past" still leaves the deadline armed
        // (clockhal's contract): the interrupt must come all the same.
        let _ = t.arm(deadline, &mut why);
        let Some(d) = await_delivery(t, &before, armed_at) else {
            t.cancel();
            return rep.report(
                None,
                t.name(),
                Check::TimerPast,
                Status::Fail,
                Value::None,
                "ns",
                &detail!(
                    "a deadline {what} was not delivered within {} ms (arm said: {})",
                    TIMER_LOST_AFTER.as_nanos() / 1_000_000,
                    if why.as_str().is_empty() {
                        "ok"
                    } else {
                        why.as_str()
                    }
                ),
            );
        };
        let took = d.last_seen_ns.saturating_sub(armed_at);
        let pieces = d.rearmed - before.rearmed;
        if d.last_deadline_ns != deadline || d.last_seen_ns < deadline || pieces != 0 {
            return rep.report(
                None,
                t.name(),
                Check::TimerPast,
                Status::Fail,
                Value::U64(took),
                "ns",
                &detail!(
                    "a deadline {what}: delivered {took} ns after the arm after {pieces} re-arms (at once: the first interrupt), deadline {} of {deadline}",
                    d.last_deadline_ns
                ),
            );
        }
        worst = worst.max(took);
    }
    rep.report(
        None,
        t.name(),
        Check::TimerPast,
        Status::Pass,
        Value::U64(worst),
        "ns",
        &detail!("deadlines 1 ms in the past and at now() delivered by the first interrupt (no re-arm), the slower {worst} ns after the arm (host latency, not bounded)"),
    );
}

/// Tries at arming and cancelling in time (a cancel that returns more than
/// half the lead after the arm says nothing): a loaded KVM host
/// deschedules the vCPU across the HPET's trapping writes often enough
/// that 3 tries all came late in one matrix run of 4.
const CANCEL_ATTEMPTS: u32 = 8;

/// `timer-cancel`.
fn cancel(rep: &mut Reporter<'_>, t: &dyn TimerUnderTest) {
    let mut report = |status: Status, value: Value, d: &Detail| {
        rep.report(None, t.name(), Check::TimerCancel, status, value, "ns", d)
    };
    let idle_cancel = t.cancel();
    // Stray interrupts of earlier arms arrive first (an HPET comparator
    // written just in time, reported as in the past, still fires): only
    // what comes after the cancel counts.
    // Settled: no interrupt for TIMER_CANCEL_WAIT (bounded).
    let give_up = t.now_ns().saturating_add(4 * TIMER_LOST_AFTER.as_nanos());
    let (mut seen, mut quiet_since) = (t.deliveries().interrupts, t.now_ns());
    loop {
        let now = t.now_ns();
        if now >= give_up || now.saturating_sub(quiet_since) >= TIMER_CANCEL_WAIT.as_nanos() {
            break;
        }
        let n = t.deliveries().interrupts;
        if n != seen {
            (seen, quiet_since) = (n, now);
        }
        t.wait();
    }
    let mut attempt = 0;
    let (before, deadline, was_pending) = loop {
        attempt += 1;
        let before = t.deliveries();
        let ahead = TIMER_CANCEL_AHEAD.as_nanos();
        let deadline = t.now_ns().saturating_add(ahead);
        let mut why = Detail::new();
        if !t.arm(deadline, &mut why) {
            t.cancel();
            return report(
                Status::Fail,
                Value::None,
                &detail!("not armed: {}", why.as_str()),
            );
        }
        let was_pending = t.cancel();
        if t.now_ns() < deadline - ahead / 2 {
            break (before, deadline, was_pending);
        }
        if attempt == CANCEL_ATTEMPTS {
            return report(
                Status::Skip,
                Value::None,
                &detail!("the cancel returned more than {} ms after the arm {CANCEL_ATTEMPTS} times (a descheduled vCPU)", ahead / 2_000_000),
            );
        }
        // Let what the late cancel may have let through arrive.
        let until = deadline.saturating_add(TIMER_CANCEL_WAIT.as_nanos());
        while t.now_ns() < until {
            t.wait();
        }
    };
    let mut why = Detail::new();
    let until = deadline.saturating_add(TIMER_CANCEL_WAIT.as_nanos());
    while t.now_ns() < until {
        t.wait();
    }
    let after = t.deliveries();
    let delivered = after.fired - before.fired;
    let interrupts = after.interrupts - before.interrupts;
    if idle_cancel || !was_pending || delivered != 0 || interrupts != 0 {
        return report(
            Status::Fail,
            Value::U64(interrupts),
            &detail!(
                "cancel with nothing armed said {idle_cancel}, of a pending deadline said {was_pending}; {delivered} deliveries and {interrupts} interrupts in the {} ms after the cancelled deadline",
                TIMER_CANCEL_WAIT.as_nanos() / 1_000_000
            ),
        );
    }
    // The device still works after a cancel.
    let deadline = t.now_ns().saturating_add(1_000_000);
    if !t.arm(deadline, &mut why) {
        t.cancel();
        return report(
            Status::Fail,
            Value::None,
            &detail!("re-arm after cancel refused: {}", why.as_str()),
        );
    }
    match await_delivery(t, &after, deadline) {
        Some(d) if d.last_deadline_ns == deadline && d.last_seen_ns >= deadline => report(
            Status::Pass,
            Value::U64(0),
            &detail!(
                "a deadline cancelled {} ms ahead was not delivered and raised no interrupt in the {} ms after it; the next one was delivered",
                TIMER_CANCEL_AHEAD.as_nanos() / 1_000_000,
                TIMER_CANCEL_WAIT.as_nanos() / 1_000_000
            ),
        ),
        Some(d) => report(
            Status::Fail,
            Value::None,
            &detail!("after a cancel: delivered deadline {} (armed {deadline}) at now() {}", d.last_deadline_ns, d.last_seen_ns),
        ),
        None => {
            t.cancel();
            report(Status::Fail, Value::None, &detail!("after a cancel the device delivered nothing more"))
        }
    }
}

/// `timer-long`.
fn long(ctx: &Ctx<'_>, rep: &mut Reporter<'_>, t: &dyn TimerUnderTest) {
    let mut why = Detail::new();
    let Some(capped) = t.capped(&mut why) else {
        return skip(rep, t.name(), Check::TimerLong, why.as_str());
    };
    let mut report = |status: Status, value: Value, d: &Detail| {
        rep.report(None, t.name(), Check::TimerLong, status, value, "ns", d)
    };
    let cap = capped.reach_ns().unwrap_or(u64::MAX);
    let length = ctx.config.timer_long_deadline.as_nanos();
    if cap >= length {
        return report(
            Status::Fail,
            Value::None,
            &detail!("the capped reach is {cap} ns, not below the {length} ns deadline"),
        );
    }
    let before = capped.deliveries();
    let deadline = capped.now_ns().saturating_add(length);
    if !capped.arm(deadline, &mut why) {
        capped.cancel();
        return report(
            Status::Fail,
            Value::None,
            &detail!("not armed: {}", why.as_str()),
        );
    }
    let Some(d) = await_delivery(capped, &before, deadline) else {
        capped.cancel();
        let d = capped.deliveries();
        return report(
            Status::Fail,
            Value::None,
            &detail!(
                "a {length} ns deadline with the reach capped at {cap} ns was not delivered ({} pieces re-armed)",
                d.rearmed - before.rearmed
            ),
        );
    };
    // The re-arms are reported, not required: under emulation a piece's
    // interrupt can come so late that the deadline has passed by then.
    let pieces = d.rearmed - before.rearmed;
    if d.last_deadline_ns != deadline || d.last_seen_ns < deadline {
        return report(
            Status::Fail,
            Value::U64(d.last_late_ns),
            &detail!(
                "delivered deadline {} (armed {deadline}) at now() {} after {pieces} re-arms",
                d.last_deadline_ns,
                d.last_seen_ns
            ),
        );
    }
    report(
        Status::Pass,
        Value::U64(d.last_late_ns),
        &detail!(
            "a {} ms deadline with the reach capped at {cap} ns arrived {} ns late after {pieces} re-armed pieces, not early",
            length / 1_000_000,
            d.last_late_ns
        ),
    );
}

/// `timer-selected`.
fn selected(rep: &mut Reporter<'_>, timers: &Timers<'_>, good: &[Option<bool>]) {
    let present = timers
        .slots
        .iter()
        .any(|s| matches!(s, TimerSlot::Present(_)));
    let Some(name) = timers.selected else {
        let status = if present { Status::Fail } else { Status::Skip };
        return rep.report(
            None,
            "none",
            Check::TimerSelected,
            status,
            Value::None,
            "-",
            &detail!(
                "{}: {}",
                if present {
                    "devices present but none selected"
                } else {
                    "no timer device present"
                },
                timers.reason
            ),
        );
    };
    let slot = timers.slots.iter().position(|s| s.name() == name);
    let (status, what) = match slot.map(|i| (&timers.slots[i], good.get(i).copied().flatten())) {
        Some((TimerSlot::Present(_), Some(true))) => (Status::Pass, "delivered its deadlines"),
        Some((TimerSlot::Present(_), Some(false))) => (Status::Fail, "failed its deadlines"),
        // The clock changed under it between the selection and the
        // checks (its checks say why): nothing was measured.
        Some((TimerSlot::Present(_), None)) => (Status::Skip, "unusable when the checks ran"),
        Some((TimerSlot::Absent { .. }, _)) => (Status::Fail, "is absent"),
        None => (Status::Fail, "is not among the devices"),
    };
    rep.report(
        None,
        name,
        Check::TimerSelected,
        status,
        Value::None,
        "-",
        &detail!("selected, {what}: {}", timers.reason),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log2_and_exp2_invert() {
        assert_eq!(log2_q16(8, 1), 3 << 16);
        let span = log2_q16(10_000_000, 50_000); // log2(200) = 7.6439
        assert!((span as f64 / 65536.0 - 7.6439).abs() < 1e-3, "{span}");
        let top = mul_exp2_q16(50_000, span);
        assert!(top.abs_diff(10_000_000) < 2_000, "{top}");
        assert_eq!(mul_exp2_q16(50_000, 0), 50_000);
        assert!(mul_exp2_q16(50_000, 1 << 15).abs_diff(70_711) <= 1);
    }

    #[test]
    fn draws_are_log_uniform_and_sum_to_about_two_seconds() {
        let (lo, hi) = (50_000, 10_000_000);
        let span = log2_q16(hi, lo);
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let draws: std::vec::Vec<u64> = (0..1_000).map(|_| draw(&mut rng, lo, hi, span)).collect();
        assert!(draws.iter().all(|&d| (lo..=hi).contains(&d)));
        let sum: u64 = draws.iter().sum();
        // (hi - lo) / ln(hi / lo) = 1.878 ms mean.
        assert!((1_500_000_000..2_300_000_000).contains(&sum), "{sum}");
        // About half below the geometric middle (707 µs).
        let below = draws.iter().filter(|&&d| d < 707_107).count();
        assert!((420..580).contains(&below), "{below}");
    }
}
