//! Rows for kernels clockhal did not write: the Hermit application (booted
//! by clockhal's loader), the bootloader_api example kernel (BIOS and
//! UEFI disk images) and the bootloader 0.9 example kernel (a `bootimage`
//! BIOS disk image).
//!
//! Each row has a *peer*: the project's own PVH kernel on the same machine
//! type and CPU model ([`PEER_CONFIGS`] adds the two the main table lacks).
//! Besides its expectation rows, a foreign row must select the same source
//! as its peer and find the same sources present.
//!
//! The images are built once per run by `scripts/hermit.sh --build-only`,
//! `scripts/bootloader-api.sh --build-only` and `scripts/bootloader-09.sh
//! --build-only` (pinned toolchains installed by rustup). A build that exits with status 75 could not reach rustup's
//! server: its rows are SKIP with the script's message. Rows marked
//! [`ForeignConfig::dies_under_kvm`] become SKIP, with QEMU's error, when the
//! guest dies with "KVM internal error" (never a pass).

use crate::configs::{Accel, QemuConfig, COMMON_ARGS, QEMU_EXIT_FAILURE, QEMU_EXIT_SUCCESS};
use crate::expectations::{Expect, Row};
use crate::outcome::{Exit, Outcome};
use serde_json::{json, Value as Json};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which foreign kernel, and how QEMU boots it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guest {
    /// `-kernel clockhal-hermit-loader -initrd clockhal-hermit-app`.
    Hermit,
    /// `-drive format=raw,file=bios.img` (SeaBIOS).
    BootloaderBios,
    /// `-bios OVMF.fd -drive format=raw,file=uefi.img`.
    BootloaderUefi,
    /// bootloader 0.9: `-drive format=raw,file=bios.img` (SeaBIOS), the
    /// image `bootimage` built.
    Bootloader09,
}

impl Guest {
    /// QEMU exit statuses for (success, failure). Hermit writes 1 (success)
    /// or 0 to isa-debug-exit; the bootloader kernels use clockhal's
    /// 0x10 / 0x11.
    fn statuses(self) -> (i32, i32) {
        match self {
            Guest::Hermit => (3, 1),
            Guest::BootloaderBios | Guest::BootloaderUefi | Guest::Bootloader09 => {
                (QEMU_EXIT_SUCCESS, QEMU_EXIT_FAILURE)
            }
        }
    }
}

/// One foreign row.
#[derive(Clone, Copy, Debug)]
pub struct ForeignConfig {
    /// Stable name (`--only` selects by it).
    pub name: &'static str,
    /// What boots.
    pub guest: Guest,
    /// The PVH configuration whose accelerator, machine and CPU this row
    /// boots with ([`ForeignConfig::machine`]).
    pub peer: &'static str,
    /// Why this guest is known to die under this machine's KVM (then a
    /// death is a SKIP with QEMU's error text).
    pub dies_under_kvm: Option<&'static str>,
}

impl ForeignConfig {
    /// The peer's configuration: the accelerator and the machine and CPU
    /// arguments this row boots with.
    pub fn machine(&self) -> &'static QemuConfig {
        crate::configs::CONFIGS
            .iter()
            .chain(PEER_CONFIGS)
            .find(|p| p.name == self.peer)
            .unwrap_or_else(|| panic!("{}: no PVH configuration {}", self.name, self.peer))
    }

    /// The peer's accelerator.
    pub fn accel(&self) -> Accel {
        self.machine().accel
    }
}

/// PVH configurations only the foreign rows need: Hermit's FSGSBASE build
/// needs `-cpu max` (tcg-pc uses qemu64), and Hermit supports one IOAPIC
/// only (microvm with `ioapic2=off`).
pub const PEER_CONFIGS: &[QemuConfig] = &[
    QemuConfig {
        name: "tcg-pc-max",
        accel: Accel::Tcg,
        args: &["-M", "pc", "-cpu", "max"],
    },
    QemuConfig {
        name: "tcg-microvm-io1",
        accel: Accel::Tcg,
        args: &["-M", "microvm,ioapic2=off", "-cpu", "max"],
    },
];

const XGETBV_DIES: &str = "Hermit 0.11 enables XSAVE and runs xgetbv right after \"Welcome to Hermit\"; this machine's KVM (kvm_pvm) kills such guests";
const OVMF_DIES: &str =
    "OVMF uses SSE/XSAVE; this machine's KVM (kvm_pvm) kills such guests (KVM internal error)";

/// The foreign rows, in report order.
pub const CONFIGS: &[ForeignConfig] = &[
    ForeignConfig {
        name: "hermit-q35",
        guest: Guest::Hermit,
        peer: "tcg-q35",
        dies_under_kvm: None,
    },
    ForeignConfig {
        name: "hermit-pc",
        guest: Guest::Hermit,
        peer: "tcg-pc-max",
        dies_under_kvm: None,
    },
    ForeignConfig {
        name: "hermit-nohpet",
        guest: Guest::Hermit,
        peer: "tcg-pc-nohpet",
        dies_under_kvm: None,
    },
    ForeignConfig {
        name: "hermit-smp2",
        guest: Guest::Hermit,
        peer: "tcg-q35-smp2",
        dies_under_kvm: None,
    },
    ForeignConfig {
        name: "hermit-microvm",
        guest: Guest::Hermit,
        peer: "tcg-microvm-io1",
        dies_under_kvm: None,
    },
    ForeignConfig {
        name: "hermit-kvm-q35",
        guest: Guest::Hermit,
        peer: "kvm-q35",
        dies_under_kvm: Some(XGETBV_DIES),
    },
    ForeignConfig {
        name: "bl-bios-tcg",
        guest: Guest::BootloaderBios,
        peer: "tcg-q35",
        dies_under_kvm: None,
    },
    ForeignConfig {
        name: "bl-uefi-tcg",
        guest: Guest::BootloaderUefi,
        peer: "tcg-q35",
        dies_under_kvm: None,
    },
    ForeignConfig {
        name: "bl-bios-kvm",
        guest: Guest::BootloaderBios,
        peer: "kvm-q35",
        dies_under_kvm: None,
    },
    ForeignConfig {
        name: "bl-uefi-kvm",
        guest: Guest::BootloaderUefi,
        peer: "kvm-q35",
        dies_under_kvm: Some(OVMF_DIES),
    },
    ForeignConfig {
        name: "bl09-q35",
        guest: Guest::Bootloader09,
        peer: "tcg-q35",
        dies_under_kvm: None,
    },
    ForeignConfig {
        name: "bl09-pc",
        guest: Guest::Bootloader09,
        peer: "tcg-pc",
        dies_under_kvm: None,
    },
];

use crate::expectations::{row, NO_HV, PM, TCG_NO_KVMCLOCK};
use Expect::*;
const TSC_TCG: &str =
    "TCG: rate calibrated against the HPET/PM timer to a few ppm; no invariant bit, so \
    selected as a supervised TSC (290) over the trapping HPET (250), as by the PVH kernel";
const TSC_TCG_SMP: &str = "TCG, two CPUs on one TCG thread: Hermit tasks pinned to each CPU run \
    clockhal's warp test, which proves the TSCs in step; the supervised TSC is selected, as on the PVH kernel";
const HPET_TCG: &str = "TCG q35/pc: the supervised TSC's watchdog reference (250, traps)";
const HERMIT_CPL0: &str = "Hermit runs the application at CPL0 with the loader's identity map: the HPET stays mapped uncached";
const HERMIT_SMP: &str = "two CPUs: the suite's warp test runs on a Hermit task pinned to CPU 1 (sys_spawn2) and must pass";
const BL09_TSC: &str = "TCG: calibrated against the HPET, supervised (290) by the watchdog that the kernel's PIT interrupt (IRQ 0 via the 8259s) ticks every 250 ms; still selected after ten ticks and through the suite, as on the PVH kernel";
const BL09_HPET: &str = "the kernel maps the HPET uncached itself (bootloader 0.9's physical-memory mapping is write-back)";
const BL09_RSDP: &str =
    "bootloader 0.9 passes no RSDP: clockhal::boot finds it in the BIOS area; FADT PM timer found";
const KVM: &str = "KVM: kvmclock (stable bit) is the migration-safe no-exit source (400); its area's physical address comes from the bootloader's page tables";

/// Expectations of the foreign rows and their extra peers (same format and
/// rules as [`crate::expectations::EXPECTATIONS`]).
#[rustfmt::skip]
pub const EXPECTATIONS: &[Row] = &[
    // ---- PVH peers on Hermit's machines --------------------------------
    row("tcg-pc-max", "kvmclock", Absent, TCG_NO_KVMCLOCK),
    row("tcg-pc-max", "hyperv-page", Absent, NO_HV),
    row("tcg-pc-max", "hyperv-msr", Absent, NO_HV),
    row("tcg-pc-max", "tsc", Selected, TSC_TCG),
    row("tcg-pc-max", "hpet", Present, HPET_TCG),
    row("tcg-pc-max", "acpi-pm", Present, PM),
    row("tcg-microvm-io1", "kvmclock", Absent, TCG_NO_KVMCLOCK),
    row("tcg-microvm-io1", "hyperv-page", Absent, NO_HV),
    row("tcg-microvm-io1", "hyperv-msr", Absent, NO_HV),
    row("tcg-microvm-io1", "tsc", Selected, "microvm: the TSC calibrated against the PIT (channel 2), the only counter left, and selected"),
    row("tcg-microvm-io1", "hpet", Absent, "microvm has no HPET"),
    row("tcg-microvm-io1", "acpi-pm", Absent, "microvm's FADT has PM_TMR_BLK = 0"),
    // ---- Hermit (TCG) --------------------------------------------------
    row("hermit-q35", "kvmclock", Absent, TCG_NO_KVMCLOCK),
    row("hermit-q35", "hyperv-page", Absent, NO_HV),
    row("hermit-q35", "hyperv-msr", Absent, NO_HV),
    row("hermit-q35", "tsc", Selected, TSC_TCG),
    row("hermit-q35", "hpet", Present, HERMIT_CPL0),
    row("hermit-q35", "acpi-pm", Present, "the RSDP reaches the application (CLOCKHAL_RSDP): FADT PM timer found"),
    row("hermit-pc", "kvmclock", Absent, TCG_NO_KVMCLOCK),
    row("hermit-pc", "hyperv-page", Absent, NO_HV),
    row("hermit-pc", "hyperv-msr", Absent, NO_HV),
    row("hermit-pc", "tsc", Selected, TSC_TCG),
    row("hermit-pc", "hpet", Present, HPET_TCG),
    row("hermit-pc", "acpi-pm", Present, PM),
    row("hermit-nohpet", "kvmclock", Absent, TCG_NO_KVMCLOCK),
    row("hermit-nohpet", "hyperv-page", Absent, NO_HV),
    row("hermit-nohpet", "hyperv-msr", Absent, NO_HV),
    row("hermit-nohpet", "tsc", Selected, TSC_TCG),
    row("hermit-nohpet", "hpet", Absent, "hpet=off removes the HPET and its ACPI table"),
    row("hermit-nohpet", "acpi-pm", Present, "no HPET: the PM timer is the supervised TSC's reference"),
    row("hermit-smp2", "kvmclock", Absent, TCG_NO_KVMCLOCK),
    row("hermit-smp2", "hyperv-page", Absent, NO_HV),
    row("hermit-smp2", "hyperv-msr", Absent, NO_HV),
    row("hermit-smp2", "tsc", Selected, TSC_TCG_SMP),
    row("hermit-smp2", "tsc", CrossCpuPass, HERMIT_SMP),
    row("hermit-smp2", "hpet", Present, "Hermit (feature smp) boots 2 CPUs; the supervised TSC's watchdog reference"),
    row("hermit-smp2", "hpet", CrossCpuPass, HERMIT_SMP),
    row("hermit-smp2", "acpi-pm", Present, PM),
    row("hermit-smp2", "acpi-pm", CrossCpuPass, HERMIT_SMP),
    row("hermit-microvm", "kvmclock", Absent, TCG_NO_KVMCLOCK),
    row("hermit-microvm", "hyperv-page", Absent, NO_HV),
    row("hermit-microvm", "hyperv-msr", Absent, NO_HV),
    row("hermit-microvm", "tsc", Selected, "microvm: the TSC calibrated against the PIT (channel 2), the only counter left, and selected"),
    row("hermit-microvm", "hpet", Absent, "microvm has no HPET"),
    row("hermit-microvm", "acpi-pm", Absent, "microvm's FADT has PM_TMR_BLK = 0"),
    // ---- Hermit (KVM): SKIP when it dies (see XGETBV_DIES) ---------------
    row("hermit-kvm-q35", "kvmclock", Selected, KVM),
    row("hermit-kvm-q35", "hyperv-page", Absent, NO_HV),
    row("hermit-kvm-q35", "hyperv-msr", Absent, NO_HV),
    row("hermit-kvm-q35", "tsc", Present, "rate from pvclock; not invariant without +invtsc: supervised (290), below kvmclock"),
    row("hermit-kvm-q35", "hpet", Present, "q35 HPET, mapped uncached by the loader"),
    row("hermit-kvm-q35", "acpi-pm", Present, PM),
    // ---- bootloader_api kernel -----------------------------------------
    row("bl-bios-tcg", "kvmclock", Absent, TCG_NO_KVMCLOCK),
    row("bl-bios-tcg", "hyperv-page", Absent, NO_HV),
    row("bl-bios-tcg", "hyperv-msr", Absent, NO_HV),
    row("bl-bios-tcg", "tsc", Selected, TSC_TCG),
    row("bl-bios-tcg", "hpet", Present, "the kernel maps the HPET uncached itself (the offset mapping is write-back)"),
    row("bl-bios-tcg", "acpi-pm", Present, "RSDP from BootInfo: FADT PM timer found"),
    row("bl-uefi-tcg", "kvmclock", Absent, TCG_NO_KVMCLOCK),
    row("bl-uefi-tcg", "hyperv-page", Absent, NO_HV),
    row("bl-uefi-tcg", "hyperv-msr", Absent, NO_HV),
    row("bl-uefi-tcg", "tsc", Selected, TSC_TCG),
    row("bl-uefi-tcg", "hpet", Present, "OVMF's ACPI tables name the same HPET; RSDP from BootInfo (UEFI config table)"),
    row("bl-uefi-tcg", "acpi-pm", Present, PM),
    row("bl-bios-kvm", "kvmclock", Selected, KVM),
    row("bl-bios-kvm", "hyperv-page", Absent, NO_HV),
    row("bl-bios-kvm", "hyperv-msr", Absent, NO_HV),
    row("bl-bios-kvm", "tsc", Present, "rate from pvclock; not invariant without +invtsc: supervised (290), below kvmclock"),
    row("bl-bios-kvm", "hpet", Present, "q35 HPET, mapped uncached by the kernel"),
    row("bl-bios-kvm", "acpi-pm", Present, PM),
    row("bl-uefi-kvm", "kvmclock", Selected, KVM),
    row("bl-uefi-kvm", "hyperv-page", Absent, NO_HV),
    row("bl-uefi-kvm", "hyperv-msr", Absent, NO_HV),
    row("bl-uefi-kvm", "tsc", Present, "rate from pvclock; not invariant without +invtsc: supervised (290), below kvmclock"),
    row("bl-uefi-kvm", "hpet", Present, "q35 HPET, mapped uncached by the kernel"),
    row("bl-uefi-kvm", "acpi-pm", Present, PM),
    // ---- bootloader 0.9 kernel (bootimage, SeaBIOS) --------------------
    row("bl09-q35", "kvmclock", Absent, TCG_NO_KVMCLOCK),
    row("bl09-q35", "hyperv-page", Absent, NO_HV),
    row("bl09-q35", "hyperv-msr", Absent, NO_HV),
    row("bl09-q35", "tsc", Selected, BL09_TSC),
    row("bl09-q35", "hpet", Present, BL09_HPET),
    row("bl09-q35", "acpi-pm", Present, BL09_RSDP),
    row("bl09-pc", "kvmclock", Absent, TCG_NO_KVMCLOCK),
    row("bl09-pc", "hyperv-page", Absent, NO_HV),
    row("bl09-pc", "hyperv-msr", Absent, NO_HV),
    row("bl09-pc", "tsc", Selected, BL09_TSC),
    row("bl09-pc", "hpet", Present, BL09_HPET),
    row("bl09-pc", "acpi-pm", Present, BL09_RSDP),
];

/// Whether `name` is a foreign row or one of their extra peers.
pub fn is_known(name: &str) -> bool {
    CONFIGS.iter().any(|c| c.name == name) || PEER_CONFIGS.iter().any(|c| c.name == name)
}

/// Every foreign name, for the usage text.
pub fn names() -> impl Iterator<Item = &'static str> {
    PEER_CONFIGS
        .iter()
        .map(|c| c.name)
        .chain(CONFIGS.iter().map(|c| c.name))
}

/// What a build produced, or why its rows cannot run.
#[derive(Clone, Debug)]
enum Build {
    /// `KEY=path` lines of the script's stdout.
    Ready(Vec<(String, PathBuf)>),
    /// rustup could not reach its server (status 75).
    Skip(String),
    /// Any other failure.
    Failed(String),
}

impl Build {
    fn path(&self, key: &str) -> Option<&Path> {
        match self {
            Build::Ready(paths) => paths
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, p)| p.as_path()),
            _ => None,
        }
    }
}

/// Runs `script --build-only`; progress goes to our stderr.
fn build(root: &Path, script: &str) -> Build {
    eprintln!("building with {script} --build-only ...");
    let out = Command::new("bash")
        .arg(root.join(script))
        .arg("--build-only")
        .current_dir(root)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) => return Build::Failed(format!("cannot run {script}: {e}")),
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let pairs: Vec<(String, String)> = stdout
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    match out.status.code() {
        Some(0) => Build::Ready(
            pairs
                .into_iter()
                .map(|(k, v)| (k, PathBuf::from(v)))
                .collect(),
        ),
        Some(75) => Build::Skip(
            pairs
                .into_iter()
                .find(|(k, _)| k == "SKIP")
                .map_or_else(|| format!("{script}: toolchain unavailable"), |(_, v)| v),
        ),
        _ => Build::Failed(format!("{script} --build-only failed ({})", out.status)),
    }
}

/// QEMU arguments that boot `guest` from `build`'s artifacts.
fn boot_args(guest: Guest, build: &Build) -> Result<Vec<String>, String> {
    let path = |key: &str| {
        build
            .path(key)
            .map(|p| p.display().to_string())
            .ok_or_else(|| format!("the build printed no {key}="))
    };
    Ok(match guest {
        Guest::Hermit => vec![
            "-kernel".into(),
            path("LOADER")?,
            "-initrd".into(),
            path("IMAGE")?,
        ],
        Guest::BootloaderBios => vec![
            "-drive".into(),
            format!("format=raw,file={}", path("BIOS")?),
        ],
        // Its two rows run at once: without `snapshot=on` (writes to a
        // temporary overlay, the image opened read-only) the second QEMU
        // fails with 'Failed to get "write" lock'. (`readonly=on` does not
        // do: an IDE disk cannot be read-only.)
        Guest::Bootloader09 => vec![
            "-drive".into(),
            format!("format=raw,snapshot=on,file={}", path("BIOS")?),
        ],
        Guest::BootloaderUefi => vec![
            "-bios".into(),
            OVMF.into(),
            "-drive".into(),
            format!("format=raw,file={}", path("UEFI")?),
        ],
    })
}

/// Debian's OVMF (scripts/bootloader-api.sh installs it).
const OVMF: &str = "/usr/share/qemu/OVMF.fd";
/// What QEMU prints when this machine's KVM kills a guest.
const KVM_DEATH: &str = "KVM internal error";

/// Boots one row: QEMU directly (so it can be killed as soon as it reports
/// a KVM death), with a deadline of `timeout_s`.
fn run_one(c: &ForeignConfig, build: &Build, timeout_s: u64, log: &Path) -> Outcome {
    let boot = match build {
        Build::Skip(why) => return Outcome::skipped(c.name, c.accel(), why.clone()),
        Build::Failed(why) => return failed(c, why.clone()),
        Build::Ready(_) => match boot_args(c.guest, build) {
            Ok(a) => a,
            Err(e) => return failed(c, e),
        },
    };
    let mut cmd = Command::new("qemu-system-x86_64");
    let machine = c.machine();
    cmd.args(crate::qemu::accel_args(machine.accel, machine.args))
        .args(crate::qemu::machine_args(machine.accel, machine.args))
        .args(COMMON_ARGS)
        .args(&boot)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let command_line = format!("{cmd:?}");
    let start = Instant::now();
    let mut child = match cmd.spawn() {
        Ok(ch) => ch,
        Err(e) => {
            let exit = Exit::SpawnFailed(e.to_string());
            return Outcome::from_output(
                c.name,
                c.accel(),
                exit,
                0.0,
                "",
                log.display().to_string(),
            );
        }
    };
    let died = Arc::new(AtomicBool::new(false));
    let read = |pipe: Option<Box<dyn Read + Send>>, died: Arc<AtomicBool>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let Some(pipe) = pipe else { return text };
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if line.contains(KVM_DEATH) {
                    died.store(true, Ordering::SeqCst);
                }
                text.push_str(&line);
                text.push('\n');
            }
            text
        })
    };
    let out = read(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
        died.clone(),
    );
    let err = read(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
        died.clone(),
    );
    let deadline = start + Duration::from_secs(timeout_s);
    let exit = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status.code().map_or(Exit::Signal, Exit::Code),
            Ok(None) if died.load(Ordering::SeqCst) || Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                // 124: what `timeout` reports, so the verdict text matches the PVH rows.
                break Exit::Code(124);
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => break Exit::SpawnFailed(e.to_string()),
        }
    };
    let seconds = start.elapsed().as_secs_f64();
    let mut text = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    if !err.trim().is_empty() {
        text.push_str(crate::qemu::STDERR_MARKER);
        text.push_str(&err);
    }
    let _ = std::fs::write(log, format!("# {command_line}\n{text}"));
    let log_name = log.display().to_string();

    if died.load(Ordering::SeqCst) {
        let error = text
            .lines()
            .find(|l| l.contains(KVM_DEATH))
            .unwrap_or(KVM_DEATH)
            .trim()
            .to_string();
        if let Some(why) = c.dies_under_kvm {
            let mut o =
                Outcome::skipped(c.name, c.accel(), format!("{why}: QEMU said \"{error}\""));
            o.seconds = seconds;
            o.log = log_name;
            return o;
        }
        // Killed on the death, not on the deadline: say so.
        let mut o = verdict(c, exit, seconds, &text, log_name);
        o.unexpected.retain(|u| !u.starts_with("QEMU timed out"));
        o.unexpected.insert(
            0,
            format!("the guest died under KVM: QEMU said \"{error}\""),
        );
        return o;
    }
    verdict(c, exit, seconds, &text, log_name)
}

/// Parses a foreign row's output. The verdict rules speak clockhal's exit
/// convention: the guest's own statuses are translated, and the real one is
/// kept for the record.
fn verdict(c: &ForeignConfig, exit: Exit, seconds: f64, text: &str, log: String) -> Outcome {
    let (ok, bad) = c.guest.statuses();
    let normalised = match exit {
        Exit::Code(s) if s == ok => Exit::Code(QEMU_EXIT_SUCCESS),
        Exit::Code(s) if s == bad => Exit::Code(QEMU_EXIT_FAILURE),
        ref other => other.clone(),
    };
    let mut o = Outcome::from_output(c.name, c.accel(), normalised.clone(), seconds, text, log);
    if normalised == exit && exit == Exit::Code(QEMU_EXIT_SUCCESS) && ok != QEMU_EXIT_SUCCESS {
        o.unexpected.push(format!(
            "QEMU exited with status {QEMU_EXIT_SUCCESS}, but this guest exits with {ok} on success"
        ));
    }
    o.exit = Some(exit);
    o
}

/// A row that could not be attempted because its build failed.
fn failed(c: &ForeignConfig, why: String) -> Outcome {
    let mut o = Outcome::skipped(c.name, c.accel(), String::new());
    o.ran = true;
    o.skip_reason = None;
    o.unexpected.push(why);
    o
}

/// Builds what `configs` need (once) and runs them through `parallel`
/// (KVM rows are skipped with the reason when /dev/kvm is not usable).
pub fn run(
    root: &Path,
    configs: &[&ForeignConfig],
    kvm: &Result<(), String>,
    timeout_s: u64,
    log_dir: &Path,
    parallel: impl Fn(&[&ForeignConfig], &(dyn Fn(&ForeignConfig) -> Outcome + Sync)) -> Vec<Outcome>,
) -> Vec<Outcome> {
    let needs = |g: &[Guest]| configs.iter().any(|c| g.contains(&c.guest));
    let hermit = needs(&[Guest::Hermit]).then(|| build(root, "scripts/hermit.sh"));
    let bootloader = needs(&[Guest::BootloaderBios, Guest::BootloaderUefi])
        .then(|| build(root, "scripts/bootloader-api.sh"));
    let bootloader09 =
        needs(&[Guest::Bootloader09]).then(|| build(root, "scripts/bootloader-09.sh"));
    let run = |c: &ForeignConfig| {
        let b = match c.guest {
            Guest::Hermit => hermit.as_ref(),
            Guest::BootloaderBios | Guest::BootloaderUefi => bootloader.as_ref(),
            Guest::Bootloader09 => bootloader09.as_ref(),
        };
        match (c.accel(), kvm, b) {
            (Accel::Kvm, Err(why), _) => Outcome::skipped(c.name, c.accel(), why.clone()),
            (_, _, Some(b)) => {
                // A firmware boot under this machine's KVM emulates every
                // page-table write slowly: the bootloader's "Map physical
                // memory" took 297 s of a loaded 2-core host (60-90 s
                // idle); a KVM row gets three deadlines.
                let t = match c.accel() {
                    Accel::Kvm => timeout_s.saturating_mul(3),
                    _ => timeout_s,
                };
                run_one(c, b, t, &log_dir.join(format!("{}.log", c.name)))
            }
            (_, _, None) => failed(c, "not built".into()),
        }
    };
    parallel(configs, &run)
}

/// The peer configurations `configs` need besides the ones already chosen.
pub fn peers_of<'a>(configs: &[&'a ForeignConfig]) -> impl Iterator<Item = &'static str> + 'a {
    configs
        .iter()
        .map(|c| c.peer)
        .collect::<BTreeSet<_>>()
        .into_iter()
}

/// Present sources, in report order.
fn present(o: &Outcome) -> Vec<&str> {
    o.sources
        .iter()
        .filter(|s| s.present)
        .map(|s| s.name.as_str())
        .collect()
}

/// Checks each foreign row against its peer (same selection, same sources
/// present) and returns the comparison for results.json.
pub fn compare_with_peers(outcomes: &mut [Outcome]) -> Json {
    let mut rows = Vec::new();
    for c in CONFIGS {
        let (Some(fi), Some(pi)) = (
            outcomes.iter().position(|o| o.name == c.name),
            outcomes.iter().position(|o| o.name == c.peer),
        ) else {
            continue;
        };
        let (f, p) = (&outcomes[fi], &outcomes[pi]);
        let matches = f.ran && p.ran && f.selected() == p.selected() && present(f) == present(p);
        let row = json!({
            "config": c.name,
            "peer": c.peer,
            "compared": f.ran && p.ran,
            "selected": f.selected(),
            "peer_selected": p.selected(),
            "present": present(f),
            "peer_present": present(p),
            "match": matches,
        });
        if f.ran && p.ran && !matches {
            let why = format!(
                "differs from {} on the same machine: selected {:?} vs {:?}, present {:?} vs {:?}",
                c.peer,
                f.selected(),
                p.selected(),
                present(f),
                present(p)
            );
            outcomes[fi].unexpected.push(why);
        }
        rows.push(row);
    }
    Json::Array(rows)
}

/// The comparison as a table for the console.
pub fn peer_table(comparison: &Json) -> String {
    let mut t =
        String::from("foreign kernel vs clockhal's PVH kernel on the same machine and CPU:\n");
    for r in comparison.as_array().into_iter().flatten() {
        let sel = |k: &str| r[k].as_str().unwrap_or("-").to_string();
        let verdict = match (r["compared"].as_bool(), r["match"].as_bool()) {
            (Some(true), Some(true)) => "same",
            (Some(true), _) => "DIFFERENT",
            _ => "not compared (skipped)",
        };
        t.push_str(&format!(
            "  {:<15} {:<8} | {:<15} {:<8} {verdict}\n",
            r["config"].as_str().unwrap_or("?"),
            sel("selected"),
            r["peer"].as_str().unwrap_or("?"),
            sel("peer_selected"),
        ));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expectations::SOURCES;

    #[test]
    fn every_foreign_row_states_every_source_and_names_a_real_peer() {
        for c in CONFIGS {
            // Panics when the peer is not a PVH configuration.
            assert_eq!(c.machine().name, c.peer);
        }
        for name in CONFIGS
            .iter()
            .map(|c| c.name)
            .chain(PEER_CONFIGS.iter().map(|c| c.name))
        {
            for s in SOURCES {
                assert!(
                    EXPECTATIONS
                        .iter()
                        .any(|r| r.config == name && r.source == s),
                    "{name} lacks {s}"
                );
            }
            let sel = EXPECTATIONS
                .iter()
                .filter(|r| r.config == name && r.expect == Selected)
                .count();
            assert!(sel <= 1, "{name}");
            assert!(
                !crate::configs::CONFIGS.iter().any(|c| c.name == name),
                "{name} clashes"
            );
        }
        for r in EXPECTATIONS {
            assert!(is_known(r.config), "{r:?}");
            assert!(!r.reason.is_empty());
        }
    }

    const HERMIT_OK: &str = "\
loader: entering Hermit
CLOCKHAL-CONFORMANCE version=1 cpus=1 reference=acpi-pm
SOURCE name=kvmclock present=0 reason=no KVM signature
SOURCE name=hyperv-page present=0 reason=no Hyper-V signature
SOURCE name=hyperv-msr present=0 reason=no Hyper-V signature
SOURCE name=tsc present=1 quality=290 freq_hz=2600000000 flags=mono cost=no-trap selected=1 reason=usable
SOURCE name=hpet present=0 reason=no HPET table
SOURCE name=acpi-pm present=1 quality=150 freq_hz=3579545 flags=mono,ext cost=one-trap selected=0 reason=usable
CHECK source=tsc name=monotonic status=pass value=0 unit=ns detail=ok
CHECK source=acpi-pm name=monotonic status=pass value=0 unit=ns detail=ok
2 passed, 0 failed, 0 skipped
";

    fn hermit_nohpet(exit: i32, text: &str) -> Outcome {
        let c = CONFIGS.iter().find(|c| c.name == "hermit-nohpet").unwrap();
        verdict(c, Exit::Code(exit), 1.0, text, String::new())
    }

    #[test]
    fn hermit_status_3_is_success_and_1_is_failure() {
        let ok = hermit_nohpet(3, HERMIT_OK);
        assert_eq!(ok.unexpected, Vec::<String>::new());
        // results.json keeps Hermit's own status.
        assert_eq!(ok.to_json()["exit_status"], json!(3));
        let u = hermit_nohpet(1, HERMIT_OK).unexpected.join("\n");
        assert!(u.contains("exited with failure"), "{u}");
        // Status 33 from a Hermit guest is not Hermit's success.
        assert!(!hermit_nohpet(33, HERMIT_OK).unexpected.is_empty());
    }

    #[test]
    fn a_different_selection_than_the_peer_is_unexpected() {
        let foreign = hermit_nohpet(3, HERMIT_OK);
        let same = Outcome::from_output(
            "tcg-pc-nohpet",
            Accel::Tcg,
            Exit::Code(QEMU_EXIT_SUCCESS),
            1.0,
            HERMIT_OK,
            String::new(),
        );
        let mut outcomes = vec![foreign.clone(), same];
        let j = compare_with_peers(&mut outcomes);
        assert_eq!(j[0]["match"], json!(true));
        assert!(outcomes[0].unexpected.is_empty());

        let other = HERMIT_OK
            .replace(
                "selected=1 reason=usable\nSOURCE name=hpet",
                "selected=0 reason=usable\nSOURCE name=hpet",
            )
            .replace("cost=one-trap selected=0", "cost=one-trap selected=1");
        let peer = Outcome::from_output(
            "tcg-pc-nohpet",
            Accel::Tcg,
            Exit::Code(QEMU_EXIT_SUCCESS),
            1.0,
            &other,
            String::new(),
        );
        let mut outcomes = vec![foreign, peer];
        let j = compare_with_peers(&mut outcomes);
        assert_eq!(j[0]["match"], json!(false));
        let u = outcomes[0].unexpected.join("\n");
        assert!(u.contains("differs from tcg-pc-nohpet"), "{u}");
        assert!(peer_table(&j).contains("DIFFERENT"));
    }

    #[test]
    fn build_scripts_report_paths_skips_and_failures() {
        let dir = std::env::temp_dir().join(format!("clockhal-matrix-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = |name: &str, body: &str| std::fs::write(dir.join(name), body).unwrap();
        script(
            "ok.sh",
            "echo progress >&2\necho LOADER=/a/loader\necho IMAGE=/a/image\n",
        );
        script(
            "skip.sh",
            "echo 'SKIP=rustup cannot reach its server'\nexit 75\n",
        );
        script("fail.sh", "exit 3\n");
        let ok = build(&dir, "ok.sh");
        assert_eq!(ok.path("IMAGE"), Some(Path::new("/a/image")));
        assert_eq!(
            boot_args(Guest::Hermit, &ok).unwrap(),
            ["-kernel", "/a/loader", "-initrd", "/a/image"]
        );
        assert!(
            matches!(build(&dir, "skip.sh"), Build::Skip(s) if s == "rustup cannot reach its server")
        );
        assert!(matches!(build(&dir, "fail.sh"), Build::Failed(_)));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_failed_build_fails_its_rows_and_an_unreachable_rustup_skips_them() {
        let c = &CONFIGS[0];
        let o = run_one(
            c,
            &Build::Failed("boom".into()),
            1,
            Path::new("/nonexistent"),
        );
        assert!(o.ran && o.unexpected == ["boom"]);
        let o = run_one(
            c,
            &Build::Skip("rustup cannot reach its server".into()),
            1,
            Path::new("/nonexistent"),
        );
        assert!(!o.ran && o.skip_reason.as_deref() == Some("rustup cannot reach its server"));
        assert!(boot_args(Guest::BootloaderUefi, &Build::Ready(vec![])).is_err());
    }

    #[test]
    fn the_bootloader_09_rows_boot_its_bios_image_beside_their_pvh_peers() {
        let image = Build::Ready(vec![("BIOS".into(), PathBuf::from("/b/bios.img"))]);
        assert_eq!(
            boot_args(Guest::Bootloader09, &image).unwrap(),
            ["-drive", "format=raw,snapshot=on,file=/b/bios.img"]
        );
        assert_eq!(
            Guest::Bootloader09.statuses(),
            (QEMU_EXIT_SUCCESS, QEMU_EXIT_FAILURE)
        );
        // One row per machine the issue asks for, each against the PVH
        // kernel on the same machine and CPU, with its selection.
        for (name, peer) in [("bl09-q35", "tcg-q35"), ("bl09-pc", "tcg-pc")] {
            let c = CONFIGS.iter().find(|c| c.name == name).unwrap();
            assert_eq!(
                (c.guest, c.peer, c.accel()),
                (Guest::Bootloader09, peer, Accel::Tcg)
            );
            let selected = |config: &str| {
                crate::expectations::EXPECTATIONS
                    .iter()
                    .chain(EXPECTATIONS)
                    .filter(|r| r.config == config && r.expect == Selected)
                    .map(|r| r.source)
                    .collect::<Vec<_>>()
            };
            assert_eq!(selected(name), selected(peer), "{name}");
            assert_eq!(selected(name), ["tsc"], "{name}");
        }
    }
}
