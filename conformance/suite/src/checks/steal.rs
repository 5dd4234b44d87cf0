//! Steal time never decreases and never grows faster than the reference:
//! reads it on the calling CPU every millisecond for [`STEAL_DURATION_NS`]
//! of reference time. Skipped, with the reason, where there is none (no
//! KVM, `STEAL_TIME` not offered).

use crate::result::{detail, Check, Detail, Status, Value};
use crate::suite::{Ctx, Reporter};
use crate::StealTime;

/// How long the check reads, in reference ns.
pub const STEAL_DURATION_NS: u64 = 200_000_000;
/// Between reads.
const STEP_NS: u64 = 1_000_000;
/// The results' source name: steal time is KVM's, beside kvmclock.
pub const STEAL_SOURCE: &str = "kvmclock";
/// Allowed excess of steal over the reference's elapsed time: the
/// reference's own rate error (1000 ppm) plus two reads' worth of timing
/// (steal and the reference are not read at the same instant).
const SLACK_PPM: u64 = 1_000;
const SLACK_NS: u64 = 100_000;

pub(crate) fn run(ctx: &Ctx<'_>, rep: &mut Reporter<'_>, steal: &dyn StealTime) {
    let report = |rep: &mut Reporter<'_>, status, value, d: &Detail| {
        rep.report(None, STEAL_SOURCE, Check::StealTime, status, value, "ns", d)
    };
    let mut why = Detail::new();
    let epoch = ctx.reference.read();
    let Some(first) = steal.steal_ns(&mut why) else {
        return report(rep, Status::Skip, Value::None, &detail!("{}", why.as_str()));
    };
    let elapsed = |r: u64| ctx.ref_scale.ticks_to_ns(r.wrapping_sub(epoch));
    let (mut last, mut reads, mut worst_excess) = (first, 0u32, 0u64);
    loop {
        if !ctx.wait_ns(STEP_NS) {
            return report(
                rep,
                Status::Skip,
                Value::None,
                &detail!("the reference stopped advancing"),
            );
        }
        let mut why = Detail::new();
        let Some(v) = steal.steal_ns(&mut why) else {
            return report(
                rep,
                Status::Fail,
                Value::None,
                &detail!(
                    "steal time disappeared after {reads} reads: {}",
                    why.as_str()
                ),
            );
        };
        let now = elapsed(ctx.reference.read());
        reads += 1;
        if v < last {
            return report(
                rep,
                Status::Fail,
                Value::U64(v),
                &detail!("steal went back from {last} to {v} ns after {reads} reads"),
            );
        }
        let stolen = v - first;
        let allowed = now + now / (1_000_000 / SLACK_PPM) + SLACK_NS;
        worst_excess = worst_excess.max(stolen.saturating_sub(now));
        if stolen > allowed {
            return report(
                rep,
                Status::Fail,
                Value::U64(stolen),
                &detail!("{stolen} ns stolen in {now} ns of reference time"),
            );
        }
        last = v;
        if now >= STEAL_DURATION_NS {
            return report(
                rep,
                Status::Pass,
                Value::U64(stolen),
                &detail!(
                    "{stolen} ns stolen in {now} ns over {reads} reads, never back, never above elapsed (by at most {worst_excess} ns)"
                ),
            );
        }
    }
}
