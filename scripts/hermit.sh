#!/usr/bin/env bash
# Builds clockhal's Hermit application (conformance/hermit) and boots it in
# QEMU (TCG): it probes every clock source, prints the report and runs the
# conformance suite inside Hermit.
#
#   ./scripts/hermit.sh                      # q35, -cpu max, TCG
#   ./scripts/hermit.sh -M pc,hpet=off       # extra QEMU arguments go last and win
#   ./scripts/hermit.sh -smp 2
#   ./scripts/hermit.sh -M microvm,ioapic2=off   # Hermit supports one IOAPIC only
#   ./scripts/hermit.sh --build-only         # print LOADER=… and IMAGE=… instead
#
# Needs rustup (installs nightly-2025-03-15 with rust-src and llvm-tools,
# the Hermit kernel's pin) and QEMU (installed via apt-get when missing).
# Exits 0 iff the application reported success (QEMU status 3).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
source scripts/foreign-lib.sh

HERMIT_TOOLCHAIN=nightly-2025-03-15
HERMIT=conformance/hermit
# Hermit's own exit convention (isa-debug-exit): it writes 1 on success.
SUCCESS=3

BUILD_ONLY=0
if [[ ${1:-} == --build-only ]]; then
    BUILD_ONLY=1
    shift
fi

ensure_toolchain "$HERMIT_TOOLCHAIN" rust-src llvm-tools
# Cargo picks the wrong target dir or toolchain files otherwise.
unset CARGO_TARGET_DIR RUSTUP_TOOLCHAIN

echo "==> Hermit kernel 0.11.0 (crates.io, pinned lock)" >&2
KERNEL_TARGET=$CLOCKHAL_CACHE_DIR/hermit-kernel
(cd "$HERMIT/kernel" && nice cargo "+$HERMIT_TOOLCHAIN" build -q --release --locked --target-dir "$KERNEL_TARGET")

echo "==> exporting libhermit.a" >&2
cargo build -q --release --locked --manifest-path "$HERMIT/export/Cargo.toml"
mkdir -p "$HERMIT/kernel/target/export"
"$HERMIT/export/target/release/clockhal-hermit-export" \
    "$KERNEL_TARGET/x86_64-unknown-none/release/libhermit_kernel.a" \
    "$HERMIT/kernel/target/export/libhermit.a" \
    --objcopy "$(llvm_bin "$HERMIT_TOOLCHAIN")/llvm-objcopy" >&2

echo "==> loader (conformance/kernels workspace)" >&2
(cd conformance/kernels && cargo build -q --release -p clockhal-hermit-loader --target-dir target)
LOADER=conformance/kernels/target/x86_64-unknown-none/release/clockhal-hermit-loader

echo "==> Hermit application (x86_64-unknown-hermit, build-std)" >&2
(cd "$HERMIT/app" && nice cargo "+$HERMIT_TOOLCHAIN" build -q --release)
IMAGE=$HERMIT/app/target/x86_64-unknown-hermit/release/clockhal-hermit-app

if [[ $BUILD_ONLY == 1 ]]; then
    echo "LOADER=$PWD/$LOADER"
    echo "IMAGE=$PWD/$IMAGE"
    exit 0
fi

# Later options override earlier ones (-M, -cpu, -m, -smp), so "$@" goes last.
QEMU_ARGS=(-accel tcg -M q35 -cpu max -m 256M -display none -serial stdio -no-reboot
    -device isa-debug-exit,iobase=0xf4,iosize=0x04 "$@" -kernel "$LOADER" -initrd "$IMAGE")
echo "==> qemu-system-x86_64 ${QEMU_ARGS[*]}" >&2
status=0
timeout 120 qemu-system-x86_64 "${QEMU_ARGS[@]}" </dev/null || status=$?
case $status in
"$SUCCESS") echo "==> Hermit application exited with success ($status)" ;;
124) echo "==> FAILED: QEMU timed out after 120 s" >&2 ;;
1) echo "==> FAILED: Hermit exited with a failure (a check failed, or a panic) ($status)" >&2 ;;
*) echo "==> FAILED: QEMU exited with status $status" >&2 ;;
esac
[[ $status == "$SUCCESS" ]]
