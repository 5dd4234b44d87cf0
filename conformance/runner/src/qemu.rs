//! Building the kernel, probing /dev/kvm and booting one configuration.

use crate::configs::{QemuConfig, COMMON_ARGS};
use crate::outcome::{Exit, Outcome};
use std::ffi::OsStr;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Instant;

/// Whether KVM can be used: /dev/kvm opens read/write. `Err` says why not.
pub fn kvm_usable() -> Result<(), String> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .map(drop)
        .map_err(|e| format!("/dev/kvm not usable ({e})"))
}

/// Builds the kernel crate in `dir` (`cargo build --release`, target from its
/// `.cargo/config.toml`) and returns the ELF path cargo reports.
pub fn build_kernel(dir: &Path) -> Result<PathBuf, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = Command::new(cargo)
        .args([
            "build",
            "--release",
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo in {}: {e}", dir.display()))?;
    if !out.status.success() {
        return Err(format!(
            "kernel build in {} failed ({})",
            dir.display(),
            out.status
        ));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut exe = None;
    for l in stdout.lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(l) else {
            continue;
        };
        if msg["reason"] == "compiler-artifact" {
            if let Some(path) = msg["executable"].as_str() {
                exe = Some(PathBuf::from(path));
            }
        }
    }
    exe.ok_or_else(|| format!("cargo built no executable in {}", dir.display()))
}

/// Separates the console output from QEMU's own stderr in a boot's text.
pub const STDERR_MARKER: &str = "\n--- qemu stderr ---\n";

/// What one QEMU boot produced.
pub struct Boot {
    /// How QEMU ended.
    pub exit: Exit,
    /// Console output (and QEMU's stderr, after a marker line).
    pub text: String,
    /// Wall time.
    pub seconds: f64,
}

/// Boots `kernel` under `config` with `extra` QEMU arguments and
/// `timeout_s`, and writes the command line and console log to `log`.
pub fn boot(
    config: &QemuConfig,
    kernel: &Path,
    extra: &[&OsStr],
    timeout_s: u64,
    log: &Path,
) -> Boot {
    let mut cmd = Command::new("timeout");
    cmd.args([
        "--kill-after=5",
        &timeout_s.to_string(),
        "qemu-system-x86_64",
    ])
    .args(accel_args(config.accel, config.args))
    .args(machine_args(config.accel, config.args))
    .args(COMMON_ARGS)
    .arg("-kernel")
    .arg(kernel)
    .args(extra)
    .stdin(Stdio::null());
    let command_line = format!("{cmd:?}");
    let start = Instant::now();
    let result = cmd.output();
    let seconds = start.elapsed().as_secs_f64();
    let (exit, text) = match result {
        Ok(out) => {
            let exit = out.status.code().map_or(Exit::Signal, Exit::Code);
            let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
            let err = String::from_utf8_lossy(&out.stderr);
            if !err.trim().is_empty() {
                text.push_str(STDERR_MARKER);
                text.push_str(&err);
            }
            (exit, text)
        }
        Err(e) => (Exit::SpawnFailed(e.to_string()), String::new()),
    };
    let _ = std::fs::write(log, format!("# {command_line}\n{text}"));
    Boot {
        exit,
        text,
        seconds,
    }
}

/// Boots `kernel` under `config` with `timeout_s`, writes the console log to
/// `log` and the kernel's `CPUID` lines to `cpuid` (the simulator's QEMU
/// profiles are checked against them), and parses the result.
pub fn run(
    config: &QemuConfig,
    kernel: &Path,
    timeout_s: u64,
    log: &Path,
    cpuid: &Path,
) -> Outcome {
    // Rows that pause the VM boot with a QMP socket (`pause`).
    let (b, pause) = match crate::pause::row(config.name) {
        Some(_) => {
            let (b, p) = crate::pause::boot(config, kernel, timeout_s, log);
            (b, Some(p))
        }
        None => (boot(config, kernel, &[], timeout_s, log), None),
    };
    let console = b.text.split(STDERR_MARKER).next().unwrap_or("");
    let dump: String = console
        .lines()
        .filter(|l| l.starts_with("CPUID "))
        .map(|l| format!("{}\n", l.trim_end()))
        .collect();
    if !dump.is_empty() {
        let written = cpuid
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(cpuid, dump));
        if let Err(e) = written {
            eprintln!("cannot write {}: {e}", cpuid.display());
        }
    }
    let mut o = Outcome::from_output(
        config.name,
        config.accel,
        b.exit,
        b.seconds,
        &b.text,
        log.display().to_string(),
    );
    o.unexpected
        .extend(crate::pause::violations(&o, pause.as_ref()));
    crate::pause::tolerate_known_gap(&mut o);
    o.pause = pause;
    o
}

/// `-accel <name>`, unless the configuration's own arguments choose the
/// accelerator's options (`-accel tcg,thread=single`).
/// The configuration's own arguments, with `-cpu host...` made bootable on
/// this host: some KVM hosts (this project's machines since late 2026)
/// refuse QEMU's IA32_ARCH_CAPABILITIES (MSR 0x10a) for `-cpu host`, and
/// QEMU aborts before the guest runs ("failed to set MSR 0x10a"). The MSR
/// says nothing about clocks, so where plain `host` fails and
/// `host,-arch-capabilities` starts, the feature is left out.
pub fn machine_args(accel: crate::Accel, args: &[&str]) -> Vec<String> {
    let suffix = match accel {
        crate::Accel::Kvm => host_cpu_suffix(),
        _ => "",
    };
    let mut out: Vec<String> = Vec::with_capacity(args.len());
    for (i, a) in args.iter().enumerate() {
        let after_cpu = i > 0 && args[i - 1] == "-cpu";
        if after_cpu && a.starts_with("host") && !a.contains("arch-capabilities") {
            out.push(format!("{a}{suffix}"));
        } else {
            out.push((*a).to_string());
        }
    }
    out
}

/// `""`, or `",-arch-capabilities"` where plain `-cpu host` cannot start
/// (decided once per run by starting QEMU stopped, `-S`, and quitting).
pub fn host_cpu_suffix() -> &'static str {
    static SUFFIX: OnceLock<&'static str> = OnceLock::new();
    SUFFIX.get_or_init(|| {
        if kvm_usable().is_err() || starts_stopped("host") {
            return "";
        }
        if starts_stopped("host,-arch-capabilities") {
            eprintln!(
                "note: -cpu host fails on this KVM host (IA32_ARCH_CAPABILITIES refused); \
                 KVM rows run with -cpu host,-arch-capabilities"
            );
            return ",-arch-capabilities";
        }
        ""
    })
}

/// Whether QEMU/KVM with `-cpu cpu` gets as far as a stopped guest.
fn starts_stopped(cpu: &str) -> bool {
    let child = Command::new("timeout")
        .args([
            "--kill-after=2",
            "10",
            "qemu-system-x86_64",
            "-accel",
            "kvm",
        ])
        .args(["-M", "microvm", "-cpu", cpu, "-S", "-display", "none"])
        .args(["-serial", "none", "-monitor", "stdio"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut child) = child else {
        return false;
    };
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write;
        let _ = stdin.write_all(b"quit\n");
    }
    child.wait().is_ok_and(|s| s.success())
}

pub fn accel_args(accel: crate::Accel, args: &[&str]) -> Vec<&'static str> {
    if args.contains(&"-accel") {
        Vec::new()
    } else {
        vec!["-accel", accel.name()]
    }
}
