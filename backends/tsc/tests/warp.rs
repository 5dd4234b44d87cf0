//! The SMP warp test with host threads as the CPUs of a simulated machine.
//!
//! The simulator's TSC follows simulated time, which only moves when
//! something reads a clock (10 ns per `rdtsc`) or a test advances it: a
//! hand-over between two threads takes a read or two of simulated time
//! however the host schedules them. [`Timed`] wraps the machine to give
//! reads a cost, or to make the two CPUs take turns on one "host core".

use clockhal_core::ClockSource;
use clockhal_sim::{SimConfig, SimMachine};
use clockhal_tsc::{
    warp_participant, SyncStatus, Tsc, TscOptions, WarpBudget, WarpReport, WarpShared,
};
use clockhal_x86::{CpuidResult, Hardware, MmioRegion, Msr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const HZ: u64 = 2_000_000_000;
/// Ticks per µs at [`HZ`].
const US: i64 = 2_000;

fn machine(offsets: &[i64]) -> SimMachine {
    SimConfig::cpu(HZ)
        .with_invariant_tsc(true)
        .with_tsc_leaf(3, 250, 24_000_000)
        .with_cpus(offsets.len(), offsets)
        .build()
}

/// The default budget's limit on this machine: reads of 10 ns (20 ticks).
const SIM_LIMIT: u64 = 2 * (20 + 20 + 2_048);

/// One pair at a time where a test measures how fast hand-overs are: two
/// pairs competing for the host's cores would make each other's threads
/// take turns.
static ONE_PAIR_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_pair() -> std::sync::MutexGuard<'static, ()> {
    ONE_PAIR_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs CPU 0 on this thread and CPU 1 on another, each through `hw`
/// with its budget; each thread calls `leave` with its CPU when done.
/// Returns both reports.
fn run_pair_on<H: Hardware + Sync>(
    m: &SimMachine,
    hw: &H,
    shared: &WarpShared,
    budgets: [&WarpBudget; 2],
    leave: &(dyn Fn(usize) + Sync),
) -> [WarpReport; 2] {
    let side = |cpu: usize| {
        m.set_cpu(cpu);
        let r = warp_participant(hw, shared, cpu, budgets[cpu]);
        leave(cpu);
        r
    };
    std::thread::scope(|s| {
        let other = s.spawn(|| side(1));
        let mine = side(0);
        [mine, other.join().unwrap()]
    })
}

/// Both CPUs with `budget` on the simulator, yielding before each read;
/// both reports must agree.
fn run_pair(m: &SimMachine, budget: &WarpBudget) -> WarpReport {
    let _one = one_pair();
    let [a, b] = run_pair_on(m, &yielding(m), &WarpShared::new(), [budget; 2], &|_| {});
    assert_eq!(a, b, "both sides report the pair's result");
    a
}

/// The machine with a host `yield` before every TSC read. The two threads
/// of a pair hand over only while both run: on a busy host that takes
/// them in turns (as it does vCPU threads) the yield lets a turn end
/// after each read, instead of after a host time slice; simulated time,
/// which the gaps measure, is not affected.
fn yielding(m: &SimMachine) -> Timed<'_> {
    Timed::new(m, |_, read| {
        std::thread::yield_now();
        read()
    })
}

/// What a report claims must be true of the TSC offsets `offsets` (by
/// CPU): the true difference lies in its range, a warp names the CPU that
/// is behind and by less than it is, a bound is above the difference.
fn assert_sound(r: &WarpReport, offsets: &[i64]) {
    let off = |i: usize| offsets[r.cpus[i]];
    let d = off(1) - off(0);
    let (lower, upper) = r.offset_range();
    assert!(lower.is_none_or(|l| d > l), "{d} vs {r}");
    assert!(upper.is_none_or(|u| d < u), "{d} vs {r}");
    if let Some((behind, ticks)) = r.warp() {
        let behind_by = off(1 - behind) - off(behind);
        assert!(behind_by > ticks as i64, "{behind_by} vs {r}");
    }
    if let Some(n) = r.offset_bound() {
        assert!(d.unsigned_abs() < n, "{d} vs {r}");
    }
    match r.status() {
        SyncStatus::Unsynchronized {
            worst_backward_ticks,
        } => assert_eq!(r.warp().map(|w| w.1), Some(worst_backward_ticks)),
        SyncStatus::Synchronized => {
            assert!(r.warp().is_none());
            assert!(r.offset_bound().is_some_and(|n| n <= r.limit_ticks()));
        }
        SyncStatus::Unknown => assert!(r.warp().is_none()),
        SyncStatus::SingleCpu => panic!("a pair is never single-CPU: {r}"),
    }
}

#[test]
fn synchronised_tscs_are_in_step_within_a_few_reads() {
    let m = machine(&[0, 0]);
    let r = run_pair(&m, &WarpBudget::DEFAULT);
    assert_sound(&r, &[0, 0]);
    assert!(r.completed, "{r}");
    assert_eq!(r.status(), SyncStatus::Synchronized, "{r}");
    // A hand-over takes one or two reads of 20 ticks (10 ns) here.
    let n = r.offset_bound().unwrap();
    assert!((20..=100).contains(&n), "{r}");
    // One read of 20 ticks, or two when the other CPU read in between.
    assert!(
        r.read_cost_ticks.iter().all(|c| (20..=40).contains(c)),
        "{r}"
    );
    assert!(
        (SIM_LIMIT..=SIM_LIMIT + 80).contains(&r.limit_ticks()),
        "{r}"
    );
    // Decided: it stops at the 1,000 hand-overs each way.
    assert!(
        r.hand_overs.iter().all(|h| (1_000..1_100).contains(h)),
        "{r}"
    );
    assert!(
        r.to_string().starts_with(&format!(
            "in step: the TSCs differ by at most {n} ticks (cpu "
        )),
        "{r}"
    );
    let tsc = Tsc::probe(
        &m,
        &TscOptions {
            sync: SyncStatus::from_reports(&[r]),
            ..TscOptions::new()
        },
    )
    .unwrap();
    assert_eq!(tsc.quality().get(), 390);
}

#[test]
fn offsets_of_a_microsecond_and_of_five_milliseconds_are_warps() {
    for offset in [US, -US, 5_000 * US, -5_000 * US] {
        let offsets = [0, offset];
        let m = machine(&offsets);
        let r = run_pair(&m, &WarpBudget::DEFAULT);
        assert_sound(&r, &offsets);
        // The CPU with the smaller offset is behind, by the offset less
        // the fastest hand-over (a read or two).
        let (behind, ticks) = r.warp().unwrap();
        assert_eq!(r.cpus[behind], if offset < 0 { 1 } else { 0 }, "{r}");
        let size = offset.unsigned_abs();
        assert!(ticks < size && ticks + 100 > size, "{r}");
        assert_eq!(
            r.status(),
            SyncStatus::Unsynchronized {
                worst_backward_ticks: ticks
            }
        );
        assert!(r.to_string().starts_with(&format!(
            "warp: cpu {}'s TSC is behind cpu {}'s by at least {ticks} ticks (",
            r.cpus[behind],
            r.cpus[1 - behind]
        )));
        // Stopped once decided.
        assert!(r.hand_overs.iter().all(|h| *h < 1_100), "{r}");
        let tsc = Tsc::probe(
            &m,
            &TscOptions {
                sync: SyncStatus::from_reports(&[r]),
                ..TscOptions::new()
            },
        )
        .unwrap();
        assert!(!tsc.quality().auto_selectable());
        assert!(tsc.read() > 0);
    }
}

#[test]
fn every_offset_is_bracketed_and_any_beyond_a_hand_over_is_a_warp() {
    // Offsets below a hand-over (20..60 ticks here: one to three reads)
    // cannot show as a warp — nor to any reader — but are still bounded;
    // beyond it they are warps.
    let budget = WarpBudget {
        min_hand_overs: 200,
        ..WarpBudget::DEFAULT
    };
    for offset in [0i64, 1, -1, 7, -7, 19, -19, 60, -60, 150, -150, 999, -4_000] {
        let offsets = [0, offset];
        let r = run_pair(&machine(&offsets), &budget);
        assert_sound(&r, &offsets);
        if offset.unsigned_abs() >= 150 {
            assert!(r.warp().is_some(), "{offset}: {r}");
        } else if offset.unsigned_abs() < 19 {
            assert_eq!(r.status(), SyncStatus::Synchronized, "{offset}: {r}");
        }
    }
}

#[test]
fn free_running_threads_never_see_a_warp_that_is_not_there() {
    // No yields: where the host runs both threads at once, readings cross
    // while both read as fast as they can, so a reading that overtook the
    // one it is compared with (a load after the read instead of before)
    // would show as a warp of synchronised TSCs.
    let m = machine(&[0, 0]);
    let budget = WarpBudget {
        max_reads: 200_000,
        ..WarpBudget::DEFAULT
    };
    let _one = one_pair();
    for _ in 0..5 {
        let [a, b] = run_pair_on(&m, &m, &WarpShared::new(), [&budget; 2], &|_| {});
        assert_eq!(a, b);
        assert_sound(&a, &[0, 0]);
        assert!(a.warp().is_none(), "{a}");
    }
}

#[test]
fn a_partner_that_never_arrives_is_unknown_within_the_time_bound() {
    // Time passes 100 µs per read: the default budget's 2^30 ticks
    // (537 ms here) are over after ~5,400 reads, one per 1,024 spins.
    let m = machine(&[0, 0]);
    let hw = Timed::new(&m, |m, read| {
        let t = read();
        m.advance(100_000);
        t
    });
    let t0 = m.tsc_of(0);
    let r = warp_participant(&hw, &WarpShared::new(), 0, &WarpBudget::DEFAULT);
    let waited = m.tsc_of(0) - t0;
    assert!(!r.completed, "{r}");
    assert_eq!(r.hand_overs, [0, 0]);
    assert_eq!(r.status(), SyncStatus::Unknown);
    assert_eq!(SyncStatus::from_reports(&[r]), SyncStatus::Unknown);
    assert!(
        r.to_string()
            .starts_with("inconclusive: the other CPU did not arrive in time (cpu 0 -> cpu ?: 0 hand-overs, fastest -;"),
        "{r}"
    );
    // The bound, plus the read cost's nine reads and the read that saw it
    // run out (200,000 ticks each).
    assert!(
        (1 << 30..(1 << 30) + 11 * 200_000).contains(&waited),
        "{waited}"
    );
}

#[test]
fn a_partner_that_never_arrives_is_also_bounded_by_spins() {
    // A TSC that does not advance cannot end the wait: the spins do.
    let m = machine(&[0, 0]);
    let frozen = Timed::new(&m, |m, _read| m.tsc_of(0));
    let budget = WarpBudget {
        max_wait_spins: 100_000,
        ..WarpBudget::DEFAULT
    };
    let r = warp_participant(&frozen, &WarpShared::new(), 0, &budget);
    assert!(!r.completed);
    assert_eq!(r.status(), SyncStatus::Unknown);
}

#[test]
fn a_late_partner_finds_the_run_over() {
    let m = machine(&[0, 0]);
    let shared = WarpShared::new();
    let budget = WarpBudget {
        max_tsc_ticks: 1 << 16,
        ..WarpBudget::DEFAULT
    };
    let early = warp_participant(&m, &shared, 0, &budget);
    assert!(!early.completed);
    let started = Instant::now();
    let late = m.on_cpu(1, || warp_participant(&m, &shared, 1, &WarpBudget::DEFAULT));
    // It stops at once and does not wait for the partner that left: far
    // less than its own bounds (2^30 ticks, 2^26 spins).
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(!late.completed);
    assert_eq!(late.cpus, [0, 1]);
    assert!(late.hand_overs[1] <= 1, "{late}");
    assert_eq!(late.status(), SyncStatus::Unknown, "{late}");
}

#[test]
fn a_partner_that_leaves_early_leaves_its_evidence() {
    let m = machine(&[0, 0]);
    let _one = one_pair();
    for reads in [0, 1, 5] {
        let short = WarpBudget {
            max_reads: reads,
            ..WarpBudget::DEFAULT
        };
        let budgets = [&WarpBudget::DEFAULT, &short];
        let started = Instant::now();
        let [r, _] = run_pair_on(&m, &yielding(&m), &WarpShared::new(), budgets, &|_| {});
        // CPU 0 does not go on alone (its bound is 2^30 ticks).
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(r.completed, "{r}");
        assert_sound(&r, &[0, 0]);
        let cpu1 = r.cpus.iter().position(|c| *c == 1).unwrap();
        assert_eq!(r.reads[cpu1], reads, "{r}");
        assert!(r.hand_overs[1 - cpu1] <= reads, "{r}");
        // A few hand-overs both ways still bound the offset (in step, or
        // — when a loaded host descheduled a reader mid-hand-over — a bound
        // too wide to decide: never a warp); none one way leaves it open.
        if r.hand_overs.iter().all(|h| *h > 0) {
            assert!(
                matches!(r.status(), SyncStatus::Synchronized | SyncStatus::Unknown),
                "{r}"
            );
            assert!(r.warp().is_none(), "{r}");
        } else {
            assert_eq!(r.status(), SyncStatus::Unknown, "{r}");
            assert!(r
                .to_string()
                .starts_with("inconclusive: no reading crossed from cpu "));
        }
    }
}

#[test]
fn cpus_taking_turns_on_one_host_core_are_unknown_within_the_time_bound() {
    // Each CPU runs 100 reads, then the other runs: a switch costs 20 µs.
    // Every hand-over then spans a switch (40,000 ticks), ten times the
    // limit: as seen under QEMU when the two vCPU threads share a host
    // core. The run goes to its time bound (2^24 ticks here) and says so.
    let m = machine(&[0, 0]);
    let core = OneHostCore::new(100, 20_000);
    let hw = Timed::new(&m, |m, read| core.read(m, read));
    let budget = WarpBudget {
        max_tsc_ticks: 1 << 24,
        ..WarpBudget::DEFAULT
    };
    let _one = one_pair();
    let t0 = m.now_ns();
    let leave = |cpu: usize| core.leave(cpu);
    let [r, other] = run_pair_on(&m, &hw, &WarpShared::new(), [&budget; 2], &leave);
    let took_ns = m.now_ns() - t0;
    assert_eq!(r, other);
    assert_sound(&r, &[0, 0]);
    assert!(r.completed, "{r}");
    assert_eq!(r.read_cost_ticks, [20, 20], "{r}");
    let n = r.offset_bound().unwrap();
    assert!((40_000..40_100).contains(&n), "{r}");
    assert_eq!(r.status(), SyncStatus::Unknown, "{r}");
    assert!(
        r.to_string().starts_with(&format!(
            "inconclusive: the TSCs differ by at most {n} ticks, above the limit"
        )),
        "{r}"
    );
    // One hand-over per switch each way, until the time bound.
    assert!(r.hand_overs.iter().all(|h| (100..500).contains(h)), "{r}");
    assert!(r.elapsed_ticks >= 1 << 24, "{r}");
    // The run plus the waits that end it: less than twice the bound
    // (2^24 ticks are 8.4 ms here).
    let bound_ns = (1 << 24) / 2;
    assert!(took_ns < 2 * bound_ns, "{took_ns} ns");
}

#[test]
fn slow_tsc_reads_widen_the_limit_and_still_decide() {
    // Every read takes 6 µs, the TSC sampled half-way (kvm_pvm traps each
    // rdtsc, ~16,000 ticks): a hand-over cannot be faster than ~one read,
    // and the limit grows with the measured read cost.
    for offset in [0, US, -US] {
        let offsets = [0, offset];
        let m = machine(&offsets);
        let hw = Timed::new(&m, |m, read| {
            std::thread::yield_now();
            m.advance(3_000);
            let t = read();
            m.advance(3_000);
            t
        });
        let _one = one_pair();
        let [r, _] = run_pair_on(
            &m,
            &hw,
            &WarpShared::new(),
            [&WarpBudget::DEFAULT; 2],
            &|_| {},
        );
        assert_sound(&r, &offsets);
        // One read, or one of each CPU's when they interleave.
        assert!(
            r.read_cost_ticks
                .iter()
                .all(|c| (12_020..=24_040).contains(c)),
            "{r}"
        );
        assert!(r.limit_ticks() > 50_000, "{r}");
        // 1 µs is below one hand-over: invisible here, to readers too.
        assert_eq!(r.status(), SyncStatus::Synchronized, "{r}");
        assert!(r.offset_bound().unwrap() >= 12_020 - 2_000, "{r}");
    }
}

#[test]
fn a_read_cost_beyond_the_cap_does_not_stretch_the_limit() {
    // Reads of 1 ms (a vCPU descheduled in every read): the cost counts
    // as 2^16 ticks at most, so the limit stays below a host time slice
    // and the millisecond hand-overs decide nothing.
    let m = machine(&[0, 0]);
    let hw = Timed::new(&m, |m, read| {
        let t = read();
        m.advance(1_000_000);
        t
    });
    let budget = WarpBudget {
        max_tsc_ticks: 1 << 30,
        ..WarpBudget::DEFAULT
    };
    let _one = one_pair();
    let [r, _] = run_pair_on(&m, &hw, &WarpShared::new(), [&budget; 2], &|_| {});
    assert_sound(&r, &[0, 0]);
    assert_eq!(r.limit_ticks(), 2 * ((1 << 16) * 2 + 2_048), "{r}");
    assert_eq!(r.status(), SyncStatus::Unknown, "{r}");
}

#[test]
fn verdicts_are_sound_under_oversubscription_and_random_stalls() {
    // Four pairs at once plus two busy threads on a small host, reads that
    // now and then stall the thread (host time) or jump the clock (a vCPU
    // descheduled, simulated time): whatever each pair decides must be
    // true, and every pair must return.
    let _one = one_pair(); // not alongside the other tests' pairs
    let busy = AtomicBool::new(true);
    let cases: [&[i64]; 4] = [&[0, 0], &[0, 30], &[0, -US], &[5_000 * US, 0]];
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                while busy.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            });
        }
        // The busy threads stop however this scope ends (a failed check
        // must not leave them spinning).
        let _stop = StopOnDrop(&busy);
        let pairs: Vec<_> = cases
            .iter()
            .enumerate()
            .map(|(i, offsets)| {
                s.spawn(move || {
                    let m = machine(offsets);
                    let seed = AtomicU64::new(0x9E37_79B9_7F4A_7C15 ^ i as u64);
                    let hw = Timed::new(&m, |m, read| {
                        let r = next(&seed);
                        match r % 64 {
                            0 => std::thread::sleep(Duration::from_micros(r >> 56)),
                            1 => m.advance((r >> 40) % 2_000_000),
                            _ => std::thread::yield_now(),
                        }
                        read()
                    });
                    let budget = WarpBudget {
                        min_hand_overs: 300,
                        max_tsc_ticks: 1 << 32,
                        ..WarpBudget::DEFAULT
                    };
                    let [a, b] = run_pair_on(&m, &hw, &WarpShared::new(), [&budget; 2], &|_| {});
                    assert_eq!(a, b);
                    assert_sound(&a, offsets);
                    (offsets, a)
                })
            })
            .collect();
        for p in pairs {
            let (offsets, r) = p.join().unwrap();
            assert!(r.completed, "{offsets:?}: {r}");
            // Decided, too: the clock jumps make some hand-overs slow,
            // not the fastest ones.
            match offsets[1] - offsets[0] {
                0 => assert_eq!(r.status(), SyncStatus::Synchronized, "{r}"),
                30 => assert!(r.is_conclusive(), "{r}"),
                _ => assert!(r.warp().is_some(), "{offsets:?}: {r}"),
            }
        }
    });
}

struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

#[test]
fn folding_reports() {
    let in_step = WarpReport {
        cpus: [0, 1],
        reads: [1_001, 1_001],
        hand_overs: [1_000, 1_000],
        min_gap_ticks: [300, 410],
        read_cost_ticks: [40, 60],
        transfer_allowance_ticks: 2_048,
        elapsed_ticks: 600_000,
        completed: true,
    };
    assert_eq!(in_step.limit_ticks(), 4_296);
    assert_eq!(in_step.offset_range(), (Some(-300), Some(410)));
    assert_eq!(in_step.offset_bound(), Some(410));
    assert_eq!(in_step.status(), SyncStatus::Synchronized);
    assert_eq!(
        in_step.to_string(),
        "in step: the TSCs differ by at most 410 ticks \
         (cpu 0 -> cpu 1: 1000 hand-overs, fastest 410 ticks; cpu 1 -> cpu 0: 1000 hand-overs, \
         fastest 300 ticks; limit 4296 ticks (reads 40+60, transfer 2048); 1001+1001 reads in \
         600000 ticks)"
    );
    // The second CPU read 7 ticks less than the first had before.
    let warp = WarpReport {
        min_gap_ticks: [2_000, -7],
        completed: false,
        ..in_step
    };
    assert_eq!(warp.warp(), Some((1, 7)));
    assert_eq!(warp.offset_bound(), None);
    assert!(warp.is_conclusive());
    assert!(warp
        .to_string()
        .starts_with("warp: cpu 1's TSC is behind cpu 0's by at least 7 ticks ("));
    assert!(warp.to_string().ends_with(", incomplete)"));
    let too_wide = WarpReport {
        min_gap_ticks: [40_000, 41_000],
        ..in_step
    };
    assert_eq!(too_wide.offset_bound(), Some(41_000));
    assert_eq!(too_wide.status(), SyncStatus::Unknown);
    let one_way = WarpReport {
        hand_overs: [0, 12],
        ..in_step
    };
    assert_eq!(one_way.offset_range(), (None, Some(410)));
    assert!(one_way
        .to_string()
        .starts_with("inconclusive: no reading crossed from cpu 1 to cpu 0 ("));
    assert_eq!(
        SyncStatus::from_reports(&[in_step, in_step]),
        SyncStatus::Synchronized
    );
    assert_eq!(
        SyncStatus::from_reports(&[in_step, warp, too_wide]),
        SyncStatus::Unsynchronized {
            worst_backward_ticks: 7
        }
    );
    for r in [too_wide, one_way, WarpReport::default()] {
        assert!(!r.is_conclusive(), "{r}");
        assert!(r.to_string().starts_with("inconclusive: "), "{r}");
        assert_eq!(SyncStatus::from_reports(&[in_step, r]), SyncStatus::Unknown);
    }
    assert!(WarpReport::default()
        .to_string()
        .starts_with("inconclusive: the other CPU did not arrive in time (cpu ? -> cpu ?:"));
    assert_eq!(SyncStatus::from_reports(&[]), SyncStatus::Unknown);
}

#[test]
fn any_report_folds_without_panicking() {
    let edges = [
        i64::MIN,
        i64::MIN + 1,
        -1,
        0,
        1,
        4_295,
        4_296,
        4_297,
        i64::MAX,
    ];
    let uedges = [0, 1, 1 << 16, (1 << 16) + 1, u64::MAX];
    let seed = AtomicU64::new(7);
    for i in 0..20_000u64 {
        let r = next(&seed);
        let pick = |k: u32| edges[(r >> k) as usize % edges.len()];
        let upick = |k: u32| uedges[(r >> k) as usize % uedges.len()];
        let report = WarpReport {
            cpus: [(r % 3) as usize, usize::MAX - (r >> 2) as usize % 2],
            reads: [upick(3), upick(6)],
            hand_overs: [upick(9) % 3, upick(12) % 3],
            min_gap_ticks: if i % 2 == 0 {
                [pick(15), pick(20)]
            } else {
                [next(&seed) as i64, next(&seed) as i64]
            },
            read_cost_ticks: [upick(25), upick(30)],
            transfer_allowance_ticks: upick(35),
            elapsed_ticks: upick(40),
            completed: r & (1 << 45) != 0,
        };
        let text = report.to_string();
        assert!(!text.is_empty());
        let status = report.status();
        match status {
            SyncStatus::Unsynchronized {
                worst_backward_ticks,
            } => assert!(
                worst_backward_ticks > 0 && report.warp().is_some(),
                "{report:?}"
            ),
            SyncStatus::Synchronized => {
                assert!(
                    report.offset_bound().unwrap() <= report.limit_ticks(),
                    "{report:?}"
                )
            }
            SyncStatus::Unknown => assert!(report.warp().is_none(), "{report:?}"),
            SyncStatus::SingleCpu => panic!("{report:?}"),
        }
        assert_eq!(SyncStatus::from_reports(&[report]), status);
        let _ = report.offset_range();
    }
}

#[test]
fn shared_state_can_be_reused() {
    let m = machine(&[0, -100_000]);
    let shared = WarpShared::new();
    let budget = WarpBudget {
        min_hand_overs: 300,
        ..WarpBudget::DEFAULT
    };
    let _one = one_pair();
    for _ in 0..2 {
        shared.reset();
        let [r, _] = run_pair_on(&m, &yielding(&m), &shared, [&budget; 2], &|_| {});
        assert!(r.completed, "{r}");
        assert!(r.warp().is_some_and(|w| w.1 > 99_900), "{r}");
        assert!(r.hand_overs.iter().all(|h| (300..400).contains(h)), "{r}");
    }
    // A third caller is no participant: it returns at once, empty.
    let third = m.on_cpu(1, || warp_participant(&m, &shared, 2, &budget));
    assert_eq!(third, WarpReport::default());
}

/// xorshift64*: a fixed pseudo-random stream.
fn next(seed: &AtomicU64) -> u64 {
    let mut x = seed.load(Ordering::Relaxed);
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    seed.store(x, Ordering::Relaxed);
    x.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

/// Two CPUs sharing one host core: the holder runs `slice` reads, then is
/// preempted (after its last read, which it has published) and the other
/// runs; each switch costs `switch_ns` of simulated time. A CPU whose
/// thread is done gives the core up for good.
struct OneHostCore {
    holder: AtomicUsize,
    left: AtomicU64,
    slice: u64,
    switch_ns: u64,
    done: [AtomicBool; 2],
}

impl OneHostCore {
    fn new(slice: u64, switch_ns: u64) -> OneHostCore {
        OneHostCore {
            holder: AtomicUsize::new(0),
            left: AtomicU64::new(slice),
            slice,
            switch_ns,
            done: [AtomicBool::new(false), AtomicBool::new(false)],
        }
    }

    fn read(&self, m: &SimMachine, read: &mut dyn FnMut() -> u64) -> u64 {
        let me = m.cpu_index();
        while self.holder.load(Ordering::SeqCst) != me {
            let other = self.holder.load(Ordering::SeqCst);
            if self.done[other].load(Ordering::SeqCst) {
                self.holder.store(me, Ordering::SeqCst);
                break;
            }
            std::thread::yield_now();
        }
        let t = read();
        if self.left.fetch_sub(1, Ordering::SeqCst) <= 1 {
            self.left.store(self.slice, Ordering::SeqCst);
            m.advance(self.switch_ns);
            self.holder.store(1 - me, Ordering::SeqCst);
        }
        t
    }

    /// `cpu`'s thread is done: the core is the other's from now on.
    fn leave(&self, cpu: usize) {
        self.done[cpu].store(true, Ordering::SeqCst);
    }
}

type ReadFn<'f> = dyn Fn(&SimMachine, &mut dyn FnMut() -> u64) -> u64 + Sync + 'f;

/// The simulated machine with every TSC read going through `read`, which
/// gets the machine and the real read (to call once, or not at all).
struct Timed<'a> {
    m: &'a SimMachine,
    read: Box<ReadFn<'a>>,
}

impl<'a> Timed<'a> {
    fn new(
        m: &'a SimMachine,
        read: impl Fn(&SimMachine, &mut dyn FnMut() -> u64) -> u64 + Sync + 'a,
    ) -> Timed<'a> {
        Timed {
            m,
            read: Box::new(read),
        }
    }
}

impl Hardware for Timed<'_> {
    fn rdtsc(&self) -> u64 {
        (self.read)(self.m, &mut || self.m.rdtsc())
    }
    fn rdtsc_ordered(&self) -> u64 {
        (self.read)(self.m, &mut || self.m.rdtsc_ordered())
    }
    fn rdtscp(&self) -> (u64, u32) {
        let mut aux = 0;
        let t = (self.read)(self.m, &mut || {
            let (t, a) = self.m.rdtscp();
            aux = a;
            t
        });
        (t, aux)
    }
    fn cpuid(&self, leaf: u32, subleaf: u32) -> CpuidResult {
        self.m.cpuid(leaf, subleaf)
    }
    fn rdmsr(&self, msr: Msr) -> u64 {
        self.m.rdmsr(msr)
    }
    /// Declared as the trait requires; nothing unsafe happens.
    unsafe fn wrmsr(&self, msr: Msr, value: u64) {
        unreachable!("the warp test writes no MSR ({msr:?} = {value:#x})")
    }
    fn inb(&self, port: u16) -> u8 {
        self.m.inb(port)
    }
    /// Declared as the trait requires; nothing unsafe happens.
    unsafe fn outb(&self, port: u16, value: u8) {
        unreachable!("the warp test writes no port ({port:#x} = {value:#x})")
    }
    fn inl(&self, port: u16) -> u32 {
        self.m.inl(port)
    }
    fn mmio_read32(&self, region: MmioRegion, offset: usize) -> u32 {
        self.m.mmio_read32(region, offset)
    }
    fn mmio_read64(&self, region: MmioRegion, offset: usize) -> u64 {
        self.m.mmio_read64(region, offset)
    }
    fn mmio_write32(&self, region: MmioRegion, offset: usize, value: u32) {
        self.m.mmio_write32(region, offset, value)
    }
    fn mmio_write64(&self, region: MmioRegion, offset: usize, value: u64) {
        self.m.mmio_write64(region, offset, value)
    }
    fn cpu_index(&self) -> usize {
        self.m.cpu_index()
    }
}
