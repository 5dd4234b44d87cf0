//! Every public fn of the library crates says whether it may run in an
//! interrupt or NMI handler: its doc block has a line starting
//! `Interrupt-safe:` (`yes`, `yes (NMI too)` or `no (why)`), so a kernel
//! author never has to read the code to know (issue 26 §2).
//!
//! A line-based reading of the sources: every `pub fn` (also `const`,
//! `unsafe`, `extern`; not `pub(crate)` and the like) and every method
//! declared in a `pub trait`, outside `#[cfg(test)]` modules. Its doc
//! block is the `///` lines above it, attributes (`#[inline]`, `#[cfg]`,
//! multi-line ones too) and plain comments between them skipped.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The library crates' source directories (not the simulator, the
/// conformance suite, the hosted Linux crate or the tools).
const LIBRARY_SOURCES: &[&str] = &[
    "src",
    "hal/src",
    "arch/x86/src",
    "arch/user/src",
    "backends/kvmclock/src",
    "backends/hyperv/src",
    "backends/tsc/src",
    "backends/hpet/src",
    "backends/acpi-pm/src",
    "backends/pit/src",
    "backends/rtc/src",
    "backends/lapic-timer/src",
];

const MARKER: &str = "Interrupt-safe:";

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The line without comments, string and char literals (their braces do
/// not count). `in_block`: inside a `/* */` comment (carried across lines).
fn code_of(line: &str, in_block: &mut bool) -> String {
    let b = line.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while i < b.len() {
        if *in_block {
            if b[i..].starts_with(b"*/") {
                *in_block = false;
                i += 2;
            } else {
                i += 1;
            }
            continue;
        }
        match b[i] {
            b'/' if b[i..].starts_with(b"//") => break,
            b'/' if b[i..].starts_with(b"/*") => {
                *in_block = true;
                i += 2;
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            // A char literal ('{', '\''), not a lifetime ('a).
            b'\'' if b.get(i + 2) == Some(&b'\'') => i += 3,
            b'\'' if b.get(i + 1) == Some(&b'\\') => {
                i += 2;
                while i < b.len() && b[i] != b'\'' {
                    i += 1;
                }
                i += 1;
            }
            c => {
                out.push(c as char);
                i += 1;
            }
        }
    }
    out
}

/// The fn's name if `code` (comment-free, trimmed) declares a public fn.
fn public_fn(code: &str) -> Option<&str> {
    let rest = code.strip_prefix("pub ")?;
    fn_name(rest)
}

/// The name after `fn`, past qualifiers (`const`, `unsafe`, `extern "C"`,
/// `async`).
fn fn_name(mut rest: &str) -> Option<&str> {
    loop {
        rest = rest.trim_start();
        if let Some(r) = rest.strip_prefix("fn ") {
            let end = r
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(r.len());
            return Some(&r[..end]);
        }
        let q = ["const ", "unsafe ", "async ", "extern "]
            .iter()
            .find(|q| rest.starts_with(**q))?;
        rest = &rest[q.len()..];
    }
}

/// Whether the doc block above line `at` has the marker.
fn documented(lines: &[&str], at: usize) -> bool {
    let mut i = at;
    // Inside a multi-line attribute, met from its end (`)]`) upwards.
    let mut in_attr = false;
    while i > 0 {
        i -= 1;
        let t = lines[i].trim();
        if in_attr {
            in_attr = !t.starts_with("#[");
            continue;
        }
        if let Some(doc) = t.strip_prefix("///") {
            if doc.trim_start().starts_with(MARKER) {
                return true;
            }
        } else if t.starts_with("#[") || t.starts_with("//") {
            // An attribute, or a plain comment between docs and fn.
        } else if t.ends_with(']') {
            in_attr = true;
        } else {
            return false;
        }
    }
    false
}

/// `file:line name` of every public fn without the marker.
fn undocumented(root: &Path, file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut missing = Vec::new();
    let mut depth = 0i32;
    let mut in_block = false;
    // Depths at which a skipped region (a cfg(test) module) or a public
    // trait's body started.
    let mut skip_until: Option<i32> = None;
    let mut traits: Vec<i32> = Vec::new();
    let mut cfg_test = false;
    for (n, line) in lines.iter().enumerate() {
        let code = code_of(line, &mut in_block);
        let t = code.trim();
        let opens = t.matches('{').count() as i32;
        let closes = t.matches('}').count() as i32;
        if skip_until.is_none() {
            if t.starts_with("#[cfg(test)]") || t.starts_with("#[cfg(all(test") {
                cfg_test = true;
            } else if cfg_test && !t.starts_with("#[") && !t.is_empty() {
                let module = t.starts_with("mod ") || t.starts_with("pub mod ");
                if module && opens > closes {
                    skip_until = Some(depth);
                }
                cfg_test = false;
            }
        }
        if skip_until.is_none() {
            let in_trait = traits.last() == Some(&(depth - 1));
            let name = public_fn(t).or_else(|| in_trait.then(|| fn_name(t)).flatten());
            if let Some(name) = name {
                if !documented(&lines, n) {
                    let rel = file.strip_prefix(root).unwrap().display();
                    missing.push(format!("{rel}:{} {name}", n + 1));
                }
            }
            let is_pub_trait = ["pub trait ", "pub unsafe trait "]
                .iter()
                .any(|p| t.starts_with(p));
            if is_pub_trait && opens > closes {
                traits.push(depth);
            }
        }
        depth += opens - closes;
        if skip_until.is_some_and(|d| depth <= d) {
            skip_until = None;
        }
        while traits.last().is_some_and(|d| depth <= *d) {
            traits.pop();
        }
    }
    missing
}

#[test]
fn every_public_fn_says_whether_it_is_interrupt_safe() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in LIBRARY_SOURCES {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 50, "found only {} source files", files.len());
    let missing: Vec<String> = files.iter().flat_map(|f| undocumented(root, f)).collect();
    let mut msg = String::new();
    for m in &missing {
        writeln!(msg, "{m}").unwrap();
    }
    assert!(
        missing.is_empty(),
        "{} public fns lack a doc line starting `{MARKER}` (yes / yes (NMI too) / no (why)):\n{msg}",
        missing.len()
    );
}

/// The reader finds what it must: a fn without the line, one with it
/// behind attributes, a trait method, and skips tests and crate-private
/// fns.
#[test]
fn the_check_itself_finds_and_skips_what_it_should() {
    let dir = std::env::temp_dir().join(format!("clockhal-irq-docs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("sample.rs");
    std::fs::write(
        &f,
        r#"
/// Documented.
/// Interrupt-safe: yes.
#[inline]
#[cfg_attr(
    feature = "x",
    allow(dead_code)
)]
pub const fn good() {}

/// Not documented.
#[must_use]
pub unsafe fn bad() -> u8 { b'{' }

pub(crate) fn internal() {}

/// A trait.
pub trait T {
    /// Documented.
    /// Interrupt-safe: no (spins).
    fn fine(&self);
    /// Not.
    fn missing(&self) { let _ = "}"; }
}

#[cfg(test)]
mod tests {
    pub fn helper() {}
}

impl S {
    /// Not either.
    pub fn method(&self) {}
}
"#,
    )
    .unwrap();
    let missing = undocumented(&dir, &f);
    let names: Vec<&str> = missing
        .iter()
        .map(|m| m.rsplit(' ').next().unwrap())
        .collect();
    assert_eq!(names, ["bad", "missing", "method"], "{missing:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
