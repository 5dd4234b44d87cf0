//! clockhal in Linux user space (hosted mode): probe the clocks, print the
//! candidates with their verdicts, then time something with the selected
//! one. The same `Clock` API a kernel gets from `clockhal::probe`.
//!
//! Run: `cargo run --release -p clockhal-example-hosted`

use clockhal::hosted;
use clockhal::{Policy, WatchdogEvent};
use std::hint::black_box;

fn main() {
    // Calibrates the TSC against CLOCK_MONOTONIC_RAW (at most 50 ms), checks
    // both candidates and selects one.
    let probed = hosted::probe(&Policy::new());
    println!("choice: {}", probed.report());
    println!();
    print!("{}", probed.report().table());
    println!();

    let clock = match probed.into_clock() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    if let Some(f) = clock.frequency() {
        println!("using {} at {f}", clock.source_name());
    }

    // Time some work.
    let t0 = clock.now();
    let mut x = 1u64;
    for i in 0..10_000_000u64 {
        x = black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i));
    }
    println!("10M multiply-adds took {}", clock.elapsed(t0));

    // What one reading costs (a rough figure; see the benches for medians).
    const N: u64 = 1_000_000;
    let t0 = clock.now();
    for _ in 0..N {
        black_box(clock.now());
    }
    println!(
        "Clock::now() ~{} ns per call",
        clock.elapsed(t0).as_nanos() / N
    );

    // A kernel calls this from a periodic timer; here twice, 150 ms apart.
    let first = clock.watchdog_tick();
    std::thread::sleep(std::time::Duration::from_millis(150));
    match clock.watchdog_tick() {
        WatchdogEvent::Judged {
            source,
            reference,
            verdict,
            ..
        } => {
            println!("watchdog: {source} vs {reference}: {verdict:?} (first tick: {first:?})")
        }
        other => println!("watchdog: {other:?}"),
    }
}
