#!/usr/bin/env bash
# Builds the bootloader_api example kernel (examples/bootloader-api), wraps
# it into BIOS and UEFI disk images with rust-osdev's bootloader, and boots
# one in QEMU: it probes every clock source, prints the report and runs the
# conformance suite.
#
#   ./scripts/bootloader-api.sh              # BIOS image, TCG
#   ./scripts/bootloader-api.sh uefi         # UEFI image (OVMF), TCG
#   ACCEL=kvm ./scripts/bootloader-api.sh    # under KVM (BIOS works here; UEFI may die)
#   ./scripts/bootloader-api.sh bios -M pc   # extra QEMU arguments go last and win
#   ./scripts/bootloader-api.sh --build-only # print BIOS=… and UEFI=… instead
#
# Needs rustup (installs nightly-2026-08-01 with rust-src and llvm-tools for
# the image builder; the kernel itself is stable Rust), QEMU and OVMF
# (installed via apt-get when missing). Exits 0 iff the kernel reported
# success (QEMU status 33).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
source scripts/foreign-lib.sh

BUILDER_TOOLCHAIN=nightly-2026-08-01
EXAMPLE=examples/bootloader-api
SUCCESS=33

BUILD_ONLY=0
if [[ ${1:-} == --build-only ]]; then
    BUILD_ONLY=1
    shift
fi
FIRMWARE=bios
if [[ ${1:-} == bios || ${1:-} == uefi ]]; then
    FIRMWARE=$1
    shift
fi

ensure_toolchain "$BUILDER_TOOLCHAIN" rust-src llvm-tools
# The builder's build script runs nested `cargo install`s: an inherited
# CARGO_TARGET_DIR makes them deadlock on the build lock.
unset CARGO_TARGET_DIR RUSTUP_TOOLCHAIN

echo "==> kernel (conformance/kernels workspace, stable)" >&2
(cd conformance/kernels && cargo build -q --release -p clockhal-bootloader-api-kernel --target-dir target)
KERNEL=$PWD/conformance/kernels/target/x86_64-unknown-none/release/clockhal-bootloader-api-kernel

echo "==> image builder (bootloader 0.11, $BUILDER_TOOLCHAIN)" >&2
BUILDER_TARGET=$CLOCKHAL_CACHE_DIR/bootloader-image-builder
(cd "$EXAMPLE/image-builder" && CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2} nice cargo "+$BUILDER_TOOLCHAIN" \
    build -q --release --locked --target-dir "$BUILDER_TARGET")
IMAGES=$PWD/$EXAMPLE/target
"$BUILDER_TARGET/release/clockhal-bootloader-image" "$KERNEL" "$IMAGES" >&2

if [[ $BUILD_ONLY == 1 ]]; then
    echo "BIOS=$IMAGES/bios.img"
    echo "UEFI=$IMAGES/uefi.img"
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
case $FIRMWARE in
bios) BOOT_ARGS=(-drive "format=raw,file=$IMAGES/bios.img") ;;
uefi)
    ensure_ovmf
    BOOT_ARGS=(-bios "$OVMF" -drive "format=raw,file=$IMAGES/uefi.img")
    ;;
esac
QEMU_ARGS=("${ACCEL_ARGS[@]}" -M q35 -m 256M -display none -serial stdio -no-reboot
    -device isa-debug-exit,iobase=0xf4,iosize=0x04 "${BOOT_ARGS[@]}" "$@")
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
