//! One configuration's run: the parsed kernel output and its verdict.

use crate::configs::{Accel, QEMU_EXIT_FAILURE, QEMU_EXIT_SUCCESS};
use crate::expectations::{self, Expect, SOURCES};
use clockhal_conformance::line::{self, Line};
use clockhal_conformance::{Status, Summary, Value};
use serde_json::{json, Value as Json};

/// One CHECK line.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckOut {
    pub name: String,
    pub status: Status,
    pub value: Value,
    pub unit: String,
    pub detail: String,
}

/// One source: its SOURCE line and its CHECK lines.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SourceOut {
    pub name: String,
    /// How many SOURCE lines named it (must be exactly one).
    pub reported: usize,
    pub present: bool,
    pub quality: Option<i32>,
    pub frequency_hz: Option<u64>,
    pub flags: Option<String>,
    pub cost: Option<String>,
    pub selected: bool,
    pub reason: String,
    pub checks: Vec<CheckOut>,
}

impl SourceOut {
    pub fn check(&self, name: &str) -> Option<&CheckOut> {
        self.checks.iter().find(|c| c.name == name)
    }

    pub fn counts(&self) -> Summary {
        let mut s = Summary::default();
        for c in &self.checks {
            s.add(c.status);
        }
        s
    }
}

/// How QEMU ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Exit {
    /// Exit status of `timeout qemu ...`.
    Code(i32),
    /// Killed by a signal.
    Signal,
    /// Could not be started (message).
    SpawnFailed(String),
}

/// Everything known about one configuration.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub name: &'static str,
    pub accel: Accel,
    pub ran: bool,
    pub skip_reason: Option<String>,
    pub exit: Option<Exit>,
    pub seconds: f64,
    pub header: Option<(u32, usize, String)>,
    pub summary: Option<Summary>,
    pub sources: Vec<SourceOut>,
    /// Results that differ from expectations (the run fails if any).
    pub unexpected: Vec<String>,
    pub log: String,
    /// The Linux peer in the same configuration (`linux_peer`).
    pub peer: Option<crate::linux_peer::PeerOutcome>,
    /// What the runner did in a row that pauses the VM (`pause`).
    pub pause: Option<crate::pause::PauseLog>,
}

impl Outcome {
    /// A configuration that was not run.
    pub fn skipped(name: &'static str, accel: Accel, reason: String) -> Outcome {
        Outcome {
            name,
            accel,
            ran: false,
            skip_reason: Some(reason),
            exit: None,
            seconds: 0.0,
            header: None,
            summary: None,
            sources: Vec::new(),
            unexpected: Vec::new(),
            log: String::new(),
            peer: None,
            pause: None,
        }
    }

    /// Parses the kernel's console output.
    pub fn from_output(
        name: &'static str,
        accel: Accel,
        exit: Exit,
        seconds: f64,
        output: &str,
        log: String,
    ) -> Outcome {
        let mut o = Outcome {
            ran: true,
            skip_reason: None,
            exit: Some(exit),
            seconds,
            log,
            ..Outcome::skipped(name, accel, String::new())
        };
        for s in SOURCES {
            o.sources.push(SourceOut {
                name: s.to_string(),
                ..SourceOut::default()
            });
        }
        for l in output.lines() {
            match line::parse(l) {
                Line::Header(h) => o.header = Some((h.version, h.cpus, h.reference.to_string())),
                Line::Source(s) => {
                    let e = o.source_mut(s.name);
                    e.reported += 1;
                    e.present = s.present;
                    e.quality = s.quality;
                    e.frequency_hz = s.freq_hz;
                    e.flags = s.flags.map(str::to_string);
                    e.cost = s.cost.map(str::to_string);
                    e.selected = s.selected;
                    e.reason = s.reason.to_string();
                }
                Line::Check(c) => o.source_mut(c.source).checks.push(CheckOut {
                    name: c.name.to_string(),
                    status: c.status,
                    value: c.value,
                    unit: c.unit.to_string(),
                    detail: c.detail.to_string(),
                }),
                Line::Summary(s) => o.summary = Some(s),
                Line::Other(_) => {}
            }
        }
        o.unexpected = o.violations();
        o.unexpected.extend(crate::timers::violations(&o));
        o
    }

    fn source_mut(&mut self, name: &str) -> &mut SourceOut {
        if let Some(i) = self.sources.iter().position(|s| s.name == name) {
            return &mut self.sources[i];
        }
        self.sources.push(SourceOut {
            name: name.to_string(),
            ..SourceOut::default()
        });
        self.sources.last_mut().expect("just pushed")
    }

    pub fn source(&self, name: &str) -> Option<&SourceOut> {
        self.sources.iter().find(|s| s.name == name)
    }

    /// The selected source's name, if exactly one was selected.
    pub fn selected(&self) -> Option<&str> {
        let mut sel = self.sources.iter().filter(|s| s.selected);
        match (sel.next(), sel.next()) {
            (Some(s), None) => Some(&s.name),
            _ => None,
        }
    }

    /// Check counts over all sources.
    pub fn counts(&self) -> Summary {
        let mut t = Summary::default();
        for s in &self.sources {
            let c = s.counts();
            t.passed += c.passed;
            t.failed += c.failed;
            t.skipped += c.skipped;
        }
        t
    }

    /// Everything that differs from the global rules and the table.
    fn violations(&self) -> Vec<String> {
        let mut v = Vec::new();
        match &self.exit {
            Some(Exit::Code(QEMU_EXIT_SUCCESS)) => {}
            Some(Exit::Code(QEMU_EXIT_FAILURE)) => {
                v.push("kernel exited with failure (a check failed or it panicked)".to_string())
            }
            Some(Exit::Code(124)) => v.push("QEMU timed out (kernel hung or too slow)".to_string()),
            Some(Exit::Code(c)) => v.push(format!(
                "QEMU exited with status {c} (kernel reported failure or crashed; success is {QEMU_EXIT_SUCCESS})"
            )),
            Some(Exit::Signal) => v.push("QEMU was killed by a signal".to_string()),
            Some(Exit::SpawnFailed(e)) => v.push(format!("could not start QEMU: {e}")),
            None => {}
        }
        match &self.header {
            None => v.push("no CLOCKHAL-CONFORMANCE header line".to_string()),
            Some((ver, _, _)) if *ver != line::VERSION => v.push(format!(
                "result format version {ver}, runner understands {}",
                line::VERSION
            )),
            _ => {}
        }
        match self.summary {
            None => v.push("no summary line (run did not complete)".to_string()),
            Some(s) if s != self.counts() => v.push(format!(
                "summary line says {s} but the CHECK lines add up to {}",
                self.counts()
            )),
            _ => {}
        }
        for s in &self.sources {
            // Timer devices report CHECK lines only (checked by `timers`).
            let timer =
                clockhal_conformance::TIMER_DEVICES.contains(&s.name.as_str()) || s.name == "none";
            if !SOURCES.contains(&s.name.as_str()) {
                if (!timer && s.checks.iter().any(|c| c.status == Status::Fail)) || s.reported > 0 {
                    v.push(format!("unknown source {:?} reported", s.name));
                }
            } else if s.reported != 1 {
                v.push(format!(
                    "{} reported {} times (expected once)",
                    s.name, s.reported
                ));
            }
            if s.present && s.checks.is_empty() {
                v.push(format!("{} is present but was not checked", s.name));
            }
            for c in s.checks.iter().filter(|c| c.status == Status::Fail) {
                v.push(format!(
                    "{} {} failed: {} {} ({})",
                    s.name, c.name, c.value, c.unit, c.detail
                ));
            }
        }
        let selected: Vec<_> = self
            .sources
            .iter()
            .filter(|s| s.selected)
            .map(|s| s.name.as_str())
            .collect();
        let expected = expectations::for_config(self.name)
            .filter(|r| r.expect == Expect::Selected)
            .count();
        if selected.len() > 1 {
            v.push(format!(
                "{} sources selected: {}",
                selected.len(),
                selected.join(", ")
            ));
        } else if expected == 0 && !selected.is_empty() {
            v.push(format!(
                "{} selected, but the table expects no selection",
                selected[0]
            ));
        }
        for row in expectations::for_config(self.name) {
            let src = self.source(row.source);
            let present = src.is_some_and(|s| s.present);
            let check = row.expect.check();
            let ok = match row.expect {
                Expect::Present => present,
                Expect::Absent => src.is_some_and(|s| s.reported > 0 && !s.present),
                Expect::Selected => present && src.is_some_and(|s| s.selected),
                Expect::CrossCpuPass | Expect::UserPagePass | Expect::StealTimePass => src
                    .zip(check)
                    .and_then(|(s, name)| s.check(name))
                    .is_some_and(|c| c.status == Status::Pass),
                Expect::StealTimeSkip => src
                    .zip(check)
                    .and_then(|(s, name)| s.check(name))
                    .is_some_and(|c| c.status == Status::Skip),
            };
            if !ok {
                let got = match (src, check) {
                    // A check of an absent source (steal time without kvmclock).
                    (Some(s), Some(name)) if s.check(name).is_some() => {
                        let c = s.check(name).expect("just found");
                        format!("{name} {} ({})", c.status, c.detail)
                    }
                    (Some(s), _) if s.reported == 0 => "not reported".to_string(),
                    (Some(s), _) if !s.present => format!("absent ({})", s.reason),
                    (Some(s), Some(name)) => match s.check(name) {
                        Some(c) => format!("{name} {} ({})", c.status, c.detail),
                        None => format!("no {name} check"),
                    },
                    (Some(s), None) => {
                        format!("present, selected={} ({})", s.selected as u8, s.reason)
                    }
                    (None, _) => "not reported".to_string(),
                };
                v.push(format!(
                    "{} expected {} [{}], got {}",
                    row.source,
                    row.expect.word(),
                    row.reason,
                    got
                ));
            }
        }
        v
    }

    /// The configuration's JSON object.
    pub fn to_json(&self) -> Json {
        let sources: Vec<Json> = self
            .sources
            .iter()
            .map(|s| {
                json!({
                    "name": s.name,
                    "present": s.present,
                    "quality": s.quality,
                    "frequency_hz": s.frequency_hz,
                    "flags": s.flags,
                    "read_cost_claim": s.cost,
                    "selected": s.selected,
                    "reason": s.reason,
                    "checks": s.checks.iter().map(|c| json!({
                        "name": c.name,
                        "status": c.status.as_str(),
                        "value": match c.value {
                            Value::I64(v) => json!(v),
                            Value::U64(v) => json!(v),
                            Value::None => Json::Null,
                        },
                        "unit": c.unit,
                        "detail": c.detail,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        let exit = match &self.exit {
            Some(Exit::Code(c)) => json!(c),
            _ => Json::Null,
        };
        json!({
            "name": self.name,
            "accel": self.accel.name(),
            "ran": self.ran,
            "skip_reason": self.skip_reason,
            "selected": self.selected(),
            "cpus": self.header.as_ref().map(|h| h.1),
            "reference": self.header.as_ref().map(|h| h.2.clone()),
            "exit_status": exit,
            "seconds": (self.seconds * 100.0).round() / 100.0,
            "ok": self.unexpected.is_empty(),
            "unexpected": self.unexpected,
            "log": self.log,
            "sources": sources,
            "linux_peer": self.peer.as_ref().map(|p| p.to_json(self)),
            "pause": self.pause.as_ref().map(|p| p.to_json(self)),
            "timers": self.ran.then(|| crate::timers::to_json(self)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "\
boot: hello
CLOCKHAL-CONFORMANCE version=1 cpus=1 reference=hpet
SOURCE name=kvmclock present=0 reason=no KVM signature
SOURCE name=hyperv-page present=0 reason=no Hyper-V signature
SOURCE name=hyperv-msr present=0 reason=no Hyper-V signature
SOURCE name=tsc present=1 quality=290 freq_hz=2600000000 flags=mono cost=no-trap selected=1 reason=usable
SOURCE name=hpet present=1 quality=250 freq_hz=100000000 flags=mono,smp,trap cost=one-trap selected=0 reason=
SOURCE name=acpi-pm present=1 quality=150 freq_hz=3579545 flags=mono,ext cost=one-trap selected=0 reason=
CHECK source=tsc name=monotonic status=pass value=0 unit=ns detail=ok
CHECK source=hpet name=monotonic status=pass value=0 unit=ns detail=ok
CHECK source=acpi-pm name=rate status=pass value=-12 unit=ppm detail=ok
CHECK source=tsc name=cross-cpu status=skip value=- unit=ns detail=single CPU
CHECK source=tsc name=user-page status=pass value=1234 unit=ns detail=ring 3: 20000 reads
CHECK source=kvmclock name=steal-time status=skip value=- unit=ns detail=no KVM signature at any hypervisor CPUID base
CHECK source=lapic-tsc-deadline name=timer-deadlines status=skip value=- unit=- detail=CPU offers no TSC-deadline mode
CHECK source=lapic-tsc-deadline name=timer-past status=skip value=- unit=- detail=CPU offers no TSC-deadline mode
CHECK source=lapic-tsc-deadline name=timer-cancel status=skip value=- unit=- detail=CPU offers no TSC-deadline mode
CHECK source=lapic-tsc-deadline name=timer-long status=skip value=- unit=- detail=CPU offers no TSC-deadline mode
CHECK source=lapic-oneshot name=timer-deadlines status=pass value=56583 unit=ns detail=median_ns=56583 max_ns=11784757 p90_ns=3628417 deadlines=1000 of 1000
CHECK source=lapic-oneshot name=timer-past status=pass value=8523 unit=ns detail=ok
CHECK source=lapic-oneshot name=timer-cancel status=pass value=0 unit=ns detail=ok
CHECK source=lapic-oneshot name=timer-long status=pass value=17870 unit=ns detail=ok
CHECK source=hpet-comparator name=timer-deadlines status=pass value=42826 unit=ns detail=median_ns=42826 max_ns=9740904 p90_ns=2993075 deadlines=1000 of 1000
CHECK source=hpet-comparator name=timer-past status=pass value=441150 unit=ns detail=ok
CHECK source=hpet-comparator name=timer-cancel status=pass value=0 unit=ns detail=ok
CHECK source=hpet-comparator name=timer-long status=skip value=- unit=- detail=not applicable: 64 bits
CHECK source=lapic-oneshot name=timer-selected status=pass value=- unit=- detail=selected, delivered its deadlines: lapic-oneshot(100, selected) hpet-comparator(50); LAPIC via xAPIC (MMIO)
12 passed, 0 failed, 7 skipped
";

    #[test]
    fn a_good_tcg_q35_run_has_no_violations() {
        let o = Outcome::from_output(
            "tcg-q35",
            Accel::Tcg,
            Exit::Code(QEMU_EXIT_SUCCESS),
            0.1,
            GOOD,
            String::new(),
        );
        assert_eq!(o.unexpected, Vec::<String>::new());
        assert_eq!(o.selected(), Some("tsc"));
        assert_eq!(
            o.source("acpi-pm").unwrap().check("rate").unwrap().value,
            Value::I64(-12)
        );
        let j = o.to_json();
        assert_eq!(j["sources"][5]["checks"][0]["value"], json!(-12));
        assert_eq!(j["sources"][3]["checks"][1]["value"], Json::Null);
        assert_eq!(j["timers"]["selected"], json!("lapic-oneshot"));
        assert_eq!(
            j["timers"]["devices"][1]["lateness_median_ns"],
            json!(56583)
        );
        assert_eq!(j["timers"]["devices"][2]["lateness_max_ns"], json!(9740904));
        assert_eq!(crate::timers::selected_cell(&o), "lapic-oneshot");
    }

    #[test]
    fn timer_rows_are_checked() {
        // The HPET comparator's cancel failed, and the selection moved.
        let bad = GOOD
            .replace(
                "source=hpet-comparator name=timer-cancel status=pass",
                "source=hpet-comparator name=timer-cancel status=fail",
            )
            .replace(
                "source=lapic-oneshot name=timer-selected status=pass",
                "source=hpet-comparator name=timer-selected status=pass",
            )
            .replace("12 passed, 0 failed", "11 passed, 1 failed");
        let o = Outcome::from_output(
            "tcg-q35",
            Accel::Tcg,
            Exit::Code(QEMU_EXIT_SUCCESS),
            0.1,
            &bad,
            String::new(),
        );
        let u = o.unexpected.join("\n");
        assert!(u.contains("hpet-comparator timer-cancel failed"), "{u}");
        assert!(
            u.contains("hpet-comparator expected timer checks pass"),
            "{u}"
        );
        assert!(u.contains("lapic-oneshot expected timer selected"), "{u}");
        assert!(!u.contains("unknown source"), "{u}");
        // A foreign row runs no timer checks: one that passes is unexpected.
        let o = Outcome::from_output(
            "hermit-q35",
            Accel::Tcg,
            Exit::Code(QEMU_EXIT_SUCCESS),
            0.1,
            GOOD,
            String::new(),
        );
        assert!(
            o.unexpected
                .iter()
                .any(|u| u.contains("expected no timer checks")),
            "{:?}",
            o.unexpected
        );
    }

    #[test]
    fn deviations_are_reported() {
        let bad = GOOD
            .replace("source=acpi-pm name=rate status=pass", "source=acpi-pm name=rate status=fail")
            .replace("12 passed, 0 failed", "11 passed, 1 failed")
            .replace("SOURCE name=hpet present=1 quality=250 freq_hz=100000000 flags=mono,smp,trap cost=one-trap selected=0 reason=", "SOURCE name=hpet present=0 reason=no table");
        let o = Outcome::from_output(
            "tcg-q35",
            Accel::Tcg,
            Exit::Code(0x23),
            0.1,
            &bad,
            String::new(),
        );
        let u = o.unexpected.join("\n");
        assert!(u.contains("kernel exited with failure"), "{u}");
        assert!(u.contains("acpi-pm rate failed: -12 ppm (ok)"), "{u}");
        assert!(u.contains("hpet expected present"), "{u}");
        assert!(!u.contains("hpet is present but"), "{u}");

        // The ring-3 clock page check is a row of the table too.
        let no_user_page = GOOD
            .replace("CHECK source=tsc name=user-page status=pass value=1234 unit=ns detail=ring 3: 20000 reads\n", "")
            .replace("12 passed", "11 passed");
        let o = Outcome::from_output(
            "tcg-q35",
            Accel::Tcg,
            Exit::Code(QEMU_EXIT_SUCCESS),
            0.1,
            &no_user_page,
            String::new(),
        );
        let u = o.unexpected.join("\n");
        assert!(
            u.contains("tsc expected user-page pass") && u.contains("no user-page check"),
            "{u}"
        );

        // So is the steal-time check: skipped under TCG, with the reason.
        let steal_ran = GOOD
            .replace("name=steal-time status=skip", "name=steal-time status=pass")
            .replace(
                "4 passed, 0 failed, 2 skipped",
                "5 passed, 0 failed, 1 skipped",
            );
        let o = Outcome::from_output(
            "tcg-q35",
            Accel::Tcg,
            Exit::Code(QEMU_EXIT_SUCCESS),
            0.1,
            &steal_ran,
            String::new(),
        );
        let u = o.unexpected.join("\n");
        assert!(
            u.contains("kvmclock expected steal-time skip") && u.contains("steal-time pass"),
            "{u}"
        );

        let truncated: String = GOOD.lines().take(5).map(|l| format!("{l}\n")).collect();
        let o = Outcome::from_output(
            "tcg-q35",
            Accel::Tcg,
            Exit::Code(124),
            60.0,
            &truncated,
            String::new(),
        );
        let u = o.unexpected.join("\n");
        assert!(
            u.contains("timed out")
                && u.contains("no summary line")
                && u.contains("reported 0 times"),
            "{u}"
        );
        assert!(u.contains("tsc expected selected"), "{u}");
    }
}
