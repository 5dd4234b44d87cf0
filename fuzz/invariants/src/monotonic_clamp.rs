//! `MonotonicClamp` against a model, with both cells: every result is the
//! running maximum of the values since the last reset, and `last` is that
//! maximum.

use arbitrary::Arbitrary;
use clockhal_core::{AtomicCell, Cell64, CriticalSectionCell, MonotonicClamp};
use std::vec::Vec;

#[derive(Arbitrary, Debug)]
enum Op {
    Clamp(u64),
    Reset,
}

/// Runs the check on `data`.
pub fn check(data: &[u8]) {
    let Some(ops) = crate::decode::<Vec<Op>>(data) else {
        return;
    };
    run::<AtomicCell>(&ops);
    run::<CriticalSectionCell>(&ops);
}

fn run<C: Cell64>(ops: &[Op]) {
    let clamp: MonotonicClamp<C> = MonotonicClamp::new();
    let mut max = 0u64;
    for op in ops.iter().take(256) {
        match *op {
            Op::Clamp(v) => {
                let want = v.max(max);
                assert_eq!(clamp.clamp(v), want, "clamp({v}) after max {max}");
                max = want;
            }
            Op::Reset => {
                clamp.reset();
                max = 0;
            }
        }
        assert_eq!(clamp.last(), max);
    }
}
