//! The Linux peer's side of the printed table and of results.json.

use super::{rule, PeerOutcome, PeerRun, METHOD};
use crate::outcome::Outcome;
use clockhal_conformance::Value;
use rule::Verdict;
use serde_json::{json, Map, Value as Json};
use std::fmt::Write;

/// clockhal's selected source, its read cost in TSC cycles (the suite's
/// `read-cost` check) and that in ns at clockhal's TSC rate.
fn clockhal_read(o: &Outcome) -> (Option<&str>, Option<u64>, Option<f64>) {
    let sel = o.selected();
    let cycles = sel
        .and_then(|s| o.source(s))
        .and_then(|s| s.check("read-cost"))
        .filter(|c| c.unit == "cycles")
        .and_then(|c| match c.value {
            Value::U64(v) => Some(v),
            Value::I64(v) => u64::try_from(v).ok(),
            Value::None => None,
        });
    let tsc_hz = o
        .source("tsc")
        .filter(|t| t.present)
        .and_then(|t| t.frequency_hz)
        .filter(|&hz| hz > 0);
    let ns = cycles.zip(tsc_hz).map(|(c, hz)| c as f64 * 1e9 / hz as f64);
    (sel, cycles, ns)
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

impl PeerOutcome {
    /// The `linux_peer` object of a configuration in results.json.
    pub fn to_json(&self, o: &Outcome) -> Json {
        let r = self.report();
        let measured = matches!(self.run, PeerRun::Measured(_));
        let (sel, cycles, ns) = clockhal_read(o);
        let in_linux = sel
            .and_then(rule::linux_name)
            .and_then(|l| r.and_then(|r| r.cost(l)));
        let mut costs = Map::new();
        for c in r.map_or(&[][..], |r| &r.costs) {
            costs.insert(c.source.clone(), json!(c.ns));
        }
        let mut flags = Map::new();
        for (k, v) in r.map_or(&[][..], |r| &r.cpu_flags) {
            flags.insert(k.clone(), json!(v));
        }
        json!({
            "status": self.status(),
            "reason": match &self.run {
                PeerRun::Skipped(w) | PeerRun::Failed(w, _) | PeerRun::Hung(w) => Some(w),
                PeerRun::Measured(_) => None,
            },
            "kernel": self.kernel,
            "kernel_release": r.and_then(|r| r.kernel_release.clone()),
            "seconds": round1(self.seconds),
            "log": self.log,
            "chosen": if measured { r.and_then(|r| r.chosen()) } else { None },
            "chosen_at_boot": r.and_then(|r| r.boot_current.clone()),
            "available": r.map(|r| r.available.clone()),
            "cpus": r.and_then(|r| r.cpus),
            "cpu_vendor": r.and_then(|r| r.vendor.clone()),
            "cpu_flags": flags,
            "read_ns": costs,
            "read_method": METHOD,
            "not_measured": r.map(|r| r.not_measured.iter()
                .map(|(s, w)| json!({"source": s, "why": w})).collect::<Vec<_>>()),
            "klog": r.map(|r| r.klog.clone()),
            "linux_rule": self.row.map(|row| json!({
                "pick": row.linux_rule.pick,
                "why": row.linux_rule.why,
                "basis": "Linux's documented rule, not a measurement",
            })),
            "compared_with": self.compared_with.as_ref().map(|(pick, basis)| json!({
                "pick": pick, "basis": basis,
            })),
            "clockhal": {
                "selected": sel,
                "read_cycles": cycles,
                "read_ns": ns.map(round1),
                "read_method": "the suite's read-cost check: median TSC cycles per read in the \
                    kernel, counter overhead removed; ns at clockhal's TSC rate",
                "same_source_in_linux_ns": in_linux,
            },
            "retried": self.retried,
            "verdict": self.verdict.word(),
            "verdict_reason": self.verdict.reason(),
        })
    }
}

/// Counts over all configurations, for the top of results.json.
pub fn summary_json(outcomes: &[Outcome]) -> Json {
    let peers: Vec<&PeerOutcome> = outcomes.iter().filter_map(|o| o.peer.as_ref()).collect();
    let status = |s: &str| peers.iter().filter(|p| p.status() == s).count();
    let verdict = |v: &str| peers.iter().filter(|p| p.verdict.word() == v).count();
    json!({
        "measured": status("measured"),
        "skipped": status("skipped"),
        "failed": status("failed"),
        "rule_ok": verdict("ok"),
        "rule_known_gaps": verdict("known-gap"),
        "rule_exceptions": verdict("exception"),
        "rule_failed": verdict("FAIL") + verdict("STALE"),
        "rule_not_compared": verdict("SKIP"),
    })
}

fn ns(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{v:.0} ns"))
}

/// The clockhal-vs-Linux table, with the reasons behind each verdict.
pub fn table(outcomes: &[Outcome]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\nclockhal vs the Linux peer (clockhal: in-kernel read; Linux: clock_gettime from a process)"
    );
    let _ = writeln!(
        t,
        "{:<15} {:<9} {:>8}  {:<16} {:>8}  {:<22} {:<10} Linux offers (ns/read)",
        "config", "clockhal", "read", "Linux", "read", "clockhal's in Linux", "verdict"
    );
    let mut notes: Vec<(String, Vec<&str>)> = Vec::new();
    let mut note = |text: String, config: &'static str| match notes.iter_mut().find(|n| n.0 == text)
    {
        Some(n) => n.1.push(config),
        None => notes.push((text, vec![config])),
    };
    for o in outcomes {
        let Some(p) = &o.peer else { continue };
        let r = p.report();
        let (sel, _, cost) = clockhal_read(o);
        let linux = match &p.compared_with {
            Some((pick, "rule")) => format!("{pick} (rule)"),
            Some((pick, _)) => pick.clone(),
            None => "-".into(),
        };
        let linux_cost = match (&p.run, &p.compared_with) {
            (PeerRun::Measured(r), Some((pick, _))) => r.cost(pick),
            _ => None,
        };
        let ours_in_linux = sel
            .and_then(rule::linux_name)
            .and_then(|l| Some((l, r?.cost(l)?)))
            .map_or("-".into(), |(l, c)| format!("{l} {c:.0} ns"));
        let offers: Vec<String> = r
            .map(|r| {
                r.costs
                    .iter()
                    .map(|c| format!("{} {:.0}", c.source, c.ns))
                    .collect()
            })
            .unwrap_or_default();
        let _ = writeln!(
            t,
            "{:<15} {:<9} {:>8}  {:<16} {:>8}  {:<22} {:<10} {}",
            o.name,
            if o.ran {
                sel.unwrap_or("none")
            } else {
                "(skipped)"
            },
            ns(cost),
            linux,
            ns(linux_cost),
            ours_in_linux,
            p.verdict.word(),
            offers.join(", ")
        );
        match &p.run {
            PeerRun::Skipped(why) => note(format!("peer skipped: {why}"), o.name),
            PeerRun::Failed(why, _) => note(format!("peer FAILED: {why}"), o.name),
            PeerRun::Hung(why) => note(format!("Linux has no clock: {why}"), o.name),
            PeerRun::Measured(r) if r.boot_current.as_deref() != r.chosen() => note(
                format!(
                    "Linux changed its pick during the run: {} at boot, {} at the end",
                    r.boot_current.as_deref().unwrap_or("?"),
                    r.chosen().unwrap_or("?")
                ),
                o.name,
            ),
            PeerRun::Measured(_) => {}
        }
        if let (Some(row), Some((_, "rule"))) = (p.row, &p.compared_with) {
            note(
                format!(
                    "Linux rule: {}: {}",
                    row.linux_rule.pick, row.linux_rule.why
                ),
                o.name,
            );
        }
        if !p.verdict.reason().is_empty() {
            note(
                format!("{}: {}", p.verdict.word(), p.verdict.reason()),
                o.name,
            );
        }
        if let (Verdict::Holds, Some(gap), Some((pick, _))) = (
            &p.verdict,
            p.row.and_then(|r| r.known_gap),
            &p.compared_with,
        ) {
            note(
                format!("known gap not shown this run (Linux picks {pick}): {gap}"),
                o.name,
            );
        }
        for r in &p.retried {
            note(format!("peer booted again after a failed {r}"), o.name);
        }
    }
    for (text, configs) in notes {
        let _ = writeln!(t, "  {}: {text}", configs.join(", "));
    }
    let _ = writeln!(t, "  Linux read: {METHOD}");
    t
}
