//! The QEMU configurations of the matrix.

/// Which accelerator a configuration needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accel {
    /// QEMU's emulator: always available.
    Tcg,
    /// Hardware virtualisation: needs a usable /dev/kvm.
    Kvm,
}

impl Accel {
    /// `tcg` or `kvm` (also QEMU's `-accel` value).
    pub fn name(self) -> &'static str {
        match self {
            Accel::Tcg => "tcg",
            Accel::Kvm => "kvm",
        }
    }
}

/// One way to boot the kernel.
#[derive(Clone, Copy, Debug)]
pub struct QemuConfig {
    /// Stable name (`--only` selects by it).
    pub name: &'static str,
    /// Accelerator.
    pub accel: Accel,
    /// Machine-specific QEMU arguments (after the common ones).
    pub args: &'static [&'static str],
}

/// Arguments every run gets (besides `-accel` and `-kernel`).
pub const COMMON_ARGS: &[&str] = &[
    "-m",
    "256M",
    "-display",
    "none",
    "-monitor",
    "none",
    "-serial",
    "stdio",
    "-no-reboot",
    "-device",
    "isa-debug-exit,iobase=0xf4,iosize=0x04",
];

/// QEMU's exit status when the kernel wrote `0x10` (success) to
/// isa-debug-exit: `(0x10 << 1) | 1`.
pub const QEMU_EXIT_SUCCESS: i32 = 0x21;
/// ... and `0x11` (failure).
pub const QEMU_EXIT_FAILURE: i32 = 0x23;

/// The matrix, in report order.
pub const CONFIGS: &[QemuConfig] = &[
    QemuConfig {
        name: "tcg-q35",
        accel: Accel::Tcg,
        args: &["-M", "q35", "-cpu", "max"],
    },
    QemuConfig {
        name: "tcg-pc",
        accel: Accel::Tcg,
        args: &["-M", "pc", "-cpu", "qemu64"],
    },
    QemuConfig {
        name: "tcg-pc-nohpet",
        accel: Accel::Tcg,
        args: &["-M", "pc,hpet=off", "-cpu", "max"],
    },
    QemuConfig {
        name: "tcg-microvm",
        accel: Accel::Tcg,
        args: &["-M", "microvm", "-cpu", "max"],
    },
    QemuConfig {
        name: "tcg-microvm-nopit",
        accel: Accel::Tcg,
        args: &["-M", "microvm,pit=off", "-cpu", "max"],
    },
    QemuConfig {
        name: "tcg-q35-smp2",
        accel: Accel::Tcg,
        // One TCG thread for both vCPUs: with one thread per vCPU (QEMU's
        // default) the warp test decides only when the host runs both
        // threads at once, which a loaded 2-core CI host often does not;
        // single-threaded, it decides every time (measured N ~ 590 ticks).
        args: &[
            "-accel",
            "tcg,thread=single",
            "-M",
            "q35",
            "-cpu",
            "max",
            "-smp",
            "2",
        ],
    },
    QemuConfig {
        name: "tcg-q35-icount",
        accel: Accel::Tcg,
        // Time counted in guest instructions (2^8 ns each): the TSC runs
        // at ~1,000,000,005 Hz, within 100 ppm of 1 GHz, where a page TSC
        // scale's multiplier sits next to 2^64 (issue 26 §3: the user page
        // lagged here).
        args: &["-M", "q35", "-cpu", "max", "-icount", "shift=8"],
    },
    QemuConfig {
        name: "kvm-q35",
        accel: Accel::Kvm,
        args: &["-M", "q35", "-cpu", "host"],
    },
    QemuConfig {
        name: "kvm-pc",
        accel: Accel::Kvm,
        args: &["-M", "pc", "-cpu", "host"],
    },
    QemuConfig {
        name: "kvm-nokvmclock",
        accel: Accel::Kvm,
        args: &["-M", "q35", "-cpu", "host,-kvmclock"],
    },
    QemuConfig {
        name: "kvm-kvm-off",
        accel: Accel::Kvm,
        args: &["-M", "q35", "-cpu", "host,kvm=off"],
    },
    QemuConfig {
        name: "kvm-invtsc",
        accel: Accel::Kvm,
        args: &["-M", "q35", "-cpu", "host,+invtsc"],
    },
    QemuConfig {
        name: "kvm-microvm",
        accel: Accel::Kvm,
        args: &["-M", "microvm", "-cpu", "host"],
    },
    QemuConfig {
        name: "kvm-q35-smp2",
        accel: Accel::Kvm,
        args: &["-M", "q35", "-cpu", "host", "-smp", "2"],
    },
];
