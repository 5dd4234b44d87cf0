//! The Linux peer: a stock Debian kernel booted in the same QEMU
//! configuration as clockhal's conformance kernel, one boot per
//! configuration. Its `/init` (`conformance/linux-peer/init.c`) reports the
//! clocksource Linux picks, the ones it offers and what a process pays to
//! read each ([`output`]). [`rule`] compares Linux's pick with clockhal's
//! using the configuration's row in
//! [`PEER_EXPECTATIONS`](crate::expectations::PEER_EXPECTATIONS); where the
//! peer cannot boot (KVM on kvm_pvm) the row's documented Linux rule stands
//! in, marked as a rule.

pub mod initramfs;
mod kernel;
pub mod output;
mod report;
pub mod rule;

pub use report::{summary_json, table};

use crate::configs::{Accel, QemuConfig, QEMU_EXIT_SUCCESS};
use crate::expectations::{self, PeerRow};
use crate::outcome::{Exit, Outcome};
use crate::qemu;
use output::Report;
use rule::{Clockhal, LinuxPick, Verdict};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// Serial console (the boot messages show where a failed boot stopped; init
/// then turns console messages off so that none splits its lines); a panic
/// reboots, which `-no-reboot` turns into an exit.
const APPEND: &str = "console=ttyS0 panic=-1";

/// What Linux logs when it finds no TSC rate (the PIT calibration failed and
/// there is no HPET or PM timer to calibrate against): on microvm it then
/// hangs with no clock at all.
const NO_TSC_RATE: &str = "Marking TSC unstable due to could not calculate TSC khz";

/// How Linux's read cost is measured (also in results.json).
pub const METHOD: &str = "clock_gettime(CLOCK_MONOTONIC) from a process (glibc, vDSO; the vDSO \
    makes the syscall for sources without a vDSO mode: hpet, acpi_pm), ns per call, best of 5 batches";

/// Longest a peer boot may take (a healthy one takes ~5 s under TCG).
const PEER_TIMEOUT_S: u64 = 20;

/// Boots per configuration at most. Under a busy TCG host Linux's TSC
/// calibration against the PIT fails now and then, and on microvm (no other
/// reference) the kernel then hangs (conformance/linux-peer/README.md). A
/// second boot is recorded in results.json and the table, never hidden.
const ATTEMPTS: usize = 2;

/// Why a stock kernel is not booted under this host's KVM.
const PVM: &str = "this host's /dev/kvm is kvm_pvm (no vmx/svm): a stock Debian kernel dies in \
    early boot with \"KVM internal error. Suberror: 1\" (emulation failure on lock cmpxchg16b) and \
    QEMU hangs (conformance/linux-peer/README.md); Linux's documented rule stands in";

/// Everything a peer boot needs, prepared once per matrix run.
pub enum Peer {
    /// Kernel and initramfs are ready.
    Ready {
        /// The kernel.
        kernel: kernel::Kernel,
        /// The initramfs holding init.
        initrd: PathBuf,
    },
    /// `--no-peer`: no peer boots; the rows' documented rules stand in.
    Disabled,
    /// Preparing failed: every peer that should boot fails with this.
    Broken(String),
}

/// How one configuration's peer boot went.
#[derive(Clone, Debug)]
pub enum PeerRun {
    /// Booted and reported completely.
    Measured(Report),
    /// Not booted, with why.
    Skipped(String),
    /// Should have reported but did not: why, and what it did report.
    Failed(String, Report),
    /// Linux found no clock and hung before init ran: a Linux outcome (its
    /// pick is `none`), with the console line that shows it.
    Hung(String),
}

/// The peer's side of one configuration, next to clockhal's.
#[derive(Clone, Debug)]
pub struct PeerOutcome {
    /// The boot.
    pub run: PeerRun,
    /// Boot wall time.
    pub seconds: f64,
    /// Console log path.
    pub log: Option<String>,
    /// Debian package of the kernel.
    pub kernel: Option<String>,
    /// The configuration's peer row.
    pub row: Option<&'static PeerRow>,
    /// What clockhal's pick was compared with: Linux clocksource, `measured`
    /// or `rule`.
    pub compared_with: Option<(String, &'static str)>,
    /// The rule's outcome.
    pub verdict: Verdict,
    /// Boots that failed before the one reported, with why.
    pub retried: Vec<String>,
}

impl Peer {
    /// Fetches the kernel (cached in `target/linux-peer`), builds init and
    /// packs the initramfs; `enabled == false` is `--no-peer`.
    pub fn prepare(root: &Path, enabled: bool) -> Peer {
        if !enabled {
            return Peer::Disabled;
        }
        let start = std::time::Instant::now();
        match prepare(root) {
            Ok((kernel, initrd)) => {
                eprintln!(
                    "linux peer: {} ({}), ready in {:.1}s",
                    kernel.package,
                    kernel.vmlinuz.display(),
                    start.elapsed().as_secs_f64()
                );
                Peer::Ready { kernel, initrd }
            }
            Err(e) => {
                eprintln!("linux peer: cannot prepare: {e}");
                Peer::Broken(e)
            }
        }
    }

    /// Boots the peer for `config` (or says why not), compares it with
    /// clockhal's outcome `o` and stores the result in `o.peer`; failures
    /// are added to `o.unexpected`.
    pub fn attach(
        &self,
        o: &mut Outcome,
        config: &QemuConfig,
        kvm: &Result<(), String>,
        timeout_s: u64,
        log_dir: &Path,
    ) {
        let log = log_dir.join(format!("{}.linux-peer.log", config.name));
        let mut retried = Vec::new();
        let (run, seconds) = self.boot_or_skip(config, kvm, timeout_s, &log, &mut retried);
        eprintln!(
            "{:<15} linux peer {} ({seconds:.1}s)",
            config.name,
            match &run {
                PeerRun::Measured(r) => r.chosen().unwrap_or("?").to_string(),
                PeerRun::Skipped(_) => "skipped".to_string(),
                PeerRun::Failed(why, _) => format!("FAILED: {why}"),
                PeerRun::Hung(why) => format!("none: {why}"),
            }
        );
        let ran = !matches!(run, PeerRun::Skipped(_));
        let peer = PeerOutcome {
            run,
            seconds,
            log: ran.then(|| log.display().to_string()),
            kernel: match (self, ran) {
                (Peer::Ready { kernel, .. }, true) => Some(kernel.package.clone()),
                _ => None,
            },
            row: expectations::peer_row(config.name),
            compared_with: None,
            verdict: Verdict::Holds,
            retried,
        };
        record(o, peer);
    }

    /// The peer run and its boot time; failed boots before the last are
    /// added to `retried`.
    fn boot_or_skip(
        &self,
        c: &QemuConfig,
        kvm: &Result<(), String>,
        timeout_s: u64,
        log: &Path,
        retried: &mut Vec<String>,
    ) -> (PeerRun, f64) {
        if let Peer::Disabled = self {
            return (PeerRun::Skipped("disabled by --no-peer".into()), 0.0);
        }
        if c.args.contains(&"-icount") {
            // The row is there for clockhal's user page under
            // instruction counting; Linux's documented rule stands in.
            return (
                PeerRun::Skipped("not booted in the -icount row (its rule stands in)".into()),
                0.0,
            );
        }
        if c.accel == Accel::Kvm {
            if let Err(why) = kvm {
                return (PeerRun::Skipped(why.clone()), 0.0);
            }
            if kvm_is_pvm() {
                return (PeerRun::Skipped(PVM.into()), 0.0);
            }
        }
        let (kernel, initrd) = match self {
            Peer::Ready { kernel, initrd } => (kernel, initrd),
            Peer::Broken(e) => {
                return (
                    PeerRun::Failed(format!("could not prepare: {e}"), Report::default()),
                    0.0,
                )
            }
            Peer::Disabled => unreachable!("handled above"),
        };
        let extra: [&OsStr; 4] = [
            OsStr::new("-initrd"),
            initrd.as_os_str(),
            OsStr::new("-append"),
            OsStr::new(APPEND),
        ];
        let timeout_s = timeout_s.min(PEER_TIMEOUT_S);
        let mut seconds = 0.0;
        for attempt in 1.. {
            let b = qemu::boot(c, &kernel.vmlinuz, &extra, timeout_s, log);
            seconds += b.seconds;
            let run = judge_boot(&b.exit, &b.text, timeout_s);
            match run {
                // A hang on "no clock" is Linux's deterministic answer on
                // that machine (it found no TSC rate): booting again only
                // costs another timeout.
                PeerRun::Failed(why, _) if attempt < ATTEMPTS => {
                    let kept = log.with_extension(format!("attempt{attempt}.log"));
                    let _ = std::fs::rename(log, &kept);
                    eprintln!(
                        "{:<15} linux peer boot {attempt} failed, booting again: {why}",
                        c.name
                    );
                    retried.push(format!("boot {attempt} ({}): {why}", kept.display()));
                }
                run => return (run, seconds),
            }
        }
        unreachable!("the last attempt returns")
    }
}

/// Judges `peer` (its `verdict` and `compared_with` are set here) against
/// clockhal's outcome `o` by its row, stores it in `o.peer` and adds what
/// fails to `o.unexpected`.
fn record(o: &mut Outcome, mut peer: PeerOutcome) {
    if let PeerRun::Failed(why, _) = &peer.run {
        o.unexpected
            .push(format!("linux peer did not report: {why}"));
    }
    let linux = match (&peer.run, peer.row) {
        (PeerRun::Measured(r), _) => r.chosen().map(LinuxPick::Measured),
        (PeerRun::Hung(_), _) => Some(LinuxPick::Measured("none")),
        (_, Some(row)) => Some(LinuxPick::Rule(row.linux_rule.pick)),
        (_, None) => None,
    };
    let clockhal = if o.ran {
        Clockhal::Selected(o.selected())
    } else {
        Clockhal::NotRun
    };
    peer.verdict = match (peer.row, linux) {
        (Some(row), Some(l)) => rule::judge(clockhal, l, row),
        (Some(_), None) => Verdict::NoComparison("the peer reported no pick".into()),
        (None, _) => Verdict::NoComparison(format!(
            "no row for {} in expectations::PEER_EXPECTATIONS",
            o.name
        )),
    };
    if let Some(u) = peer.verdict.unexpected() {
        o.unexpected.push(u);
    }
    peer.compared_with = linux.map(|l| (l.name().to_string(), l.basis()));
    o.peer = Some(peer);
}

fn prepare(root: &Path) -> Result<(kernel::Kernel, PathBuf), String> {
    let dir = root.join("target/linux-peer");
    let kernel = kernel::obtain(&dir.join("cache"))?;
    let init = dir.join("init");
    kernel::build_init(&root.join("conformance/linux-peer/init.c"), &init)?;
    let bytes = std::fs::read(&init).map_err(|e| format!("{}: {e}", init.display()))?;
    let initrd = dir.join("initramfs.cpio");
    std::fs::write(&initrd, initramfs::archive(&bytes)?)
        .map_err(|e| format!("{}: {e}", initrd.display()))?;
    Ok((kernel, initrd))
}

/// kvm_pvm without hardware virtualisation: what this project's machines
/// have (conformance/linux-peer/README.md has the failed boot).
fn kvm_is_pvm() -> bool {
    let hardware = std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| {
        c.lines()
            .filter(|l| l.starts_with("flags"))
            .any(|l| l.split_whitespace().any(|f| f == "vmx" || f == "svm"))
    });
    Path::new("/sys/module/kvm_pvm").exists() && !hardware
}

/// A boot's console text and exit, as a [`PeerRun`].
fn judge_boot(exit: &Exit, text: &str, timeout_s: u64) -> PeerRun {
    let report = Report::parse(text);
    let mut why = report.problems();
    match exit {
        // isa-debug-exit (init's normal end) or a plain power-off.
        Exit::Code(QEMU_EXIT_SUCCESS) | Exit::Code(0) => {}
        Exit::Code(124) => why.push(format!("QEMU timed out after {timeout_s}s")),
        Exit::Code(c) => why.push(format!("QEMU exited with status {c}")),
        Exit::Signal => why.push("QEMU was killed by a signal".into()),
        Exit::SpawnFailed(e) => why.push(format!("could not start QEMU: {e}")),
    }
    if why.is_empty() {
        return PeerRun::Measured(report);
    }
    let console = text.split(qemu::STDERR_MARKER).next().unwrap_or(text);
    if report.version.is_none() && *exit == Exit::Code(124) {
        if let Some(l) = console.lines().find(|l| l.contains(NO_TSC_RATE)) {
            return PeerRun::Hung(format!(
                "Linux found no clock (\"{}\") and hung before init; QEMU timed out after {timeout_s}s",
                l.trim()
            ));
        }
    }
    let last = console
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or("no output");
    let last: String = last.chars().take(160).collect();
    PeerRun::Failed(
        format!("{}; last console line: {last}", why.join("; ")),
        report,
    )
}

impl PeerOutcome {
    /// The report, when the peer booted (complete or not).
    pub fn report(&self) -> Option<&Report> {
        match &self.run {
            PeerRun::Measured(r) | PeerRun::Failed(_, r) => Some(r),
            PeerRun::Skipped(_) | PeerRun::Hung(_) => None,
        }
    }

    /// `measured`, `skipped` or `failed`.
    pub fn status(&self) -> &'static str {
        match self.run {
            PeerRun::Measured(_) => "measured",
            PeerRun::Skipped(_) => "skipped",
            PeerRun::Hung(_) => "hung",
            PeerRun::Failed(..) => "failed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configs::QEMU_EXIT_FAILURE;
    use crate::expectations::LinuxRule;

    const SMP2: &str = include_str!("../../../linux-peer/testdata/tcg-q35-smp2.log");
    const HUNG: &str = include_str!("../../../linux-peer/testdata/tcg-microvm-hung.log");

    /// clockhal's kernel on tcg-q35: hpet selected, 466 cycles per read, TSC at 2.6 GHz.
    const CLOCKHAL_Q35: &str = "\
CLOCKHAL-CONFORMANCE version=1 cpus=1 reference=hpet
SOURCE name=kvmclock present=0 reason=no KVM signature
SOURCE name=hyperv-page present=0 reason=no Hyper-V signature
SOURCE name=hyperv-msr present=0 reason=no Hyper-V signature
SOURCE name=tsc present=1 quality=-100 freq_hz=2600000000 flags=mono cost=no-trap selected=0 reason=not invariant
SOURCE name=hpet present=1 quality=250 freq_hz=100000000 flags=mono,smp,trap cost=one-trap selected=1 reason=
SOURCE name=acpi-pm present=1 quality=150 freq_hz=3579545 flags=mono,ext cost=one-trap selected=0 reason=
CHECK source=tsc name=monotonic status=pass value=0 unit=ns detail=ok
CHECK source=hpet name=read-cost status=pass value=466 unit=cycles detail=median
CHECK source=acpi-pm name=rate status=pass value=-12 unit=ppm detail=ok
3 passed, 0 failed, 0 skipped
";

    /// A row with no gap and no exception.
    static STRICT: PeerRow = PeerRow {
        config: "tcg-q35",
        linux_rule: LinuxRule {
            pick: "tsc",
            why: "test",
        },
        exception: None,
        known_gap: None,
    };

    fn clockhal_q35() -> Outcome {
        let mut o = Outcome::from_output(
            "tcg-q35",
            Accel::Tcg,
            Exit::Code(QEMU_EXIT_SUCCESS),
            6.0,
            CLOCKHAL_Q35,
            String::new(),
        );
        // tcg-q35's own expectations now want the supervised TSC (and a
        // ring-3 clock-page check); the fixture keeps a trapping pick because these tests are about the
        // peer rule (expectation rows are tested in outcome.rs).
        assert!(
            o.unexpected
                .iter()
                .all(|u| u.contains("tsc expected selected")
                    || u.contains("user-page")
                    || u.contains("steal-time")
                    || u.contains("timer")),
            "fixture: {:?}",
            o.unexpected
        );
        o.unexpected.clear();
        o
    }

    fn peer(run: PeerRun, row: Option<&'static PeerRow>) -> PeerOutcome {
        PeerOutcome {
            run,
            seconds: 4.0,
            log: None,
            kernel: None,
            row,
            compared_with: None,
            verdict: Verdict::Holds,
            retried: Vec::new(),
        }
    }

    fn measured(text: &str) -> PeerRun {
        judge_boot(&Exit::Code(QEMU_EXIT_SUCCESS), text, 20)
    }

    #[test]
    fn a_real_boot_is_a_measurement() {
        let PeerRun::Measured(r) = measured(SMP2) else {
            panic!("the fixture is a complete boot")
        };
        assert_eq!(r.chosen(), Some("hpet"));
        assert_eq!(r.available, ["hpet", "acpi_pm"]);
        assert_eq!(
            (r.cpus, r.vendor.as_deref()),
            (Some(2), Some("AuthenticAMD"))
        );
        assert!(r.cost("acpi_pm").is_some_and(|ns| ns > 0.0));
        assert!(r
            .klog
            .iter()
            .any(|l| l.contains("Marking TSC unstable due to TSCs unsynchronized")));
    }

    #[test]
    fn a_boot_counts_only_with_a_complete_report_and_a_clean_exit() {
        let good = output::tests::TCG_PC;
        assert!(matches!(measured(good), PeerRun::Measured(_)));
        assert!(matches!(
            judge_boot(&Exit::Code(0), good, 20),
            PeerRun::Measured(_)
        ));
        let PeerRun::Failed(why, _) = judge_boot(&Exit::Code(QEMU_EXIT_FAILURE), good, 20) else {
            panic!("a failure exit is a failure")
        };
        assert!(why.contains("status 35"), "{why}");
        let panic = "LINUX-PEER begin version=1 kernel=x\nKernel panic - not syncing: VFS\n\n\
            --- qemu stderr ---\nqemu-system-x86_64: terminating on signal 15\n";
        let PeerRun::Failed(why, _) = judge_boot(&Exit::Code(124), panic, 20) else {
            panic!("a timeout is a failure")
        };
        assert!(why.contains("timed out after 20s"), "{why}");
        assert!(
            why.contains("last console line: Kernel panic - not syncing: VFS"),
            "{why}"
        );
    }

    #[test]
    fn a_kernel_that_found_no_clock_and_hung_has_picked_none() {
        let PeerRun::Hung(why) = judge_boot(&Exit::Code(124), HUNG, 20) else {
            panic!("the fixture is the no-TSC-rate hang")
        };
        assert!(why.contains("could not calculate TSC khz"), "{why}");
        // The same console without the timeout is not that hang.
        assert!(matches!(measured(HUNG), PeerRun::Failed(..)));

        let mut o = clockhal_q35();
        record(&mut o, peer(PeerRun::Hung(why), Some(&STRICT)));
        let p = o.peer.as_ref().expect("recorded");
        assert_eq!(p.verdict, Verdict::Holds);
        assert_eq!(p.compared_with, Some(("none".to_string(), "measured")));
        assert_eq!(o.unexpected, Vec::<String>::new());
        assert_eq!(p.to_json(&o)["status"], "hung");
    }

    #[test]
    fn clockhal_trapping_where_linux_does_not_fails_the_configuration() {
        let mut o = clockhal_q35();
        record(&mut o, peer(measured(output::tests::TCG_PC), Some(&STRICT)));
        let u = o.unexpected.join("\n");
        assert!(
            u.contains(
                "linux peer: clockhal picks hpet (traps) where Linux picks tsc (no trap, measured)"
            ),
            "{u}"
        );
        let j = o.to_json();
        assert_eq!(j["ok"], false);
        assert_eq!(j["linux_peer"]["verdict"], "FAIL");
        assert_eq!(j["linux_peer"]["chosen"], "tsc");
        assert_eq!(j["linux_peer"]["read_ns"]["tsc"], 62.5);
        assert_eq!(j["linux_peer"]["clockhal"]["read_cycles"], 466);
        assert_eq!(j["linux_peer"]["clockhal"]["read_ns"], 179.2);
        assert_eq!(
            j["linux_peer"]["clockhal"]["same_source_in_linux_ns"],
            640.4
        );
    }

    #[test]
    fn the_known_gap_row_lists_the_violation_without_failing() {
        static GAP: PeerRow = PeerRow {
            known_gap: Some("issue 14: test gap"),
            ..STRICT
        };
        let mut o = clockhal_q35();
        record(&mut o, peer(measured(output::tests::TCG_PC), Some(&GAP)));
        assert_eq!(o.unexpected, Vec::<String>::new());
        let j = o.to_json();
        assert_eq!(j["linux_peer"]["verdict"], "known-gap");
        assert!(table(&[o]).contains("known-gap: issue 14"));
    }

    #[test]
    fn a_peer_that_should_have_reported_fails_and_the_rule_still_applies() {
        let mut o = clockhal_q35();
        let run = judge_boot(&Exit::Code(124), "SeaBIOS\n", 20);
        record(&mut o, peer(run, Some(&STRICT)));
        let u = o.unexpected.join("\n");
        assert!(
            u.contains("linux peer did not report: no LINUX-PEER begin line"),
            "{u}"
        );
        // Linux's documented rule (tsc) stands in for the comparison.
        assert!(u.contains("where Linux picks tsc (no trap, rule)"), "{u}");
    }

    #[test]
    fn a_skipped_peer_is_compared_by_the_rule_and_says_so() {
        let mut o = clockhal_q35();
        record(&mut o, peer(PeerRun::Skipped("test".into()), Some(&STRICT)));
        let j = o.to_json();
        assert_eq!(j["linux_peer"]["status"], "skipped");
        assert!(j["linux_peer"]["chosen"].is_null());
        assert_eq!(j["linux_peer"]["compared_with"]["basis"], "rule");
        assert_eq!(
            j["linux_peer"]["linux_rule"]["basis"],
            "Linux's documented rule, not a measurement"
        );
    }
}
