# Sourced by the scripts: makes sure the toolchain target and QEMU exist.
# The Rust toolchain and the x86_64-unknown-none target come from
# rust-toolchain.toml (rustup installs the target on first use).
rustup show active-toolchain >/dev/null
if ! rustup target list --installed | grep -qx x86_64-unknown-none; then
    rustup target add x86_64-unknown-none
fi
if ! command -v qemu-system-x86_64 >/dev/null; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
        echo "installing QEMU (qemu-system-x86) via apt-get"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-system-x86 >/dev/null
    else
        echo "missing: qemu-system-x86_64 (install Debian/Ubuntu package qemu-system-x86 as root)" >&2
        exit 1
    fi
fi

# `-cpu host` as this KVM host can boot it: some hosts refuse QEMU's
# IA32_ARCH_CAPABILITIES (MSR 0x10a) and QEMU aborts ("failed to set MSR
# 0x10a"); the MSR says nothing about clocks, so it is left out there (the
# matrix runner decides the same way, conformance/runner/src/qemu.rs).
kvm_host_cpu() {
    local cpu
    for cpu in host host,-arch-capabilities; do
        if echo quit | timeout --kill-after=2 10 qemu-system-x86_64 -accel kvm -M microvm -cpu "$cpu" \
            -S -display none -serial none -monitor stdio >/dev/null 2>&1; then
            echo "$cpu"
            return
        fi
    done
    echo host
}
