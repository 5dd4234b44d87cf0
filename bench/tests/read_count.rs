//! `clockhal-read-count` end to end (debug build, few reads): it counts
//! every budgeted row under valgrind, and its `--check` fails for a row
//! over budget or a budgeted row that no longer exists. Where valgrind
//! cannot run, each test prints `SKIP <test>: <reason>` and returns.

use clockhal_bench::rows::{BUDGETED, FACADE_KVM};
use std::process::{Command, Output};

fn run(args: &[&str]) -> (Output, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_clockhal-read-count"))
        .args(["--reads", "200"])
        .args(args)
        .output()
        .expect("run clockhal-read-count");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    (out, stdout)
}

fn skipped(test: &str, stdout: &str) -> bool {
    match stdout
        .lines()
        .find(|l| l.starts_with("SKIP instruction counts:"))
    {
        Some(l) => {
            eprintln!("SKIP {test}: {l}");
            true
        }
        None => false,
    }
}

#[test]
fn every_budgeted_row_is_counted() {
    let (out, stdout) = run(&[]);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    if skipped("every_budgeted_row_is_counted", &stdout) {
        return;
    }
    for name in BUDGETED {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} not counted:\n{stdout}"));
        let instr: f64 = line[name.len()..]
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no count in {line:?}"));
        // A read executes at least the TSC instruction and a conversion.
        assert!(instr >= 3.0, "{line}");
    }
    assert!(stdout.contains("loop overhead subtracted"), "{stdout}");
}

#[test]
fn check_fails_over_budget_and_for_a_vanished_row() {
    let dir = std::env::temp_dir().join(format!("clockhal-read-count-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tight = dir.join("tight.json");
    std::fs::write(
        &tight,
        format!(
            r#"{{"recorded_on": "test", "rows": {{
                "{FACADE_KVM}": {{"budget": 1, "recorded": 1.0}},
                "no such row": {{"budget": 100, "recorded": 90.0}}}}}}"#
        ),
    )
    .unwrap();
    let (out, stdout) = run(&["--check", "--budgets", tight.to_str().unwrap()]);
    if skipped("check_fails_over_budget_and_for_a_vanished_row", &stdout) {
        return;
    }
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(&format!("OVER  {FACADE_KVM}: "))
            && stdout.contains(", budget 1 (recorded 1.00)"),
        "{stdout}"
    );
    assert!(stdout.contains("MISSING no such row"), "{stdout}");
    assert!(stdout.contains("2 rows, 2 failed"), "{stdout}");

    let loose = dir.join("loose.json");
    let rows: Vec<String> = BUDGETED
        .iter()
        .map(|n| format!(r#""{n}": {{"budget": 1000000, "recorded": 1.0}}"#))
        .collect();
    std::fs::write(&loose, format!(r#"{{"rows": {{{}}}}}"#, rows.join(","))).unwrap();
    let (out, stdout) = run(&["--check", "--budgets", loose.to_str().unwrap()]);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains(&format!("{} rows, 0 failed", BUDGETED.len())),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
