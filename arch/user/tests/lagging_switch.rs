//! The case the writer's own floor exists for: the kernel switches to a
//! source that starts *behind* what user programs already read from the
//! page (a clock continues from its last returned instant, which readers of
//! the page have passed). A reader thread must never step back.
//!
//! Deterministic whatever the scheduling (the machine may be loaded): the
//! TSC is simulated and only advances when the reader reads it, and the
//! writer lets the reader take five readings of the old state before each
//! switch and five of the new one after it.

use clockhal_user::abi::{ClockPage, WindowLayout};
use clockhal_user::{tsc_map, ClockPageWriter, PageSource, Publication, TscRead, UserClock};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};

/// Ticks the simulated TSC advances per reader read.
const TICKS_PER_READ: u64 = 10;
/// 0.5 ns per tick.
const MUL: u64 = 1 << 63;

#[test]
fn a_switch_to_a_lagging_source_never_steps_back() {
    let page: &'static ClockPage = Box::leak(Box::new(ClockPage::new()));
    let writer = ClockPageWriter::new(
        page,
        WindowLayout::CLOCK_PAGE_ONLY,
        &[],
        None,
        TscRead::LfenceRdtsc,
    )
    .unwrap();
    let clock = UserClock::new(page, &[], None).unwrap();
    let tsc: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(1 << 40)));
    let reads: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
    let allowed: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
    let stop: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
    let mut state = PageSource::tsc_anchored(MUL, tsc.load(SeqCst), 1_000_000_000);
    writer
        .publish_with(
            &Publication {
                source: state,
                floor_ns: 0,
                boot_wall_ns: None,
            },
            || tsc.load(SeqCst),
        )
        .unwrap();

    let reader = std::thread::spawn(move || {
        let (mut backward, mut worst, mut prev) = (0u64, 0u64, 0u64);
        while !stop.load(SeqCst) {
            if reads.load(SeqCst) >= allowed.load(SeqCst) {
                std::thread::yield_now();
                continue;
            }
            let r = clock
                .read_with(|| tsc.fetch_add(TICKS_PER_READ, SeqCst) + TICKS_PER_READ)
                .expect("TSC state");
            if r.clock_ns < prev {
                backward += 1;
                worst = worst.max(prev - r.clock_ns);
            }
            prev = prev.max(r.clock_ns);
            reads.fetch_add(1, SeqCst);
        }
        (backward, worst)
    });
    // Lets the reader take `n` more readings and waits for them.
    let wait_reads = |n: u64| {
        let until = reads.load(SeqCst) + n;
        allowed.store(until, SeqCst);
        while reads.load(SeqCst) < until {
            std::thread::yield_now();
        }
    };

    for i in 0..2_000u64 {
        wait_reads(5);
        let PageSource::Tsc { mul, add, .. } = state else {
            unreachable!()
        };
        // The kernel's clock value now, and a new source 100..1100 ns
        // behind it (slightly faster or slower), with the kernel's floor
        // behind too: only the page's own floor can hold the readers.
        let current = tsc_map(tsc.load(SeqCst), mul, add);
        let behind = 100 + (i * 7_919) % 1_000;
        let rate = if i % 2 == 0 {
            MUL + (MUL >> 12)
        } else {
            MUL - (MUL >> 12)
        };
        state = PageSource::tsc_anchored(rate, tsc.load(SeqCst), current - behind);
        wait_reads(5); // the reader keeps reading the old state
        writer
            .publish_with(
                &Publication {
                    source: state,
                    floor_ns: current - behind,
                    boot_wall_ns: None,
                },
                || tsc.load(SeqCst),
            )
            .unwrap();
    }
    wait_reads(5);
    stop.store(true, SeqCst);
    let (backward, worst) = reader.join().unwrap();
    let n = reads.load(SeqCst);
    println!("{n} reads over 2000 lagging switches: {backward} backward (worst {worst} ns)");
    assert_eq!(n, 2_000 * 10 + 5, "{n}");
    assert_eq!(backward, 0, "worst {worst} ns");
}
