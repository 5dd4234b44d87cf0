//! The human table and results.json.

use crate::expectations::SOURCES;
use crate::outcome::Outcome;
use clockhal_conformance::{Status, Summary};
use serde_json::json;
use std::fmt::Write;

/// Totals of check results over all configurations.
pub fn totals(outcomes: &[Outcome]) -> Summary {
    let mut t = Summary::default();
    for o in outcomes {
        let c = o.counts();
        t.passed += c.passed;
        t.failed += c.failed;
        t.skipped += c.skipped;
    }
    t
}

/// The whole results.json document.
pub fn json(outcomes: &[Outcome]) -> serde_json::Value {
    let t = totals(outcomes);
    json!({
        "configs": outcomes.iter().map(Outcome::to_json).collect::<Vec<_>>(),
        "passed": t.passed,
        "failed": t.failed,
        "skipped": t.skipped,
        "unexpected": outcomes.iter().map(|o| o.unexpected.len()).sum::<usize>(),
        "configs_skipped": outcomes.iter().filter(|o| !o.ran).count(),
        "linux_peer": crate::linux_peer::summary_json(outcomes),
    })
}

/// One cell per source: `-` absent, `pass/fail/skip` counts, `*` selected,
/// `!` a failed check.
fn cell(o: &Outcome, name: &str) -> String {
    let Some(s) = o.source(name) else {
        return "?".into();
    };
    if s.reported == 0 {
        return "?".into();
    }
    if !s.present {
        return "-".into();
    }
    let c = s.counts();
    let mut out = format!("{}/{}/{}", c.passed, c.failed, c.skipped);
    if s.selected {
        out.push('*');
    }
    if s.checks.iter().any(|c| c.status == Status::Fail) {
        out.push('!');
    }
    out
}

/// The matrix table plus the list of unexpected results.
pub fn table(outcomes: &[Outcome]) -> String {
    let mut t = String::new();
    let _ = write!(
        t,
        "{:<15} {:<5} {:<6} {:>6}  {:<9}",
        "config", "accel", "result", "time", "selected"
    );
    for s in SOURCES {
        let _ = write!(t, " {s:>11}");
    }
    t.push_str("  timer (median lateness)");
    t.push('\n');
    for o in outcomes {
        let result = if !o.ran {
            "SKIP"
        } else if o.unexpected.is_empty() {
            "ok"
        } else {
            "FAIL"
        };
        let _ = write!(
            t,
            "{:<15} {:<5} {:<6} {:>5.1}s  {:<9}",
            o.name,
            o.accel.name(),
            result,
            o.seconds,
            o.selected().unwrap_or("-")
        );
        for s in SOURCES {
            let c = if o.ran { cell(o, s) } else { String::new() };
            let _ = write!(t, " {c:>11}");
        }
        if o.ran {
            let _ = write!(t, "  {}", timer_cell(o));
        }
        t.push('\n');
    }
    t.push_str("cells: pass/fail/skip checks, * selected, ! failed check, - absent; timer: the device the kernel selected\n");
    for o in outcomes {
        if let Some(r) = &o.skip_reason {
            let _ = writeln!(t, "{}: skipped: {r}", o.name);
        }
        for u in &o.unexpected {
            let _ = writeln!(t, "{}: UNEXPECTED: {u}", o.name);
        }
    }
    let tot = totals(outcomes);
    let unexpected: usize = outcomes.iter().map(|o| o.unexpected.len()).sum();
    // The last line is the plain "N passed, N failed, N skipped" CI reads.
    let _ = writeln!(t, "unexpected results: {unexpected}");
    let _ = writeln!(t, "checks: {tot}");
    t
}

/// The selected timer device and its median lateness (`-`: none passed).
fn timer_cell(o: &Outcome) -> String {
    let name = crate::timers::selected_cell(o);
    let median = o
        .source(name)
        .and_then(|s| s.check("timer-deadlines"))
        .and_then(|c| match c.value {
            clockhal_conformance::Value::U64(v) => Some(v),
            _ => None,
        });
    match median {
        Some(ns) => format!("{name} ({:.1} us)", ns as f64 / 1_000.0),
        None => name.to_string(),
    }
}

/// Per-configuration clock table (sources, rating, rate, cost, selection).
pub fn details(o: &Outcome) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "== {} ({})", o.name, o.log);
    for s in o.sources.iter().filter(|s| s.reported > 0) {
        if !s.present {
            let _ = writeln!(t, "  {:<12} absent: {}", s.name, s.reason);
            continue;
        }
        let val = |c: &str| {
            s.check(c)
                .map_or("-".to_string(), |c| format!("{} {}", c.value, c.unit))
        };
        let _ = writeln!(
            t,
            "  {:<12} q={:<4} {:>11} Hz  cost={:<13} rate={:<10} res={:<9} {}{}",
            s.name,
            s.quality.map_or("?".into(), |q| q.to_string()),
            s.frequency_hz.map_or("?".into(), |f| f.to_string()),
            val("read-cost"),
            val("rate"),
            val("resolution"),
            if s.selected { "SELECTED " } else { "" },
            s.reason
        );
        for c in s.checks.iter().filter(|c| c.status != Status::Pass) {
            let _ = writeln!(t, "      {} {}: {}", c.name, c.status, c.detail);
        }
    }
    // The timer devices (CHECK lines only, no SOURCE line).
    for s in o
        .sources
        .iter()
        .filter(|s| s.reported == 0 && s.checks.iter().any(|c| c.name.starts_with("timer-")))
    {
        for c in &s.checks {
            let _ = writeln!(t, "  {:<18} {} {}: {}", s.name, c.name, c.status, c.detail);
        }
    }
    t
}
