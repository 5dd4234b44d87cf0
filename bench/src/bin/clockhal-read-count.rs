//! `clockhal-read-count`: instructions per read of every clockhal row,
//! counted by valgrind's callgrind (see `clockhal_bench::count`), and the
//! check against `bench/instruction-budgets.json`.
//!
//! ```text
//! cargo run -p clockhal-bench --release --bin clockhal-read-count                      # print the counts
//! cargo run -p clockhal-bench --release --bin clockhal-read-count -- --check           # fail if over budget
//! cargo run -p clockhal-bench --release --bin clockhal-read-count -- --update-budgets  # record today's counts
//! ```
//!
//! `--reads N` sets the calls per row (default 20000); `--budgets PATH`
//! another budgets file. Exit status: 0 when every budgeted row is within
//! budget or skipped with a printed reason (also when valgrind cannot run
//! here: `SKIP ...`), 1 when a row is over budget, missing, or counting
//! failed, 2 on bad arguments.

use clockhal_bench::budget;
use clockhal_bench::count::{self, CountError};
use clockhal_bench::host;
use clockhal_bench::rows;
use clockhal_linux::live_pvclock;
use clockhal_x86::Native;
use std::path::PathBuf;
use std::process::{exit, Command};
use std::time::Instant;

#[derive(PartialEq)]
enum Action {
    Print,
    Check,
    Update,
}

fn main() {
    // Under valgrind, started by `count::count` below: count and exit.
    count::inner_if_requested();
    count::trace_if_requested();
    let started = Instant::now();
    let mut action = Action::Print;
    let mut reads = count::DEFAULT_READS;
    let mut budgets = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("instruction-budgets.json");
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next().unwrap_or_else(|| {
                eprintln!("{flag} needs a value");
                exit(2)
            })
        };
        match flag.as_str() {
            "--check" => action = Action::Check,
            "--update-budgets" => action = Action::Update,
            "--reads" => {
                reads = value().parse().unwrap_or_else(|e| {
                    eprintln!("--reads: {e}");
                    exit(2)
                })
            }
            "--budgets" => budgets = PathBuf::from(value()),
            _ => {
                eprintln!(
                    "usage: clockhal-read-count [--check | --update-budgets] [--reads N] [--budgets PATH]"
                );
                exit(2);
            }
        }
    }
    if cfg!(debug_assertions) {
        eprintln!("warning: debug build; budgets are for --release");
    }

    let hw = Native::hosted();
    let live = live_pvclock();
    let (tsc_hz, rate_source) = host::tsc_rate(&hw, live.as_ref().map_err(|e| e.to_string()));
    println!("TSC rate: {tsc_hz} Hz, {rate_source}");
    let exe = std::env::current_exe().unwrap_or_else(|e| {
        eprintln!("no path to this program: {e}");
        exit(1)
    });
    let counts = match count::count(&exe, tsc_hz, reads, &count::default_workdir()) {
        Ok(c) => c,
        Err(e @ CountError::Skip(_)) => {
            // Never a silent pass: the step prints why it did not check.
            println!("{e}");
            if action == Action::Update {
                exit(1);
            }
            exit(0);
        }
        Err(e) => {
            eprintln!("{e}");
            exit(1);
        }
    };
    print!("{}", counts.table());
    for s in &counts.skipped {
        println!("SKIP row {s}");
    }

    match action {
        Action::Print => {}
        Action::Update => {
            let about = format!(
                "{}; {}; {}",
                host::cpu_model(),
                command_line("rustc", "--version"),
                counts.valgrind
            );
            let text = budget::render(rows::BUDGETED, &counts, &about).unwrap_or_else(|e| {
                eprintln!("{e}");
                exit(1)
            });
            if let Err(e) = std::fs::write(&budgets, text) {
                eprintln!("cannot write {}: {e}", budgets.display());
                exit(1);
            }
            println!("wrote {}", budgets.display());
        }
        Action::Check => {
            let text = std::fs::read_to_string(&budgets).unwrap_or_else(|e| {
                eprintln!("cannot read {}: {e}", budgets.display());
                exit(1)
            });
            let list = budget::parse(&text).unwrap_or_else(|e| {
                eprintln!("{}: {e}", budgets.display());
                exit(1)
            });
            let checked = budget::check(&list.rows, &counts);
            for c in &checked {
                println!("{c}");
            }
            let failed = checked.iter().filter(|c| c.fails()).count();
            if failed > 0 {
                println!(
                    "budgets recorded on: {}\nthis run: {}; {}; {}\n(a deliberate change or a new compiler: record new budgets with --update-budgets and commit them with the reason)",
                    list.recorded_on,
                    host::cpu_model(),
                    command_line("rustc", "--version"),
                    counts.valgrind
                );
            }
            println!(
                "instruction budgets ({}): {} rows, {failed} failed, {:.1} s",
                budgets.display(),
                checked.len(),
                started.elapsed().as_secs_f64()
            );
            if failed > 0 {
                exit(1);
            }
        }
    }
}

/// The first line of `program arg`'s output, or `"<program> unknown"`.
fn command_line(program: &str, arg: &str) -> String {
    Command::new(program)
        .arg(arg)
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_string)
        })
        .unwrap_or_else(|| format!("{program} unknown"))
}
