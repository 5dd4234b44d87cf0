//! Instruction budgets of clockhal's fast paths
//! (`bench/instruction-budgets.json`) and the check against a count.
//!
//! A budget is the count recorded when the file was last regenerated plus a
//! margin ([`margin`]): enough for a compiler release that reorders a
//! register move or two, small enough that a new load, check or branch on
//! the read path shows. Regenerate after a deliberate change with
//! `cargo run -p clockhal-bench --release --bin clockhal-read-count -- --update-budgets`
//! and commit the file with the change that explains it.

use crate::count::Counts;
use serde_json::{json, Map, Value};
use std::fmt;

/// Allowed growth over the recorded count: 5 %, at least 2 instructions
/// (what a compiler release moving a spill or a register copy costs; one
/// more load-compare-branch check on a 120-instruction path still shows).
pub fn margin(count: f64) -> f64 {
    (count * 0.05).ceil().max(2.0)
}

/// The budget for a row counted at `count` instructions per read.
pub fn budget_for(count: f64) -> u64 {
    (count.ceil() + margin(count)) as u64
}

/// One budgeted row.
#[derive(Clone, Debug, PartialEq)]
pub struct Budget {
    /// Row name, as in the read-cost table.
    pub name: String,
    /// Instructions per read it may take.
    pub budget: u64,
    /// What it took when the budget was set.
    pub recorded: f64,
}

/// The budgets file.
#[derive(Clone, Debug, PartialEq)]
pub struct Budgets {
    /// Machine, compiler and valgrind the counts were recorded with.
    pub recorded_on: String,
    /// Every budgeted row.
    pub rows: Vec<Budget>,
}

/// Parses the budgets file.
pub fn parse(text: &str) -> Result<Budgets, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let rows = v
        .get("rows")
        .and_then(Value::as_object)
        .ok_or("no \"rows\" object")?;
    let recorded_on = v
        .get("recorded_on")
        .and_then(Value::as_str)
        .unwrap_or("unknown")
        .to_string();
    let rows = rows
        .iter()
        .map(|(name, r)| {
            let budget = r
                .get("budget")
                .and_then(Value::as_u64)
                .ok_or(format!("{name}: no integer \"budget\""))?;
            let recorded = r
                .get("recorded")
                .and_then(Value::as_f64)
                .ok_or(format!("{name}: no \"recorded\" count"))?;
            Ok(Budget {
                name: name.clone(),
                budget,
                recorded,
            })
        })
        .collect::<Result<_, String>>()?;
    Ok(Budgets { recorded_on, rows })
}

/// The outcome for one budgeted row.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Within budget.
    Pass {
        /// Instructions per read now.
        count: f64,
    },
    /// Over budget: a regression (or a deliberate change that needs a new
    /// budget).
    Over {
        /// Instructions per read now.
        count: f64,
    },
    /// Not counted in this run, for the reason given (e.g. the CPU has no
    /// RDTSCP): reported as SKIP.
    Skipped(String),
    /// The budgeted row does not exist any more (renamed?): a failure.
    Missing,
}

/// One checked row.
#[derive(Clone, Debug, PartialEq)]
pub struct Checked {
    /// The budget.
    pub budget: Budget,
    /// What happened.
    pub verdict: Verdict,
}

impl Checked {
    /// Whether this row fails the check.
    pub fn fails(&self) -> bool {
        matches!(self.verdict, Verdict::Over { .. } | Verdict::Missing)
    }
}

impl fmt::Display for Checked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.budget;
        match &self.verdict {
            Verdict::Pass { count } => write!(
                f,
                "ok    {}: {count:.2} instructions per read, budget {} (recorded {:.2})",
                b.name, b.budget, b.recorded
            ),
            Verdict::Over { count } => write!(
                f,
                "OVER  {}: {count:.2} instructions per read, budget {} (recorded {:.2})",
                b.name, b.budget, b.recorded
            ),
            Verdict::Skipped(why) => write!(f, "SKIP  {}: {why}", b.name),
            Verdict::Missing => write!(
                f,
                "MISSING {}: budgeted but not measured (renamed? update the budgets)",
                b.name
            ),
        }
    }
}

/// Checks every budgeted row against `counts`.
pub fn check(budgets: &[Budget], counts: &Counts) -> Vec<Checked> {
    budgets
        .iter()
        .map(|b| {
            let verdict = match (counts.get(&b.name), counts.why_not(&b.name)) {
                (Some(c), _) if c.per_read.ir <= b.budget as f64 => Verdict::Pass {
                    count: c.per_read.ir,
                },
                (Some(c), _) => Verdict::Over {
                    count: c.per_read.ir,
                },
                (None, Some(why)) => Verdict::Skipped(why),
                (None, None) => Verdict::Missing,
            };
            Checked {
                budget: b.clone(),
                verdict,
            }
        })
        .collect()
}

/// The budgets file for `counts`: every row in `names` that was counted,
/// at [`budget_for`] its count; `about` describes the machine and toolchain.
pub fn render(names: &[&str], counts: &Counts, about: &str) -> Result<String, String> {
    let mut rows = Map::new();
    for name in names {
        let c = counts
            .get(name)
            .ok_or(format!("{name} was not counted: cannot set its budget"))?;
        let ir = (c.per_read.ir * 100.0).round() / 100.0;
        rows.insert(
            name.to_string(),
            json!({"budget": budget_for(c.per_read.ir), "recorded": ir}),
        );
    }
    let doc = json!({
        "about": "Instructions per read (valgrind callgrind Ir, loop overhead subtracted) each clockhal fast path may execute: the recorded count, rounded up, + max(2, 5%). Checked by ./scripts/test-all.sh; regenerate after a deliberate change: cargo run -p clockhal-bench --release --bin clockhal-read-count -- --update-budgets",
        "recorded_on": about,
        "reads_per_row": counts.reads,
        "rows": rows,
    });
    serde_json::to_string_pretty(&doc)
        .map(|s| s + "\n")
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::count::{Count, Events};

    fn counts(rows: &[(&str, f64)]) -> Counts {
        Counts {
            rows: rows
                .iter()
                .map(|(n, ir)| Count {
                    name: n.to_string(),
                    per_read: Events {
                        ir: *ir,
                        ..Events::default()
                    },
                })
                .collect(),
            loop_overhead: Events::default(),
            reads: 100,
            valgrind: "valgrind-3.19.0".into(),
            cpu: String::new(),
            skipped: vec!["s: no RDTSCP".into()],
            uncounted: vec![],
        }
    }

    #[test]
    fn margins() {
        assert_eq!(budget_for(10.0), 12);
        assert_eq!(budget_for(29.5), 30 + 2);
        assert_eq!(budget_for(41.2), 42 + 3);
        assert_eq!(budget_for(126.0), 126 + 7);
    }

    #[test]
    fn over_budget_missing_and_skipped_rows() {
        let text = r#"{"rows": {
            "a": {"budget": 20, "recorded": 17.0},
            "b": {"budget": 20, "recorded": 17.0},
            "s": {"budget": 20, "recorded": 17.0},
            "gone": {"budget": 20, "recorded": 17.0}}}"#;
        let budgets = parse(text).unwrap();
        assert_eq!(budgets.recorded_on, "unknown");
        let c = counts(&[("a", 20.0), ("b", 20.01)]);
        let checked = check(&budgets.rows, &c);
        let by = |n: &str| checked.iter().find(|c| c.budget.name == n).unwrap();
        assert_eq!(by("a").verdict, Verdict::Pass { count: 20.0 });
        assert_eq!(by("b").verdict, Verdict::Over { count: 20.01 });
        assert!(by("b").fails());
        assert!(by("b")
            .to_string()
            .contains("OVER  b: 20.01 instructions per read, budget 20"));
        assert_eq!(
            by("s").verdict,
            Verdict::Skipped("not built under valgrind: no RDTSCP".into())
        );
        assert!(!by("s").fails());
        assert_eq!(by("gone").verdict, Verdict::Missing);
        assert!(by("gone").fails());
    }

    #[test]
    fn rendered_budgets_parse_back() {
        let c = counts(&[("a", 40.004), ("b", 7.0)]);
        let text = render(&["a", "b"], &c, "test").unwrap();
        let b = parse(&text).unwrap();
        assert_eq!(b.recorded_on, "test");
        let b = b.rows;
        assert_eq!(b.len(), 2);
        let a = b.iter().find(|b| b.name == "a").unwrap();
        assert_eq!((a.budget, a.recorded), (41 + 3, 40.0));
        assert!(render(&["nope"], &c, "test").is_err());
        assert!(parse("{}").is_err());
    }
}
