#!/usr/bin/env bash
# Runs every clockhal test on a fresh machine: formatting, lints, host tests
# (simulated machine), no_std builds for x86_64-unknown-none, docs, the kernel
# crates, and the QEMU conformance matrix.
#
#   ./scripts/test-all.sh            # everything
#   SKIP_MATRIX=1 ./scripts/test-all.sh   # everything but QEMU
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

step() { printf '\n==> %s\n' "$*"; }

# Kernel crates live in their own workspace (they link for bare metal).
KERNELS=conformance/kernels

step "format"
cargo fmt --all -- --check
(cd "$KERNELS" && cargo fmt --all -- --check)

step "clippy (host workspace, all targets, all features)"
cargo clippy --workspace --all-targets --all-features -- -D warnings

step "clippy (kernel crates, x86_64-unknown-none)"
(cd "$KERNELS" && cargo clippy --release --workspace --lib --bins --examples -- -D warnings)

step "host tests (simulated machine)"
cargo test --workspace --all-features --exclude clockhal-invariants
# What a kernel that disables backends sees (rejected "feature disabled").
cargo test -p clockhal --no-default-features --features tsc,kvmclock --test feature_disabled

step "invariant checks: seeded random stream + fuzz corpus replay (deep runs: scripts/deep-checks.sh)"
(cd fuzz && cargo fmt --all -- --check)
cargo test -q -p clockhal-invariants -- --nocapture

step "live KVM pvclock page of this machine (SKIP lines say why where absent)"
cargo test -q -p clockhal-bench --test live_pvclock -- --nocapture --test-threads 1

step "no_std builds for x86_64-unknown-none"
LIBS=(clockhal-core clockhal-x86 clockhal-kvmclock clockhal-hyperv clockhal-tsc clockhal-hpet clockhal-acpi-pm clockhal-pit clockhal-rtc clockhal-conformance)
for p in "${LIBS[@]}"; do
    cargo build -q -p "$p" --target x86_64-unknown-none --no-default-features
done
cargo build -q -p clockhal --target x86_64-unknown-none --no-default-features
for f in kvmclock hyperv tsc hpet acpi-pm defmt embedded-time; do
    echo "  clockhal --features $f"
    cargo build -q -p clockhal --target x86_64-unknown-none --no-default-features --features "$f"
done
cargo build -q -p clockhal --target x86_64-unknown-none --features kvmclock,hyperv,tsc,hpet,acpi-pm,defmt,embedded-time

step "docs (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc -q --workspace --no-deps --all-features

if [[ "${SKIP_MATRIX:-0}" == 1 ]]; then
    step "QEMU matrix: SKIPPED (SKIP_MATRIX=1)"
else
    step "QEMU conformance matrix"
    cargo run -q -p clockhal-matrix --release
fi
step "all tests passed"
