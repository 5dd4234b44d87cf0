//! Monotonic over many consecutive reads, and the smallest step seen.

use crate::math::ticks_to_ns_ceil;
use crate::result::{detail, Check, Status, Value};
use crate::suite::{Ctx, Reporter};
use clockhal_core::Scale;

pub(crate) fn run(ctx: &Ctx<'_>, rep: &mut Reporter<'_>) {
    for (i, src) in ctx.sources.iter().enumerate() {
        let freq = src.frequency();
        let scale = Scale::new(freq);
        let budget = scale
            .ns_to_ticks(ctx.config.monotonic_budget.as_nanos())
            .max(1);
        let first = src.read();
        let (mut prev, mut reads) = (first, 1u32);
        let (mut backs, mut max_back) = (0u32, 0u64);
        let mut min_step = u64::MAX;
        while reads < ctx.config.monotonic_reads.max(2) {
            let v = src.read();
            reads += 1;
            if v < prev {
                backs += 1;
                max_back = max_back.max(prev - v);
            } else if v > prev {
                min_step = min_step.min(v - prev);
            }
            prev = v;
            if v >= first && v - first >= budget {
                break;
            }
        }

        let back_ns = ticks_to_ns_ceil(freq, max_back);
        if backs == 0 {
            rep.report(
                Some(i),
                src.name(),
                Check::Monotonic,
                Status::Pass,
                Value::U64(0),
                "ns",
                &detail!("{reads} consecutive reads, none went backwards"),
            );
        } else {
            rep.report(
                Some(i),
                src.name(),
                Check::Monotonic,
                Status::Fail,
                Value::U64(back_ns),
                "ns",
                &detail!("{backs} of {reads} reads went backwards, worst by {max_back} ticks"),
            );
        }

        if min_step == u64::MAX {
            rep.report(
                Some(i),
                src.name(),
                Check::Resolution,
                Status::Fail,
                Value::None,
                "ns",
                &detail!("never advanced over {reads} reads"),
            );
        } else {
            let ns = ticks_to_ns_ceil(freq, min_step);
            let limit = ctx.config.resolution_limit_ns;
            let status = if ns <= limit {
                // Only a step the check accepts widens the rate tolerance.
                rep.step_ns[i] = Some(ns);
                Status::Pass
            } else {
                Status::Fail
            };
            rep.report(
                Some(i),
                src.name(),
                Check::Resolution,
                status,
                Value::U64(ns),
                "ns",
                &detail!("smallest step {min_step} ticks over {reads} reads (limit {limit} ns)"),
            );
        }
    }
}
