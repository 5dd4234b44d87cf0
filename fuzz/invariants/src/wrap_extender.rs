//! `WrapExtender` against a model, with both cells.
//!
//! - Under the read-interval rule (each raw reading at most half a wrap
//!   after the last extended value) the extended value *is* the true 64-bit
//!   counter.
//! - For any raw value: the result either holds the last value or moves it
//!   forward by `0 < step <= 2^(N-1)` to a value congruent to the raw
//!   reading modulo `2^N` — never backwards.
//! - `extend_near` with an estimate within a ninth of a wrap of the true
//!   counter counts any gap (whole wraps included) exactly; with any
//!   estimate it never goes back, lands on the raw reading's phase when it
//!   moves, moves by more than half a wrap only to within an eighth of a
//!   wrap of the estimate, and says `current: false` only when it held.
//! - `reset` restarts the timeline at the raw value; `bits` and
//!   `max_read_interval` describe the clamped width.

use arbitrary::Arbitrary;
use clockhal_core::{AtomicCell, Cell64, CriticalSectionCell, Estimate, WrapExtender};
use std::vec::Vec;

#[derive(Arbitrary, Debug)]
enum Op {
    /// The true counter advances by `step % (half + 1)`; read it.
    Advance(u64),
    /// A raw reading from anywhere (a late, early or rule-breaking read).
    Raw(u64),
    /// Restart at a raw value (resume).
    Reset(u64),
    /// The true counter advances by any `step` (a gap; below 2^40 ticks)
    /// and is read with an estimate off by `err` (under a ninth of a wrap).
    Gap(u64, u64, bool),
    /// A raw reading with any estimate, or none.
    Near(u64, Option<u64>),
}

#[derive(Arbitrary, Debug)]
struct Case {
    bits: u8,
    initial: u64,
    ops: Vec<Op>,
}

/// Runs the check on `data`.
pub fn check(data: &[u8]) {
    let Some(case) = crate::decode::<Case>(data) else {
        return;
    };
    run::<AtomicCell>(&case);
    run::<CriticalSectionCell>(&case);
}

fn run<C: Cell64>(case: &Case) {
    let bits = (case.bits as u32).clamp(1, 64);
    let mask = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let half = 1u64 << (bits - 1);
    let ext: WrapExtender<C> = WrapExtender::new(case.bits as u32, case.initial);
    assert_eq!(ext.bits(), bits);
    assert_eq!(ext.max_read_interval(), half);
    // The model: the true counter, which the extender's last value equals.
    let mut truth = case.initial & mask;
    assert_eq!(ext.last(), truth);
    for op in case.ops.iter().take(256) {
        match *op {
            Op::Advance(step) => {
                truth = truth.wrapping_add(step % (half + 1));
                assert_eq!(ext.extend(truth & mask), truth, "bits={bits}");
            }
            Op::Raw(raw) => {
                let got = ext.extend(raw);
                let step = got.wrapping_sub(truth);
                if step != 0 {
                    assert!(step <= half, "bits={bits}: moved {step} > {half}");
                    assert_eq!(got & mask, raw & mask, "bits={bits}: not the raw reading");
                }
                assert_eq!(ext.last(), got);
                truth = got;
            }
            // (Extended values far below the top of u64, as real ones are.)
            Op::Gap(step, err, below) if bits < 64 && truth < 1 << 62 => {
                truth = truth.wrapping_add(1 + step % (1 << 40));
                let wrap = mask + 1;
                let err = err % (wrap / 9).max(1);
                let e = if below {
                    truth.saturating_sub(err)
                } else {
                    truth.saturating_add(err)
                };
                let r = ext.extend_near(
                    truth & mask,
                    Some(Estimate {
                        ticks: e,
                        within: wrap / 8,
                    }),
                );
                assert_eq!(
                    (r.ticks, r.current),
                    (truth, true),
                    "bits={bits}: estimate {e}"
                );
            }
            Op::Gap(step, _, _) if bits == 64 => {
                truth = truth.wrapping_add(step % (half + 1));
                assert_eq!(ext.extend_near(truth, None).ticks, truth);
            }
            Op::Gap(..) => {}
            Op::Near(raw, estimate) => {
                let r = ext.extend_near(
                    raw,
                    estimate.map(|ticks| Estimate {
                        ticks,
                        within: (mask / 8).saturating_add(1),
                    }),
                );
                // A 64-bit counter's values wrap with it; a narrower one's
                // extension never goes back.
                let step = r.ticks.wrapping_sub(truth);
                if bits < 64 {
                    assert!(r.ticks >= truth, "bits={bits}: back {truth} -> {}", r.ticks);
                } else {
                    assert!(step <= half, "bits=64: moved {step}");
                }
                if step != 0 {
                    assert_eq!(
                        r.ticks & mask,
                        raw & mask,
                        "bits={bits}: not the raw reading"
                    );
                    assert!(r.current, "bits={bits}: moved but not current");
                }
                if step > half {
                    let e = estimate.expect("moved more than half a wrap without an estimate");
                    let slack = (mask / 8).saturating_add(1);
                    assert!(
                        r.ticks.abs_diff(e) <= slack,
                        "bits={bits}: {} far from {e}",
                        r.ticks
                    );
                }
                assert_eq!(ext.last(), r.ticks);
                truth = r.ticks;
            }
            Op::Reset(raw) => {
                ext.reset(raw);
                truth = raw & mask;
                assert_eq!(ext.last(), truth);
            }
        }
    }
}
