//! The benchmark binary end to end, with tiny sample counts: it runs, writes
//! the documented JSON, measures every row it promises, and counts the
//! instructions of the clockhal rows (or says why not).

use std::process::Command;

#[test]
fn writes_the_documented_json_with_every_core_row() {
    let out = std::env::temp_dir().join(format!("clockhal-bench-cli-{}.json", std::process::id()));
    let run = Command::new(env!("CARGO_BIN_EXE_clockhal-bench"))
        .args([
            "--samples",
            "3",
            "--batch",
            "200",
            "--reads",
            "200",
            "--out",
        ])
        .arg(&out)
        .output()
        .expect("run the bench");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "bench failed: {}\n{stdout}",
        String::from_utf8_lossy(&run.stderr)
    );
    let json = std::fs::read_to_string(&out).expect("JSON written");
    let _ = std::fs::remove_file(&out);
    assert!(json.starts_with("{\n  \"rows\": ["), "{json}");
    for row in [
        "rdtsc",
        "ordered rdtsc (Native::rdtsc_ordered)",
        "rdtscp",
        "clockhal TSC -> ns (Tsc::read + Scale)",
        "clockhal::Clock::now() (hosted, tsc)",
        "clockhal::Clock::now() via probe (tsc)",
        "clockhal::Clock::now() via probe (kvmclock, stable page)",
        "clockhal::Clock::now() via probe (Hyper-V page)",
        "clockhal kvmclock -> ns (stable page)",
        "clockhal kvmclock -> ns (clamp, 1 thread)",
        "clockhal Hyper-V page -> ns",
        "std::time::Instant::now()",
        "clock_gettime(CLOCK_MONOTONIC) (vDSO)",
        "quanta::Instant::now()",
        "minstant::Instant::now()",
    ] {
        let key = format!("{{\"name\": \"{row}\", \"ns_median\": ");
        assert!(json.contains(&key), "row {row} missing:\n{json}");
        assert!(
            stdout.contains(row),
            "row {row} missing from the table:\n{stdout}"
        );
    }
    // Every clockhal fast path has an instruction count, or the reason
    // valgrind could not run is recorded; rows never counted say why.
    let counted = !stdout.contains("SKIP instruction counts:");
    for row in clockhal_bench::rows::BUDGETED {
        let line = json
            .lines()
            .find(|l| l.contains(&format!("{{\"name\": \"{row}\"")))
            .unwrap_or_else(|| panic!("{row} missing"));
        if counted {
            assert!(
                line.contains("\"instructions_per_read\": ") && !line.contains("null"),
                "{line}"
            );
        } else {
            assert!(line.contains("\"instructions_note\": \"SKIP"), "{line}");
        }
    }
    let std_row = json
        .lines()
        .find(|l| l.contains("\"std::time::Instant::now()\""))
        .unwrap();
    assert!(
        std_row.contains("\"instructions_per_read\": null, \"instructions_note\": "),
        "{std_row}"
    );
    // The baseline's ratio to itself.
    assert!(json.contains(r#"{"name": "ordered rdtsc (Native::rdtsc_ordered)", "ns_median": "#));
    let base = json
        .lines()
        .find(|l| l.contains("\"ordered rdtsc (Native::rdtsc_ordered)\""))
        .unwrap();
    assert!(
        base.contains("\"ratio_to_ordered_rdtsc\": 1.000, "),
        "{base}"
    );
    // Rows needing a live page or a second CPU are either measured or
    // skipped with a printed reason, never silently absent.
    for row in [
        "clockhal kvmclock (live page, read_area)",
        "clockhal kvmclock -> ns (clamp, 2 threads)",
    ] {
        assert!(
            json.contains(&format!("\"{row}\"")) || stdout.contains(&format!("SKIP row {row}: ")),
            "{row} neither measured nor skipped with a reason"
        );
    }
}
