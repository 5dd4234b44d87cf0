//! Rate against the reference and agreement between all sources. Sources
//! are measured together over the same consecutive intervals, except that a
//! software-extended source whose own `max_read_interval` needs shorter
//! intervals is measured in a pass of its own: one source's read limit
//! never shortens (and so widens) another source's interval.

use crate::config::{MAX_INTERVALS, MAX_SOURCES, RATE_QUANTIZATION_LIMIT_PPM};
use crate::math::{error_ppm, median_i64, scale_by_ppm, signed_elapsed_ns, within};
use crate::result::{detail, Check, Status, Value};
use crate::suite::{Ctx, Reporter, Stamp};
use clockhal_core::{ClockSource, Scale};

/// Shortest interval the suite measures, whatever the sources' read limits.
const MIN_INTERVAL_NS: u64 = 1_000;

/// The configured interval length (at least [`MIN_INTERVAL_NS`]).
fn configured_interval_ns(ctx: &Ctx<'_>) -> u64 {
    ctx.config.rate_interval.as_nanos().max(MIN_INTERVAL_NS)
}

/// Source `s`'s interval length: the configured one, shortened only when
/// `s` itself is software-extended, so that it is read at least twice per
/// wrap-safe span. (The reference needs no shortening: the waits read it
/// often enough.)
fn interval_ns(ctx: &Ctx<'_>, s: &dyn ClockSource) -> u64 {
    let ns = ctx.config.rate_interval.as_nanos();
    let ns = match s.max_read_interval() {
        Some(m) => ns.min(Scale::new(s.frequency()).ticks_to_ns(m) / 2),
        None => ns,
    };
    ns.max(MIN_INTERVAL_NS)
}

/// Measures the sources marked in `members` over `k` consecutive intervals
/// of `interval` ns, filling their columns of `ppm`. Returns `false` if the
/// reference stopped or went backwards.
fn measure(
    ctx: &Ctx<'_>,
    ppm: &mut Table,
    members: &[bool; MAX_SOURCES],
    k: usize,
    interval: u64,
) -> bool {
    let mut scales = [None; MAX_SOURCES];
    for (slot, s) in scales.iter_mut().zip(ctx.sources) {
        *slot = Some(Scale::new(s.frequency()));
    }
    let epoch = ctx.reference.read();
    let mut prev = [Stamp::default(); MAX_SOURCES];
    for (i, s) in ctx.sources.iter().enumerate() {
        if members[i] {
            prev[i] = ctx.stamp(*s, epoch);
        }
    }
    for row in ppm.iter_mut().take(k) {
        if !ctx.wait_ns(interval) {
            return false;
        }
        for (i, s) in ctx.sources.iter().enumerate() {
            if !members[i] {
                continue;
            }
            let now = ctx.stamp(*s, epoch);
            let scale = scales[i].unwrap_or(ctx.ref_scale);
            let src_ns = signed_elapsed_ns(&scale, prev[i].ticks, now.ticks);
            row[i] = error_ppm(src_ns, now.at_ns.saturating_sub(prev[i].at_ns));
            prev[i] = now;
        }
    }
    true
}

pub(crate) fn run(ctx: &Ctx<'_>, rep: &mut Reporter<'_>) {
    let k = ctx.config.intervals();
    let majority = ctx.config.majority();
    let n = ctx.sources.len();
    let mut intervals = [0u64; MAX_SOURCES];
    for (iv, s) in intervals.iter_mut().zip(ctx.sources) {
        *iv = interval_ns(ctx, *s);
    }

    // ppm[j][i]: source i's elapsed time over its interval j against the
    // reference's. Sources sharing an interval length share a pass.
    let mut ppm = [[0i64; MAX_SOURCES]; MAX_INTERVALS];
    let mut measured = [false; MAX_SOURCES];
    let mut reference_ok = true;
    for first in 0..n {
        if measured[first] {
            continue;
        }
        let mut members = [false; MAX_SOURCES];
        for i in first..n {
            if !measured[i] && intervals[i] == intervals[first] {
                members[i] = true;
                measured[i] = true;
            }
        }
        if !measure(ctx, &mut ppm, &members, k, intervals[first]) {
            reference_ok = false;
            break;
        }
    }
    if n == 0 {
        // Nothing to time, but a broken reference still fails itself.
        let configured = configured_interval_ns(ctx);
        reference_ok = measure(ctx, &mut ppm, &[false; MAX_SOURCES], k, configured);
    }

    let base_tol = ctx.config.rate_tolerance_ppm;
    if !reference_ok && !ctx.reference_in_list() {
        // The reference is at fault, and no row of the list is it: its own.
        rep.report(
            None,
            ctx.reference.name(),
            Check::Rate,
            Status::Fail,
            Value::None,
            "ppm",
            &detail!("the reference stopped advancing or went backwards during the interval"),
        );
    }
    for (i, s) in ctx.sources.iter().enumerate() {
        if !reference_ok {
            report_no_reference(ctx, rep, i, *s);
            continue;
        }
        if ctx.is_reference(*s) {
            rep.report(
                Some(i),
                s.name(),
                Check::Rate,
                Status::Skip,
                Value::None,
                "ppm",
                &detail!("this source is the reference for the others' rates; see agreement"),
            );
            continue;
        }
        let interval = intervals[i];
        let interval_ms = interval / 1_000_000;
        let interval_us = interval / 1_000 % 1_000;
        let quantization = quantization_ppm(rep.step_ns[i], interval);
        if quantization > RATE_QUANTIZATION_LIMIT_PPM {
            report_unresolved(rep, i, *s, Check::Rate, rep.step_ns[i], interval);
            continue;
        }
        let tol = base_tol.saturating_add(quantization);
        let mut col = column(&ppm, i);
        let good = col[..k].iter().filter(|&&v| within(v, tol)).count();
        let med = median_i64(&mut col[..k]);
        let claimed = s.frequency().hz_rounded();
        let status = if good >= majority {
            Status::Pass
        } else {
            Status::Fail
        };
        rep.report(
            Some(i),
            s.name(),
            Check::Rate,
            status,
            Value::I64(med),
            "ppm",
            &detail!(
                "measured {} Hz, claims {claimed} Hz; {good}/{k} intervals of {interval_ms}.{interval_us:03} ms within {tol} ppm of {} (need {majority})",
                scale_by_ppm(claimed, med),
                ctx.reference.name()
            ),
        );
    }

    if reference_ok {
        agreement(ctx, rep, &ppm, k, majority, &intervals);
    }
}

/// Reports `check` skipped for source `i`: over its interval, its own steps
/// alone could hide more than [`RATE_QUANTIZATION_LIMIT_PPM`] of error, so a
/// pass would claim what was not measured. The source is unverified.
fn report_unresolved(
    rep: &mut Reporter<'_>,
    i: usize,
    s: &dyn ClockSource,
    check: Check,
    step_ns: Option<u64>,
    interval: u64,
) {
    rep.unverified[i] = true;
    let step = step_ns.unwrap_or(0);
    let quantization = quantization_ppm(step_ns, interval);
    rep.report(
        Some(i),
        s.name(),
        check,
        Status::Skip,
        Value::None,
        "ppm",
        &detail!(
            "interval too short to resolve this source's rate: {step} ns steps over {}.{:03} ms allow {quantization} ppm (limit {RATE_QUANTIZATION_LIMIT_PPM})",
            interval / 1_000_000,
            interval / 1_000 % 1_000
        ),
    );
}

/// Source `i`'s error in every interval.
fn column(ppm: &Table, i: usize) -> [i64; MAX_INTERVALS] {
    let mut col = [0i64; MAX_INTERVALS];
    for (c, row) in col.iter_mut().zip(ppm) {
        *c = row[i];
    }
    col
}

/// How far a source whose smallest step is `step_ns` can be off over
/// `interval` ns from quantization alone: one step at each end (a 1 ms
/// step over 100 ms: 20,000 ppm). The rate and agreement tolerances widen
/// by it, so a correct tick-based counter is not called wrong; above
/// [`RATE_QUANTIZATION_LIMIT_PPM`] the checks are skipped instead.
fn quantization_ppm(step_ns: Option<u64>, interval: u64) -> u64 {
    step_ns.map_or(0, |s| {
        (2 * s as u128 * 1_000_000 / interval.max(1) as u128).min(u64::MAX as u128) as u64
    })
}

/// Errors in ppm, indexed `[interval][source]`.
type Table = [[i64; MAX_SOURCES]; MAX_INTERVALS];

fn report_no_reference(ctx: &Ctx<'_>, rep: &mut Reporter<'_>, i: usize, s: &dyn ClockSource) {
    let reference = ctx.reference.name();
    // The reference itself is at fault; the others simply could not be timed.
    let status = if ctx.is_reference(s) {
        Status::Fail
    } else {
        rep.unverified[i] = true;
        Status::Skip
    };
    for check in [Check::Rate, Check::Agreement] {
        rep.report(
            Some(i),
            s.name(),
            check,
            status,
            Value::None,
            "ppm",
            &detail!(
                "reference {reference} stopped advancing or went backwards during the interval"
            ),
        );
    }
}

/// Each source against the per-interval median of all sources. The
/// reference counts as a source at 0 ppm when it is not in the list, and
/// casts the deciding vote when the count is even, so two sources that
/// disagree are decided in the reference's favour. Only sources resolved to
/// within the base tolerance vote (a coarse source's quantization would
/// move the median by as much); all are judged against it.
fn agreement(
    ctx: &Ctx<'_>,
    rep: &mut Reporter<'_>,
    ppm: &Table,
    k: usize,
    majority: usize,
    intervals: &[u64; MAX_SOURCES],
) {
    let n = ctx.sources.len();
    let base_tol = ctx.config.agreement_tolerance_ppm;
    let extra_reference = !ctx.reference_in_list();
    let participants = n + extra_reference as usize;
    let mut votes_from = [false; MAX_SOURCES];
    for (i, v) in votes_from[..n].iter_mut().enumerate() {
        *v = quantization_ppm(rep.step_ns[i], intervals[i]) <= base_tol;
    }
    if !extra_reference && !votes_from[..n].contains(&true) {
        // Nobody is resolved finely enough: better all than none.
        votes_from[..n].fill(true);
    }
    let voters = votes_from[..n].iter().filter(|&&v| v).count() + extra_reference as usize;
    let mut consensus = [0i64; MAX_INTERVALS];
    for (c, row) in consensus[..k].iter_mut().zip(ppm) {
        let mut votes = [0i64; MAX_SOURCES + 2];
        let mut m = 0;
        for (v, _) in row[..n].iter().zip(&votes_from).filter(|(_, &f)| f) {
            votes[m] = *v;
            m += 1;
        }
        if extra_reference {
            m += 1; // a zero vote
        }
        if m % 2 == 0 {
            m += 1; // the reference's tie-breaking zero vote
        }
        *c = median_i64(&mut votes[..m]);
    }

    for (i, s) in ctx.sources.iter().enumerate() {
        if participants < 2 {
            rep.report(
                Some(i),
                s.name(),
                Check::Agreement,
                Status::Skip,
                Value::None,
                "ppm",
                &detail!("no other source to compare with"),
            );
            continue;
        }
        let quantization = quantization_ppm(rep.step_ns[i], intervals[i]);
        if quantization > RATE_QUANTIZATION_LIMIT_PPM {
            report_unresolved(rep, i, *s, Check::Agreement, rep.step_ns[i], intervals[i]);
            continue;
        }
        let tol = base_tol.saturating_add(quantization);
        let mut dev = column(ppm, i);
        for (d, c) in dev[..k].iter_mut().zip(&consensus) {
            *d = d.saturating_sub(*c);
        }
        let good = dev[..k].iter().filter(|&&v| within(v, tol)).count();
        let med = median_i64(&mut dev[..k]);
        let status = if good >= majority {
            Status::Pass
        } else {
            Status::Fail
        };
        rep.report(
            Some(i),
            s.name(),
            Check::Agreement,
            status,
            Value::I64(med),
            "ppm",
            &detail!(
                "{good}/{k} intervals within {tol} ppm of the median of {voters} sources (need {majority})"
            ),
        );
    }
}
