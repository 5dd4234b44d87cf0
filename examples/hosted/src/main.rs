//! clockhal in Linux user space (hosted mode): probe the clocks, print the
//! candidates with their verdicts, then time something with the selected
//! one. The same `Clock` API a kernel gets from `clockhal::probe`, with
//! the adapters: the global clock, fugit types, an embedded-hal delay.
//!
//! Run: `cargo run --release -p clockhal-example-hosted`

use clockhal::{global, hosted, FugitDuration};
use clockhal::{Policy, WatchdogEvent};
use embedded_hal::delay::DelayNs;
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
    // The clock for the rest of the program, also as the global clock
    // (what a logger without a handle reads).
    let clock = Box::leak(Box::new(clock));
    global::install(clock).expect("first install");
    if let Some(f) = clock.frequency() {
        println!("using {} at {f}", clock.source_name());
    }

    // Time some work (in fugit's types, as embedded code would).
    let t0 = clock.now_fugit();
    let mut x = 1u64;
    for i in 0..10_000_000u64 {
        x = black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i));
    }
    let took: FugitDuration = clock.now_fugit() - t0;
    println!("10M multiply-adds took {} us", took.as_micros());

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

    // A kernel calls this from a periodic timer; here twice, 150 ms apart
    // (an embedded-hal delay spinning on the clock).
    let first = clock.watchdog_tick();
    clock.delay().delay_ms(150);
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
    let t = global::now().expect("installed");
    println!("[{t}] done (the global clock's reading)");
}
