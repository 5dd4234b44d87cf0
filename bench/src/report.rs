//! The human table and `read-cost.json`.

use crate::measure::Stats;
use std::fmt::Write as _;

/// One finished row.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    /// What was timed.
    pub name: String,
    /// ns per call.
    pub stats: Stats,
    /// Median relative to the ordered-rdtsc row's median.
    pub ratio: f64,
}

/// Pairs names with stats and computes each median's ratio to row
/// `baseline`'s median.
pub fn lines(names: &[String], stats: &[Stats], baseline: usize) -> Vec<Line> {
    let base = stats[baseline].median;
    names
        .iter()
        .zip(stats)
        .map(|(n, s)| Line {
            name: n.clone(),
            stats: *s,
            ratio: s.median / base,
        })
        .collect()
}

/// A fixed-width table: name, median, min, max (ns per call), ratio.
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
        "{:<w$}  {:>9}  {:>9}  {:>9}  {:>8}",
        "read", "median ns", "min ns", "max ns", "x ordered"
    );
    for l in lines {
        let _ = writeln!(
            out,
            "{:<w$}  {:>9.2}  {:>9.2}  {:>9.2}  {:>8.2}",
            l.name, l.stats.median, l.stats.min, l.stats.max, l.ratio
        );
    }
    out
}

/// `{"rows":[{"name","ns_median","ns_min","ns_max","ratio_to_ordered_rdtsc"}], ...}`
/// plus a `"meta"` object of string pairs describing the run.
pub fn json(lines: &[Line], meta: &[(&str, String)]) -> String {
    let mut out = String::from("{\n  \"rows\": [\n");
    for (i, l) in lines.iter().enumerate() {
        let _ = write!(
            out,
            "    {{\"name\": {}, \"ns_median\": {}, \"ns_min\": {}, \"ns_max\": {}, \"ratio_to_ordered_rdtsc\": {}}}",
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
        let l = lines(&["a \"q\"".into(), "b".into()], &[s(10.0), s(15.0)], 0);
        assert_eq!(l[1].ratio, 1.5);
        let j = json(&l, &[("cpu", "x".into())]);
        assert!(j.contains(r#"{"name": "a \"q\"", "ns_median": 10.000, "ns_min": 9.000, "ns_max": 11.000, "ratio_to_ordered_rdtsc": 1.000}"#), "{j}");
        assert!(j.contains(r#""ratio_to_ordered_rdtsc": 1.500}"#));
        assert!(j.contains(r#""cpu": "x""#));
        assert_eq!(num(f64::NAN), "null");
    }
}
