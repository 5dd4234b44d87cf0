//! The machine-readable result lines a test kernel prints and the matrix
//! runner parses (format version 1).
//!
//! ```text
//! CLOCKHAL-CONFORMANCE version=1 cpus=2 reference=hpet
//! SOURCE name=kvmclock present=1 quality=400 freq_hz=1000000000 flags=mono,smp,inv,migr,paused,percpu cost=no-trap selected=1 reason=highest rated
//! SOURCE name=hyperv-page present=0 reason=no Hyper-V signature in CPUID
//! CHECK source=kvmclock name=rate status=pass value=-3 unit=ppm detail=measured ...
//! 31 passed, 0 failed, 4 skipped
//! ```
//!
//! - One record per line; fields are `key=value` separated by single spaces,
//!   in the order shown; values contain no spaces except the last field
//!   (`reason` / `detail`), which runs to the end of the line.
//! - `SOURCE` lines for absent sources carry only `name`, `present=0` and
//!   `reason`.
//! - `value=-` means nothing was measured (skips).
//! - The summary line is the last line of a complete run; anything else on
//!   the console (boot messages, panics) is ignored by parsers as
//!   [`Line::Other`].

use crate::result::{CheckResult, Status, Summary, Value};
use clockhal_core::{ReadCost, Stability};
use core::fmt::{self, Write};

/// The format version written in the header line.
pub const VERSION: u32 = 1;

/// The first word of the header line.
pub const HEADER_TAG: &str = "CLOCKHAL-CONFORMANCE";

/// Writes the header line (with its newline).
pub fn write_header(w: &mut dyn Write, cpus: usize, reference: &str) -> fmt::Result {
    writeln!(
        w,
        "{HEADER_TAG} version={VERSION} cpus={cpus} reference={reference}"
    )
}

/// A present source's description, as the `SOURCE` line carries it.
#[derive(Clone, Copy, Debug)]
pub struct PresentSource<'a> {
    /// Source name.
    pub name: &'a str,
    /// Its rating.
    pub quality: i32,
    /// Its frequency, rounded to Hz.
    pub freq_hz: u64,
    /// Its stability flags.
    pub flags: Stability,
    /// Its claimed exits per read.
    pub cost: ReadCost,
    /// Whether the OS selected it.
    pub selected: bool,
    /// Why it was (or was not) selected, or rated as it is.
    pub reason: &'a str,
}

/// Writes a `SOURCE` line for a present source.
pub fn write_present_source(w: &mut dyn Write, s: &PresentSource<'_>) -> fmt::Result {
    write!(
        w,
        "SOURCE name={} present=1 quality={} freq_hz={} flags={} cost={} selected={} reason=",
        s.name, s.quality, s.freq_hz, s.flags, s.cost, s.selected as u8
    )?;
    write_text(w, s.reason)?;
    w.write_char('\n')
}

/// Writes a `SOURCE` line for an absent source, with why it is absent.
pub fn write_absent_source(
    w: &mut dyn Write,
    name: &str,
    reason: fmt::Arguments<'_>,
) -> fmt::Result {
    write!(w, "SOURCE name={name} present=0 reason=")?;
    let mut t = TextWriter(w);
    t.write_fmt(reason)?;
    w.write_char('\n')
}

/// Writes a `CHECK` line.
pub fn write_check(w: &mut dyn Write, r: &CheckResult<'_>) -> fmt::Result {
    write_check_line(
        w,
        r.source,
        r.check.name(),
        r.status,
        r.value,
        r.unit,
        format_args!("{}", r.detail),
    )
}

/// Writes a `CHECK` line for a check a kernel runs outside the suite (its
/// `name` is free; the runner keys checks by name).
pub fn write_check_line(
    w: &mut dyn Write,
    source: &str,
    name: &str,
    status: Status,
    value: Value,
    unit: &str,
    detail: fmt::Arguments<'_>,
) -> fmt::Result {
    write!(
        w,
        "CHECK source={source} name={name} status={status} value={value} unit={unit} detail="
    )?;
    TextWriter(w).write_fmt(detail)?;
    w.write_char('\n')
}

/// Writes the summary line (`N passed, N failed, N skipped`).
pub fn write_summary(w: &mut dyn Write, s: &Summary) -> fmt::Result {
    writeln!(w, "{s}")
}

fn write_text(w: &mut dyn Write, s: &str) -> fmt::Result {
    TextWriter(w).write_str(s)
}

/// Replaces line breaks so free text stays on its line.
struct TextWriter<'w>(&'w mut dyn Write);

impl Write for TextWriter<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for part in s.split(['\n', '\r']).enumerate() {
            if part.0 > 0 {
                self.0.write_char(' ')?;
            }
            self.0.write_str(part.1)?;
        }
        Ok(())
    }
}

/// A parsed header line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header<'a> {
    /// Format version.
    pub version: u32,
    /// CPUs the kernel runs on.
    pub cpus: usize,
    /// The reference source's name.
    pub reference: &'a str,
}

/// A parsed `SOURCE` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceRecord<'a> {
    /// Source name.
    pub name: &'a str,
    /// Whether it was found.
    pub present: bool,
    /// Rating (present sources).
    pub quality: Option<i32>,
    /// Frequency in Hz (present sources).
    pub freq_hz: Option<u64>,
    /// Stability tags (present sources).
    pub flags: Option<&'a str>,
    /// Claimed read cost (present sources).
    pub cost: Option<&'a str>,
    /// Whether it was selected.
    pub selected: bool,
    /// Free text.
    pub reason: &'a str,
}

/// A parsed `CHECK` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckRecord<'a> {
    /// Source name.
    pub source: &'a str,
    /// Check name (see [`Check::name`](crate::Check::name)).
    pub name: &'a str,
    /// Outcome.
    pub status: Status,
    /// Measured value.
    pub value: Value,
    /// Unit of the value.
    pub unit: &'a str,
    /// Free text.
    pub detail: &'a str,
}

/// One console line, classified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Line<'a> {
    /// The header.
    Header(Header<'a>),
    /// A `SOURCE` line.
    Source(SourceRecord<'a>),
    /// A `CHECK` line.
    Check(CheckRecord<'a>),
    /// The summary line.
    Summary(Summary),
    /// Anything else (including malformed records).
    Other(&'a str),
}

/// Splits `rest` into the `key=value` fields before ` {last}=` and the free
/// text after it.
fn split_last<'a>(rest: &'a str, last: &str) -> (&'a str, &'a str) {
    let mut pat = [0u8; 16];
    let plen = last.len() + 2;
    if plen > pat.len() {
        return (rest, "");
    }
    pat[0] = b' ';
    pat[1..plen - 1].copy_from_slice(last.as_bytes());
    pat[plen - 1] = b'=';
    let pat = core::str::from_utf8(&pat[..plen]).unwrap_or(" ");
    match rest.find(pat) {
        Some(p) => (&rest[..p], &rest[p + plen..]),
        None => match rest.strip_prefix(&pat[1..]) {
            Some(text) => ("", text),
            None => (rest, ""),
        },
    }
}

fn field<'a>(fields: &'a str, key: &str) -> Option<&'a str> {
    fields.split(' ').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then_some(v)
    })
}

fn parse_value(s: &str) -> Option<Value> {
    if s == "-" {
        Some(Value::None)
    } else if s.starts_with('-') {
        s.parse().ok().map(Value::I64)
    } else {
        s.parse().ok().map(Value::U64)
    }
}

fn parse_summary(line: &str) -> Option<Summary> {
    let mut it = line.split(", ");
    let mut num = |word: &str| -> Option<u32> {
        let part = it.next()?;
        let (n, w) = part.split_once(' ')?;
        (w == word).then(|| n.parse().ok())?
    };
    let s = Summary {
        passed: num("passed")?,
        failed: num("failed")?,
        skipped: num("skipped")?,
    };
    it.next().is_none().then_some(s)
}

/// Classifies one console line (trailing `\r`/spaces ignored).
pub fn parse(line: &str) -> Line<'_> {
    let line = line.trim_end();
    let other = Line::Other(line);
    if let Some(rest) = line
        .strip_prefix(HEADER_TAG)
        .and_then(|r| r.strip_prefix(' '))
    {
        let parsed = (|| {
            Some(Header {
                version: field(rest, "version")?.parse().ok()?,
                cpus: field(rest, "cpus")?.parse().ok()?,
                reference: field(rest, "reference")?,
            })
        })();
        return parsed.map_or(other, Line::Header);
    }
    if let Some(rest) = line.strip_prefix("SOURCE ") {
        let (fields, reason) = split_last(rest, "reason");
        let parsed = (|| {
            let present = field(fields, "present")? == "1";
            Some(SourceRecord {
                name: field(fields, "name")?,
                present,
                quality: field(fields, "quality").and_then(|v| v.parse().ok()),
                freq_hz: field(fields, "freq_hz").and_then(|v| v.parse().ok()),
                flags: field(fields, "flags"),
                cost: field(fields, "cost"),
                selected: field(fields, "selected") == Some("1"),
                reason,
            })
        })();
        return parsed.map_or(other, Line::Source);
    }
    if let Some(rest) = line.strip_prefix("CHECK ") {
        let (fields, detail) = split_last(rest, "detail");
        let parsed = (|| {
            Some(CheckRecord {
                source: field(fields, "source")?,
                name: field(fields, "name")?,
                status: Status::parse(field(fields, "status")?)?,
                value: parse_value(field(fields, "value")?)?,
                unit: field(fields, "unit")?,
                detail,
            })
        })();
        return parsed.map_or(other, Line::Check);
    }
    parse_summary(line).map_or(other, Line::Summary)
}

/// A fixed-capacity text buffer for one field or reason (160 bytes;
/// truncates at a character boundary): formatting without allocation.
pub struct Text {
    buf: [u8; 160],
    len: usize,
}

impl Text {
    /// An empty buffer.
    pub const fn new() -> Text {
        Text {
            buf: [0; 160],
            len: 0,
        }
    }

    /// What was written (whole characters only).
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl Default for Text {
    fn default() -> Self {
        Text::new()
    }
}

/// `Text::from(format_args!(...))`: formatted into a new buffer.
impl From<fmt::Arguments<'_>> for Text {
    fn from(args: fmt::Arguments<'_>) -> Text {
        let mut t = Text::new();
        let _ = t.write_fmt(args);
        t
    }
}

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Write for Text {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for ch in s.chars() {
            let mut tmp = [0u8; 4];
            let enc = ch.encode_utf8(&mut tmp).as_bytes();
            if self.len + enc.len() > self.buf.len() {
                break;
            }
            self.buf[self.len..self.len + enc.len()].copy_from_slice(enc);
            self.len += enc.len();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Check;
    use std::string::String;

    #[test]
    fn round_trip() {
        let mut s = String::new();
        write_header(&mut s, 2, "hpet").unwrap();
        write_present_source(
            &mut s,
            &PresentSource {
                name: "kvmclock",
                quality: 400,
                freq_hz: 1_000_000_000,
                flags: Stability::MONOTONIC_PER_CPU | Stability::SURVIVES_MIGRATION,
                cost: ReadCost::NoTrap,
                selected: true,
                reason: "best\nrated",
            },
        )
        .unwrap();
        write_absent_source(&mut s, "hpet", format_args!("no {} table", "HPET")).unwrap();
        write_check(
            &mut s,
            &CheckResult {
                source: "kvmclock",
                check: Check::Rate,
                status: Status::Pass,
                value: Value::I64(-12),
                unit: "ppm",
                detail: "a detail=with value=odd text",
            },
        )
        .unwrap();
        write_check(
            &mut s,
            &CheckResult {
                source: "tsc",
                check: Check::CrossCpu,
                status: Status::Skip,
                value: Value::None,
                unit: "ns",
                detail: "",
            },
        )
        .unwrap();
        write_summary(
            &mut s,
            &Summary {
                passed: 3,
                failed: 1,
                skipped: 2,
            },
        )
        .unwrap();
        s.push_str("random boot noise\r\n");

        let lines: std::vec::Vec<_> = s.lines().map(parse).collect();
        assert_eq!(
            lines[0],
            Line::Header(Header {
                version: 1,
                cpus: 2,
                reference: "hpet"
            })
        );
        let Line::Source(k) = lines[1] else {
            panic!("{:?}", lines[1])
        };
        assert_eq!(
            (k.name, k.present, k.quality, k.freq_hz, k.flags, k.cost, k.selected, k.reason),
            (
                "kvmclock",
                true,
                Some(400),
                Some(1_000_000_000),
                Some("mono,migr"),
                Some("no-trap"),
                true,
                "best rated"
            )
        );
        let Line::Source(h) = lines[2] else { panic!() };
        assert_eq!(
            (h.name, h.present, h.quality, h.reason),
            ("hpet", false, None, "no HPET table")
        );
        let Line::Check(c) = lines[3] else { panic!() };
        assert_eq!(
            (c.source, c.name, c.status, c.value, c.unit, c.detail),
            (
                "kvmclock",
                "rate",
                Status::Pass,
                Value::I64(-12),
                "ppm",
                "a detail=with value=odd text"
            )
        );
        let Line::Check(c) = lines[4] else { panic!() };
        assert_eq!((c.value, c.detail), (Value::None, ""));
        assert_eq!(
            lines[5],
            Line::Summary(Summary {
                passed: 3,
                failed: 1,
                skipped: 2
            })
        );
        assert_eq!(lines[6], Line::Other("random boot noise"));
    }

    #[test]
    fn malformed_lines_are_other() {
        for l in [
            "CHECK source=x name=y status=maybe value=1 unit=ns detail=",
            "SOURCE present=1",
            "1 passed, 2 failed",
            "1 passed, 2 failed, x skipped",
            "CLOCKHAL-CONFORMANCE version=one cpus=1 reference=tsc",
        ] {
            assert_eq!(parse(l), Line::Other(l), "{l}");
        }
    }
}
