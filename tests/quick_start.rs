//! The README's Quick start is the crate docs' (which rustdoc compiles as
//! a doc test): a user reading either gets code that builds.

/// The first ```` ```rust,no_run ```` block after `heading` in `text`,
/// with `prefix` (the crate docs' `//! `) stripped from each line.
fn block(text: &str, heading: &str, prefix: &str) -> String {
    let from = text
        .find(heading)
        .unwrap_or_else(|| panic!("no {heading:?}"));
    let mut lines = text[from..].lines().map(|l| {
        l.strip_prefix(prefix)
            .unwrap_or(l.trim_end_matches(prefix.trim_end()))
    });
    lines
        .by_ref()
        .find(|l| l.trim_end() == "```rust,no_run")
        .unwrap_or_else(|| panic!("no rust,no_run block after {heading:?}"));
    let body: Vec<&str> = lines.take_while(|l| l.trim_end() != "```").collect();
    assert!(body.len() > 10, "block after {heading:?} is too short");
    body.join("\n")
}

#[test]
fn readme_and_crate_docs_show_the_same_quick_start() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let readme = std::fs::read_to_string(format!("{dir}/README.md")).unwrap();
    let lib = std::fs::read_to_string(format!("{dir}/src/lib.rs")).unwrap();
    let from_readme = block(&readme, "## Quick start for a kernel", "");
    let from_docs = block(&lib, "//! ## Quick start (kernel)", "//! ");
    assert_eq!(from_readme, from_docs);
    // Paths a user depending only on clockhal can write.
    assert!(!from_docs.contains("clockhal_x86"), "{from_docs}");
}
