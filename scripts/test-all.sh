#!/usr/bin/env bash
# Runs every clockhal test on a fresh machine: formatting, lints, host tests
# (simulated machine), no_std builds for x86_64-unknown-none, docs (also as
# docs.rs builds them), builds with the declared MSRV, the crates.io packages
# (dry run), the kernel crates, and the QEMU conformance matrix.
#
#   ./scripts/test-all.sh            # everything
#   SKIP_MATRIX=1 ./scripts/test-all.sh   # everything but QEMU
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

step() { printf '\n==> %s\n' "$*"; }

# Kernel crates live in their own workspace (they link for bare metal).
KERNELS=conformance/kernels
# The library crates' declared rust-version, and the nightly docs.rs stands
# for (pinned, so CI does not change under us).
MSRV=1.85
DOCS_NIGHTLY=nightly-2026-08-01

step "format"
cargo fmt --all -- --check
(cd "$KERNELS" && cargo fmt --all -- --check)

step "clippy (host workspace, all targets, all features)"
cargo clippy --workspace --all-targets --all-features -- -D warnings

step "clippy (kernel crates, x86_64-unknown-none)"
(cd "$KERNELS" && cargo clippy --release --workspace --lib --bins --examples -- -D warnings)

step "host tests (simulated machine)"
cargo test --workspace --all-features
# What a kernel that disables backends sees (rejected "feature disabled").
cargo test -p clockhal --no-default-features --features tsc,kvmclock --test feature_disabled

step "live KVM pvclock page of this machine (SKIP lines say why where absent)"
cargo test -q -p clockhal-bench --test live_pvclock -- --nocapture --test-threads 1

step "no_std builds for x86_64-unknown-none"
LIBS=(clockhal-core clockhal-x86 clockhal-user clockhal-kvmclock clockhal-hyperv clockhal-tsc clockhal-hpet clockhal-acpi-pm clockhal-pit clockhal-rtc clockhal-conformance)
for p in "${LIBS[@]}"; do
    cargo build -q -p "$p" --target x86_64-unknown-none --no-default-features
done
cargo build -q -p clockhal --target x86_64-unknown-none --no-default-features
for f in kvmclock hyperv tsc hpet acpi-pm defmt embedded-time; do
    echo "  clockhal --features $f"
    cargo build -q -p clockhal --target x86_64-unknown-none --no-default-features --features "$f"
done
cargo build -q -p clockhal --target x86_64-unknown-none --features kvmclock,hyperv,tsc,hpet,acpi-pm,defmt,embedded-time

step "docs (warnings are errors) and the READMEs' docs.rs links"
RUSTDOCFLAGS="-D warnings" cargo doc -q --workspace --no-deps --all-features
./scripts/check-readme-links.sh

# docs.rs builds with nightly and `--cfg docsrs`, which turns on the
# feature badges (`doc_cfg`); this is that build, on a pinned nightly.
step "docs as docs.rs builds them ($DOCS_NIGHTLY, --cfg docsrs)"
rustup toolchain install "$DOCS_NIGHTLY" --profile minimal --no-self-update
RUSTDOCFLAGS="--cfg docsrs -D warnings" CARGO_TARGET_DIR=target/docsrs \
    cargo "+$DOCS_NIGHTLY" doc -q --workspace --no-deps --all-features

# The declared rust-version, built for real, against Cargo.lock. --locked: a
# locked dependency that needs a newer rustc fails here; then lock an older
# one (`CARGO_RESOLVER_INCOMPATIBLE_RUST_VERSIONS=fallback cargo update -p
# <dep>` picks the newest that builds on the MSRV).
step "MSRV: the library crates with Rust $MSRV (host and x86_64-unknown-none)"
rustup toolchain install "$MSRV" --profile minimal --target x86_64-unknown-none --no-self-update
msrv_build() { CARGO_TARGET_DIR=target/msrv cargo "+$MSRV" build -q --locked "$@"; }
msrv_build "${LIBS[@]/#/--package=}" --package=clockhal --package=clockhal-sim --package=clockhal-linux --all-features
msrv_build "${LIBS[@]/#/--package=}" --package=clockhal --target x86_64-unknown-none \
    --features clockhal/defmt,clockhal/embedded-time

# Every publishable crate, packaged in dependency order and each package
# built from its own .crate against the others (a local registry overlay);
# nothing is uploaded. --allow-dirty: local runs with uncommitted changes.
step "packages: cargo publish --dry-run --workspace"
mkdir -p target/package && touch target/package/.stamp
cargo publish -q --workspace --dry-run --allow-dirty
echo "  packaged and verified:" $(cd target/package && find . -maxdepth 1 -type d -name 'clockhal*' -newer .stamp | sed 's|^\./||' | sort)

if [[ "${SKIP_MATRIX:-0}" == 1 ]]; then
    step "QEMU matrix: SKIPPED (SKIP_MATRIX=1)"
else
    # Also boots the Linux peer (a Debian kernel fetched once with apt-get
    # download into target/linux-peer, init built with gcc -static).
    step "QEMU conformance matrix and the Linux peer"
    cargo run -q -p clockhal-matrix --release
fi
step "all tests passed"
