//! Rate against the reference and agreement between all sources, measured
//! together over the same consecutive intervals.

use crate::config::{MAX_INTERVALS, MAX_SOURCES};
use crate::math::{error_ppm, median_i64, scale_by_ppm, signed_elapsed_ns, within};
use crate::result::{detail, Check, Status, Value};
use crate::suite::{Ctx, Reporter, Stamp};
use clockhal_core::{ClockSource, Scale};

/// Shortest interval the suite measures, whatever the sources' read limits.
const MIN_INTERVAL_NS: u64 = 1_000;

/// The interval length: the configured one, shortened so that every
/// software-extended source (and the reference) is read at least twice per
/// wrap-safe interval.
fn interval_ns(ctx: &Ctx<'_>) -> u64 {
    let mut ns = ctx.config.rate_interval.as_nanos();
    let all = ctx
        .sources
        .iter()
        .copied()
        .chain(core::iter::once(ctx.reference));
    for s in all {
        if let Some(m) = s.max_read_interval() {
            let m_ns = Scale::new(s.frequency()).ticks_to_ns(m);
            ns = ns.min(m_ns / 2);
        }
    }
    ns.max(MIN_INTERVAL_NS)
}

pub(crate) fn run(ctx: &Ctx<'_>, rep: &mut Reporter<'_>) {
    let k = ctx.config.intervals();
    let majority = ctx.config.majority();
    let interval = interval_ns(ctx);
    let mut scales = [None; MAX_SOURCES];
    for (slot, s) in scales.iter_mut().zip(ctx.sources) {
        *slot = Some(Scale::new(s.frequency()));
    }

    // ppm[j][i]: source i's elapsed time over interval j against the
    // reference's.
    let mut ppm = [[0i64; MAX_SOURCES]; MAX_INTERVALS];
    let epoch = ctx.reference.read();
    let mut prev = [Stamp::default(); MAX_SOURCES];
    for (p, s) in prev.iter_mut().zip(ctx.sources) {
        *p = ctx.stamp(*s, epoch);
    }
    let mut reference_ok = true;
    for row in ppm.iter_mut().take(k) {
        if !ctx.wait_ns(interval) {
            reference_ok = false;
            break;
        }
        for (i, s) in ctx.sources.iter().enumerate() {
            let now = ctx.stamp(*s, epoch);
            let scale = scales[i].unwrap_or(ctx.ref_scale);
            let src_ns = signed_elapsed_ns(&scale, prev[i].ticks, now.ticks);
            row[i] = error_ppm(src_ns, now.at_ns.saturating_sub(prev[i].at_ns));
            prev[i] = now;
        }
    }

    let base_tol = ctx.config.rate_tolerance_ppm;
    let interval_ms = interval / 1_000_000;
    let interval_us = interval / 1_000 % 1_000;
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
        let tol = base_tol.saturating_add(quantization_ppm(rep.step_ns[i], interval));
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
        agreement(ctx, rep, &ppm, k, majority, interval);
    }
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
/// by it, so a correct tick-based counter is not called wrong.
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
/// disagree are decided in the reference's favour.
fn agreement(
    ctx: &Ctx<'_>,
    rep: &mut Reporter<'_>,
    ppm: &Table,
    k: usize,
    majority: usize,
    interval: u64,
) {
    let n = ctx.sources.len();
    let extra_reference = !ctx.reference_in_list();
    let voters = n + extra_reference as usize;
    let mut consensus = [0i64; MAX_INTERVALS];
    for (c, row) in consensus[..k].iter_mut().zip(ppm) {
        let mut votes = [0i64; MAX_SOURCES + 2];
        votes[..n].copy_from_slice(&row[..n]);
        let mut m = n;
        if extra_reference {
            m += 1; // a zero vote
        }
        if m % 2 == 0 {
            m += 1; // the reference's tie-breaking zero vote
        }
        *c = median_i64(&mut votes[..m]);
    }

    let base_tol = ctx.config.agreement_tolerance_ppm;
    for (i, s) in ctx.sources.iter().enumerate() {
        if voters < 2 {
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
        let tol = base_tol.saturating_add(quantization_ppm(rep.step_ns[i], interval));
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
