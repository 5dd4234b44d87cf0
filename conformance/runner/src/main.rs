//! # clockhal-matrix
//!
//! Builds the conformance kernel (`conformance/kernels/pvh`) and boots it under
//! every QEMU configuration of [`configs::CONFIGS`], two at a time, each
//! under `timeout`. Parses the kernel's result lines
//! ([`clockhal_conformance::line`]), compares them with the expectation
//! table ([`expectations::EXPECTATIONS`]), writes
//! `target/conformance/results.json`, the console logs and each boot's CPUID
//! dump (`target/conformance/cpuid/<config>.txt`), prints a table,
//! and exits non-zero on any unexpected result.
//!
//! ```text
//! cargo run -p clockhal-matrix --release -- [--kernel PATH] [--only NAME[,NAME..]]
//!     [--timeout SECS] [--jobs N] [--verbose] [--no-peer] [--no-foreign]
//! ```
//!
//! Then it boots the Linux peer in each configuration, one at a time
//! ([`linux_peer`]), and compares Linux's pick with clockhal's.
//! [`foreign`] adds the rows of kernels clockhal did not write (Hermit,
//! bootloader_api and bootloader 0.9 kernels) and compares each with the PVH kernel on the
//! same machine.

mod configs;
mod expectations;
mod foreign;
mod linux_peer;
mod outcome;
mod pause;
mod qemu;
mod report;
mod timers;

use configs::{Accel, QemuConfig, CONFIGS};
use outcome::Outcome;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

const USAGE: &str = "\
usage: clockhal-matrix [--kernel PATH] [--only NAME[,NAME..]] [--timeout SECS] [--jobs N] [--verbose] [--no-peer] [--no-foreign]
  --kernel PATH   boot this ELF instead of building conformance/kernels/pvh
  --only NAMES    run only these configurations (comma-separated, repeatable)
  --timeout SECS  per-QEMU timeout (default 90)
  --jobs N        configurations run in parallel (default 2)
  --verbose       print each configuration's clock table
  --no-peer       do not boot the Linux peer (its documented rules stand in)
  --no-foreign    leave out the Hermit, bootloader_api and bootloader 0.9 rows (and their extra peers)
configurations: ";

struct Args {
    kernel: Option<PathBuf>,
    only: Vec<String>,
    timeout: u64,
    jobs: usize,
    verbose: bool,
    no_peer: bool,
    no_foreign: bool,
}

fn usage() -> String {
    let names: Vec<_> = CONFIGS
        .iter()
        .map(|c| c.name)
        .chain(foreign::names())
        .collect();
    format!("{USAGE}{}", names.join(", "))
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        kernel: None,
        only: Vec::new(),
        timeout: 90,
        jobs: 2,
        verbose: false,
        no_peer: false,
        no_foreign: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |what: &str| it.next().ok_or_else(|| format!("{arg} needs {what}"));
        match arg.as_str() {
            "--kernel" => a.kernel = Some(PathBuf::from(value("a path")?)),
            "--only" => a
                .only
                .extend(value("a name")?.split(',').map(str::to_string)),
            "--timeout" => {
                a.timeout = value("seconds")?
                    .parse()
                    .map_err(|e| format!("--timeout: {e}"))?
            }
            "--jobs" => {
                a.jobs = value("a count")?
                    .parse()
                    .map_err(|e| format!("--jobs: {e}"))?
            }
            "--verbose" | "-v" => a.verbose = true,
            "--no-peer" => a.no_peer = true,
            "--no-foreign" => a.no_foreign = true,
            "--help" | "-h" => return Err(usage()),
            _ => return Err(format!("unknown argument {arg:?}\n{}", usage())),
        }
    }
    for n in &a.only {
        if !CONFIGS.iter().any(|c| c.name == n) && !foreign::is_known(n) {
            return Err(format!("unknown configuration {n:?}\n{}", usage()));
        }
    }
    Ok(a)
}

fn workspace_root() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    dir.canonicalize().unwrap_or(dir)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let root = workspace_root();
    let out_dir = root.join("target/conformance");
    let log_dir = out_dir.join("logs");
    if let Err(e) = std::fs::create_dir_all(&log_dir) {
        eprintln!("cannot create {}: {e}", log_dir.display());
        return ExitCode::from(2);
    }

    let kernel = match &args.kernel {
        Some(k) => k.clone(),
        None => {
            eprintln!("building conformance/kernels/pvh ...");
            match qemu::build_kernel(&root.join("conformance/kernels/pvh")) {
                Ok(k) => k,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::from(2);
                }
            }
        }
    };
    eprintln!("kernel: {}", kernel.display());

    let wanted = |name: &str| args.only.is_empty() || args.only.iter().any(|n| n == name);
    let foreign_rows: Vec<&foreign::ForeignConfig> = foreign::CONFIGS
        .iter()
        .filter(|c| !args.no_foreign && wanted(c.name))
        .collect();
    let peers: Vec<&str> = foreign::peers_of(&foreign_rows).collect();
    let selected: Vec<&QemuConfig> = CONFIGS
        .iter()
        .filter(|c| wanted(c.name) || peers.contains(&c.name))
        .chain(
            foreign::PEER_CONFIGS
                .iter()
                .filter(|c| (!args.no_foreign && wanted(c.name)) || peers.contains(&c.name)),
        )
        .collect();
    let kvm = qemu::kvm_usable();
    let mut outcomes = run_all(&selected, &kernel, &kvm, &args, &log_dir);
    let peer = linux_peer::Peer::prepare(&root, !args.no_peer);
    for o in &mut outcomes {
        if let Some(c) = selected.iter().find(|c| c.name == o.name) {
            peer.attach(o, c, &kvm, args.timeout, &log_dir);
        }
    }
    outcomes.extend(foreign::run(
        &root,
        &foreign_rows,
        &kvm,
        args.timeout,
        &log_dir,
        |rows, run| parallel(rows, args.jobs, &|c| run(c)),
    ));
    let comparison = foreign::compare_with_peers(&mut outcomes);

    let mut json = report::json(&outcomes);
    json["foreign_peers"] = comparison.clone();
    let path = out_dir.join("results.json");
    match serde_json::to_string_pretty(&json) {
        Ok(text) => {
            if let Err(e) = std::fs::write(&path, text + "\n") {
                eprintln!("cannot write {}: {e}", path.display());
                return ExitCode::from(2);
            }
        }
        Err(e) => {
            eprintln!("cannot serialise results: {e}");
            return ExitCode::from(2);
        }
    }
    if args.verbose {
        for o in outcomes.iter().filter(|o| o.ran) {
            print!("{}", report::details(o));
        }
    }
    print!("{}", linux_peer::table(&outcomes));
    print!("{}", report::table(&outcomes));
    if !foreign_rows.is_empty() {
        print!("{}", foreign::peer_table(&comparison));
    }
    println!("results: {}", path.display());
    if outcomes.iter().all(|o| o.unexpected.is_empty()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Runs the configurations `jobs` at a time; KVM ones are skipped with the
/// reason when /dev/kvm is not usable.
fn run_all(
    configs: &[&QemuConfig],
    kernel: &Path,
    kvm: &Result<(), String>,
    args: &Args,
    log_dir: &Path,
) -> Vec<Outcome> {
    let cpuid_dir = log_dir.with_file_name("cpuid");
    parallel(
        configs,
        args.jobs,
        &|c: &&QemuConfig| match (c.accel, kvm) {
            (Accel::Kvm, Err(why)) => Outcome::skipped(c.name, c.accel, why.clone()),
            _ => qemu::run(
                c,
                kernel,
                args.timeout,
                &log_dir.join(format!("{}.log", c.name)),
                &cpuid_dir.join(format!("{}.txt", c.name)),
            ),
        },
    )
}

/// Runs `run` over `items`, `jobs` at a time, printing one progress line
/// each; results in the order of `items`.
fn parallel<T: Sync>(
    items: &[T],
    jobs: usize,
    run: &(dyn Fn(&T) -> Outcome + Sync),
) -> Vec<Outcome> {
    let results: Mutex<Vec<Option<Outcome>>> = Mutex::new(vec![None; items.len()]);
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..jobs.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(item) = items.get(i) else { break };
                let o = run(item);
                eprintln!(
                    "{:<15} {} ({:.1}s)",
                    o.name,
                    if !o.ran {
                        "skipped"
                    } else if o.unexpected.is_empty() {
                        "ok"
                    } else {
                        "FAIL"
                    },
                    o.seconds
                );
                results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(o);
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .flatten()
        .collect()
}
