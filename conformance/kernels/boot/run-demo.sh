#!/bin/bash
# Builds the demo kernel and boots it under the QEMU configurations the
# clockhal conformance runs use. Prints one line per configuration and exits
# non-zero if any run did not end with status 33 (EXIT_SUCCESS).
#   ./run-demo.sh            # all configurations (KVM ones skipped without /dev/kvm)
#   LOGS=dir ./run-demo.sh   # keep each run's console output in dir
set -u
cd "$(dirname "$0")"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/work/target-boot}
cargo build --release --target x86_64-unknown-none --example demo || exit 1
K=$CARGO_TARGET_DIR/x86_64-unknown-none/release/examples/demo
command -v qemu-system-x86_64 >/dev/null || { echo "qemu-system-x86_64 missing: apt-get install -y qemu-system-x86"; exit 1; }
LOGS=${LOGS:-$(mktemp -d)}
mkdir -p "$LOGS"
BASE=(-m 256M -display none -serial stdio -no-reboot -device isa-debug-exit,iobase=0xf4,iosize=0x04 -kernel "$K")
fail=0
while read -r name args; do
  [ -z "$name" ] && continue
  case "$name" in kvm-*) [ -w /dev/kvm ] || { printf "%-16s skipped (no /dev/kvm)\n" "$name"; continue; } ;; esac
  start=$(date +%s%N)
  # shellcheck disable=SC2086
  timeout 30 qemu-system-x86_64 $args "${BASE[@]}" </dev/null >"$LOGS/$name.log" 2>&1
  rc=$?
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  cpus=$(grep -o 'cpu_count=[0-9]*' "$LOGS/$name.log" | head -1)
  msr=$(grep -o 'try_rdmsr(0x4b564dff) = [A-Za-z0-9()]*' "$LOGS/$name.log" | head -1)
  verdict=ok; [ "$rc" = 33 ] || { verdict=FAILED; fail=1; }
  printf "%-16s rc=%-3s %5d ms  %-12s %-32s %s\n" "$name" "$rc" "$ms" "$cpus" "$msr" "$verdict"
done <<'CFG'
tcg-q35-smp1     -accel tcg -M q35 -smp 1
tcg-q35-smp2     -accel tcg -M q35 -smp 2
tcg-q35-smp4     -accel tcg -M q35 -smp 4
tcg-pc-smp2      -accel tcg -M pc -smp 2
tcg-microvm-smp1 -accel tcg -M microvm -smp 1
tcg-microvm-smp2 -accel tcg -M microvm -smp 2
kvm-q35-smp1     -accel kvm -cpu host -M q35 -smp 1
kvm-q35-smp2     -accel kvm -cpu host -M q35 -smp 2
kvm-pc-smp1      -accel kvm -cpu host -M pc -smp 1
kvm-pc-smp2      -accel kvm -cpu host -M pc -smp 2
kvm-microvm-smp1 -accel kvm -cpu host -M microvm -smp 1
kvm-microvm-smp2 -accel kvm -cpu host -M microvm -smp 2
CFG
echo "logs: $LOGS"
exit $fail
