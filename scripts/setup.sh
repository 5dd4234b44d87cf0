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
