//! The human table and `read-cost.json`.

use crate::count::{CountError, Counts, Events};
use crate::measure::Stats;
use std::fmt::Write as _;
use std::path::PathBuf;

/// One finished row.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    /// What was timed.
    pub name: String,
    /// ns per call.
    pub stats: Stats,
    /// Median relative to the ordered-rdtsc row's median.
    pub ratio: f64,
    /// valgrind's counts per read, or why there are none.
    pub counts: Result<Events, String>,
}

/// Pairs names with stats and computes each median's ratio to row
/// `baseline`'s median (no counts yet: [`attach_counts`]).
pub fn lines(names: &[String], stats: &[Stats], baseline: usize) -> Vec<Line> {
    let base = stats[baseline].median;
    names
        .iter()
        .zip(stats)
        .map(|(n, s)| Line {
            name: n.clone(),
            stats: *s,
            ratio: s.median / base,
            counts: Err("not counted".into()),
        })
        .collect()
}

/// Gives every line its instruction counts from one counting run, or the
/// reason it has none.
pub fn attach_counts(lines: &mut [Line], counts: &Result<Counts, CountError>) {
    for l in lines {
        l.counts = match counts {
            Ok(c) => match c.get(&l.name) {
                Some(c) => Ok(c.per_read),
                None => Err(c.why_not(&l.name).unwrap_or_else(|| "not counted".into())),
            },
            Err(e) => Err(e.to_string()),
        };
    }
}

/// The workspace's target directory (`$CARGO_TARGET_DIR` when set).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join("target")
        })
}

/// A fixed-width table: name, median, min, max (ns per call), ratio, and
/// instructions per read where counted.
pub fn table(lines: &[Line]) -> String {
    let w = lines
        .iter()
        .map(|l| l.name.chars().count())
        .max()
        .unwrap_or(4)
        .max(4);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<w$}  {:>9}  {:>9}  {:>9}  {:>9}  {:>7}",
        "read", "median ns", "min ns", "max ns", "x ordered", "instr"
    );
    for l in lines {
        let instr = l
            .counts
            .as_ref()
            .map_or("-".to_string(), |e| format!("{:.1}", e.ir));
        let _ = writeln!(
            out,
            "{:<w$}  {:>9.2}  {:>9.2}  {:>9.2}  {:>9.2}  {:>7}",
            l.name, l.stats.median, l.stats.min, l.stats.max, l.ratio, instr
        );
    }
    out
}

/// The table as Markdown (for the README): read, median ns, x ordered
/// rdtsc, instructions per read.
pub fn markdown(lines: &[Line]) -> String {
    let mut out = String::from(
        "| read | median ns | x ordered rdtsc | instructions/read |\n|---|---:|---:|---:|\n",
    );
    for l in lines {
        let instr = l
            .counts
            .as_ref()
            .map_or("–".to_string(), |e| format!("{:.1}", e.ir));
        let _ = writeln!(
            out,
            "| {} | {:.2} | {:.2} | {instr} |",
            l.name.replace('|', "\\|"),
            l.stats.median,
            l.ratio
        );
    }
    out
}

/// `{"rows":[{"name","ns_median","ns_min","ns_max","ratio_to_ordered_rdtsc",
/// "instructions_per_read", ...}], ...}` plus a `"meta"` object of string
/// pairs describing the run. A row without counts has
/// `"instructions_per_read": null` and `"instructions_note"` saying why.
pub fn json(lines: &[Line], meta: &[(&str, String)]) -> String {
    let mut out = String::from("{\n  \"rows\": [\n");
    for (i, l) in lines.iter().enumerate() {
        let counts = match &l.counts {
            Ok(e) => format!(
                "\"instructions_per_read\": {}, \"loads_per_read\": {}, \"stores_per_read\": {}, \"branches_per_read\": {}",
                num(e.ir),
                num(e.dr),
                num(e.dw),
                num(e.bc)
            ),
            Err(why) => format!(
                "\"instructions_per_read\": null, \"instructions_note\": {}",
                quote(why)
            ),
        };
        let _ = write!(
            out,
            "    {{\"name\": {}, \"ns_median\": {}, \"ns_min\": {}, \"ns_max\": {}, \"ratio_to_ordered_rdtsc\": {}, {counts}}}",
            quote(&l.name),
            num(l.stats.median),
            num(l.stats.min),
            num(l.stats.max),
            num(l.ratio)
        );
        out.push_str(if i + 1 < lines.len() { ",\n" } else { "\n" });
    }
    out.push_str("  ],\n  \"meta\": {");
    for (i, (k, v)) in meta.iter().enumerate() {
        let _ = write!(
            out,
            "{}\n    {}: {}",
            if i == 0 { "" } else { "," },
            quote(k),
            quote(v)
        );
    }
    out.push_str("\n  }\n}\n");
    out
}

/// A JSON number with 3 decimals (`null` for NaN/inf, which JSON lacks).
fn num(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.3}")
    } else {
        "null".into()
    }
}

/// A JSON string literal.
fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_the_documented_shape() {
        let s = |m| Stats {
            median: m,
            min: m - 1.0,
            max: m + 1.0,
        };
        let mut l = lines(&["a \"q\"".into(), "b".into()], &[s(10.0), s(15.0)], 0);
        assert_eq!(l[1].ratio, 1.5);
        l[1].counts = Ok(Events {
            ir: 12.5,
            dr: 3.0,
            dw: 1.0,
            bc: 2.0,
            bi: 0.0,
        });
        let j = json(&l, &[("cpu", "x".into())]);
        assert!(j.contains(r#"{"name": "a \"q\"", "ns_median": 10.000, "ns_min": 9.000, "ns_max": 11.000, "ratio_to_ordered_rdtsc": 1.000, "instructions_per_read": null, "instructions_note": "not counted"}"#), "{j}");
        assert!(j.contains(r#""ratio_to_ordered_rdtsc": 1.500, "instructions_per_read": 12.500, "loads_per_read": 3.000, "stores_per_read": 1.000, "branches_per_read": 2.000}"#), "{j}");
        assert!(table(&l).contains("12.5"));
        assert!(
            markdown(&l).contains("| b | 15.00 | 1.50 | 12.5 |"),
            "{}",
            markdown(&l)
        );
        assert!(j.contains(r#""cpu": "x""#));
        assert_eq!(num(f64::NAN), "null");
    }
}
