#!/usr/bin/env bash
# Boots the demo unikernel (conformance/kernels/demo) in QEMU: it probes every
# clock source, prints the verdicts and the selection, compares the sources
# over a 100 ms busy-wait, runs a clock-heavy workload on each, and runs two
# embassy tasks on the selected timer (`demo: async: ok: ...`).
#
#   ./scripts/demo.sh                    # KVM if /dev/kvm is usable, else TCG
#   ACCEL=tcg ./scripts/demo.sh          # force the accelerator (tcg | kvm)
#   ./scripts/demo.sh -M microvm         # extra QEMU arguments go last and win
#   ./scripts/demo.sh -cpu host,-kvmclock
#
# Exits 0 iff the guest reported success (QEMU status 33).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

KERNELS=conformance/kernels
KERNEL=$KERNELS/target/x86_64-unknown-none/release/clockhal-demo
# isa-debug-exit: the guest writes 0x10 (success) -> QEMU exits with (0x10 << 1) | 1.
SUCCESS=33

kvm_usable() { [[ -e /dev/kvm ]] && { exec 3<>/dev/kvm; } 2>/dev/null && exec 3>&-; }

ACCEL=${ACCEL:-}
if [[ -z $ACCEL ]]; then
    if kvm_usable; then ACCEL=kvm; else ACCEL=tcg; fi
fi
case $ACCEL in
kvm)
    if ! kvm_usable; then
        echo "ACCEL=kvm but /dev/kvm cannot be opened read-write" >&2
        exit 1
    fi
    ACCEL_ARGS=(-accel kvm -cpu "$(kvm_host_cpu)")
    ;;
tcg) ACCEL_ARGS=(-accel tcg) ;;
*)
    echo "ACCEL must be tcg or kvm, not '$ACCEL'" >&2
    exit 1
    ;;
esac

echo "==> building the demo unikernel"
# The kernels' own workspace and target dir (a CARGO_TARGET_DIR meant for
# host builds must not catch it).
(cd "$KERNELS" && cargo build --release -p clockhal-demo --target-dir target)

# Later options override earlier ones (-M, -cpu, -m, -smp), so "$@" goes last.
QEMU_ARGS=("${ACCEL_ARGS[@]}" -M q35 -m 256M -display none -serial stdio -no-reboot
    -device isa-debug-exit,iobase=0xf4,iosize=0x04 "$@" -kernel "$KERNEL")
echo "==> qemu-system-x86_64 ${QEMU_ARGS[*]}"
status=0
timeout 120 qemu-system-x86_64 "${QEMU_ARGS[@]}" </dev/null || status=$?

case $status in
"$SUCCESS") echo "==> guest exited with success ($status)" ;;
124) echo "==> FAILED: QEMU timed out after 120 s" >&2 ;;
35) echo "==> FAILED: the guest reported failure ($status)" >&2 ;;
*) echo "==> FAILED: QEMU exited with status $status" >&2 ;;
esac
[[ $status == "$SUCCESS" ]]
