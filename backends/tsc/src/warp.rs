//! The SMP TSC warp test: are the TSCs of two CPUs in step?
//!
//! Both CPUs run [`warp_participant`] at the same time on one
//! [`WarpShared`]. They take turns: on its turn a CPU takes a shared lock,
//! reads the TSC (ordered), compares it with the value the other CPU stored
//! on its turn, stores its own and releases the lock; then it waits for the
//! other CPU's turn. Because the lock orders the reads, a value smaller than
//! the stored one means this CPU's TSC is *behind* the other's: a warp (the
//! method of Linux's `tsc_sync.c`; FreeBSD's `test_tsc` is similar). The
//! largest backward step seen is reported.
//!
//! Why turns: only a comparison against the *other* CPU's reading (a
//! handoff) can show a warp. A plain lock is unfair — the CPU that just
//! released it usually takes it again — so without turns a run can make a
//! million comparisons of which a handful cross CPUs (seen under QEMU TCG:
//! 6 handoffs in 803,913 iterations). With turns nearly every comparison is
//! a handoff, and a run needs [`WarpBudget::min_handoffs`] of them to count
//! as evidence ([`WarpReport::is_conclusive`]).
//!
//! A kernel runs it for every CPU pair (or CPU 0 against each other CPU)
//! with interrupts off, then feeds [`SyncStatus::from_reports`] into
//! [`TscOptions::sync`](crate::TscOptions::sync). A report's
//! [`Display`](core::fmt::Display) says why it is or is not conclusive.
//!
//! Every wait is bounded by [`WarpBudget::max_wait_spins`] spins and by TSC
//! time: the start and end rendezvous and the lock by
//! [`WarpBudget::max_tsc_ticks`] each, the wait for the other CPU's turn by
//! the end of the run: one call takes at most about four times
//! `max_tsc_ticks` (start, run, a lock wait, end), normally at most one. A
//! partner that never comes, stalls or leaves early makes the run
//! incomplete or short of handoffs — [`SyncStatus::Unknown`], never a hang.

use clockhal_x86::Hardware;
use core::fmt;
use core::hint::spin_loop;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

const NOBODY: usize = usize::MAX;

/// Spins between two TSC reads while waiting: a TSC read can be a slow,
/// trapping instruction in a VM, and 1,024 `pause`s are only ~15..150 µs
/// (the spins still poll the shared state every time).
const SPINS_PER_CLOCK_CHECK: u64 = 1_024;

/// State shared by the two participants. Use a fresh one (or
/// [`reset`](Self::reset) it) for each pair.
#[derive(Debug)]
pub struct WarpShared {
    lock: AtomicBool,
    last_tsc: AtomicU64,
    last_cpu: AtomicUsize,
    worst: AtomicU64,
    iterations: AtomicU64,
    handoffs: AtomicU64,
    arrived: AtomicU32,
    finished: AtomicU32,
    stop: AtomicBool,
    aborted: AtomicBool,
}

impl Default for WarpShared {
    fn default() -> Self {
        Self::new()
    }
}

impl WarpShared {
    /// Fresh state (usable in a `static`).
    pub const fn new() -> WarpShared {
        WarpShared {
            lock: AtomicBool::new(false),
            last_tsc: AtomicU64::new(0),
            last_cpu: AtomicUsize::new(NOBODY),
            worst: AtomicU64::new(0),
            iterations: AtomicU64::new(0),
            handoffs: AtomicU64::new(0),
            arrived: AtomicU32::new(0),
            finished: AtomicU32::new(0),
            stop: AtomicBool::new(false),
            aborted: AtomicBool::new(false),
        }
    }

    /// Clears the state for the next pair. Only while no participant runs.
    pub fn reset(&self) {
        self.lock.store(false, Ordering::SeqCst);
        self.last_tsc.store(0, Ordering::SeqCst);
        self.last_cpu.store(NOBODY, Ordering::SeqCst);
        for a in [&self.worst, &self.iterations, &self.handoffs] {
            a.store(0, Ordering::SeqCst);
        }
        self.arrived.store(0, Ordering::SeqCst);
        self.finished.store(0, Ordering::SeqCst);
        self.stop.store(false, Ordering::SeqCst);
        self.aborted.store(false, Ordering::SeqCst);
    }

    fn report(&self, budget: &WarpBudget) -> WarpReport {
        WarpReport {
            worst_backward_ticks: self.worst.load(Ordering::SeqCst),
            iterations: self.iterations.load(Ordering::SeqCst),
            handoffs: self.handoffs.load(Ordering::SeqCst),
            required_handoffs: budget.min_handoffs,
            completed: !self.aborted.load(Ordering::SeqCst),
        }
    }

    /// Arrives at `counter` and waits for the other CPU to arrive too.
    fn rendezvous<H: Hardware>(&self, hw: &H, counter: &AtomicU32, budget: &WarpBudget) -> bool {
        counter.fetch_add(1, Ordering::SeqCst);
        let mut wait = Wait::new(budget.max_wait_spins, None, budget.max_tsc_ticks);
        while counter.load(Ordering::SeqCst) < 2 {
            if wait.expired(hw) {
                return false;
            }
        }
        true
    }

    fn lock<H: Hardware>(&self, hw: &H, budget: &WarpBudget) -> bool {
        let mut wait = Wait::new(budget.max_wait_spins, None, budget.max_tsc_ticks);
        while self
            .lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            if wait.expired(hw) {
                return false;
            }
        }
        true
    }

    /// Waits until the other CPU has taken its turn since `me` took this
    /// one, the pair is stopping, or the wait runs out (then `me` simply
    /// takes another turn: the lock keeps that correct).
    fn await_turn<H: Hardware>(&self, hw: &H, me: usize, budget: &WarpBudget, run_start: u64) {
        let mut wait = Wait::new(budget.max_wait_spins, Some(run_start), budget.max_tsc_ticks);
        while self.last_cpu.load(Ordering::Acquire) == me
            && !self.stop.load(Ordering::Relaxed)
            && !wait.expired(hw)
        {}
    }
}

/// A bounded spin: at most `max_spins` spins and `ticks` TSC ticks from
/// `start`. Without a given start the clock is first read after
/// [`SPINS_PER_CLOCK_CHECK`] spins, so a wait that ends at once costs no
/// TSC read.
struct Wait {
    spins: u64,
    max_spins: u64,
    start: Option<u64>,
    ticks: u64,
}

impl Wait {
    fn new(max_spins: u64, start: Option<u64>, ticks: u64) -> Wait {
        Wait {
            spins: 0,
            max_spins,
            start,
            ticks,
        }
    }

    /// Spins once; true once a bound is reached.
    fn expired<H: Hardware>(&mut self, hw: &H) -> bool {
        if self.spins >= self.max_spins {
            return true;
        }
        self.spins += 1;
        // `pause`: also lets QEMU TCG switch to the other vCPU.
        spin_loop();
        if self.spins % SPINS_PER_CLOCK_CHECK != 0 {
            return false;
        }
        let now = hw.rdtsc();
        let start = *self.start.get_or_insert(now);
        now.wrapping_sub(start) >= self.ticks
    }
}

/// Bounds of one warp test, and how much evidence it must gather.
///
/// A CPU's loop ends at `max_iterations` or `max_tsc_ticks`, or earlier
/// once it did `min_iterations` and the pair made `min_handoffs`
/// comparisons across CPUs; when either CPU ends, the other ends too.
/// A run with fewer than `min_handoffs` handoffs is inconclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct WarpBudget {
    /// Iterations (turns) this CPU runs at least (unless a bound hits).
    pub min_iterations: u64,
    /// Comparisons against the other CPU's reading (both CPUs together)
    /// that a run needs to count as evidence of synchronised TSCs
    /// ([`WarpReport::required_handoffs`]; at least 1 is always required).
    pub min_handoffs: u64,
    /// Hard bound on this CPU's iterations.
    pub max_iterations: u64,
    /// Hard bound on this CPU's run time, in its own TSC ticks; also the
    /// bound of each wait for the other CPU (start, end, lock).
    pub max_tsc_ticks: u64,
    /// Spin bound of each wait for the other CPU (start, end, lock, turn).
    /// A start, end or lock wait that runs out makes the report
    /// `completed: false`.
    pub max_wait_spins: u64,
}

impl WarpBudget {
    /// 2,000..=1,000,000 turns per CPU, 200 handoffs required, at most 2^28
    /// TSC ticks per run (0.1 s at 2.6 GHz; 0.2 s at 1.34 GHz), 2^26 spins
    /// per wait.
    ///
    /// A handoff costs about one TSC read and two cache-line transfers, as
    /// long as both CPUs run. Measured under QEMU 7.2 with two vCPUs, TCG
    /// and a slow KVM (`rdtsc` ~17,000 host cycles) alike: 3,999 handoffs,
    /// the run ending at its 2,000 turns per CPU, when the host gives each
    /// vCPU a core; 80..600 on a busy host; ~30 when both vCPUs share one
    /// host core and so take turns once per host time slice (~4 ms) —
    /// inconclusive, rightly: such a run cannot see an offset below
    /// milliseconds. On bare metal the 2,000 turns take well under a
    /// millisecond.
    pub const DEFAULT: WarpBudget = WarpBudget {
        min_iterations: 2_000,
        min_handoffs: 200,
        max_iterations: 1_000_000,
        max_tsc_ticks: 1 << 28,
        max_wait_spins: 1 << 26,
    };
}

impl Default for WarpBudget {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The pair's result (both participants return the same one). Its
/// [`Display`](fmt::Display) gives the verdict and why.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct WarpReport {
    /// Largest backward step seen, in TSC ticks (0: none).
    pub worst_backward_ticks: u64,
    /// Loop iterations, both CPUs together.
    pub iterations: u64,
    /// Comparisons against the other CPU's reading, both CPUs together.
    pub handoffs: u64,
    /// Handoffs the run needed to be conclusive
    /// ([`WarpBudget::min_handoffs`]).
    pub required_handoffs: u64,
    /// Whether both CPUs met and finished within the wait bounds.
    pub completed: bool,
}

impl WarpReport {
    /// Whether the run proves something: a backward step (always), or a
    /// completed run with at least `required_handoffs` handoffs (and at
    /// least one).
    pub fn is_conclusive(&self) -> bool {
        self.worst_backward_ticks > 0 || (self.completed && self.has_enough_handoffs())
    }

    fn has_enough_handoffs(&self) -> bool {
        self.handoffs >= self.required_handoffs.max(1)
    }
}

impl fmt::Display for WarpReport {
    /// One line: the verdict, then the numbers behind it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.worst_backward_ticks > 0 {
            write!(
                f,
                "warp: a TSC ran {} ticks behind the other's",
                self.worst_backward_ticks
            )?;
        } else if !self.completed {
            f.write_str("inconclusive: the other CPU did not meet or finish in time")?;
        } else if !self.has_enough_handoffs() {
            f.write_str("inconclusive: too few cross-CPU comparisons")?;
        } else {
            f.write_str("in step: no backward step")?;
        }
        write!(
            f,
            " ({} of {} handoffs required, {} iterations, completed={})",
            self.handoffs, self.required_handoffs, self.iterations, self.completed
        )
    }
}

/// Runs one side of the warp test; call it on both CPUs at once with the
/// same `shared`, each with a distinct `me` (e.g. the CPU index; not
/// `usize::MAX`). Returns when both are done (or a wait bound hits).
///
/// ```
/// use clockhal_tsc::{warp_participant, SyncStatus, WarpBudget, WarpShared};
/// use clockhal_sim::SimConfig;
/// // Two CPUs whose TSCs differ by 100,000 ticks (50 µs).
/// let m = SimConfig::cpu(2_000_000_000).with_cpus(2, &[0, -100_000]).build();
/// let shared = WarpShared::new();
/// let budget = WarpBudget::DEFAULT;
/// let reports = std::thread::scope(|s| {
///     let h = s.spawn(|| { m.set_cpu(1); warp_participant(&m, &shared, 1, &budget) });
///     let r0 = warp_participant(&m, &shared, 0, &budget);
///     [r0, h.join().unwrap()]
/// });
/// assert!(reports[0].worst_backward_ticks > 90_000);
/// assert!(matches!(SyncStatus::from_reports(&reports), SyncStatus::Unsynchronized { .. }));
/// // The report says why: "warp: a TSC ran 99990 ticks behind the other's (...)".
/// assert!(reports[0].to_string().starts_with("warp: "));
/// ```
pub fn warp_participant<H: Hardware>(
    hw: &H,
    shared: &WarpShared,
    me: usize,
    budget: &WarpBudget,
) -> WarpReport {
    if !shared.rendezvous(hw, &shared.arrived, budget) {
        shared.aborted.store(true, Ordering::SeqCst);
        shared.stop.store(true, Ordering::SeqCst);
        return shared.report(budget);
    }
    let start = hw.rdtsc_ordered();
    let mut i = 0u64;
    loop {
        if !shared.lock(hw, budget) {
            shared.aborted.store(true, Ordering::SeqCst);
            break;
        }
        let prev = shared.last_tsc.load(Ordering::Relaxed);
        let prev_cpu = shared.last_cpu.load(Ordering::Relaxed);
        let now = hw.rdtsc_ordered();
        shared.last_tsc.store(now, Ordering::Relaxed);
        shared.last_cpu.store(me, Ordering::Relaxed);
        let handoff = prev_cpu != NOBODY && prev_cpu != me;
        if handoff {
            shared.handoffs.fetch_add(1, Ordering::Relaxed);
        }
        shared.lock.store(false, Ordering::Release);

        i += 1;
        if prev_cpu != NOBODY && prev > now {
            shared.worst.fetch_max(prev - now, Ordering::Relaxed);
        }
        let done_enough = i >= budget.min_iterations
            && shared.handoffs.load(Ordering::Relaxed) >= budget.min_handoffs;
        if done_enough
            || i >= budget.max_iterations
            || now.wrapping_sub(start) >= budget.max_tsc_ticks
            || shared.stop.load(Ordering::Relaxed)
        {
            break;
        }
        shared.await_turn(hw, me, budget, start);
    }
    // The pair ends together: a CPU left alone makes no more handoffs.
    shared.stop.store(true, Ordering::SeqCst);
    shared.iterations.fetch_add(i, Ordering::SeqCst);
    if !shared.rendezvous(hw, &shared.finished, budget) {
        shared.aborted.store(true, Ordering::SeqCst);
    }
    shared.report(budget)
}

/// Whether the TSCs of all CPUs are in step, as far as the OS knows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum SyncStatus {
    /// One CPU: trivially in step.
    SingleCpu,
    /// Conclusive warp tests on every pair saw no backward step.
    Synchronized,
    /// A warp test saw a backward step: never auto-select the TSC.
    Unsynchronized {
        /// The largest backward step, in ticks.
        worst_backward_ticks: u64,
    },
    /// Several CPUs and no conclusive warp test (print the
    /// [`WarpReport`]s for the reason).
    #[default]
    Unknown,
}

impl SyncStatus {
    /// Folds the reports of all pairs: any backward step → unsynchronised;
    /// else any inconclusive test ([`WarpReport::is_conclusive`]: incomplete,
    /// or fewer handoffs than required), or none → unknown; else
    /// synchronised.
    pub fn from_reports(reports: &[WarpReport]) -> SyncStatus {
        let worst = reports
            .iter()
            .map(|r| r.worst_backward_ticks)
            .max()
            .unwrap_or(0);
        if worst > 0 {
            SyncStatus::Unsynchronized {
                worst_backward_ticks: worst,
            }
        } else if reports.is_empty() || !reports.iter().all(WarpReport::is_conclusive) {
            SyncStatus::Unknown
        } else {
            SyncStatus::Synchronized
        }
    }

    /// Single CPU or verified synchronised.
    pub fn in_step(&self) -> bool {
        matches!(self, SyncStatus::SingleCpu | SyncStatus::Synchronized)
    }

    /// One word for an atomic: tag in bits 0..2, backward ticks above
    /// (saturated to 62 bits).
    pub(crate) fn encode(self) -> u64 {
        match self {
            SyncStatus::Unknown => 0,
            SyncStatus::SingleCpu => 1,
            SyncStatus::Synchronized => 2,
            SyncStatus::Unsynchronized {
                worst_backward_ticks,
            } => 3 | worst_backward_ticks.min(u64::MAX >> 2) << 2,
        }
    }

    /// The inverse of [`encode`](Self::encode).
    pub(crate) fn decode(v: u64) -> SyncStatus {
        match v & 3 {
            1 => SyncStatus::SingleCpu,
            2 => SyncStatus::Synchronized,
            3 => SyncStatus::Unsynchronized {
                worst_backward_ticks: v >> 2,
            },
            _ => SyncStatus::Unknown,
        }
    }
}
