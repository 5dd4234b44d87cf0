//! Instructions per read, counted by valgrind: a count does not depend on
//! the machine's load, so a budget on it is a regression check that does
//! not flake on a shared machine.
//!
//! **Why callgrind.** It counts every guest instruction (`Ir`) and, with
//! `--cache-sim=yes --branch-sim=yes`, every data read (`Dr`), data write
//! (`Dw`) and conditional branch (`Bc`), and it can attribute them to one
//! function: `--toggle-collect` counts only inside the measured function,
//! `--dump-before`/`--dump-after` write one profile per call. So one
//! valgrind run counts every row, and the rows' setup (the probes) is never
//! counted. Cachegrind (3.19) cannot restrict counting to a function;
//! lackey only gives whole-program totals, ~10x slower.
//!
//! **How.** The counting program (`clockhal-read-count`, or `clockhal-bench`
//! itself) is re-run under callgrind with [`INNER_FLAG`]: it builds the
//! countable rows ([`rows::Mode::Count`]) and runs each row's batch of
//! `reads` calls once in [`measured_reads`], after an uncounted warm-up. A
//! row's count per read is its profile minus the profile of the
//! [`rows::LOOP`] row (the same batch loop around a constant), divided by
//! `reads`. The rows are the library's code, so every binary counts the same
//! machine code.
//!
//! valgrind executes `rdtsc`, `rdtscp` and `cpuid` (its CPUID is its own
//! synthetic CPU: `Native`'s choice of TSC ordering, and the TSC's invariant
//! bit, can differ from the real CPU's; the rows force their source and the
//! ordered-rdtsc row shows which instruction was used). It does not support
//! what rustix's vDSO lookup does, so rows through `CLOCK_MONOTONIC` are not
//! counted (each says why).

use crate::measure::Row;
use crate::rows::{self, Inputs, Mode};
use clockhal_x86::Native;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// First argument that makes a counting program run the rows for valgrind.
pub const INNER_FLAG: &str = "--count-inner";

/// Default calls per row.
pub const DEFAULT_READS: u64 = 20_000;

/// Uncounted calls per row before the counted batch: caches, the clock's
/// first slow path (filling the per-CPU map), lazy initialisation.
const WARM_UP: u64 = 1_000;

/// The callgrind events of one profile, by name.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Events {
    /// Instructions executed.
    pub ir: f64,
    /// Data reads (loads; a read-modify-write counts once here and once in `dw`).
    pub dr: f64,
    /// Data writes (stores).
    pub dw: f64,
    /// Conditional branches executed.
    pub bc: f64,
    /// Indirect branches executed (calls through pointers, returns are not).
    pub bi: f64,
}

impl Events {
    fn minus(self, o: Events) -> Events {
        Events {
            ir: self.ir - o.ir,
            dr: self.dr - o.dr,
            dw: self.dw - o.dw,
            bc: self.bc - o.bc,
            bi: self.bi - o.bi,
        }
    }

    fn per(self, n: u64) -> Events {
        let n = n as f64;
        Events {
            ir: self.ir / n,
            dr: self.dr / n,
            dw: self.dw / n,
            bc: self.bc / n,
            bi: self.bi / n,
        }
    }
}

/// One row's counts per read (loop overhead subtracted).
#[derive(Clone, Debug, PartialEq)]
pub struct Count {
    /// The row's name.
    pub name: String,
    /// Events per read.
    pub per_read: Events,
}

/// The result of one counting run.
#[derive(Clone, Debug, PartialEq)]
pub struct Counts {
    /// Counted rows, in run order (without the loop row).
    pub rows: Vec<Count>,
    /// The loop overhead per call that was subtracted.
    pub loop_overhead: Events,
    /// Calls per row.
    pub reads: u64,
    /// `valgrind --version`.
    pub valgrind: String,
    /// The TSC as valgrind's CPUID presents it ([`cpu_note`]).
    pub cpu: String,
    /// `"<name>: <reason>"` of rows that could not be built under valgrind.
    pub skipped: Vec<String>,
    /// `(name, why)` of rows that are never counted.
    pub uncounted: Vec<(String, String)>,
}

impl Counts {
    /// The counts of row `name`.
    pub fn get(&self, name: &str) -> Option<&Count> {
        self.rows.iter().find(|c| c.name == name)
    }

    /// Why row `name` has no count, if it was skipped or is never counted.
    pub fn why_not(&self, name: &str) -> Option<String> {
        self.uncounted
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, why)| why.clone())
            .or_else(|| {
                self.skipped
                    .iter()
                    .find_map(|s| s.strip_prefix(name)?.strip_prefix(": "))
                    .map(|why| format!("not built under valgrind: {why}"))
            })
    }

    /// A fixed-width table of the counts per read.
    pub fn table(&self) -> String {
        let w = self
            .rows
            .iter()
            .map(|c| c.name.chars().count())
            .max()
            .unwrap_or(4);
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<w$}  {:>7}  {:>6}  {:>6}  {:>8}",
            "instructions per read", "instr", "loads", "stores", "branches"
        );
        for c in &self.rows {
            let e = c.per_read;
            let _ = writeln!(
                out,
                "{:<w$}  {:>7.2}  {:>6.2}  {:>6.2}  {:>8.2}",
                c.name, e.ir, e.dr, e.dw, e.bc
            );
        }
        let l = self.loop_overhead;
        let _ = writeln!(
            out,
            "({} calls per row; loop overhead subtracted: {:.2} instr, {:.2} loads, {:.2} stores, {:.2} branches per call; {}; {})",
            self.reads, l.ir, l.dr, l.dw, l.bc, self.valgrind, self.cpu
        );
        out
    }
}

/// Why there are no counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CountError {
    /// valgrind cannot run on this machine: the reason (a SKIP, not a pass).
    Skip(String),
    /// valgrind ran, but the counting failed: a defect.
    Failed(String),
}

impl std::fmt::Display for CountError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CountError::Skip(why) => write!(f, "SKIP instruction counts: {why}"),
            CountError::Failed(why) => write!(f, "instruction counting failed: {why}"),
        }
    }
}

/// Runs `n` calls of `row`: the only function callgrind counts in (by its
/// name, so never inlined).
#[inline(never)]
pub fn measured_reads(row: &mut Row, n: u64) {
    row.run(std::hint::black_box(n));
}

/// One call of `row`, for a debugger to single-step (`bench/trace-read.py`):
/// the batch loop once around the row's inlined read.
#[inline(never)]
pub fn traced_call(row: &mut Row) {
    row.run(std::hint::black_box(1));
}

/// First argument that makes a counting program call each row once in
/// [`traced_call`] (every row, as timed), for `bench/trace-read.py`.
pub const TRACE_FLAG: &str = "--trace-calls";

/// The callgrind name pattern of [`measured_reads`].
const MEASURED: &str = "*count::measured_reads";

/// If the program was started with [`INNER_FLAG`] (by [`count`], under
/// valgrind), runs the rows and exits; otherwise returns.
pub fn inner_if_requested() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) != Some(INNER_FLAG) {
        return;
    }
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    let (Some(tsc_hz), Some(reads)) = (value("--tsc-hz"), value("--reads")) else {
        eprintln!("{INNER_FLAG} needs --tsc-hz N --reads N");
        std::process::exit(2);
    };
    inner(tsc_hz, reads);
    std::process::exit(0);
}

/// If the program was started with [`TRACE_FLAG`], builds every row as
/// for timing, warms each up, calls each once in [`traced_call`] (naming it
/// on stdout first) and exits; otherwise returns.
pub fn trace_if_requested() {
    if std::env::args().nth(1).as_deref() != Some(TRACE_FLAG) {
        return;
    }
    let hw = Native::hosted();
    let live = clockhal_linux::live_pvclock();
    let (tsc_hz, _) = crate::host::tsc_rate(&hw, live.as_ref().map_err(|e| e.to_string()));
    let input = Inputs {
        hw,
        tsc_hz,
        live: live.ok(),
        cpus: 1,
    };
    let built = rows::build(input, Mode::Timing);
    let mut out = std::io::stdout().lock();
    for mut row in built.rows {
        row.run(WARM_UP);
        let _ = writeln!(out, "TRACE\t{}", row.name());
        let _ = out.flush();
        traced_call(&mut row);
    }
    std::process::exit(0);
}

/// The counted run: every countable row, one batch each in
/// [`measured_reads`]; stdout names the rows in order.
fn inner(tsc_hz: u64, reads: u64) {
    let input = Inputs {
        hw: Native::hosted(),
        tsc_hz,
        live: None,
        cpus: 1,
    };
    let built = rows::build(input, Mode::Count);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "CPU\t{}", cpu_note(&Native::hosted()));
    for s in &built.skipped {
        let _ = writeln!(out, "SKIP\t{s}");
    }
    for (name, why) in &built.uncounted {
        let _ = writeln!(out, "UNCOUNTED\t{name}\t{why}");
    }
    for mut row in built.rows {
        row.run(WARM_UP);
        let _ = writeln!(out, "ROW\t{}", row.name());
        let _ = out.flush();
        measured_reads(&mut row, reads);
    }
}

/// What the CPU (valgrind's synthetic one, when counting) says about the
/// TSC: which instruction the ordered read uses, whether it is invariant.
pub fn cpu_note(hw: &Native) -> String {
    let ordered = if clockhal_x86::cpuid::has_rdtscp(hw) {
        "rdtscp"
    } else if clockhal_x86::cpuid::vendor(hw) == clockhal_x86::cpuid::Vendor::Amd {
        "mfence; rdtsc"
    } else {
        "lfence; rdtsc"
    };
    format!(
        "ordered TSC read: {ordered}; invariant TSC: {}",
        clockhal_x86::cpuid::invariant_tsc(hw)
    )
}

/// `valgrind --version`, or why valgrind cannot run here.
fn valgrind_version() -> Result<String, CountError> {
    let v = Command::new("valgrind")
        .arg("--version")
        .output()
        .map_err(|e| {
            CountError::Skip(format!(
                "valgrind not found ({e}); install the valgrind package"
            ))
        })?;
    if !v.status.success() {
        return Err(CountError::Skip(format!(
            "`valgrind --version` failed: {}",
            String::from_utf8_lossy(&v.stderr).trim()
        )));
    }
    // A tool that cannot start (no ptrace-like support, seccomp, an
    // unsupported kernel) fails on the smallest program too.
    let t = Command::new("valgrind")
        .args(["-q", "--tool=none", "/bin/true"])
        .output()
        .map_err(|e| CountError::Skip(format!("valgrind cannot start: {e}")))?;
    if !t.status.success() {
        return Err(CountError::Skip(format!(
            "valgrind cannot run /bin/true here: {}",
            String::from_utf8_lossy(&t.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&v.stdout).trim().to_string())
}

/// Counts the rows of `exe` (a program that calls [`inner_if_requested`]
/// first) under callgrind, with `reads` calls per row. valgrind's files go
/// to a directory of this process under `workdir`, removed after a
/// successful count (kept for a look when counting failed).
pub fn count(exe: &Path, tsc_hz: u64, reads: u64, workdir: &Path) -> Result<Counts, CountError> {
    let valgrind = valgrind_version()?;
    let failed = |what: String| CountError::Failed(what);
    // One directory per counting process: concurrent runs (a test-all step
    // next to a bench run, parallel tests) must not mix their profiles.
    let workdir = &workdir.join(std::process::id().to_string());
    if workdir.exists() {
        std::fs::remove_dir_all(workdir)
            .map_err(|e| failed(format!("cannot empty {}: {e}", workdir.display())))?;
    }
    std::fs::create_dir_all(workdir)
        .map_err(|e| failed(format!("cannot create {}: {e}", workdir.display())))?;
    let log = workdir.join("valgrind.log");
    let run = Command::new("valgrind")
        .arg("-q")
        .arg("--tool=callgrind")
        .arg("--cache-sim=yes")
        .arg("--branch-sim=yes")
        .arg("--collect-atstart=no")
        .arg(format!("--toggle-collect={MEASURED}"))
        .arg(format!("--dump-before={MEASURED}"))
        .arg(format!("--dump-after={MEASURED}"))
        .arg(format!(
            "--callgrind-out-file={}",
            workdir.join("callgrind.out").display()
        ))
        .arg(format!("--log-file={}", log.display()))
        .arg(exe)
        .args([INNER_FLAG, "--tsc-hz", &tsc_hz.to_string()])
        .args(["--reads", &reads.to_string()])
        .output()
        .map_err(|e| failed(format!("cannot run valgrind: {e}")))?;
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    if !run.status.success() {
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        return Err(failed(format!(
            "{} under callgrind exited with {}:\n{}{}{log}",
            exe.display(),
            run.status,
            stdout,
            String::from_utf8_lossy(&run.stderr)
        )));
    }
    let mut profiles = Vec::new();
    let dir = std::fs::read_dir(workdir)
        .map_err(|e| failed(format!("cannot list {}: {e}", workdir.display())))?;
    for entry in dir.flatten() {
        let path = entry.path();
        let is_profile = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("callgrind.out"));
        if is_profile {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| failed(format!("cannot read {}: {e}", path.display())))?;
            profiles.push(
                parse_profile(&text).map_err(|e| failed(format!("{}: {e}", path.display())))?,
            );
        }
    }
    let counts = assemble(&stdout, profiles, reads)
        .map_err(|e| failed(format!("{e}\n(valgrind's files: {})", workdir.display())))?;
    let _ = std::fs::remove_dir_all(workdir);
    Ok(Counts { valgrind, ..counts })
}

/// One callgrind dump: its part number, whether `--dump-after` wrote it,
/// and its totals.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    /// The dump's sequence number.
    pub part: u64,
    /// Written on leaving the measured function.
    pub after_call: bool,
    /// The dump's totals.
    pub totals: Events,
}

/// Parses the header lines of one callgrind output file.
pub fn parse_profile(text: &str) -> Result<Profile, String> {
    let mut part = None;
    let mut after_call = false;
    let mut events: Vec<&str> = Vec::new();
    let mut totals: Option<Vec<f64>> = None;
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("part: ") {
            part = v.trim().parse().ok();
        } else if let Some(v) = line.strip_prefix("desc: Trigger: ") {
            after_call = v.starts_with("--dump-after");
        } else if let Some(v) = line.strip_prefix("events: ") {
            events = v.split_whitespace().collect();
        } else if let Some(v) = line
            .strip_prefix("totals: ")
            .or_else(|| line.strip_prefix("summary: "))
        {
            let parsed: Result<Vec<f64>, _> = v.split_whitespace().map(str::parse).collect();
            totals = Some(parsed.map_err(|e| format!("bad totals line {line:?}: {e}"))?);
        }
    }
    let part = part.ok_or("no part: line")?;
    let totals = totals.ok_or("no totals: line")?;
    // Trailing zero events may be left out.
    let event = |name: &str| {
        events
            .iter()
            .position(|e| *e == name)
            .map(|i| totals.get(i).copied().unwrap_or(0.0))
    };
    Ok(Profile {
        part,
        after_call,
        totals: Events {
            ir: event("Ir").ok_or("no Ir event")?,
            dr: event("Dr").unwrap_or(f64::NAN),
            dw: event("Dw").unwrap_or(f64::NAN),
            bc: event("Bc").unwrap_or(f64::NAN),
            bi: event("Bi").unwrap_or(f64::NAN),
        },
    })
}

/// Pairs the rows the counted program printed with the profiles of its
/// calls of [`measured_reads`] (in call order) and subtracts the loop row.
pub fn assemble(stdout: &str, mut profiles: Vec<Profile>, reads: u64) -> Result<Counts, String> {
    let mut names = Vec::new();
    let mut skipped = Vec::new();
    let mut uncounted = Vec::new();
    let mut cpu = String::new();
    for line in stdout.lines() {
        let mut f = line.splitn(3, '\t');
        match (f.next(), f.next(), f.next()) {
            (Some("ROW"), Some(name), None) => names.push(name.to_string()),
            (Some("CPU"), Some(note), None) => cpu = note.to_string(),
            (Some("SKIP"), Some(what), None) => skipped.push(what.to_string()),
            (Some("UNCOUNTED"), Some(name), Some(why)) => {
                uncounted.push((name.to_string(), why.to_string()))
            }
            _ => {}
        }
    }
    profiles.sort_by_key(|p| p.part);
    let calls: Vec<Events> = profiles
        .iter()
        .filter(|p| p.after_call)
        .map(|p| p.totals)
        .collect();
    if calls.len() != names.len() {
        return Err(format!(
            "{} rows ran but callgrind wrote {} profiles of measured calls:\n{stdout}",
            names.len(),
            calls.len()
        ));
    }
    let at = names
        .iter()
        .position(|n| n == rows::LOOP)
        .ok_or("the loop-overhead row did not run")?;
    let loop_total = calls[at];
    if loop_total.ir < reads as f64 {
        return Err(format!(
            "the loop row executed {} instructions for {reads} calls: not counted",
            loop_total.ir
        ));
    }
    let rows = names
        .iter()
        .zip(&calls)
        .filter(|(n, _)| *n != rows::LOOP)
        .map(|(n, e)| Count {
            name: n.clone(),
            per_read: e.minus(loop_total).per(reads),
        })
        .collect();
    Ok(Counts {
        rows,
        loop_overhead: loop_total.per(reads),
        reads,
        valgrind: String::new(),
        cpu,
        skipped,
        uncounted,
    })
}

/// Where counting runs keep valgrind's files: `target/bench/callgrind/<pid>`
/// (under `$CARGO_TARGET_DIR` when set).
pub fn default_workdir() -> PathBuf {
    crate::report::target_dir().join("bench").join("callgrind")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dump(part: u64, trigger: &str, totals: &str) -> String {
        format!(
            "version: 1\ncreator: callgrind-3.19.0\npid: 1\ncmd: x\npart: {part}\n\ndesc: I1 cache: \ndesc: Timerange: Basic block 0 - 1\ndesc: Trigger: {trigger}\n\npositions: line\nevents: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw Bc Bcm Bi Bim\nsummary: {totals}\n\n\ntotals: {totals}\n"
        )
    }

    #[test]
    fn profiles_parse_with_truncated_totals() {
        let p = parse_profile(&dump(
            4,
            "--dump-after=clockhal_bench::count::measured_reads",
            "8007 1 2001 0 0 0 0 0 0 2001 8",
        ))
        .unwrap();
        assert_eq!(p.part, 4);
        assert!(p.after_call);
        assert_eq!(
            p.totals,
            Events {
                ir: 8007.0,
                dr: 1.0,
                dw: 2001.0,
                bc: 2001.0,
                bi: 0.0
            }
        );
        let before = parse_profile(&dump(3, "--dump-before=x", "0")).unwrap();
        assert!(!before.after_call);
        assert_eq!(before.totals.ir, 0.0);
        assert!(parse_profile("part: 1\n").is_err());
    }

    #[test]
    fn rows_pair_with_their_calls_and_lose_the_loop_overhead() {
        let stdout = format!(
            "CPU\tordered TSC read: rdtscp\nSKIP\tx: no RDTSCP\nUNCOUNTED\ty\tnot clockhal\nROW\t{}\nROW\ta\nROW\tb\n",
            rows::LOOP
        );
        let profiles = vec![
            // Out of order on purpose: the part number decides.
            parse_profile(&dump(6, "--dump-after=m", "5000 0 1000 0 0 0 0 0 0 1000")).unwrap(),
            parse_profile(&dump(1, "--dump-before=m", "0")).unwrap(),
            parse_profile(&dump(2, "--dump-after=m", "4000 0 1000 0 0 0 0 0 0 1000")).unwrap(),
            parse_profile(&dump(3, "--dump-before=m", "0")).unwrap(),
            parse_profile(&dump(
                4,
                "--dump-after=m",
                "14000 2000 1000 0 0 0 0 0 0 3000",
            ))
            .unwrap(),
            parse_profile(&dump(7, "Program termination", "0")).unwrap(),
        ];
        let c = assemble(&stdout, profiles, 1000).unwrap();
        assert_eq!(c.loop_overhead.ir, 4.0);
        assert_eq!(c.cpu, "ordered TSC read: rdtscp");
        assert_eq!(c.rows.len(), 2);
        assert_eq!(c.get("a").unwrap().per_read.ir, 10.0);
        assert_eq!(c.get("a").unwrap().per_read.dr, 2.0);
        assert_eq!(c.get("a").unwrap().per_read.bc, 2.0);
        assert_eq!(c.get("b").unwrap().per_read.ir, 1.0);
        assert_eq!(
            c.why_not("x").unwrap(),
            "not built under valgrind: no RDTSCP"
        );
        assert_eq!(c.why_not("y").unwrap(), "not clockhal");
        assert!(c.why_not("a").is_none());
    }

    #[test]
    fn a_missing_profile_is_an_error_not_a_shifted_table() {
        let stdout = format!("ROW\t{}\nROW\ta\n", rows::LOOP);
        let profiles = vec![parse_profile(&dump(2, "--dump-after=m", "4000 0 1000")).unwrap()];
        assert!(assemble(&stdout, profiles, 1000).is_err());
    }
}
