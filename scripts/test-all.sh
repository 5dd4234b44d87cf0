#!/usr/bin/env bash
# Runs every clockhal test on a fresh machine: formatting, lints, host tests
# (simulated machine), no_std builds for x86_64-unknown-none, docs (also as
# docs.rs builds them), builds with the declared MSRV, the crates.io packages
# (dry run), the kernel crates, and the QEMU conformance matrix.
#
#   ./scripts/test-all.sh            # everything
#   SKIP_MATRIX=1 ./scripts/test-all.sh   # everything but QEMU
#   SKIP_FOREIGN=1 ./scripts/test-all.sh  # no Hermit / bootloader_api / bootloader 0.9 rows (no pinned nightlies)
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
# Crates with workspaces of their own (conformance/hermit, the image builder,
# the bootloader 0.9 kernel).
rustfmt --check --edition 2021 conformance/hermit/kernel/src/lib.rs conformance/hermit/export/src/main.rs \
    conformance/hermit/app/src/main.rs examples/bootloader-api/image-builder/src/main.rs \
    examples/bootloader-09/src/main.rs examples/bootloader-09/build.rs

step "clippy (host workspace, all targets, all features)"
cargo clippy --workspace --all-targets --all-features -- -D warnings

step "clippy (kernel crates, x86_64-unknown-none)"
(cd "$KERNELS" && cargo clippy --release --workspace --lib --bins --examples -- -D warnings)

step "Hermit export tool and loader (clippy, host tests)"
(cd conformance/hermit/export && cargo clippy -q --all-targets -- -D warnings && cargo test -q)
(cd "$KERNELS" && cargo clippy -q -p clockhal-hermit-loader --lib --tests --target x86_64-unknown-linux-gnu -- -D warnings &&
    cargo test -q -p clockhal-hermit-loader --target x86_64-unknown-linux-gnu)

step "host tests (simulated machine)"
cargo test --workspace --all-features --exclude clockhal-invariants
# What a kernel that disables backends sees (rejected "feature disabled").
cargo test -p clockhal --no-default-features --features tsc,kvmclock --test feature_disabled
# The facade's doc examples gate themselves on the backends they need.
cargo test -q -p clockhal --no-default-features --doc

step "invariant checks: seeded random stream + fuzz corpus replay (deep runs: scripts/deep-checks.sh)"
(cd fuzz && cargo fmt --all -- --check)
cargo test -q -p clockhal-invariants -- --nocapture

step "live KVM pvclock page of this machine (SKIP lines say why where absent)"
cargo test -q -p clockhal-bench --test live_pvclock -- --nocapture --test-threads 1

# Instructions per read of clockhal's fast paths (Clock::now() on TSC,
# kvmclock, Hyper-V page; the backends' reads) under valgrind, against
# bench/instruction-budgets.json: a regression check that does not depend on
# the machine's load. SKIP (with the reason) where valgrind cannot run.
step "instruction budgets of the read paths (valgrind)"
if ! command -v valgrind >/dev/null; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
        echo "installing valgrind via apt-get"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null; } ||
            echo "could not install valgrind: the instruction-budget step will SKIP" >&2
    else
        echo "missing: valgrind (Debian/Ubuntu package valgrind, as root): the instruction-budget step will SKIP" >&2
    fi
fi
cargo run -q -p clockhal-bench --release --bin clockhal-read-count -- --check

step "no_std builds for x86_64-unknown-none"
LIBS=(clockhal-core clockhal-x86 clockhal-user clockhal-kvmclock clockhal-hyperv clockhal-tsc clockhal-hpet clockhal-acpi-pm clockhal-pit clockhal-rtc clockhal-lapic-timer clockhal-conformance)
for p in "${LIBS[@]}"; do
    cargo build -q -p "$p" --target x86_64-unknown-none --no-default-features
done
cargo build -q -p clockhal --target x86_64-unknown-none --no-default-features
for f in kvmclock hyperv tsc hpet acpi-pm pit rtc defmt embedded-time fugit embedded-hal x86_64 bootloader_api bootloader multiboot2 limine; do
    echo "  clockhal --features $f"
    cargo build -q -p clockhal --target x86_64-unknown-none --no-default-features --features "$f"
done
cargo build -q -p clockhal --target x86_64-unknown-none --features rtc,defmt,embedded-time,fugit,embedded-hal,x86_64

step "docs (warnings are errors) and the READMEs' docs.rs links"
RUSTDOCFLAGS="-D warnings" cargo doc -q --workspace --no-deps --all-features
# The facade's docs alone (what a user depending only on clockhal reads),
# in each feature set: no link may dangle where a feature is off, and the
# inlined seam (`clockhal::x86`) must be there.
for f in "" --no-default-features --all-features; do
    RUSTDOCFLAGS="-D warnings" cargo doc -q -p clockhal --no-deps ${f:+"$f"}
done
test -f target/doc/clockhal/x86/index.html || { echo "clockhal::x86 is not documented inline" >&2; exit 1; }
./scripts/check-readme-links.sh

# docs.rs builds with nightly and `--cfg docsrs`, which turns on the
# feature badges (`doc_cfg`); this is that build, on a pinned nightly.
step "docs as docs.rs builds them ($DOCS_NIGHTLY, --cfg docsrs)"
source scripts/foreign-lib.sh # ensure_toolchain; the bootloader_api image builder uses the same nightly
ensure_toolchain "$DOCS_NIGHTLY"
RUSTDOCFLAGS="--cfg docsrs -D warnings" CARGO_TARGET_DIR=target/docsrs \
    cargo "+$DOCS_NIGHTLY" doc -q --workspace --no-deps --all-features

# The declared rust-version, built for real, against Cargo.lock. --locked: a
# locked dependency that needs a newer rustc fails here; then lock an older
# one (`CARGO_RESOLVER_INCOMPATIBLE_RUST_VERSIONS=fallback cargo update -p
# <dep>` picks the newest that builds on the MSRV).
step "MSRV: the library crates with Rust $MSRV (host and x86_64-unknown-none)"
rustup toolchain install "$MSRV" --profile minimal --target x86_64-unknown-none --no-self-update
msrv_build() { CARGO_TARGET_DIR=target/msrv cargo "+$MSRV" build -q --locked "$@"; }
# Feature `embassy` is left out: its queue needs heapless, which needs a
# newer Rust than 1.85 (heapless 0.9.1 fails there with E0223).
msrv_build "${LIBS[@]/#/--package=}" --package=clockhal --package=clockhal-sim --package=clockhal-linux \
    --features clockhal/kvmclock,clockhal/hyperv,clockhal/tsc,clockhal/hpet,clockhal/acpi-pm,clockhal/pit,clockhal/defmt,clockhal/embedded-time,clockhal/fugit,clockhal/embedded-hal,clockhal/rtc,clockhal/x86_64,clockhal/bootloader_api,clockhal/bootloader,clockhal/multiboot2,clockhal/limine,clockhal/std
msrv_build "${LIBS[@]/#/--package=}" --package=clockhal --target x86_64-unknown-none \
    --features clockhal/defmt,clockhal/embedded-time,clockhal/fugit,clockhal/embedded-hal,clockhal/rtc,clockhal/x86_64

# Every publishable crate, packaged in dependency order and each package
# built from its own .crate against the others (a local registry overlay);
# nothing is uploaded. --allow-dirty: local runs with uncommitted changes.
step "packages: cargo publish --dry-run --workspace"
# Cargo takes registry crates of one version to be immutable: it reuses an
# earlier run's unpacking (under $CARGO_HOME/registry/src/-<hash>) and build
# of the same version even though the sources changed. So: drop those, and
# verify in a target directory of its own, from scratch.
rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/clockhal-* target/publish
CARGO_TARGET_DIR=target/publish cargo publish -q --workspace --dry-run --allow-dirty
echo "  packaged and verified:" $(cd target/publish/package && ls -d clockhal*/)

if [[ "${SKIP_MATRIX:-0}" == 1 ]]; then
    step "QEMU matrix: SKIPPED (SKIP_MATRIX=1)"
else
    # Also boots the Linux peer (a Debian kernel fetched once with apt-get
    # download into target/linux-peer, init built with gcc -static), and the
    # Hermit, bootloader_api and bootloader 0.9 rows: the matrix builds them
    # once (scripts/hermit.sh, scripts/bootloader-api.sh,
    # scripts/bootloader-09.sh --build-only).
    # The README's demo (./scripts/demo.sh): its last step runs two embassy
    # tasks (every 10 ms, every 25 ms, 1 s) on clockhal's embassy-time driver
    # over the selected timer; the kernel exits with failure unless both
    # wake counts are within +-10 % and no wake came before its deadline.
    # Booted under TCG, and under KVM too where /dev/kvm opens (~5 s + ~20 s).
    step "demo kernel: embassy tasks on the selected timer (scripts/demo.sh)"
    demo_async() {
        local log=target/demo-$1.log
        mkdir -p target
        if ! ACCEL=$1 ./scripts/demo.sh >"$log" 2>&1; then
            tail -n 20 "$log"
            echo "demo ($1): FAILED (log: $log)" >&2
            return 1
        fi
        grep '^demo: async: ' "$log"
        grep -q '^demo: async: ok: ' "$log" || { echo "demo ($1): no 'demo: async: ok:' line" >&2; return 1; }
        echo "  demo ($1): async step passed"
    }
    demo_async tcg
    if [[ -e /dev/kvm ]] && { exec 3<>/dev/kvm; } 2>/dev/null && exec 3>&-; then
        demo_async kvm
    else
        echo "  demo (kvm): SKIP: /dev/kvm cannot be opened read-write"
    fi

    step "QEMU conformance matrix, foreign kernels and the Linux peer"
    FOREIGN=()
    [[ "${SKIP_FOREIGN:-0}" == 1 ]] && FOREIGN=(--no-foreign)
    cargo run -q -p clockhal-matrix --release -- "${FOREIGN[@]}"
    if [[ "${SKIP_FOREIGN:-0}" != 1 && -e conformance/hermit/kernel/target/export/libhermit.a ]]; then
        step "clippy (Hermit application, nightly-2025-03-15, x86_64-unknown-hermit)"
        ensure_toolchain nightly-2025-03-15 rust-src llvm-tools clippy
        (cd conformance/hermit/app && cargo +nightly-2025-03-15 clippy -q --release -- -D warnings)
    fi
    if [[ "${SKIP_FOREIGN:-0}" != 1 && -e examples/bootloader-09/target/bios.img ]]; then
        # Its toolchain (rust-toolchain.toml) was installed by bootloader-09.sh.
        step "clippy (bootloader 0.9 kernel, nightly-2026-08-01, x86_64-unknown-none)"
        (cd examples/bootloader-09 && cargo clippy -q --release --locked -- -D warnings)
    fi
fi
step "all tests passed"
