//! Cross-CPU monotonicity (warp test): the calling CPU and a partner take
//! turns reading the source under a spinlock; a reading smaller than the
//! last one taken (on either CPU) is a warp.

use crate::math::ticks_to_ns_ceil;
use crate::result::{detail, Check, Status, Value};
use crate::suite::{Ctx, Reporter};
use crate::Cpus;
use clockhal_core::{ClockSource, Scale, Stability};

pub(crate) fn run(ctx: &Ctx<'_>, rep: &mut Reporter<'_>, cpus: Option<&dyn Cpus>) {
    let count = cpus.map_or(1, |c| c.count());
    for (i, src) in ctx.sources.iter().enumerate() {
        let Some(cpus) = cpus.filter(|_| count > 1) else {
            rep.report(
                Some(i),
                src.name(),
                Check::CrossCpu,
                Status::Skip,
                Value::None,
                "ns",
                &detail!("single CPU: no cross-CPU reads possible"),
            );
            continue;
        };
        test_source(ctx, rep, i, *src, cpus);
    }
}

#[cfg(not(target_has_atomic = "64"))]
fn test_source(_: &Ctx<'_>, rep: &mut Reporter<'_>, i: usize, src: &dyn ClockSource, _: &dyn Cpus) {
    rep.report(
        Some(i),
        src.name(),
        Check::CrossCpu,
        Status::Skip,
        Value::None,
        "ns",
        &detail!("target has no 64-bit atomics"),
    );
}

#[cfg(target_has_atomic = "64")]
fn test_source(
    ctx: &Ctx<'_>,
    rep: &mut Reporter<'_>,
    i: usize,
    src: &dyn ClockSource,
    cpus: &dyn Cpus,
) {
    let me = cpus.current();
    let freq = src.frequency();
    let scale = Scale::new(freq);
    let bounds = shared::Bounds {
        min_ticks: scale
            .ns_to_ticks(ctx.config.warp_duration.as_nanos())
            .max(1),
        max_ticks: scale
            .ns_to_ticks(ctx.config.warp_max_duration.as_nanos())
            .max(1),
        target_handoffs: ctx.config.warp_target_handoffs,
        max_reads: ctx.config.warp_max_reads,
    };
    let (mut tested, mut reads, mut handoffs) = (0usize, 0u64, 0u64);
    let (mut warps, mut max_warp) = (0u64, 0u64);
    let mut skip_reason: Option<crate::result::Detail> = None;
    for cpu in (0..cpus.count())
        .filter(|&c| c != me)
        .take(ctx.config.warp_partners.max(1))
    {
        let state = shared::WarpState::new(src.read(), bounds);
        let remote = || state.take_turns(src, 1);
        let mut local = || state.take_turns(src, 0);
        if let Err(reason) = cpus.run_concurrently(cpu, &remote, &mut local) {
            skip_reason.get_or_insert(detail!("CPU {cpu} could not run the test: {reason}"));
            continue;
        }
        let r = state.outcome();
        if r.arrived < 2 {
            skip_reason.get_or_insert(detail!("CPU {cpu} never started the test"));
            continue;
        }
        // A backward step actually seen decides, however few the handoffs
        // (a partner far ahead ends its turn at once).
        if r.handoffs < ctx.config.warp_min_handoffs && r.warps == 0 {
            skip_reason.get_or_insert(detail!(
                "CPUs {me} and {cpu} alternated only {} times in {} reads",
                r.handoffs,
                r.reads
            ));
            continue;
        }
        tested += 1;
        reads += r.reads;
        handoffs += r.handoffs;
        warps += r.warps;
        max_warp = max_warp.max(r.max_warp);
    }

    if tested == 0 {
        let d = skip_reason.unwrap_or_else(|| detail!("no partner CPU"));
        rep.report(
            Some(i),
            src.name(),
            Check::CrossCpu,
            Status::Skip,
            Value::None,
            "ns",
            &d,
        );
        return;
    }
    let warp_ns = ticks_to_ns_ceil(freq, max_warp);
    let claimed = src.stability().contains(Stability::MONOTONIC_ACROSS_CPUS);
    let (status, d) = if warps == 0 {
        (
            Status::Pass,
            detail!("{reads} reads on CPU {me} and {tested} partner(s), {handoffs} handoffs, no backward step"),
        )
    } else if claimed {
        (
            Status::Fail,
            detail!("{warps} backward steps between CPUs (worst {max_warp} ticks) although claimed monotonic across CPUs"),
        )
    } else {
        (
            Status::Skip,
            detail!("{warps} backward steps between CPUs (worst {max_warp} ticks); not claimed monotonic across CPUs"),
        )
    };
    let value = if warps == 0 {
        Value::U64(0)
    } else {
        Value::U64(warp_ns)
    };
    rep.report(
        Some(i),
        src.name(),
        Check::CrossCpu,
        status,
        value,
        "ns",
        &d,
    );
}

#[cfg(target_has_atomic = "64")]
mod shared {
    use clockhal_core::ClockSource;
    use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::*};

    /// Spins waiting for the partner CPU to arrive before starting alone.
    const ARRIVAL_SPINS: u64 = 100_000_000;
    /// Spins waiting for the lock before giving up (partner stuck).
    const LOCK_SPINS: u64 = 100_000_000;
    /// Spins waiting for the partner's turn before reading again anyway
    /// (the partner may be descheduled).
    const TURN_SPINS: u64 = 1_000_000;

    /// When one warp test ends.
    #[derive(Clone, Copy)]
    pub(super) struct Bounds {
        /// Run at least this long (source ticks)...
        pub min_ticks: u64,
        /// ...and until this many handoffs...
        pub target_handoffs: u64,
        /// ...but at most this long...
        pub max_ticks: u64,
        /// ...and this many reads per CPU.
        pub max_reads: u32,
    }

    /// State both CPUs share during one warp test.
    pub(super) struct WarpState {
        lock: AtomicBool,
        last: AtomicU64,
        last_side: AtomicU32,
        arrived: AtomicU32,
        finished: AtomicU32,
        reads: AtomicU64,
        handoffs: AtomicU64,
        warps: AtomicU64,
        max_warp: AtomicU64,
        start: u64,
        bounds: Bounds,
    }

    /// What one test observed.
    pub(super) struct Outcome {
        pub arrived: u32,
        pub reads: u64,
        pub handoffs: u64,
        pub warps: u64,
        pub max_warp: u64,
    }

    impl WarpState {
        pub fn new(start: u64, bounds: Bounds) -> WarpState {
            WarpState {
                lock: AtomicBool::new(false),
                last: AtomicU64::new(start),
                last_side: AtomicU32::new(u32::MAX),
                arrived: AtomicU32::new(0),
                finished: AtomicU32::new(0),
                reads: AtomicU64::new(0),
                handoffs: AtomicU64::new(0),
                warps: AtomicU64::new(0),
                max_warp: AtomicU64::new(0),
                start,
                bounds,
            }
        }

        /// One CPU's half: read under the lock, compare with the last
        /// reading (from either CPU), until the time or read budget is spent.
        pub fn take_turns(&self, src: &dyn ClockSource, side: u32) {
            self.read_in_turn(src, side);
            self.finished.fetch_add(1, SeqCst);
        }

        fn read_in_turn(&self, src: &dyn ClockSource, side: u32) {
            self.arrived.fetch_add(1, SeqCst);
            let mut spins = 0;
            while self.arrived.load(SeqCst) < 2 && spins < ARRIVAL_SPINS {
                core::hint::spin_loop();
                spins += 1;
            }
            if self.arrived.load(SeqCst) < 2 {
                // The partner never came: reading alone tests nothing (and
                // a stopped source would never end the loop by time).
                return;
            }
            let b = self.bounds;
            for _ in 0..b.max_reads {
                let mut spins = 0;
                while self
                    .lock
                    .compare_exchange_weak(false, true, Acquire, Relaxed)
                    .is_err()
                {
                    core::hint::spin_loop();
                    spins += 1;
                    if spins > LOCK_SPINS {
                        return;
                    }
                }
                let prev = self.last.load(Relaxed);
                let now = src.read();
                self.last.store(now, Relaxed);
                // Only comparisons with the other CPU's reading count (a
                // step back on one CPU is the monotonic check's business).
                if self.last_side.swap(side, Relaxed) != side {
                    self.handoffs.fetch_add(1, Relaxed);
                    if now < prev {
                        self.warps.fetch_add(1, Relaxed);
                        self.max_warp.fetch_max(prev - now, Relaxed);
                    }
                }
                self.reads.fetch_add(1, Relaxed);
                self.lock.store(false, Release);
                let elapsed = now.saturating_sub(self.start);
                let enough =
                    elapsed >= b.min_ticks && self.handoffs.load(Relaxed) >= b.target_handoffs;
                if enough || elapsed >= b.max_ticks {
                    break;
                }
                // Let the partner read next, so most comparisons are
                // cross-CPU, unless it is finished or descheduled.
                let mut spins = 0;
                while self.last_side.load(Relaxed) == side
                    && self.finished.load(Relaxed) == 0
                    && spins < TURN_SPINS
                {
                    core::hint::spin_loop();
                    spins += 1;
                }
            }
        }

        pub fn outcome(&self) -> Outcome {
            Outcome {
                arrived: self.arrived.load(SeqCst),
                reads: self.reads.load(SeqCst),
                // The first turn is not a handoff.
                handoffs: self.handoffs.load(SeqCst).saturating_sub(1),
                warps: self.warps.load(SeqCst),
                max_warp: self.max_warp.load(SeqCst),
            }
        }
    }
}
