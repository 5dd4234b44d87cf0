//! The SMP TSC warp test: how far apart can the TSCs of two CPUs be? See
//! [`warp_participant`] for the method, what a result proves and its
//! bounds.

use clockhal_x86::Hardware;
use core::fmt;
use core::hint::spin_loop;
use core::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// `cpus` entry of a side that never arrived.
const NOBODY: usize = usize::MAX;

/// `min_gap_ticks` of a direction without hand-overs.
const NO_GAP: i64 = i64::MAX;

/// Spins between two TSC reads while waiting: a TSC read can be a slow,
/// trapping instruction in a VM (the spins still poll the shared state
/// every time).
const SPINS_PER_CLOCK_CHECK: u64 = 1_024;

/// Back-to-back ordered reads behind a CPU's read cost.
const READ_COST_SAMPLES: usize = 8;

/// Cap of a CPU's measured read cost in [`WarpReport::limit_ticks`]:
/// 2^16 ticks (16..66 µs at 1..4 GHz; a read costs ~10 ns on hardware,
/// ~6 µs where it traps). It keeps the limit (then at most ~270,000 ticks)
/// below a host time slice, so a CPU descheduled while it measured its
/// reads cannot make turn-taking evidence pass.
const MAX_READ_COST_TICKS: u64 = 1 << 16;

/// One CPU's outbox: written by that CPU only, read by the other. One cache
/// line, so a hand-over moves one line.
#[derive(Debug)]
#[repr(align(64))]
struct Outbox {
    /// The latest TSC reading (0: none yet).
    tsc: AtomicU64,
    /// Fresh readings of the other CPU's received so far.
    hand_overs: AtomicU64,
    /// The smallest gap among them ([`NO_GAP`]: none).
    min_gap: AtomicI64,
    /// TSC reads (loop iterations) so far.
    reads: AtomicU64,
    /// This CPU's read cost in ticks (0: not measured yet).
    read_cost: AtomicU64,
}

impl Outbox {
    const fn new() -> Outbox {
        Outbox {
            tsc: AtomicU64::new(0),
            hand_overs: AtomicU64::new(0),
            min_gap: AtomicI64::new(NO_GAP),
            reads: AtomicU64::new(0),
            read_cost: AtomicU64::new(0),
        }
    }

    fn reset(&self) {
        self.tsc.store(0, Ordering::SeqCst);
        self.hand_overs.store(0, Ordering::SeqCst);
        self.min_gap.store(NO_GAP, Ordering::SeqCst);
        self.reads.store(0, Ordering::SeqCst);
        self.read_cost.store(0, Ordering::SeqCst);
    }
}

/// Arrival, departure and stop: read-mostly, on its own line.
#[derive(Debug)]
#[repr(align(64))]
struct Control {
    arrived: AtomicU32,
    finished: AtomicU32,
    stop: AtomicBool,
    aborted: AtomicBool,
    cpus: [AtomicUsize; 2],
    /// The first CPU's [`WarpBudget::transfer_allowance_ticks`].
    allowance: AtomicU64,
    /// The first CPU's run, in its ticks.
    elapsed: AtomicU64,
}

/// State shared by the two participants. Use a fresh one (or
/// [`reset`](Self::reset) it) for each pair.
#[derive(Debug)]
pub struct WarpShared {
    outbox: [Outbox; 2],
    control: Control,
}

impl Default for WarpShared {
    fn default() -> Self {
        Self::new()
    }
}

impl WarpShared {
    /// Fresh state (usable in a `static`).
    /// Interrupt-safe: yes.
    pub const fn new() -> WarpShared {
        WarpShared {
            outbox: [Outbox::new(), Outbox::new()],
            control: Control {
                arrived: AtomicU32::new(0),
                finished: AtomicU32::new(0),
                stop: AtomicBool::new(false),
                aborted: AtomicBool::new(false),
                cpus: [AtomicUsize::new(NOBODY), AtomicUsize::new(NOBODY)],
                allowance: AtomicU64::new(0),
                elapsed: AtomicU64::new(0),
            },
        }
    }

    /// Clears the state for the next pair. Only while no participant runs.
    /// Interrupt-safe: no (only between warp tests).
    pub fn reset(&self) {
        for o in &self.outbox {
            o.reset();
        }
        let c = &self.control;
        c.arrived.store(0, Ordering::SeqCst);
        c.finished.store(0, Ordering::SeqCst);
        c.stop.store(false, Ordering::SeqCst);
        c.aborted.store(false, Ordering::SeqCst);
        for cpu in &c.cpus {
            cpu.store(NOBODY, Ordering::SeqCst);
        }
        c.allowance.store(0, Ordering::SeqCst);
        c.elapsed.store(0, Ordering::SeqCst);
    }

    fn report(&self) -> WarpReport {
        let c = &self.control;
        let o = |i: usize| &self.outbox[i];
        let both = |f: &dyn Fn(&Outbox) -> u64| [f(o(0)), f(o(1))];
        WarpReport {
            cpus: [
                c.cpus[0].load(Ordering::SeqCst),
                c.cpus[1].load(Ordering::SeqCst),
            ],
            reads: both(&|o| o.reads.load(Ordering::SeqCst)),
            hand_overs: both(&|o| o.hand_overs.load(Ordering::SeqCst)),
            min_gap_ticks: [
                o(0).min_gap.load(Ordering::SeqCst),
                o(1).min_gap.load(Ordering::SeqCst),
            ],
            read_cost_ticks: both(&|o| o.read_cost.load(Ordering::SeqCst)),
            transfer_allowance_ticks: c.allowance.load(Ordering::SeqCst),
            elapsed_ticks: c.elapsed.load(Ordering::SeqCst),
            completed: !c.aborted.load(Ordering::SeqCst),
        }
    }

    /// Ends this side: counts it out and waits (bounded) for the other.
    fn depart<H: Hardware>(&self, hw: &H, budget: &WarpBudget) -> WarpReport {
        let c = &self.control;
        c.stop.store(true, Ordering::SeqCst);
        c.finished.fetch_add(1, Ordering::SeqCst);
        if !both_counted(hw, &c.finished, budget) {
            c.aborted.store(true, Ordering::SeqCst);
        }
        self.report()
    }
}

/// Waits (bounded by `budget`) until `counter`, which already counts this
/// side, counts the other too; false if the wait ran out.
fn both_counted<H: Hardware>(hw: &H, counter: &AtomicU32, budget: &WarpBudget) -> bool {
    let mut wait = Wait::new(budget.max_wait_spins, budget.max_tsc_ticks);
    while counter.load(Ordering::SeqCst) < 2 {
        if wait.expired(hw) {
            return false;
        }
    }
    true
}

/// A bounded spin: at most `max_spins` spins and `ticks` TSC ticks. The
/// clock is first read after [`SPINS_PER_CLOCK_CHECK`] spins, so a wait
/// that ends at once costs no TSC read.
struct Wait {
    spins: u64,
    max_spins: u64,
    start: Option<u64>,
    ticks: u64,
}

impl Wait {
    fn new(max_spins: u64, ticks: u64) -> Wait {
        Wait {
            spins: 0,
            max_spins,
            start: None,
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

/// The fastest of [`READ_COST_SAMPLES`] back-to-back ordered TSC reads,
/// capped at [`MAX_READ_COST_TICKS`].
fn read_cost<H: Hardware>(hw: &H) -> u64 {
    let mut prev = hw.rdtsc_ordered();
    let mut best = u64::MAX;
    for _ in 0..READ_COST_SAMPLES {
        let now = hw.rdtsc_ordered();
        best = best.min(now.wrapping_sub(prev));
        prev = now;
    }
    best.min(MAX_READ_COST_TICKS)
}

/// The limit of [`WarpReport::limit_ticks`], saturating.
fn limit(read_costs: [u64; 2], allowance: u64) -> u64 {
    let cost = |c: u64| c.min(MAX_READ_COST_TICKS);
    cost(read_costs[0])
        .saturating_add(cost(read_costs[1]))
        .saturating_add(allowance)
        .saturating_mul(2)
}

/// Bounds of one warp test, and when it may stop early.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct WarpBudget {
    /// Hand-overs per direction after which a run stops once it is
    /// decided (a warp, or a bound within the limit). More hand-overs give
    /// a fast hand-over (and a small warp) more chances to show.
    pub min_hand_overs: u64,
    /// Hard bound on this CPU's TSC reads in the run (should the TSC not
    /// advance).
    pub max_reads: u64,
    /// Hard bound on the run, in this CPU's TSC ticks; also the bound of
    /// each wait for the other CPU (arrival, departure).
    pub max_tsc_ticks: u64,
    /// Spin bound of each wait for the other CPU (arrival, departure). A
    /// wait that runs out makes the report `completed: false`.
    pub max_wait_spins: u64,
    /// Ticks the limit allows for moving a reading (one cache line) from
    /// one CPU to the other, besides the two CPUs' read costs
    /// ([`WarpReport::limit_ticks`]; the first CPU's value counts).
    pub transfer_allowance_ticks: u64,
}

impl WarpBudget {
    /// 1,000 hand-overs each way, at most 4,000,000 reads and 2^30 TSC
    /// ticks per run (0.41 s at 2.6 GHz, 1.07 s at 1 GHz) and per wait,
    /// 2^26 spins per wait, a transfer allowance of 2,048 ticks (0.5..2 µs
    /// at 1..4 GHz; a cache-line transfer between cores or sockets takes
    /// ~0.05..0.3 µs).
    ///
    /// Measured under QEMU 7.2 with two vCPUs on a 2-core host: when both
    /// vCPU threads run at once the run ends after its 2,000 hand-overs
    /// (TCG: ~1,100..1,400 reads per CPU, 0.5..0.7 ms; KVM, where every
    /// `rdtsc` traps: ~1,000 reads, 17 ms); when the host makes them take
    /// turns on one core (seen whenever another session kept a host core
    /// busy: both vCPU threads on one host CPU) it runs to the time bound
    /// with one hand-over each way per host context switch (~30..50).
    pub const DEFAULT: WarpBudget = WarpBudget {
        min_hand_overs: 1_000,
        max_reads: 4_000_000,
        max_tsc_ticks: 1 << 30,
        max_wait_spins: 1 << 26,
        transfer_allowance_ticks: 2_048,
    };
}

impl Default for WarpBudget {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The pair's result from [`warp_participant`] (both participants return
/// the same one, unless one left before the other finished). Index 0 is
/// the first CPU to arrive, 1 the second; per-direction arrays are indexed
/// by the *receiving* CPU. [`status`](Self::status) says what it proves;
/// its [`Display`](fmt::Display) gives the verdict and the evidence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct WarpReport {
    /// The participants' `me`, in arrival order (`usize::MAX`: none).
    pub cpus: [usize; 2],
    /// TSC reads each CPU made in the run.
    pub reads: [u64; 2],
    /// Fresh readings of the other CPU each CPU compared against.
    pub hand_overs: [u64; 2],
    /// Per receiving CPU, the smallest gap (its reading minus the other's
    /// earlier one), in ticks; meaningless without hand-overs.
    pub min_gap_ticks: [i64; 2],
    /// Each CPU's read cost: its fastest back-to-back ordered TSC read (or
    /// loop iteration).
    pub read_cost_ticks: [u64; 2],
    /// The first CPU's [`WarpBudget::transfer_allowance_ticks`].
    pub transfer_allowance_ticks: u64,
    /// The first CPU's run, in its TSC ticks (without the waits).
    pub elapsed_ticks: u64,
    /// Whether both CPUs met and finished within the wait bounds.
    pub completed: bool,
}

impl Default for WarpReport {
    /// No run: no CPUs, no hand-overs, not completed (inconclusive).
    fn default() -> Self {
        WarpReport {
            cpus: [NOBODY; 2],
            reads: [0; 2],
            hand_overs: [0; 2],
            min_gap_ticks: [NO_GAP; 2],
            read_cost_ticks: [0; 2],
            transfer_allowance_ticks: 0,
            elapsed_ticks: 0,
            completed: false,
        }
    }
}

/// What a report proves (see [`WarpReport::status`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// No reading went back; the TSCs differ by at most `within`, which
    /// is within the limit.
    InStep { within: u64 },
    /// CPU `behind`'s TSC is behind the other's by at least `by` ticks.
    OutOfStep { behind: usize, by: u64 },
    /// The other CPU did not arrive (or no run happened).
    NoPartner,
    /// No reading crossed from CPU `from` to the other.
    OneWay { from: usize },
    /// No reading went back, but the bound `within` is above the limit.
    TooWide { within: u64 },
}

impl WarpReport {
    /// The largest bound `N` that still counts as in step:
    /// `2 × (read_cost_ticks[0] + read_cost_ticks[1] + transfer_allowance_ticks)`,
    /// each read cost capped at 2^16 ticks, saturating (see
    /// [`warp_participant`] for why).
    /// Interrupt-safe: yes.
    pub fn limit_ticks(&self) -> u64 {
        limit(self.read_cost_ticks, self.transfer_allowance_ticks)
    }

    /// The smallest gap of hand-overs received by CPU `to`, if any.
    fn gap(&self, to: usize) -> Option<i64> {
        (self.hand_overs[to] > 0).then_some(self.min_gap_ticks[to])
    }

    /// What the evidence says about `d` = the second CPU's TSC minus the
    /// first's: `lower <= d <= upper`, each where that direction had
    /// hand-overs (`(lower, upper)`; strictly inside unless the TSC
    /// advances in steps coarser than a hand-over).
    /// Interrupt-safe: yes.
    pub fn offset_range(&self) -> (Option<i64>, Option<i64>) {
        (self.gap(0).map(i64::saturating_neg), self.gap(1))
    }

    /// A reading that went back: `(behind, ticks)`, the index of the CPU
    /// whose TSC is behind (0: the first) and the largest backward step
    /// (its TSC is behind by at least that). Proof even from an
    /// incomplete run.
    /// Interrupt-safe: yes.
    pub fn warp(&self) -> Option<(usize, u64)> {
        let backward = |to: usize| self.gap(to).filter(|g| *g < 0).map_or(0, i64::unsigned_abs);
        let (back0, back1) = (backward(0), backward(1));
        // The receiver of a backward step is behind the sender.
        (back0 > 0 || back1 > 0).then(|| (usize::from(back1 >= back0), back0.max(back1)))
    }

    /// Without a warp and with hand-overs both ways, the bound `N`: the
    /// TSCs differ by at most this many ticks (the larger of the two
    /// directions' smallest gaps), whether or not within the limit.
    /// Interrupt-safe: yes.
    pub fn offset_bound(&self) -> Option<u64> {
        match (self.gap(0), self.gap(1)) {
            (Some(g0), Some(g1)) if g0 >= 0 && g1 >= 0 => Some(g0.max(g1).unsigned_abs()),
            _ => None,
        }
    }

    fn verdict(&self) -> Verdict {
        if let Some((behind, by)) = self.warp() {
            return Verdict::OutOfStep { behind, by };
        }
        if let Some(within) = self.offset_bound() {
            return if within <= self.limit_ticks() {
                Verdict::InStep { within }
            } else {
                Verdict::TooWide { within }
            };
        }
        match (self.gap(0), self.gap(1)) {
            (None, None) if !self.completed => Verdict::NoPartner,
            (None, _) => Verdict::OneWay { from: 1 },
            _ => Verdict::OneWay { from: 0 },
        }
    }

    /// What the run proves: [`SyncStatus::Unsynchronized`] on a warp (by
    /// the largest backward step), [`SyncStatus::Synchronized`] when the
    /// offset bound is within [`limit_ticks`](Self::limit_ticks), else
    /// [`SyncStatus::Unknown`] (the other CPU did not come, no reading
    /// crossed one way, or the bound is above the limit: see the
    /// [`Display`](fmt::Display)). Never [`SyncStatus::SingleCpu`].
    /// Interrupt-safe: yes.
    pub fn status(&self) -> SyncStatus {
        match self.verdict() {
            Verdict::OutOfStep { by, .. } => SyncStatus::Unsynchronized {
                worst_backward_ticks: by,
            },
            Verdict::InStep { .. } => SyncStatus::Synchronized,
            _ => SyncStatus::Unknown,
        }
    }

    /// Whether the run decides anything (a warp, or in step).
    /// Interrupt-safe: yes.
    pub fn is_conclusive(&self) -> bool {
        self.status() != SyncStatus::Unknown
    }

    /// The `me` of CPU `i` for messages (`?` if none).
    fn cpu(&self, i: usize) -> CpuName {
        CpuName(self.cpus[i])
    }
}

struct CpuName(usize);

impl fmt::Display for CpuName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == NOBODY {
            f.write_str("cpu ?")
        } else {
            write!(f, "cpu {}", self.0)
        }
    }
}

impl fmt::Display for WarpReport {
    /// One line: the verdict, then the evidence behind it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (a, b) = (self.cpu(0), self.cpu(1));
        let other = |i: usize| self.cpu(1 - i.min(1));
        match self.verdict() {
            Verdict::InStep { within } => {
                write!(f, "in step: the TSCs differ by at most {within} ticks")?
            }
            Verdict::OutOfStep { behind, by } => write!(
                f,
                "warp: {}'s TSC is behind {}'s by at least {by} ticks",
                self.cpu(behind),
                other(behind)
            )?,
            Verdict::NoPartner => {
                f.write_str("inconclusive: the other CPU did not arrive in time")?
            }
            Verdict::OneWay { from } => write!(
                f,
                "inconclusive: no reading crossed from {} to {}",
                self.cpu(from),
                other(from)
            )?,
            Verdict::TooWide { within } => write!(
                f,
                "inconclusive: the TSCs differ by at most {within} ticks, above the limit \
                 (readings crossed slowly: CPUs taking turns on one host core?)"
            )?,
        }
        let gap = |to: usize| GapText(self.gap(to));
        write!(
            f,
            " ({a} -> {b}: {} hand-overs, fastest {}; {b} -> {a}: {} hand-overs, fastest {}; \
             limit {} ticks (reads {}+{}, transfer {}); {}+{} reads in {} ticks{})",
            self.hand_overs[1],
            gap(1),
            self.hand_overs[0],
            gap(0),
            self.limit_ticks(),
            self.read_cost_ticks[0],
            self.read_cost_ticks[1],
            self.transfer_allowance_ticks,
            self.reads[0],
            self.reads[1],
            self.elapsed_ticks,
            if self.completed { "" } else { ", incomplete" },
        )
    }
}

struct GapText(Option<i64>);

impl fmt::Display for GapText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(g) => write!(f, "{g} ticks"),
            None => f.write_str("-"),
        }
    }
}

/// Runs one side of the warp test; call it on both CPUs at once with the
/// same `shared` (interrupts off). `me` names this CPU in the report (e.g.
/// its index). The first to arrive is CPU 0 of the report, the second
/// CPU 1; a third caller returns at once with an empty report. Both return
/// the pair's [`WarpReport`]; a kernel runs it for every CPU pair (or CPU 0
/// against each other CPU) and feeds [`SyncStatus::from_reports`] into
/// [`TscOptions::sync`](crate::TscOptions::sync).
/// Interrupt-safe: no (spins until the other CPU takes part).
///
/// # The method
/// Each CPU loops: load the other CPU's latest published TSC reading, read
/// its own TSC (ordered), publish that. A reading a CPU loads was taken by
/// the other CPU *before* its own read (the other CPU stored it after
/// reading it; the ordered read waits for the load), so each fresh reading
/// received is a *hand-over* in causal order, and its gap `mine − theirs`
/// is evidence:
///
/// - a negative gap is a reading that went back across CPUs: the
///   receiver's TSC is behind the sender's by at least `−gap` ticks (a
///   warp: proof, whatever else happened; [`WarpReport::warp`]);
/// - with `d` = the second CPU's TSC minus the first's, a hand-over from
///   the first to the second took `gap − d` ticks, one the other way
///   `gap + d`; both are positive (or zero, for a TSC that advances in
///   coarse steps), so each direction's smallest gap bounds `d` from one
///   side: `−min_gap_ticks[0] ≤ d ≤ min_gap_ticks[1]`
///   ([`WarpReport::offset_range`]). Without a warp, `|d|` is at most `N`,
///   the larger of the two ([`WarpReport::offset_bound`]).
///
/// Linux's `check_tsc_warp` compares against the last value under a shared
/// lock, FreeBSD's `test_tsc` compares readings taken around rendezvous
/// barriers; here each CPU owns its outbox (one cache line) and publishes
/// every reading, so nothing waits inside the run. When both CPUs run at
/// once nearly every read is a hand-over; when the host makes two vCPUs
/// take turns on one core, the first read after a switch still sees the
/// other's reading from just before it: a hand-over of one context switch,
/// where waiting for turns made it one host time slice (measured with both
/// vCPUs on one host core, QEMU 7.2: 44,000..52,000 ticks under TCG and
/// 86,000..113,000 under KVM, against 2,000,000..10,000,000 with turns).
///
/// # When the bound is good enough: the limit
/// A clock reading handed from one CPU to another comes out *earlier* on
/// the second only if its TSC is behind by more than the hand-over took.
/// The test hands readings over the fastest way there is — a store, a load
/// and an ordered TSC read, less work than any clock read — so once the
/// fastest hand-overs both ways show no warp, only readings handed over
/// faster than those could step back, and by at most `N`. That covers
/// clock reads when `N` is about what a hand-over takes between two CPUs
/// *running at the same time*: one TSC read on each side plus one
/// cache-line transfer. [`WarpReport::limit_ticks`] allows twice that (an
/// offset as large as the hand-over itself shows no warp — and no reader
/// can see it either): `2 × (read cost of the first CPU + of the second +
/// transfer allowance)`. Each CPU measures its read cost itself (its
/// fastest of eight back-to-back ordered reads, or of its loop iterations,
/// capped at 2^16 ticks so that a CPU descheduled while it measured cannot
/// stretch the limit to a host time slice); the allowance is
/// [`WarpBudget::transfer_allowance_ticks`]. A larger `N` means the
/// readings crossed slowly — vCPUs taking turns on one host core — and the
/// result is [`SyncStatus::Unknown`]: such a run cannot see an offset
/// below `N`, and a reader on CPUs that later run at once could.
///
/// Measured (fastest hand-overs each way, limit): two host threads on this
/// project's build machine (a 2-vCPU KVM guest): 107..221 ticks; QEMU 7.2 TCG
/// (MTTCG) with both vCPU threads running: 173..445 ticks, limit
/// 4,400..6,000; QEMU with KVM (kvm_pvm, where every `rdtsc` traps; reads
/// of ~7,000 ticks): 9,300..22,000, limit ~32,500.
///
/// # Bounded in time
/// A call waits at most [`WarpBudget::max_tsc_ticks`] for the other CPU to
/// arrive, runs at most that long, and waits at most that long for it to
/// finish: at most about three times `max_tsc_ticks` of its own TSC, plus
/// nine reads for the read cost. Each wait is also bounded by
/// [`WarpBudget::max_wait_spins`] spins and the run by
/// [`WarpBudget::max_reads`] reads, should the TSC not advance. A run where
/// both CPUs run at once ends after [`WarpBudget::min_hand_overs`]
/// hand-overs each way. A partner that never comes, stalls or leaves early
/// leaves the evidence it gave; without hand-overs both ways the run is
/// inconclusive — never a hang.
///
/// ```
/// use clockhal_tsc::{warp_participant, SyncStatus, WarpBudget, WarpShared};
/// use clockhal_sim::SimConfig;
/// // Two CPUs whose TSCs differ by 2,000 ticks (1 µs).
/// let m = SimConfig::cpu(2_000_000_000).with_cpus(2, &[0, -2_000]).build();
/// let shared = WarpShared::new();
/// let budget = WarpBudget::DEFAULT;
/// let reports = std::thread::scope(|s| {
///     let h = s.spawn(|| { m.set_cpu(1); warp_participant(&m, &shared, 1, &budget) });
///     let r0 = warp_participant(&m, &shared, 0, &budget);
///     [r0, h.join().unwrap()]
/// });
/// assert_eq!(reports[0], reports[1]);
/// let (behind, ticks) = reports[0].warp().unwrap();
/// assert_eq!(reports[0].cpus[behind], 1);
/// assert!(ticks > 1_900 && ticks < 2_000);
/// assert!(matches!(SyncStatus::from_reports(&reports), SyncStatus::Unsynchronized { .. }));
/// // The report says why: "warp: cpu 1's TSC is behind cpu 0's by at least 1980 ticks (...)".
/// assert!(reports[0].to_string().starts_with("warp: "));
/// ```
pub fn warp_participant<H: Hardware>(
    hw: &H,
    shared: &WarpShared,
    me: usize,
    budget: &WarpBudget,
) -> WarpReport {
    let cost = read_cost(hw);
    let c = &shared.control;
    let side = c.arrived.fetch_add(1, Ordering::SeqCst);
    if side >= 2 {
        // Not one of the pair: leave its state alone.
        return WarpReport::default();
    }
    let side = side as usize;
    let (mine, theirs) = (&shared.outbox[side], &shared.outbox[1 - side]);
    c.cpus[side].store(me, Ordering::SeqCst);
    mine.read_cost.store(cost, Ordering::SeqCst);
    if side == 0 {
        c.allowance
            .store(budget.transfer_allowance_ticks, Ordering::SeqCst);
    }
    if !both_counted(hw, &c.arrived, budget) {
        // Nobody to wait for at the end either; a latecomer finds the run
        // stopped and this side counted out.
        c.aborted.store(true, Ordering::SeqCst);
        c.stop.store(true, Ordering::SeqCst);
        c.finished.fetch_add(1, Ordering::SeqCst);
        return shared.report();
    }
    let elapsed = run(hw, c, mine, theirs, cost, budget);
    if side == 0 {
        c.elapsed.store(elapsed, Ordering::SeqCst);
    }
    shared.depart(hw, budget)
}

/// The streaming loop of one side; returns its length in ticks.
fn run<H: Hardware>(
    hw: &H,
    c: &Control,
    mine: &Outbox,
    theirs: &Outbox,
    my_cost: u64,
    budget: &WarpBudget,
) -> u64 {
    let start = hw.rdtsc_ordered();
    let mut now = start;
    let mut my_cost = my_cost;
    let mut last_seen = 0u64;
    let (mut reads, mut hand_overs, mut min_gap) = (0u64, 0u64, NO_GAP);
    while reads < budget.max_reads {
        // The order that makes a hand-over causal: their reading was
        // stored after they read it; ours is read after the load.
        let theirs_tsc = theirs.tsc.load(Ordering::Acquire);
        let prev = now;
        now = hw.rdtsc_ordered();
        mine.tsc.store(now, Ordering::Release);
        reads += 1;
        // A loop iteration is a read and more: an upper bound of the read
        // cost, tighter than the first measurement when that one was
        // slowed (a vCPU descheduled, code run for the first time).
        if now.wrapping_sub(prev) < my_cost {
            my_cost = now.wrapping_sub(prev);
            mine.read_cost.store(my_cost, Ordering::Relaxed);
        }
        if theirs_tsc != 0 && theirs_tsc != last_seen {
            last_seen = theirs_tsc;
            hand_overs += 1;
            let gap = now.wrapping_sub(theirs_tsc) as i64;
            if gap < min_gap {
                min_gap = gap;
                mine.min_gap.store(gap, Ordering::Relaxed);
            }
            mine.hand_overs.store(hand_overs, Ordering::Relaxed);
        }
        mine.reads.store(reads, Ordering::Relaxed);
        if c.stop.load(Ordering::Relaxed) {
            break;
        }
        let decided = || {
            let their_count = theirs.hand_overs.load(Ordering::Relaxed);
            let their_gap = theirs.min_gap.load(Ordering::Relaxed);
            // As the report will judge it (a value not yet published
            // reads as 0: a stricter limit, never a looser one).
            let costs = [my_cost, theirs.read_cost.load(Ordering::Relaxed)];
            let allowance = c.allowance.load(Ordering::Relaxed);
            hand_overs >= budget.min_hand_overs
                && their_count >= budget.min_hand_overs
                && (min_gap < 0
                    || their_gap < 0
                    || min_gap.max(their_gap).unsigned_abs() <= limit(costs, allowance))
        };
        if now.wrapping_sub(start) >= budget.max_tsc_ticks || decided() {
            break;
        }
        spin_loop();
    }
    now.wrapping_sub(start)
}

/// Whether the TSCs of all CPUs are in step, as far as the OS knows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum SyncStatus {
    /// One CPU: trivially in step.
    SingleCpu,
    /// Warp tests on every pair bound the TSCs' offsets within their
    /// limits ([`WarpReport::status`]).
    Synchronized,
    /// A warp test saw a backward step: never auto-select the TSC.
    Unsynchronized {
        /// The largest backward step, in ticks.
        worst_backward_ticks: u64,
    },
    /// Several CPUs and no decisive warp test (print the
    /// [`WarpReport`]s for the reason).
    #[default]
    Unknown,
}

impl SyncStatus {
    /// Folds the reports of all pairs: any warp → unsynchronised (by the
    /// largest backward step); else every pair in step → synchronised;
    /// else (an inconclusive pair, or no report) unknown.
    /// Interrupt-safe: yes.
    pub fn from_reports(reports: &[WarpReport]) -> SyncStatus {
        let mut worst = 0u64;
        let mut all_in_step = !reports.is_empty();
        for r in reports {
            match r.status() {
                SyncStatus::Unsynchronized {
                    worst_backward_ticks,
                } => worst = worst.max(worst_backward_ticks),
                SyncStatus::Synchronized => {}
                _ => all_in_step = false,
            }
        }
        if worst > 0 {
            SyncStatus::Unsynchronized {
                worst_backward_ticks: worst,
            }
        } else if all_in_step {
            SyncStatus::Synchronized
        } else {
            SyncStatus::Unknown
        }
    }

    /// Single CPU or verified synchronised.
    /// Interrupt-safe: yes.
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
