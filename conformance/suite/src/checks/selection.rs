//! The selected source passed everything and is the fastest passing one,
//! unless the documented ranking ([`clockhal_core::select`]) puts it first
//! (e.g. migration-safe kvmclock over a slightly cheaper TSC). A name
//! that more than one source object carries (the reference included) fails:
//! it does not say which one was selected.

use crate::config::MAX_SOURCES;
use crate::result::{detail, Check, Status, Value};
use crate::suite::{Ctx, Reporter};
use clockhal_core::select;
use core::cmp::Ordering;

pub(crate) fn run(ctx: &Ctx<'_>, rep: &mut Reporter<'_>, selected: Option<&str>) {
    // Candidates: passed every check, auto-selectable, cost measured.
    let mut fastest: Option<(usize, u64)> = None;
    let mut candidates = [false; MAX_SOURCES];
    for (i, s) in ctx.sources.iter().enumerate() {
        let Some(cost) = rep.cost[i] else { continue };
        if rep.failed[i] || rep.unverified[i] || !s.quality().auto_selectable() {
            continue;
        }
        candidates[i] = true;
        if fastest.is_none_or(|(_, c)| cost < c) {
            fastest = Some((i, cost));
        }
    }

    let Some(name) = selected else {
        let (status, d) = match fastest {
            None => (
                Status::Pass,
                detail!("nothing selected, and no source passed every check"),
            ),
            Some((f, _)) => (
                Status::Fail,
                detail!(
                    "nothing selected although {} passed every check",
                    ctx.sources[f].name()
                ),
            ),
        };
        rep.report(
            None,
            "none",
            Check::Selected,
            status,
            Value::None,
            "cycles",
            &d,
        );
        return;
    };

    // A failure that names no checked source (no read cost to report).
    let fail_unplaced = |rep: &mut Reporter<'_>, d| {
        rep.report(
            None,
            name,
            Check::Selected,
            Status::Fail,
            Value::None,
            "cycles",
            &d,
        )
    };
    let named = ctx.objects_named(name);
    if named > 1 {
        // Which of them the OS uses, the name cannot say: none passes.
        return fail_unplaced(
            rep,
            detail!(
                "ambiguous: {named} different sources (counting the reference) are named {name}"
            ),
        );
    }
    let Some(sel) = ctx.sources.iter().position(|s| s.name() == name) else {
        return fail_unplaced(
            rep,
            detail!("the selected source was not among the checked sources"),
        );
    };
    let source = ctx.sources[sel];
    let cost = rep.cost[sel].unwrap_or(u64::MAX);
    let fail = |rep: &mut Reporter<'_>, d| {
        rep.report(
            Some(sel),
            name,
            Check::Selected,
            Status::Fail,
            Value::U64(cost),
            "cycles",
            &d,
        )
    };
    if rep.failed[sel] {
        return fail(rep, detail!("the selected source failed a check"));
    }
    if rep.unverified[sel] {
        return fail(
            rep,
            detail!("the selected source's rate could not be checked"),
        );
    }
    if !candidates[sel] {
        return fail(
            rep,
            detail!(
                "rated {} (<= 0): never selected automatically",
                source.quality()
            ),
        );
    }
    let Some((f, fast_cost)) = fastest else {
        return fail(rep, detail!("no read cost measured"));
    };
    let margin = ctx.config.selection_cost_margin_percent;
    let fast_name = ctx.sources[f].name();
    let limit = fast_cost.saturating_mul(100 + margin) / 100;
    let (status, d) = if f == sel || cost <= limit {
        (
            Status::Pass,
            detail!(
                "fastest passing source ({cost} cycles; {fast_name} {fast_cost}, {margin}% margin)"
            ),
        )
    } else if select::compare(&source.descriptor(), &ctx.sources[f].descriptor()) == Ordering::Less
    {
        (
            Status::Pass,
            detail!(
                "outranks faster {fast_name} ({fast_cost} cycles) by the select ranking: quality {} vs {}",
                source.quality(),
                ctx.sources[f].quality()
            ),
        )
    } else {
        (
            Status::Fail,
            detail!("{fast_name} passed every check, is faster ({fast_cost} vs {cost} cycles) and ranks as high"),
        )
    };
    rep.report(
        Some(sel),
        name,
        Check::Selected,
        status,
        Value::U64(cost),
        "cycles",
        &d,
    );
}
