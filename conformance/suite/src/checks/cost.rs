//! Read cost in cycles: median of many single reads, minus the cost of
//! reading the cycle counter itself.

use crate::config::MAX_COST_SAMPLES;
use crate::math::median_u64;
use crate::result::{detail, Check, Status, Value};
use crate::suite::{Ctx, Reporter};
use core::hint::black_box;

pub(crate) fn run(ctx: &Ctx<'_>, rep: &mut Reporter<'_>) {
    let n = ctx.config.samples();
    let cycles = ctx.cycles;
    let mut buf = [0u64; MAX_COST_SAMPLES];
    for slot in buf[..n].iter_mut() {
        let a = cycles();
        let b = cycles();
        *slot = b.wrapping_sub(a);
    }
    let overhead = median_u64(&mut buf[..n]);

    for (i, src) in ctx.sources.iter().enumerate() {
        for slot in buf[..n].iter_mut() {
            let a = cycles();
            black_box(src.read());
            let b = cycles();
            *slot = b.wrapping_sub(a);
        }
        let median = median_u64(&mut buf[..n]).saturating_sub(overhead);
        let min = buf[0].saturating_sub(overhead);
        rep.cost[i] = Some(median);
        let limit = ctx.config.read_cost_limit_cycles;
        let status = if median <= limit {
            Status::Pass
        } else {
            Status::Fail
        };
        rep.report(
            Some(i),
            src.name(),
            Check::ReadCost,
            status,
            Value::U64(median),
            "cycles",
            &detail!(
                "median of {n} reads (min {min}, {overhead} counter overhead removed), claims {}, limit {limit}",
                src.read_cost()
            ),
        );
    }
}
