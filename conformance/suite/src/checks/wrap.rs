//! Software-extended counters across a wrap of the hardware counter.
//!
//! Reads the source every quarter of its `max_read_interval` for one wrap
//! period plus 10%, and checks that the extended value never goes backwards
//! and that its elapsed time over the whole span matches the reference (a
//! lost or spurious wrap is off by a whole wrap period).

use crate::math::{error_ppm, signed_elapsed_ns, within};
use crate::result::{detail, Check, Status, Value};
use crate::suite::{Ctx, Reporter};
use clockhal_core::{Scale, Stability};

pub(crate) fn run(ctx: &Ctx<'_>, rep: &mut Reporter<'_>) {
    for (i, src) in ctx.sources.iter().enumerate() {
        let extended = src.stability().contains(Stability::SOFTWARE_EXTENDED);
        let Some(max_interval) = src.max_read_interval() else {
            if extended {
                rep.report(
                    Some(i),
                    src.name(),
                    Check::Wrap,
                    Status::Fail,
                    Value::None,
                    "ppm",
                    &detail!("flagged software-extended but states no max_read_interval"),
                );
            }
            continue; // not extended: nothing to check
        };
        let scale = Scale::new(src.frequency());
        // WrapExtender's limit is half a wrap.
        let wrap_ns = scale.ticks_to_ns(max_interval.saturating_mul(2));
        let span_ns = wrap_ns.saturating_add(wrap_ns / 10);
        let step_ns = (scale.ticks_to_ns(max_interval) / 4).max(1);
        let budget = ctx.config.wrap_budget.as_nanos();
        if span_ns > budget {
            rep.report(
                Some(i),
                src.name(),
                Check::Wrap,
                Status::Skip,
                Value::None,
                "ppm",
                &detail!(
                    "one wrap takes {} ms, over the {} ms budget",
                    wrap_ns / 1_000_000,
                    budget / 1_000_000
                ),
            );
            continue;
        }

        let epoch = ctx.reference.read();
        let start = ctx.stamp(*src, epoch);
        let mut prev = start.ticks;
        let (mut backs, mut reads) = (0u32, 0u32);
        let mut reference_ok = true;
        loop {
            if !ctx.wait_ns(step_ns) {
                reference_ok = false;
                break;
            }
            let v = src.read();
            reads += 1;
            if v < prev {
                backs += 1;
            }
            prev = v;
            let ref_now = ctx
                .ref_scale
                .ticks_to_ns(ctx.reference.read().saturating_sub(epoch));
            if ref_now.saturating_sub(start.at_ns) >= span_ns {
                break;
            }
        }
        if !reference_ok {
            rep.report(
                Some(i),
                src.name(),
                Check::Wrap,
                Status::Skip,
                Value::None,
                "ppm",
                &detail!("reference {} stopped advancing", ctx.reference.name()),
            );
            continue;
        }
        let end = ctx.stamp(*src, epoch);
        let ref_ns = end.at_ns.saturating_sub(start.at_ns);
        let ppm = error_ppm(signed_elapsed_ns(&scale, start.ticks, end.ticks), ref_ns);
        let tol = ctx.config.rate_tolerance_ppm;
        let wraps_x100 = (ref_ns as u128 * 100 / wrap_ns.max(1) as u128) as u64;
        let status = if backs == 0 && within(ppm, tol) {
            Status::Pass
        } else {
            Status::Fail
        };
        rep.report(
            Some(i),
            src.name(),
            Check::Wrap,
            status,
            Value::I64(ppm),
            "ppm",
            &detail!(
                "{}.{:02} wraps in {} ms, read every {} ms: {backs} of {reads} reads went back; span within {tol} ppm of {} required",
                wraps_x100 / 100,
                wraps_x100 % 100,
                ref_ns / 1_000_000,
                step_ns / 1_000_000,
                ctx.reference.name()
            ),
        );
    }
}
