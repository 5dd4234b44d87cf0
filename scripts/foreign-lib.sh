# Sourced by hermit.sh, bootloader-api.sh and bootloader-09.sh: pinned
# toolchains, the build cache, firmware.
#
# Status 75 (EX_TEMPFAIL, with a SKIP=<why> line on stdout) means "cannot be
# built here because rustup cannot reach its server"; the matrix reports
# those rows as SKIP with the message. Any other failure is a failure.

# Builds whose inputs are all pinned (the Hermit kernel from crates.io with
# its lock, the bootloader image builder, bootimage) are kept here across clones and CI
# runs; everything that compiles clockhal builds inside the tree.
CLOCKHAL_CACHE_DIR=${CLOCKHAL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/clockhal}
mkdir -p "$CLOCKHAL_CACHE_DIR"

# ensure_toolchain TOOLCHAIN COMPONENT...: installs a pinned toolchain with
# rustup (minimal profile) unless it and the components are already there.
ensure_toolchain() {
    local toolchain=$1
    shift
    local installed missing=0
    if installed=$(rustup component list --installed --toolchain "$toolchain" 2>/dev/null); then
        for c in "$@"; do
            grep -q "^$c" <<<"$installed" || missing=1
        done
        [[ $missing == 0 ]] && return 0
    fi
    local args=() out
    for c in "$@"; do args+=(-c "$c"); done
    echo "installing $toolchain (${*}) with rustup" >&2
    if ! out=$(RUST_BACKTRACE=0 rustup toolchain install "$toolchain" --profile minimal "${args[@]}" 2>&1); then
        echo "$out" >&2
        if grep -qiE "could not (download|resolve|connect)|failed to download|error sending request|network|timed out|dns|connection" <<<"$out"; then
            local why="rustup cannot reach its server to install $toolchain: $(grep -m1 '^error:' <<<"$out" | sed 's/^error: //')"
            echo "SKIP: $why" >&2
            echo "SKIP=$why" # for clockhal-matrix, which reads stdout
            exit 75
        fi
        exit 1
    fi
}

# The LLVM tools (llvm-objcopy, ...) of an installed toolchain.
llvm_bin() {
    echo "$(rustc "+$1" --print sysroot)/lib/rustlib/$(rustc "+$1" -vV | sed -n 's/^host: //p')/bin"
}

# OVMF (UEFI firmware for QEMU), from Debian's `ovmf` package.
OVMF=/usr/share/qemu/OVMF.fd
ensure_ovmf() {
    [[ -e $OVMF ]] && return 0
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
        echo "installing OVMF (Debian package ovmf) via apt-get" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ovmf >/dev/null
    fi
    if [[ ! -e $OVMF ]]; then
        echo "missing: $OVMF (install the Debian/Ubuntu package ovmf as root)" >&2
        exit 1
    fi
}
