//! `cargo run -p clockhal-bench --release`: what one clock read costs, in
//! time and in instructions.
//!
//! Prints a table and writes `read-cost.json` under `$CARGO_TARGET_DIR/bench/`
//! (default `target/bench/`; `--out PATH` overrides). `--samples N` and
//! `--batch N` set the sample count (default 31) and calls per sample
//! (default 20000); `--reads N` the calls per row under valgrind (default
//! 20000), `--no-count` leaves the instruction counts out; `--markdown`
//! also prints the table as Markdown. See `bench/README.md`.

use clockhal_bench::count::{self, CountError};
use clockhal_bench::host::{self, pin_to_cpu};
use clockhal_bench::measure::{self, Row};
use clockhal_bench::report;
use clockhal_bench::rows::{self, Inputs, Mode};
use clockhal_linux::live_pvclock;
use clockhal_x86::Native;
use std::path::PathBuf;

/// Command-line settings.
struct Args {
    samples: usize,
    batch: u64,
    reads: u64,
    count: bool,
    markdown: bool,
    out: PathBuf,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        samples: 31,
        batch: 20_000,
        reads: count::DEFAULT_READS,
        count: true,
        markdown: false,
        out: report::target_dir().join("bench").join("read-cost.json"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--samples" => a.samples = value()?.parse().map_err(|e| format!("--samples: {e}"))?,
            "--batch" => a.batch = value()?.parse().map_err(|e| format!("--batch: {e}"))?,
            "--reads" => a.reads = value()?.parse().map_err(|e| format!("--reads: {e}"))?,
            "--no-count" => a.count = false,
            "--markdown" => a.markdown = true,
            "--out" => a.out = PathBuf::from(value()?),
            "-h" | "--help" => {
                return Err("usage: clockhal-bench [--samples N] [--batch N] [--reads N] [--no-count] [--markdown] [--out PATH]".into());
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if a.samples == 0 || a.batch == 0 || a.reads == 0 {
        return Err("--samples, --batch and --reads must be positive".into());
    }
    Ok(a)
}

fn main() {
    // Under valgrind, started by `count::count` below: count and exit.
    count::inner_if_requested();
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    if cfg!(debug_assertions) {
        eprintln!("warning: debug build; run with --release for meaningful figures");
    }
    let cpus = host::cpu_count();
    let pinned = pin_to_cpu(0);
    let hw = Native::hosted();

    let live = live_pvclock();
    let (tsc_hz, rate_source) = host::tsc_rate(&hw, live.as_ref().map_err(|e| e.to_string()));
    println!("TSC rate: {tsc_hz} Hz, {rate_source}");
    println!("{}", count::cpu_note(&hw));
    println!(
        "{} samples x {} calls per row, interleaved; ns per call from CLOCK_MONOTONIC_RAW; {} CPUs, main thread {}pinned to CPU 0",
        args.samples,
        args.batch,
        cpus,
        if pinned { "" } else { "NOT " }
    );

    let input = Inputs {
        hw,
        tsc_hz,
        live: live.ok(),
        cpus,
    };
    let built = rows::build(input, Mode::Timing);
    for skip in &built.skipped {
        println!("SKIP row {skip}");
    }
    let mut rows: Vec<Row> = built.rows;
    let names: Vec<String> = rows.iter().map(|r| r.name().to_string()).collect();
    let baseline = names
        .iter()
        .position(|n| n == rows::ORDERED_RDTSC)
        .expect("the ordered rdtsc row is always built");
    let stats = measure::run(&mut rows, args.samples, args.batch);
    let mut lines = report::lines(&names, &stats, baseline);

    // Instructions per read: this program again, under callgrind.
    let counts = if args.count {
        std::env::current_exe()
            .map_err(|e| CountError::Failed(format!("no path to this program: {e}")))
            .and_then(|exe| count::count(&exe, tsc_hz, args.reads, &count::default_workdir()))
    } else {
        Err(CountError::Skip("--no-count".into()))
    };
    report::attach_counts(&mut lines, &counts);
    print!("{}", report::table(&lines));
    let count_note = match &counts {
        Ok(c) => {
            let l = c.loop_overhead;
            format!(
                "{}, callgrind, {} calls per row, loop overhead {:.2} instructions per call subtracted; under valgrind's CPUID: {}",
                c.valgrind, c.reads, l.ir, c.cpu
            )
        }
        Err(e) => e.to_string(),
    };
    println!("instructions: {count_note}");
    if args.markdown {
        print!("\n{}", report::markdown(&lines));
    }

    let meta = [
        ("tsc_hz", tsc_hz.to_string()),
        ("tsc_rate_source", rate_source),
        ("samples", args.samples.to_string()),
        ("batch", args.batch.to_string()),
        ("timer", "CLOCK_MONOTONIC_RAW around each batch".to_string()),
        ("instructions", count_note),
        ("cpu", host::cpu_model()),
        (
            "kernel",
            std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_string(),
        ),
        ("pinned", pinned.to_string()),
    ];
    let json = report::json(&lines, &meta);
    if let Some(dir) = args.out.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    match std::fs::write(&args.out, json) {
        Ok(()) => println!("wrote {}", args.out.display()),
        Err(e) => {
            eprintln!("cannot write {}: {e}", args.out.display());
            std::process::exit(1);
        }
    }
    if let Err(CountError::Failed(_)) = counts {
        std::process::exit(1);
    }
}
