//! `cargo run -p clockhal-bench --release`: what one clock read costs.
//!
//! Prints a table and writes `read-cost.json` under `$CARGO_TARGET_DIR/bench/`
//! (default `target/bench/`; `--out PATH` overrides). `--samples N` and
//! `--batch N` set the sample count (default 31) and calls per sample
//! (default 20000). See `bench/README.md`.

use clockhal_bench::host::{self, pin_to_cpu};
use clockhal_bench::measure::{self, Row};
use clockhal_bench::report;
use clockhal_linux::live_pvclock;
use clockhal_x86::Native;
use std::path::PathBuf;
use std::time::Duration;

mod rows;

/// Command-line settings.
struct Args {
    samples: usize,
    batch: u64,
    out: PathBuf,
}

fn parse_args() -> Result<Args, String> {
    let default_out = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join("target")
        })
        .join("bench")
        .join("read-cost.json");
    let mut a = Args {
        samples: 31,
        batch: 20_000,
        out: default_out,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--samples" => a.samples = value()?.parse().map_err(|e| format!("--samples: {e}"))?,
            "--batch" => a.batch = value()?.parse().map_err(|e| format!("--batch: {e}"))?,
            "--out" => a.out = PathBuf::from(value()?),
            "-h" | "--help" => {
                return Err("usage: clockhal-bench [--samples N] [--batch N] [--out PATH]".into());
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if a.samples == 0 || a.batch == 0 {
        return Err("--samples and --batch must be positive".into());
    }
    Ok(a)
}

fn main() {
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

    // The real TSC rate: from the live pvclock page where there is one
    // (exact, what KVM itself uses), else calibrated against
    // CLOCK_MONOTONIC_RAW.
    let live = live_pvclock();
    let (tsc_hz, rate_source) = match &live {
        Ok(l) => {
            let (n, d) = l.params().tsc_hz_ratio();
            (
                (n / d) as u64,
                format!("live pvclock page ({})", l.mapping()),
            )
        }
        Err(e) => {
            let hz = host::tsc_hz_vs_raw(&hw, Duration::from_millis(200));
            (
                hz.round() as u64,
                format!("calibrated against CLOCK_MONOTONIC_RAW (no live page: {e})"),
            )
        }
    };
    println!("TSC rate: {tsc_hz} Hz, {rate_source}");
    println!(
        "{} samples x {} calls per row, interleaved; ns per call from CLOCK_MONOTONIC_RAW; {} CPUs, main thread {}pinned to CPU 0",
        args.samples,
        args.batch,
        cpus,
        if pinned { "" } else { "NOT " }
    );

    let built = rows::build(hw, tsc_hz, live.ok(), cpus);
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
    let lines = report::lines(&names, &stats, baseline);
    print!("{}", report::table(&lines));

    let meta = [
        ("tsc_hz", tsc_hz.to_string()),
        ("tsc_rate_source", rate_source),
        ("samples", args.samples.to_string()),
        ("batch", args.batch.to_string()),
        ("timer", "CLOCK_MONOTONIC_RAW around each batch".to_string()),
        ("cpu", cpu_model()),
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
}

/// `model name` from /proc/cpuinfo.
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_default()
}
