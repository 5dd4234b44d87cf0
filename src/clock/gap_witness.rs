//! The TSC as the witness of gaps in a software-extended device's reads:
//! per CPU, the TSC and the device's count at the clock's last reading of
//! the current device that was the device's count then. After a gap of
//! more than half a wrap, the pair taken before it estimates the count
//! after it ([`Clock::read_current_device`](super::Clock)), on whichever
//! CPU reads first and however the CPUs took turns.

use clockhal_core::PER_CPU_SLOTS;
use core::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// Whether a read or a round that took `took_ns` may have met a gap it did
/// not measure, for a counter whose half wrap is `half_wrap_ns`: it took
/// more than an eighth of the wrap. Never below 50 ms: a counter that wraps
/// faster than a loaded host's ticks take (the PIT's 55 ms) places its own
/// reads by the TSC (`clockhal-pit` brackets each latch).
pub(crate) fn took_a_pause(took_ns: u64, half_wrap_ns: u64) -> bool {
    const FLOOR_NS: u64 = 50_000_000;
    took_ns > (half_wrap_ns / 4).max(FLOOR_NS)
}

/// Reads of a pair that find it being written before giving up.
const TRIES: usize = 16;

/// A pair stayed busy ([`GapWitness::get`]).
#[derive(Debug)]
pub(crate) struct Busy;

/// A (TSC, count) pair: the TSC read before the count, and how long the
/// read took (the count lies that much after the TSC at most).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Witnessed {
    pub(crate) tsc: u64,
    pub(crate) ticks: u64,
    pub(crate) skew_ns: u64,
}

/// One CPU's pair under a seqlock (odd: being written), tagged with the
/// clock's state word (a switch or rebase starts new pairs) and the CPU
/// that took it (CPUs beyond the table share entries).
#[derive(Debug)]
struct Pair {
    seq: AtomicU32,
    state: AtomicU32,
    cpu: AtomicU32,
    tsc: AtomicU64,
    ticks: AtomicU64,
    skew_ns: AtomicU64,
}

/// The pairs, one per CPU index (modulo the table), or one shared by all
/// CPUs where their TSCs are known to agree.
#[derive(Debug)]
pub(crate) struct GapWitness {
    pairs: [Pair; PER_CPU_SLOTS],
}

impl GapWitness {
    pub(crate) const fn new() -> GapWitness {
        GapWitness {
            pairs: [const {
                Pair {
                    seq: AtomicU32::new(0),
                    state: AtomicU32::new(0),
                    cpu: AtomicU32::new(u32::MAX),
                    tsc: AtomicU64::new(0),
                    ticks: AtomicU64::new(0),
                    skew_ns: AtomicU64::new(0),
                }
            }; PER_CPU_SLOTS],
        }
    }

    fn pair(&self, cpu: usize, shared: bool) -> &Pair {
        &self.pairs[if shared { 0 } else { cpu % PER_CPU_SLOTS }]
    }

    /// The (TSC, count) CPU `cpu` recorded under clock state `state` (any
    /// CPU's, where `shared`): `Ok(None)` if there is none, `Err(Busy)` if
    /// it stayed busy (being written) over a few tries: the caller cannot
    /// tell whether a gap passed.
    /// Interrupt-safe: yes (lock-free, bounded: an interrupted writer on
    /// this CPU leaves it busy, and the reader gives up).
    pub(crate) fn get(
        &self,
        cpu: usize,
        shared: bool,
        state: u32,
    ) -> Result<Option<Witnessed>, Busy> {
        let p = self.pair(cpu, shared);
        for _ in 0..TRIES {
            let seq = p.seq.load(Ordering::Acquire);
            if seq & 1 != 0 {
                core::hint::spin_loop();
                continue;
            }
            let (st, by) = (
                p.state.load(Ordering::Relaxed),
                p.cpu.load(Ordering::Relaxed),
            );
            let w = Witnessed {
                tsc: p.tsc.load(Ordering::Relaxed),
                ticks: p.ticks.load(Ordering::Relaxed),
                skew_ns: p.skew_ns.load(Ordering::Relaxed),
            };
            fence(Ordering::Acquire);
            if p.seq.load(Ordering::Relaxed) != seq {
                continue;
            }
            let mine = st == state && (shared || by as usize == cpu);
            return Ok(mine.then_some(w));
        }
        Err(Busy)
    }

    /// Records CPU `cpu`'s pair. A writer that finds the pair being
    /// written (an interrupt inside a read on this CPU, another CPU
    /// sharing it) leaves it: the next reading records.
    /// Interrupt-safe: yes (lock-free, never waits).
    pub(crate) fn record(&self, cpu: usize, shared: bool, state: u32, w: Witnessed) {
        let p = self.pair(cpu, shared);
        let seq = p.seq.load(Ordering::Relaxed);
        if seq & 1 != 0
            || p.seq
                .compare_exchange(
                    seq,
                    seq.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_err()
        {
            return;
        }
        // Readers that see any store below see the odd sequence too.
        fence(Ordering::Release);
        p.state.store(state, Ordering::Relaxed);
        p.cpu.store(cpu as u32, Ordering::Relaxed);
        p.tsc.store(w.tsc, Ordering::Relaxed);
        p.ticks.store(w.ticks, Ordering::Relaxed);
        p.skew_ns.store(w.skew_ns, Ordering::Relaxed);
        p.seq.store(seq.wrapping_add(2), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_is_an_eighth_of_a_wrap_and_never_below_50_ms() {
        // The PM timer: half a wrap 2.34 s.
        assert!(!took_a_pause(580_000_000, 2_343_484_000));
        assert!(took_a_pause(590_000_000, 2_343_484_000));
        // The PIT: half a wrap 27.5 ms; its own TSC brackets place it.
        assert!(!took_a_pause(40_000_000, 27_462_000));
        assert!(took_a_pause(60_000_000, 27_462_000));
    }

    fn pair(tsc: u64, ticks: u64) -> Witnessed {
        Witnessed {
            tsc,
            ticks,
            skew_ns: 0,
        }
    }

    #[test]
    fn a_pair_serves_its_cpu_and_state_only() {
        let w = GapWitness::new();
        assert!(matches!(w.get(1, false, 7), Ok(None)));
        w.record(1, false, 7, pair(1_000, 50));
        assert_eq!(w.get(1, false, 7).ok(), Some(Some(pair(1_000, 50))));
        // Another state word (a switch), another CPU sharing the entry.
        assert!(matches!(w.get(1, false, 8), Ok(None)));
        assert!(matches!(w.get(1 + PER_CPU_SLOTS, false, 7), Ok(None)));
        // Shared (TSCs agree): any CPU's pair.
        w.record(3, true, 7, pair(2_000, 60));
        assert_eq!(w.get(5, true, 7).ok(), Some(Some(pair(2_000, 60))));
        // A pair being written (an interrupted writer on this CPU).
        let p = w.pair(1, false);
        p.seq.fetch_add(1, Ordering::SeqCst);
        assert!(w.get(1, false, 7).is_err());
        w.record(1, false, 7, pair(3_000, 70));
        p.seq.fetch_add(1, Ordering::SeqCst);
        assert_eq!(w.get(1, false, 7).ok(), Some(Some(pair(1_000, 50))));
    }
}
