//! A host that writes a paravirtual page *inside* a guest's seqlock window:
//! the guest's `rdtsc` callback runs one scripted step, which may publish a
//! new page state before it returns the step's TSC value.

use arbitrary::Arbitrary;
use std::vec::Vec;

/// One `rdtsc` of the reader.
#[derive(Arbitrary, Debug)]
pub struct Step<W> {
    /// What `rdtsc` returns.
    pub tsc: u64,
    /// What the host writes first, if anything.
    pub write: Option<W>,
}

/// What happened while `read` ran.
pub struct Trace<R> {
    /// The reader's result.
    pub result: R,
    /// Every TSC value handed out.
    pub tscs: Vec<u64>,
    /// How many host writes landed.
    pub writes: usize,
}

/// Runs `read` with an `rdtsc` that plays `steps` (then returns the last
/// TSC again with no writes), calling `apply` for each write.
pub fn run<W, R>(
    steps: &[Step<W>],
    mut apply: impl FnMut(&W),
    read: impl FnOnce(&mut dyn FnMut() -> u64) -> R,
) -> Trace<R> {
    let mut tscs = Vec::new();
    let mut writes = 0;
    let result = {
        let mut rdtsc = || {
            let tsc = match steps.get(tscs.len()) {
                Some(step) => {
                    if let Some(w) = &step.write {
                        apply(w);
                        writes += 1;
                    }
                    step.tsc
                }
                None => tscs.last().copied().unwrap_or(0),
            };
            tscs.push(tsc);
            tsc
        };
        read(&mut rdtsc)
    };
    Trace {
        result,
        tscs,
        writes,
    }
}
