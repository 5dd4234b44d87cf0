#!/usr/bin/env bash
# Builds the bootloader 0.9 example kernel (examples/bootloader-09, blog_os
# second edition as its post 12 leaves it) into a BIOS disk image with
# `cargo bootimage`, and boots it in QEMU: clockhal probes through
# `clockhal::boot`, the PIT interrupt ticks the watchdog, and the
# conformance suite runs.
#
#   ./scripts/bootloader-09.sh               # TCG, -M q35
#   ACCEL=kvm ./scripts/bootloader-09.sh     # under KVM
#   ./scripts/bootloader-09.sh -M pc         # extra QEMU arguments go last and win
#   ./scripts/bootloader-09.sh --build-only  # print BIOS=… instead
#
# Needs rustup (installs nightly-2026-08-01 with rust-src, llvm-tools and
# clippy and the x86_64-unknown-none target: the kernel's
# rust-toolchain.toml), `bootimage` (installed once with `cargo install` into
# $CLOCKHAL_CACHE_DIR) and QEMU. Exits 0 iff the kernel reported success
# (QEMU status 33).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
source scripts/foreign-lib.sh

TOOLCHAIN=nightly-2026-08-01 # = examples/bootloader-09/rust-toolchain.toml
BOOTIMAGE_VERSION=0.10.3
EXAMPLE=examples/bootloader-09
SUCCESS=33

BUILD_ONLY=0
if [[ ${1:-} == --build-only ]]; then
    BUILD_ONLY=1
    shift
fi

ensure_toolchain "$TOOLCHAIN" rust-src llvm-tools clippy
if ! rustup target list --installed --toolchain "$TOOLCHAIN" | grep -qx x86_64-unknown-none; then
    rustup target add --toolchain "$TOOLCHAIN" x86_64-unknown-none >&2
fi

# bootimage's inputs are pinned: built once per machine.
BOOTIMAGE=$CLOCKHAL_CACHE_DIR/bootimage-$BOOTIMAGE_VERSION
if [[ ! -x $BOOTIMAGE/bin/cargo-bootimage ]]; then
    echo "==> cargo install bootimage $BOOTIMAGE_VERSION into $BOOTIMAGE" >&2
    CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2} cargo install -q bootimage --version "=$BOOTIMAGE_VERSION" \
        --locked --root "$BOOTIMAGE" >&2
fi

# bootimage builds the kernel and then the bootloader with $CARGO (else the
# `cargo` on PATH, whose toolchain the kernel's rust-toolchain.toml picks)
# and takes the project from CARGO_MANIFEST_DIR: a caller's (`cargo run`
# of the matrix runner sets them) would pick stable and the runner.
unset CARGO CARGO_TARGET_DIR RUSTUP_TOOLCHAIN

echo "==> kernel + bootloader 0.9 (cargo bootimage, $TOOLCHAIN)" >&2
(cd "$EXAMPLE" && PATH=$BOOTIMAGE/bin:$PATH CARGO_MANIFEST_DIR=$PWD CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2} \
    cargo bootimage --release --locked --quiet >&2)
RELEASE=$PWD/$EXAMPLE/target/x86_64-unknown-none/release
IMAGE=$PWD/$EXAMPLE/target/bios.img
cp "$RELEASE/bootimage-clockhal-bootloader-09-kernel.bin" "$IMAGE"
# SeaBIOS cannot read a disk smaller than one cylinder (16 heads x 63
# sectors) over q35's AHCI ("Boot failed: could not read the boot disk";
# on -M pc's IDE it can), and bootimage writes just the loader and kernel
# (~424 KiB): round up to whole cylinders.
truncate -s %$((16 * 63 * 512)) "$IMAGE"

if [[ $BUILD_ONLY == 1 ]]; then
    echo "BIOS=$IMAGE"
    exit 0
fi

ACCEL=${ACCEL:-tcg}
case $ACCEL in
kvm) ACCEL_ARGS=(-accel kvm -cpu "$(kvm_host_cpu)") ;;
tcg) ACCEL_ARGS=(-accel tcg -cpu max) ;;
*)
    echo "ACCEL must be tcg or kvm, not '$ACCEL'" >&2
    exit 1
    ;;
esac
QEMU_ARGS=("${ACCEL_ARGS[@]}" -M q35 -m 256M -display none -serial stdio -no-reboot
    -device isa-debug-exit,iobase=0xf4,iosize=0x04 -drive "format=raw,file=$IMAGE" "$@")
echo "==> qemu-system-x86_64 ${QEMU_ARGS[*]}" >&2
status=0
timeout 180 qemu-system-x86_64 "${QEMU_ARGS[@]}" </dev/null || status=$?
case $status in
"$SUCCESS") echo "==> kernel exited with success ($status)" ;;
124) echo "==> FAILED: QEMU timed out after 180 s" >&2 ;;
35) echo "==> FAILED: the kernel reported failure ($status)" >&2 ;;
*) echo "==> FAILED: QEMU exited with status $status" >&2 ;;
esac
[[ $status == "$SUCCESS" ]]
