#!/usr/bin/env bash
# The deep checks (issue 18), run before landing a change to the parsers,
# the scaling arithmetic or the lock-free code:
#
#   miri   the pure and simulator-backed tests of clockhal-core, -x86, -sim
#          and the backends under Miri (undefined behaviour, data races)
#   fuzz   each libFuzzer target in fuzz/ for FUZZ_SECONDS (default 300 s)
#          and at least FUZZ_RUNS executions (default 10M: a target still
#          short of it goes on for the rest, up to 3x FUZZ_SECONDS more),
#          one job at a time, nice -n 10, starting from the committed corpus
#          (then minimised again: commit fuzz/corpus if it changed)
#   loom   the loom models (tests/loom_*.rs) over the real atomics code,
#          and each must fail with its mutant (cfg clockhal_loom_mutant)
#
#   ./scripts/deep-checks.sh                 # all three (~55 min on 2 cores:
#                                            # Miri ~16, fuzz ~36, loom ~5)
#   ./scripts/deep-checks.sh fuzz loom       # some of them
#   FUZZ_SECONDS=20 ./scripts/deep-checks.sh fuzz   # a short pass
#
# Tooling only: the libraries stay on stable. The pinned nightly (Miri,
# cargo-fuzz's sanitizer flags) and cargo-fuzz are installed when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

NIGHTLY=nightly-2026-05-15
CARGO_FUZZ_VERSION=0.13.2
FUZZ_SECONDS=${FUZZ_SECONDS:-300}
FUZZ_RUNS=${FUZZ_RUNS:-10000000}
TARGETS=(acpi pvclock hyperv frequency wrap_extender monotonic_clamp cpuid)
# Crates whose tests run under Miri: pure or simulator-backed (the hosted
# and live-page tests need syscalls and /proc, which Miri cannot run).
# clockhal-linux's /proc and inline-asm tests are ignored under Miri.
MIRI_CRATES=(clockhal-core clockhal-x86 clockhal-sim clockhal-kvmclock clockhal-hyperv
    clockhal-hpet clockhal-acpi-pm clockhal-linux)
# clockhal-tsc without tests/calibration.rs: its calibrations spin on the
# simulated clock for 10-50 ms of machine time each (~7 min per test under
# Miri); shrinking their budgets would change the precision they test.
MIRI_TSC_TESTS=(--lib --test discovery --test warp)
# The simulator leaks its shared pages on purpose (arch/sim/src/memory.rs);
# PROPTEST_CASES reaches the scaling proptest.
MIRIFLAGS_DEFAULT="-Zmiri-ignore-leaks -Zmiri-env-forward=PROPTEST_CASES"
LOOM_CRATES=(clockhal-core clockhal-kvmclock clockhal-hyperv)

step() { printf '\n==> %s\n' "$*"; }

ensure_nightly() {
    if ! rustup run "$NIGHTLY" cargo miri --version >/dev/null 2>&1; then
        rustup toolchain install "$NIGHTLY" --profile minimal -c miri -c rust-src -c llvm-tools
    fi
}

ensure_cargo_fuzz() {
    if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
        cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION"
    fi
}

run_miri() {
    ensure_nightly
    step "Miri ($NIGHTLY): ${MIRI_CRATES[*]}"
    local args=()
    for c in "${MIRI_CRATES[@]}"; do args+=(-p "$c"); done
    export MIRIFLAGS="${MIRIFLAGS:-$MIRIFLAGS_DEFAULT}"
    local rc=0
    nice -n 10 cargo +"$NIGHTLY" miri test --no-fail-fast --all-features --lib --tests \
        "${args[@]}" || rc=1
    step "Miri ($NIGHTLY): clockhal-tsc ${MIRI_TSC_TESTS[*]}"
    nice -n 10 cargo +"$NIGHTLY" miri test --no-fail-fast -p clockhal-tsc "${MIRI_TSC_TESTS[@]}" ||
        rc=1
    return $rc
}

run_fuzz() {
    ensure_nightly
    ensure_cargo_fuzz
    local summary=target/deep-checks/fuzz-summary.txt
    mkdir -p target/deep-checks
    : >"$summary"
    for t in "${TARGETS[@]}"; do
        step "fuzz $t for ${FUZZ_SECONDS}s"
        local flags=(-s none) dirs=("fuzz/corpus/$t")
        # Safe Rust: AddressSanitizer finds nothing bounds checks do not,
        # at 2-3x the cost; overflow checks and debug assertions stay on.
        if [[ $t == cpuid ]]; then
            # Its input names the signatures itself; tracing the simulator's
            # map-lookup compares would cost 4x the executions.
            flags+=(--no-trace-compares)
        fi
        if [[ $t == acpi ]]; then dirs+=(fuzz/seeds/acpi); fi
        mkdir -p "fuzz/corpus/$t"
        local log=target/deep-checks/fuzz-$t.log execs=0 cov=0 round=1
        : >"$log"
        # Round 1 for the time, round 2 (if needed) for the executions.
        local limit=(-max_total_time="$FUZZ_SECONDS")
        while :; do
            # Paths relative to fuzz/, where cargo fuzz runs.
            (cd fuzz && nice -n 10 cargo +"$NIGHTLY" fuzz run "${flags[@]}" "$t" \
                "${dirs[@]/#fuzz\//}" -- "${limit[@]}" -print_final_stats=1) \
                >"$log.$round" 2>&1 || {
                tail -40 "$log.$round"
                echo "FAIL: fuzz $t (log: $log.$round; a crash leaves its input in fuzz/artifacts/$t/)" >&2
                exit 1
            }
            cat "$log.$round" >>"$log"
            execs=$((execs + $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log.$round" |
                grep -o '[0-9]*$')))
            cov=$(grep -E '^#[0-9]+.*DONE' "$log.$round" | grep -o 'cov: [0-9]*' | grep -o '[0-9]*$')
            rm -f "$log.$round"
            if ((execs >= FUZZ_RUNS || round == 2)); then break; fi
            round=2
            limit=(-runs=$((FUZZ_RUNS - execs)) -max_total_time=$((3 * FUZZ_SECONDS)))
        done
        printf '%-16s %12s executions  %5s edges  0 crashes\n' "$t" "$execs" "$cov" | tee -a "$summary"
        # The run added its new inputs to fuzz/corpus/$t: keep it minimal.
        (cd fuzz && nice -n 10 cargo +"$NIGHTLY" fuzz cmin "${flags[@]}" "$t" "corpus/$t") \
            >>"$log" 2>&1
    done
    step "fuzz summary (${FUZZ_SECONDS}s per target)"
    cat "$summary"
}

run_loom() {
    step "loom (cfg loom, preemption bound ${LOOM_MAX_PREEMPTIONS:-3})"
    local args=()
    for c in "${LOOM_CRATES[@]}"; do args+=(-p "$c"); done
    # Own target dir: --cfg loom rebuilds everything.
    RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
        LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}" \
        nice -n 10 cargo test --release "${args[@]}" --test 'loom_*'
    step "loom: the read loop over per-CPU slots on loom's atomics"
    # clockhal-core alone: with clockhal_loom_slots its ReadHw and SlotPool
    # take loom's atomics, which the other crates' code cannot (hal/src/sync.rs).
    RUSTFLAGS="--cfg loom --cfg clockhal_loom_slots" CARGO_TARGET_DIR=target/loom-slots \
        LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}" \
        nice -n 10 cargo test --release -p clockhal-core --test loom_timeline
    step "loom: the seqlock readers without their acquire fence must fail"
    # Under this cfg the only tests are `should_panic(expected = "torn")`.
    RUSTFLAGS="--cfg loom --cfg clockhal_loom_mutant" CARGO_TARGET_DIR=target/loom-mutant \
        LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}" \
        nice -n 10 cargo test --release -p clockhal-kvmclock -p clockhal-hyperv --test 'loom_*'
    step "loom: the read loop with its floor raised by a plain load and store must fail"
    # The interrupt model is `should_panic(expected = "lost raise")` here;
    # the other timeline models are ignored.
    RUSTFLAGS="--cfg loom --cfg clockhal_loom_slots --cfg clockhal_loom_mutant" \
        CARGO_TARGET_DIR=target/loom-slots-mutant \
        LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}" \
        nice -n 10 cargo test --release -p clockhal-core --test loom_timeline
}

what=("$@")
[[ ${#what[@]} -gt 0 ]] || what=(miri fuzz loom)
start=$SECONDS
for w in "${what[@]}"; do
    case $w in
    miri) run_miri ;;
    fuzz) run_fuzz ;;
    loom) run_loom ;;
    *) echo "unknown check: $w (miri, fuzz, loom)" >&2 && exit 2 ;;
    esac
done
step "deep checks passed (${what[*]}) in $((SECONDS - start)) s"
