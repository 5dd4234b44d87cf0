//! The SMP warp test with two host threads on a two-CPU simulated machine.

use clockhal_core::ClockSource;
use clockhal_sim::{SimConfig, SimMachine};
use clockhal_tsc::{
    warp_participant, SyncStatus, Tsc, TscOptions, WarpBudget, WarpReport, WarpShared,
};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

fn two_cpus(offset1: i64) -> SimMachine {
    SimConfig::cpu(2_000_000_000)
        .with_invariant_tsc(true)
        .with_tsc_leaf(3, 250, 24_000_000)
        .with_cpus(2, &[0, offset1])
        .build()
}

/// One pair at a time: the CPUs take turns, so each turn needs both
/// threads running, and two pairs competing for the host's cores would
/// mostly wait for each other.
static ONE_PAIR_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs CPU 0 on this thread with `budgets[0]` and CPU 1 on another with
/// `budgets[1]`, after `on_cpu1` ran there.
fn run_pair_with(
    m: &SimMachine,
    shared: &WarpShared,
    budgets: [&WarpBudget; 2],
    on_cpu1: impl FnOnce() + Send,
) -> [WarpReport; 2] {
    let _one = ONE_PAIR_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    std::thread::scope(|s| {
        let other = s.spawn(move || {
            on_cpu1();
            m.set_cpu(1);
            warp_participant(m, shared, 1, budgets[1])
        });
        m.set_cpu(0);
        let mine = warp_participant(m, shared, 0, budgets[0]);
        [mine, other.join().unwrap()]
    })
}

fn run_pair(m: &SimMachine, budget: &WarpBudget) -> [WarpReport; 2] {
    run_pair_with(m, &WarpShared::new(), [budget; 2], || {})
}

#[test]
fn detects_an_offset_in_either_direction() {
    // 100,000 ticks (50 µs): a sim read costs 10 ns, but a turn wait also
    // reads the clock now and then, so when the host deschedules a thread
    // the gap between two reads can grow to microseconds.
    for offset in [-100_000i64, 100_000] {
        let m = two_cpus(offset);
        let r = run_pair(&m, &WarpBudget::DEFAULT);
        assert_eq!(r[0], r[1], "both sides report the pair's result");
        let r = r[0];
        assert!(r.completed && r.is_conclusive(), "{r:?}");
        assert!(r.handoffs >= WarpBudget::DEFAULT.min_handoffs, "{r:?}");
        // A backward step of the offset minus the ticks that pass between
        // the two reads.
        assert!(
            r.worst_backward_ticks > 90_000 && r.worst_backward_ticks <= 100_000,
            "{r:?}"
        );
        assert!(r.to_string().starts_with("warp: "), "{r}");
        let sync = SyncStatus::from_reports(&[r]);
        assert_eq!(
            sync,
            SyncStatus::Unsynchronized {
                worst_backward_ticks: r.worst_backward_ticks
            }
        );
        // The TSC is then never auto-selected, but stays readable.
        let tsc = Tsc::probe(
            &m,
            &TscOptions {
                sync,
                ..TscOptions::new()
            },
        )
        .unwrap();
        assert!(!tsc.quality().auto_selectable());
        assert!(tsc.read() > 0);
    }
}

#[test]
fn passes_without_offset() {
    let m = two_cpus(0);
    let [r, _] = run_pair(&m, &WarpBudget::DEFAULT);
    assert_eq!(r.worst_backward_ticks, 0, "{r:?}");
    assert!(r.completed);
    assert_eq!(r.required_handoffs, WarpBudget::DEFAULT.min_handoffs);
    assert!(r.handoffs >= r.required_handoffs, "{r:?}");
    // The CPUs take turns: every read but the first follows the other
    // CPU's (unless a turn wait ran out: a host thread stalled for ~1 s),
    // and the run stops after the 2,000 turns per CPU of the budget.
    assert!(r.handoffs * 10 >= r.iterations * 9, "{r:?}");
    assert_eq!(r.iterations, 4_000, "{r:?}");
    assert!(r.to_string().starts_with("in step: "), "{r}");
    let sync = SyncStatus::from_reports(&[r]);
    assert_eq!(sync, SyncStatus::Synchronized);
    let tsc = Tsc::probe(
        &m,
        &TscOptions {
            sync,
            ..TscOptions::new()
        },
    )
    .unwrap();
    assert_eq!(tsc.quality().get(), 390);
}

#[test]
fn a_missing_partner_is_bounded_and_inconclusive() {
    let m = two_cpus(0);
    let shared = WarpShared::new();
    let budget = WarpBudget {
        max_wait_spins: 10_000,
        ..WarpBudget::DEFAULT
    };
    let r = warp_participant(&m, &shared, 0, &budget);
    assert!(!r.completed);
    assert_eq!((r.iterations, r.handoffs), (0, 0));
    assert!(!r.is_conclusive());
    assert!(r.to_string().starts_with("inconclusive: "), "{r}");
    assert_eq!(SyncStatus::from_reports(&[r]), SyncStatus::Unknown);
}

#[test]
fn a_missing_partner_is_also_bounded_by_time() {
    // No spin bound to speak of: the TSC bound (2^16 ticks, 33 µs at
    // 2 GHz) ends the wait for the partner.
    let m = two_cpus(0);
    let shared = WarpShared::new();
    let budget = WarpBudget {
        max_wait_spins: u64::MAX,
        max_tsc_ticks: 1 << 16,
        ..WarpBudget::DEFAULT
    };
    let t0 = m.tsc_of(0);
    let r = warp_participant(&m, &shared, 0, &budget);
    let waited = m.tsc_of(0) - t0;
    assert!(!r.completed);
    assert!((1 << 16..2 << 16).contains(&waited), "{waited}");
    assert_eq!(SyncStatus::from_reports(&[r]), SyncStatus::Unknown);
}

#[test]
fn a_partner_that_leaves_early_ends_the_run_inconclusive() {
    // CPU 1 stops after 5 turns: CPU 0 must not wait for it (nor go on
    // alone), and 10 turns are too few handoffs to conclude anything.
    let m = two_cpus(0);
    let shared = WarpShared::new();
    let budget = WarpBudget::DEFAULT;
    let short = WarpBudget {
        max_iterations: 5,
        ..budget
    };
    let [r, _] = run_pair_with(&m, &shared, [&budget, &short], || {});
    assert!(r.completed, "{r:?}");
    assert!(r.iterations <= 12 && r.handoffs < 12, "{r:?}");
    assert_eq!(r.worst_backward_ticks, 0);
    assert!(!r.is_conclusive());
    assert!(
        r.to_string()
            .starts_with("inconclusive: too few cross-CPU comparisons"),
        "{r}"
    );
    assert_eq!(SyncStatus::from_reports(&[r]), SyncStatus::Unknown);
}

#[test]
fn a_partner_descheduled_every_turn_is_inconclusive_within_the_time_bound() {
    // Like two vCPUs sharing one busy host core (seen under QEMU: ~30
    // handoffs per run): whenever CPU 1 reads the TSC after CPU 0 did,
    // 4 ms have passed. The run ends at its time bound (2^28 ticks, 134 ms
    // at 2 GHz) with a few dozen handoffs: too few.
    thread_local!(static PARTNER: Cell<bool> = const { Cell::new(false) });
    let cpu0_reads = Arc::new(AtomicU64::new(0));
    let seen = Arc::new(AtomicU64::new(0));
    let m = two_cpus(0);
    let (reads, last_seen) = (cpu0_reads.clone(), seen.clone());
    m.set_rdtsc_hook(move |m| {
        if !PARTNER.with(Cell::get) {
            reads.fetch_add(1, Ordering::SeqCst);
        } else if last_seen.swap(reads.load(Ordering::SeqCst), Ordering::SeqCst)
            != reads.load(Ordering::SeqCst)
        {
            m.advance(4_000_000);
        }
    });
    let shared = WarpShared::new();
    let budget = WarpBudget::DEFAULT;
    let t0 = m.now_ns();
    let [r, _] = run_pair_with(&m, &shared, [&budget; 2], || PARTNER.with(|p| p.set(true)));
    m.clear_rdtsc_hook();
    let took_ms = (m.now_ns() - t0) / 1_000_000;
    assert!(r.completed, "{r:?}");
    assert!(
        r.handoffs >= 10 && r.handoffs < budget.min_handoffs,
        "{r:?}"
    );
    assert_eq!(SyncStatus::from_reports(&[r]), SyncStatus::Unknown);
    // The time bound plus the last turns and the end rendezvous.
    assert!((134..200).contains(&took_ms), "{took_ms} ms, {r:?}");
}

#[test]
fn iteration_bound_holds() {
    let m = two_cpus(0);
    let budget = WarpBudget {
        min_iterations: 10,
        min_handoffs: u64::MAX, // never satisfied: the hard bound ends it
        max_iterations: 500,
        ..WarpBudget::DEFAULT
    };
    let [r, _] = run_pair(&m, &budget);
    assert_eq!(r.iterations, 1_000);
    // Every read but the first followed the other CPU's...
    assert_eq!(r.handoffs, 999, "{r:?}");
    // ...but the (impossible) requirement makes the run inconclusive.
    assert_eq!(SyncStatus::from_reports(&[r]), SyncStatus::Unknown);
}

#[test]
fn folding_reports() {
    let ok = WarpReport {
        worst_backward_ticks: 0,
        iterations: 400,
        handoffs: 200,
        required_handoffs: 200,
        completed: true,
    };
    let bad = WarpReport {
        worst_backward_ticks: 7,
        ..ok
    };
    let idle = WarpReport { handoffs: 0, ..ok };
    let short = WarpReport {
        handoffs: 199,
        ..ok
    };
    let nothing_required = WarpReport {
        handoffs: 0,
        required_handoffs: 0,
        ..ok
    };
    let incomplete = WarpReport {
        completed: false,
        ..ok
    };
    assert_eq!(
        SyncStatus::from_reports(&[ok, ok]),
        SyncStatus::Synchronized
    );
    assert_eq!(
        SyncStatus::from_reports(&[ok, bad]),
        SyncStatus::Unsynchronized {
            worst_backward_ticks: 7
        }
    );
    // A backward step is proof even in a short or incomplete run.
    let bad_short = WarpReport {
        handoffs: 1,
        completed: false,
        ..bad
    };
    assert!(bad_short.is_conclusive());
    assert_eq!(
        SyncStatus::from_reports(&[bad_short]),
        SyncStatus::Unsynchronized {
            worst_backward_ticks: 7
        }
    );
    for r in [idle, short, nothing_required, incomplete] {
        assert!(!r.is_conclusive(), "{r:?}");
        assert!(r.to_string().starts_with("inconclusive: "), "{r}");
        assert_eq!(SyncStatus::from_reports(&[ok, r]), SyncStatus::Unknown);
    }
    assert_eq!(
        short.to_string(),
        "inconclusive: too few cross-CPU comparisons \
         (199 of 200 handoffs required, 400 iterations, completed=true)"
    );
    assert_eq!(SyncStatus::from_reports(&[]), SyncStatus::Unknown);
    // The placeholder for a CPU that could not run the test.
    assert_eq!(
        SyncStatus::from_reports(&[ok, WarpReport::default()]),
        SyncStatus::Unknown
    );
}

#[test]
fn shared_state_can_be_reused() {
    let m = two_cpus(-100_000);
    let shared = WarpShared::new();
    let budget = WarpBudget {
        min_iterations: 300,
        ..WarpBudget::DEFAULT
    };
    for _ in 0..2 {
        shared.reset();
        let [r, _] = run_pair_with(&m, &shared, [&budget; 2], || {});
        assert!(r.worst_backward_ticks > 90_000, "{r:?}");
        assert_eq!(r.iterations, 600, "{r:?}");
    }
}
