//! `WrapExtender` against a model, with both cells.
//!
//! - Under the read-interval rule (each raw reading at most half a wrap
//!   after the last extended value) the extended value *is* the true 64-bit
//!   counter.
//! - For any raw value: the result either holds the last value or moves it
//!   forward by `0 < step <= 2^(N-1)` to a value congruent to the raw
//!   reading modulo `2^N` — never backwards.
//! - `reset` restarts the timeline at the raw value; `bits` and
//!   `max_read_interval` describe the clamped width.

use arbitrary::Arbitrary;
use clockhal_core::{AtomicCell, Cell64, CriticalSectionCell, WrapExtender};
use std::vec::Vec;

#[derive(Arbitrary, Debug)]
enum Op {
    /// The true counter advances by `step % (half + 1)`; read it.
    Advance(u64),
    /// A raw reading from anywhere (a late, early or rule-breaking read).
    Raw(u64),
    /// Restart at a raw value (resume).
    Reset(u64),
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
            Op::Reset(raw) => {
                ext.reset(raw);
                truth = raw & mask;
                assert_eq!(ext.last(), truth);
            }
        }
    }
}
