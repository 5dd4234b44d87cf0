//! A real QEMU `stop`/`cont` while the kernel's `pause` check samples its
//! clock (issue 26: legitimate host pauses are not punished).
//!
//! In the rows of [`ROWS`] the runner boots the kernel with
//! `-append clockhal.pause_ms=HOLD_MS`, a QMP socket
//! (`-qmp unix:PATH,server=on,wait=off`) and a pipe to QEMU's stdin (the
//! guest's COM1 input). It reads the console as it comes; when the kernel
//! prints [`MARKER`] (its check is sampling), it sends `stop`, checks
//! `query-status` says paused, waits [`HOLD_MS`], sends `cont`, and writes
//! [`RESUMED_BYTE`] to the guest's console, which ends the check's wait.
//! The check then states what it saw; [`violations`] holds it against the
//! row's [`Seen`] and the QMP exchange. Everywhere else the kernel has no
//! `clockhal.pause_ms` and reports the check skipped with that reason.

use crate::configs::{QemuConfig, COMMON_ARGS};
use crate::outcome::{Exit, Outcome};
use crate::qemu::{accel_args, machine_args, Boot, STDERR_MARKER};
use clockhal_conformance::Status;
use serde_json::{json, Value as Json};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long the VM is held stopped.
pub const HOLD_MS: u64 = 2_000;
/// The kernel's line that asks for the pause (conformance/kernels/pvh
/// `pause::MARKER`).
pub const MARKER: &str = "CLOCKHAL-PAUSE ready";
/// Written to the guest's console after `cont` (the kernel's
/// `pause::RESUMED_BYTE`).
pub const RESUMED_BYTE: u8 = b'R';
/// How long to keep trying to connect to QEMU's QMP socket.
const QMP_CONNECT: Duration = Duration::from_secs(10);
/// Longest wait for one QMP answer.
const QMP_READ: Duration = Duration::from_secs(10);

/// How the guest must see the pause in a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// kvmclock's `GUEST_STOPPED` (QEMU's `KVM_KVMCLOCK_CTRL` at `cont`).
    GuestStopped,
    /// Only the cycle counter (the TSC counts through a KVM stop; no
    /// kvmclock area to carry the flag).
    CycleCounter,
    /// Not at all: TCG stops the TSC and every device clock with the VM.
    Nothing,
}

impl Seen {
    /// How the check's detail begins for this sighting.
    pub fn detail_prefix(self) -> &'static str {
        match self {
            Seen::GuestStopped => "seen by GUEST_STOPPED",
            Seen::CycleCounter => "seen by the cycle counter only",
            Seen::Nothing => "not seen",
        }
    }
}

/// The rows that pause the guest, with how the guest must see it, why,
/// and a known gap (the failure the row tolerates, by the text its detail
/// contains) if any.
pub const ROWS: &[(&str, Seen, &str, Option<&str>)] = &[
    ("tcg-q35", Seen::Nothing, "TCG stops the virtual TSC, the HPET and the PM timer with the VM: the guest cannot see the pause, and nothing may break", None),
    ("kvm-q35", Seen::GuestStopped, KVMCLOCK, None),
    ("kvm-pc", Seen::GuestStopped, KVMCLOCK, None),
    ("kvm-invtsc", Seen::GuestStopped, KVMCLOCK, None),
    ("kvm-microvm", Seen::GuestStopped, KVMCLOCK, None),
    ("kvm-q35-smp2", Seen::GuestStopped, KVMCLOCK, None),
    ("kvm-nokvmclock", Seen::CycleCounter, NO_AREA, Some(UNSUPERVISED)),
    ("kvm-kvm-off", Seen::CycleCounter, NO_AREA, Some(UNSUPERVISED)),
];
const KVMCLOCK: &str = "QEMU saves kvmclock at stop and restores it at cont (KVM_SET_CLOCK), then sets GUEST_STOPPED (KVM_KVMCLOCK_CTRL); the TSC counts on";
const NO_AREA: &str = "no kvmclock area to carry GUEST_STOPPED; the TSC counts through the stop while the HPET and the PM timer (QEMU's virtual clock) do not";
/// Known gap of the rows without kvmclock: a supervised TSC that is
/// current at the stop was read past its supervision deadline right after
/// `cont` (nothing tells the guest it was paused) and switched away from,
/// to be re-admitted rounds later. The deadline now asks the HPET whether
/// the ticks really stopped (`Clock::deadline_passed`); still tolerated
/// because ticks a loaded host starves for 2 s around the pause end the
/// supervision for real, and whether the TSC is current at the stop
/// depends on earlier ticks.
const UNSUPERVISED: &str = "demoted: tsc: supervised TSC not verified by a watchdog round in time";

/// The row's planned pause, if it has one: how it must be seen, why, and
/// its known gap.
pub fn row(name: &str) -> Option<(Seen, &'static str, Option<&'static str>)> {
    ROWS.iter()
        .find(|r| r.0 == name)
        .map(|&(_, seen, why, gap)| (seen, why, gap))
}

/// What the runner did to the VM.
#[derive(Clone, Debug, Default)]
pub struct PauseLog {
    /// Seconds after QEMU started: the marker line, `stop`'s answer,
    /// `cont`'s answer.
    pub marker_s: Option<f64>,
    pub stopped_s: Option<f64>,
    pub resumed_s: Option<f64>,
    /// `query-status` while stopped.
    pub status_while_stopped: Option<String>,
    /// What went wrong on the runner's side.
    pub error: Option<String>,
}

impl PauseLog {
    /// The hold as the runner measured it (between the answers to `stop`
    /// and `cont`), ms.
    pub fn held_ms(&self) -> Option<f64> {
        Some((self.resumed_s? - self.stopped_s?) * 1000.0)
    }

    /// The row's `pause` object in results.json.
    pub fn to_json(&self, o: &Outcome) -> Json {
        let check = pause_check(o);
        json!({
            "hold_ms_planned": HOLD_MS,
            "held_ms": self.held_ms().map(|h| h.round()),
            "marker_s": self.marker_s.map(|s| (s * 100.0).round() / 100.0),
            "status_while_stopped": self.status_while_stopped,
            "error": self.error,
            "expected_seen": row(o.name).map(|r| r.0.detail_prefix()),
            "known_gap": row(o.name).and_then(|r| r.2),
            "check": check.map(|(src, c)| json!({
                "source": src,
                "status": c.status.as_str(),
                "clock_step_ns": match c.value {
                    clockhal_conformance::Value::U64(v) => json!(v),
                    _ => Json::Null,
                },
                "detail": c.detail,
            })),
        })
    }
}

/// The `pause` CHECK line (whatever source it names: the clock's current
/// one) and its source.
fn pause_check(o: &Outcome) -> Option<(&str, &crate::outcome::CheckOut)> {
    o.sources
        .iter()
        .find_map(|s| s.check("pause").map(|c| (s.name.as_str(), c)))
}

/// What differs from the row's plan: in a pause row, the QMP exchange
/// worked, the check passed, and the guest saw the pause as [`Seen`] says;
/// elsewhere the check (if reported) was skipped.
pub fn violations(o: &Outcome, log: Option<&PauseLog>) -> Vec<String> {
    let mut v = Vec::new();
    let check = pause_check(o);
    let (Some((seen, why, gap)), Some(log)) = (row(o.name), log) else {
        if let Some((_, c)) = check.filter(|(_, c)| c.status != Status::Skip) {
            v.push(format!(
                "pause check {} in a row that plans no pause ({})",
                c.status, c.detail
            ));
        }
        return v;
    };
    if let Some(e) = &log.error {
        v.push(format!("QMP stop/cont: {e}"));
    }
    match check {
        None => v.push("no pause check reported".to_string()),
        Some((_, c)) if c.status == Status::Fail && gap.is_some_and(|g| c.detail.contains(g)) => {}
        Some((_, c)) if c.status != Status::Pass => {
            v.push(format!("pause check {}: {}", c.status, c.detail))
        }
        Some((_, c)) if !c.detail.starts_with(seen.detail_prefix()) => v.push(format!(
            "pause expected {:?} [{why}], got: {}",
            seen.detail_prefix(),
            c.detail
        )),
        Some(_) => {}
    }
    v
}

/// Drops the generic rules' entries for a failure the row lists as its
/// known gap (the kernel's failure exit and the failed check) when the
/// pause check is the only check that failed.
pub fn tolerate_known_gap(o: &mut Outcome) {
    let Some(gap) = row(o.name).and_then(|r| r.2) else {
        return;
    };
    let failed: Vec<_> = o
        .sources
        .iter()
        .flat_map(|s| s.checks.iter().map(move |c| (s.name.as_str(), c)))
        .filter(|(_, c)| c.status == Status::Fail)
        .collect();
    let [(src, c)] = failed[..] else { return };
    if c.name != "pause" || !c.detail.contains(gap) {
        return;
    }
    let check_line = format!("{src} pause failed:");
    o.unexpected
        .retain(|u| !u.starts_with("kernel exited with failure") && !u.starts_with(&check_line));
}

/// A socket path short enough for `sun_path` (108 bytes), one per boot.
fn socket_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("clockhal-qmp-{}-{name}.sock", std::process::id()))
}

/// Boots `config` as `qemu::boot` does, plus the pause: see the module docs.
pub fn boot(config: &QemuConfig, kernel: &Path, timeout_s: u64, log: &Path) -> (Boot, PauseLog) {
    let sock = socket_path(config.name);
    let _ = std::fs::remove_file(&sock);
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
    .arg("-append")
    .arg(format!("clockhal.pause_ms={HOLD_MS}"))
    .arg("-qmp")
    .arg(format!("unix:{},server=on,wait=off", sock.display()))
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let command_line = format!("{cmd:?}");
    let start = Instant::now();
    let mut pause = PauseLog::default();
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let b = Boot {
                exit: Exit::SpawnFailed(e.to_string()),
                text: String::new(),
                seconds: 0.0,
            };
            return (b, pause);
        }
    };
    let mut stdin = child.stdin.take();
    let stderr = child.stderr.take().map(|mut e| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = e.read_to_end(&mut s);
            String::from_utf8_lossy(&s).into_owned()
        })
    });
    let mut text = String::new();
    if let Some(out) = child.stdout.take() {
        let mut out = BufReader::new(out);
        let mut line = Vec::new();
        while out.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
            let l = String::from_utf8_lossy(&line).into_owned();
            line.clear();
            let is_marker = l.trim_end() == MARKER;
            text.push_str(&l);
            if is_marker && pause.marker_s.is_none() {
                pause.marker_s = Some(start.elapsed().as_secs_f64());
                if let Err(e) = stop_hold_cont(&sock, start, &mut pause, stdin.as_mut()) {
                    pause.error = Some(e);
                }
            }
        }
    }
    let status = child.wait();
    drop(stdin);
    let _ = std::fs::remove_file(&sock);
    let seconds = start.elapsed().as_secs_f64();
    // Serial output ends lines with "\r\n"; qemu::boot's text has them too.
    let err = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
    if !err.trim().is_empty() {
        text.push_str(STDERR_MARKER);
        text.push_str(&err);
    }
    if pause.marker_s.is_none() && pause.error.is_none() {
        pause.error = Some(format!("the kernel never printed {MARKER:?}"));
    }
    let exit = match status {
        Ok(s) => s.code().map_or(Exit::Signal, Exit::Code),
        Err(e) => Exit::SpawnFailed(e.to_string()),
    };
    let _ = std::fs::write(log, format!("# {command_line}\n{text}"));
    (
        Boot {
            exit,
            text,
            seconds,
        },
        pause,
    )
}

/// `stop`, `query-status`, the hold, `cont`, then the byte on the guest's
/// console (sent even when QMP failed, so the kernel's wait ends).
fn stop_hold_cont(
    sock: &Path,
    start: Instant,
    log: &mut PauseLog,
    stdin: Option<&mut std::process::ChildStdin>,
) -> Result<(), String> {
    let result = (|| {
        let mut qmp = Qmp::connect(sock)?;
        qmp.execute("stop")?;
        log.stopped_s = Some(start.elapsed().as_secs_f64());
        let status = qmp.execute("query-status")?;
        log.status_while_stopped = status["status"].as_str().map(str::to_string);
        if status["running"] != json!(false) {
            return Err(format!("query-status after stop: {status}"));
        }
        std::thread::sleep(Duration::from_millis(HOLD_MS));
        qmp.execute("cont")?;
        log.resumed_s = Some(start.elapsed().as_secs_f64());
        Ok(())
    })();
    let sent = match stdin {
        Some(s) => s.write_all(&[RESUMED_BYTE]).and_then(|()| s.flush()),
        None => Ok(()),
    };
    result?;
    sent.map_err(|e| format!("cannot write to the guest's console: {e}"))
}

/// A QMP connection after the capabilities handshake.
struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Qmp {
    fn connect(sock: &Path) -> Result<Qmp, String> {
        let deadline = Instant::now() + QMP_CONNECT;
        let stream = loop {
            match UnixStream::connect(sock) {
                Ok(s) => break s,
                Err(e) if Instant::now() >= deadline => {
                    return Err(format!("cannot connect to {}: {e}", sock.display()))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        };
        stream
            .set_read_timeout(Some(QMP_READ))
            .map_err(|e| e.to_string())?;
        let writer = stream.try_clone().map_err(|e| e.to_string())?;
        let mut q = Qmp {
            reader: BufReader::new(stream),
            writer,
        };
        let greeting = q.message()?;
        if greeting.get("QMP").is_none() {
            return Err(format!("not a QMP greeting: {greeting}"));
        }
        q.execute("qmp_capabilities")?;
        Ok(q)
    }

    /// One JSON message (QMP sends one per line).
    fn message(&mut self) -> Result<Json, String> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => Err("QMP closed the connection".to_string()),
            Ok(_) => {
                serde_json::from_str(&line).map_err(|e| format!("bad QMP message {line:?}: {e}"))
            }
            Err(e) => Err(format!("reading QMP: {e}")),
        }
    }

    /// Runs `command` and returns its `return` value (events in between
    /// are skipped).
    fn execute(&mut self, command: &str) -> Result<Json, String> {
        let req = json!({ "execute": command }).to_string() + "\n";
        self.writer
            .write_all(req.as_bytes())
            .map_err(|e| format!("sending {command}: {e}"))?;
        loop {
            let m = self.message()?;
            if let Some(r) = m.get("return") {
                return Ok(r.clone());
            }
            if let Some(e) = m.get("error") {
                return Err(format!("{command}: {e}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configs::{Accel, CONFIGS, QEMU_EXIT_SUCCESS};

    #[test]
    fn every_pause_row_is_a_config() {
        for (name, _, why, _) in ROWS {
            assert!(CONFIGS.iter().any(|c| c.name == *name), "{name}");
            assert!(!why.is_empty());
        }
    }

    const RUN: &str = "\
CLOCKHAL-CONFORMANCE version=1 cpus=1 reference=hpet
SOURCE name=kvmclock present=1 quality=400 freq_hz=1000000000 flags=mono cost=no-trap selected=1 reason=usable
CHECK source=kvmclock name=pause status=pass value=169603 unit=ns detail=seen by GUEST_STOPPED: clock +169603 ns, cycle counter +1996808011 ns (hold 2000 ms)
1 passed, 0 failed, 0 skipped
";

    fn outcome(name: &'static str, text: &str) -> Outcome {
        Outcome::from_output(
            name,
            Accel::Kvm,
            Exit::Code(QEMU_EXIT_SUCCESS),
            1.0,
            text,
            String::new(),
        )
    }

    fn held() -> PauseLog {
        PauseLog {
            marker_s: Some(1.0),
            stopped_s: Some(1.1),
            resumed_s: Some(3.1),
            status_while_stopped: Some("paused".into()),
            error: None,
        }
    }

    #[test]
    fn a_pause_seen_as_the_row_says_is_no_violation() {
        let o = outcome("kvm-q35", RUN);
        assert_eq!(violations(&o, Some(&held())), Vec::<String>::new());
        let j = held().to_json(&o);
        assert_eq!(j["check"]["clock_step_ns"], json!(169603));
        assert_eq!(j["held_ms"], json!(2000.0));
    }

    #[test]
    fn a_pause_seen_otherwise_or_failed_or_missing_is_a_violation() {
        let v = violations(&outcome("kvm-nokvmclock", RUN), Some(&held()));
        assert!(v[0].contains("seen by the cycle counter only"), "{v:?}");
        let failed = RUN
            .replace("status=pass", "status=fail")
            .replace("1 passed, 0 failed", "0 passed, 1 failed");
        let v = violations(&outcome("kvm-q35", &failed), Some(&held()));
        assert!(v[0].starts_with("pause check fail"), "{v:?}");
        let none = RUN.replace("name=pause", "name=other");
        let v = violations(&outcome("kvm-q35", &none), Some(&held()));
        assert_eq!(v, ["no pause check reported"]);
        let mut broken = held();
        broken.error = Some("cannot connect".into());
        let v = violations(&outcome("kvm-q35", RUN), Some(&broken));
        assert_eq!(v, ["QMP stop/cont: cannot connect"]);
    }

    #[test]
    fn a_known_gap_is_tolerated_only_where_the_row_lists_it() {
        let gap = RUN
            .replace(
                "status=pass value=169603 unit=ns detail=seen by GUEST_STOPPED: clock +169603 ns, cycle counter +1996808011 ns (hold 2000 ms)",
                "status=fail value=304004 unit=ns detail=the pause moved the clock from tsc to hpet (seen by the cycle counter only; now on hpet; demoted: tsc: supervised TSC not verified by a watchdog round in time)",
            )
            .replace("1 passed, 0 failed", "0 passed, 1 failed");
        let v = violations(&outcome("kvm-kvm-off", &gap), Some(&held()));
        assert_eq!(v, Vec::<String>::new());
        // The generic rules' entries for it are dropped, nothing else.
        let mut o = outcome("kvm-kvm-off", &gap);
        // (The fixture is no full kvm-kvm-off run: only these entries.)
        o.unexpected = vec![
            "kernel exited with failure (a check failed or it panicked)".into(),
            "kvmclock pause failed: 304004 ns (...)".into(),
            "something else".into(),
        ];
        tolerate_known_gap(&mut o);
        assert_eq!(o.unexpected, ["something else"]);
        let v = violations(&outcome("kvm-q35", &gap), Some(&held()));
        assert!(v[0].starts_with("pause check fail"), "{v:?}");
    }

    #[test]
    fn outside_the_pause_rows_the_check_must_be_skipped() {
        let v = violations(&outcome("kvm-microvm-x", RUN), None);
        assert!(v[0].contains("plans no pause"), "{v:?}");
        let skipped = RUN
            .replace("status=pass value=169603", "status=skip value=-")
            .replace(
                "1 passed, 0 failed, 0 skipped",
                "0 passed, 0 failed, 1 skipped",
            );
        assert!(violations(&outcome("tcg-pc", &skipped), None).is_empty());
    }
}
