//! Batched timing: many samples of a batch of calls, interleaved across rows.

use crate::host::{median, raw_ns};
use std::hint::black_box;

/// ns per call over all samples of one row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    /// Median ns per call.
    pub median: f64,
    /// Fastest sample's ns per call.
    pub min: f64,
    /// Slowest sample's ns per call.
    pub max: f64,
}

impl Stats {
    /// Median, min and max of per-sample ns-per-call figures.
    pub fn of(samples: &[f64]) -> Stats {
        Stats {
            median: median(samples),
            min: samples.iter().copied().fold(f64::INFINITY, f64::min),
            max: samples.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }
}

/// A boxed batch runner: calls the measured function `n` times.
type Batch = Box<dyn FnMut(u64)>;
/// Called with `true` before and `false` after each timed sample.
type Around = Box<dyn FnMut(bool)>;

/// One measured operation.
pub struct Row {
    name: String,
    batch: Batch,
    around: Option<Around>,
}

impl Row {
    /// Times `f`; every result goes through [`black_box`] so the call cannot
    /// be elided or hoisted. The loop is monomorphised: only the batch is
    /// called through a pointer, once per sample.
    pub fn new<T, F: FnMut() -> T + 'static>(name: impl Into<String>, mut f: F) -> Row {
        Row {
            name: name.into(),
            batch: Box::new(move |n| {
                for _ in 0..n {
                    black_box(f());
                }
            }),
            around: None,
        }
    }

    /// Runs `around(true)` before and `around(false)` after each sample
    /// (e.g. to start and stop a second thread), outside the timed region.
    pub fn with_around(mut self, around: impl FnMut(bool) + 'static) -> Row {
        self.around = Some(Box::new(around));
        self
    }

    /// The row's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `n` calls, untimed and without the around hook (instruction counting
    /// runs one thread).
    pub fn run(&mut self, n: u64) {
        (self.batch)(n);
    }

    /// One timed batch of `n` calls: ns per call (CLOCK_MONOTONIC_RAW).
    fn sample(&mut self, n: u64) -> f64 {
        if let Some(a) = self.around.as_mut() {
            a(true);
        }
        let t0 = raw_ns();
        (self.batch)(n);
        let t1 = raw_ns();
        if let Some(a) = self.around.as_mut() {
            a(false);
        }
        (t1 - t0) as f64 / n as f64
    }
}

/// Measures every row: one warm-up batch each, then `samples` rounds in
/// which every row runs one batch of `batch` calls. Rounds interleave the
/// rows (starting at a different row each round) so that slow drifts of the
/// machine — other tenants, frequency changes — spread over all rows.
pub fn run(rows: &mut [Row], samples: usize, batch: u64) -> Vec<Stats> {
    for r in rows.iter_mut() {
        r.sample(batch);
    }
    let mut per_row = vec![Vec::with_capacity(samples); rows.len()];
    for s in 0..samples {
        for k in 0..rows.len() {
            let i = (s + k) % rows.len();
            per_row[i].push(rows[i].sample(batch));
        }
    }
    per_row.iter().map(|v| Stats::of(v)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_of_samples() {
        let s = Stats::of(&[3.0, 1.0, 2.0, 10.0, 4.0]);
        assert_eq!(
            s,
            Stats {
                median: 3.0,
                min: 1.0,
                max: 10.0
            }
        );
    }

    #[test]
    fn every_sample_runs_the_batch_and_the_hooks() {
        use std::cell::Cell;
        use std::rc::Rc;
        let calls = Rc::new(Cell::new(0u64));
        let hooks = Rc::new(Cell::new((0u32, 0u32)));
        let (c, h) = (calls.clone(), hooks.clone());
        let mut rows = [
            Row::new("count", move || c.set(c.get() + 1)).with_around(move |on| {
                let (a, b) = h.get();
                h.set(if on { (a + 1, b) } else { (a, b + 1) });
            }),
        ];
        let stats = run(&mut rows, 5, 100);
        assert_eq!(calls.get(), 600); // warm-up + 5 samples
        assert_eq!(hooks.get(), (6, 6));
        assert!(stats[0].min <= stats[0].median && stats[0].median <= stats[0].max);
    }
}
