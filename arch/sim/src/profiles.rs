//! Ready-made machines: bare metal and Hyper-V (synthetic CPUID), and the
//! QEMU configurations of the conformance matrix, whose CPUID is what QEMU
//! 7.2 really answered there ([`crate::QEMU_CPUID_DUMPS`]).

use crate::{
    CpuidDump, HpetConfig, HypervConfig, KvmConfig, PitConfig, PmTimerConfig, RtcConfig, SimConfig,
    SimMachine, UnknownMsr, PIT_KVM_RATE, QEMU_KVM_INVTSC, QEMU_KVM_MICROVM, QEMU_KVM_Q35,
    QEMU_TCG_MICROVM, QEMU_TCG_PC, QEMU_TCG_Q35,
};

/// TCG's TSC runs at the host's rate, which no CPUID leaf states; the
/// simulator picks 2 GHz.
const TCG_TSC_HZ: u64 = 2_000_000_000;
/// The recording machine's TSC (KVM leaf 0x40000010 with `+invtsc`:
/// 2,600,000 kHz).
const KVM_TSC_HZ: u64 = 2_600_000_000;
/// The PIIX4 PM timer port QEMU's `-M pc` uses (q35's ICH9: 0x608).
const PC_PM_TIMER_PORT: u16 = 0xb008;

impl SimMachine {
    /// Bare metal: Intel, invariant TSC at 2.592 GHz stated exactly by leaf
    /// 0x15 (24 MHz crystal * 216/2), 64-bit HPET at 14.318 MHz
    /// (69,841,279 fs) at 0xFED00000, 24-bit PM timer at port 0x608, an
    /// 8254 at 105/88 MHz and an MC146818 RTC (data-sheet behaviour).
    pub fn bare_metal() -> SimMachine {
        Self::bare_metal_config().build()
    }

    /// The configuration behind [`SimMachine::bare_metal`].
    pub fn bare_metal_config() -> SimConfig {
        SimConfig::cpu(2_592_000_000)
            .with_invariant_tsc(true)
            .with_tsc_leaf(2, 216, 24_000_000)
            .with_hpet(HpetConfig::classic())
            .with_pm_timer(PmTimerConfig::default())
            .with_pit(PitConfig::hardware())
            .with_rtc(RtcConfig::hardware())
    }

    /// QEMU/KVM q35 with kvmclock: [`qemu_kvm`](Self::qemu_kvm).
    pub fn kvm() -> SimMachine {
        Self::qemu_kvm()
    }

    /// The configuration behind [`SimMachine::kvm`], for tweaking.
    pub fn kvm_config() -> SimConfig {
        Self::qemu_kvm_config()
    }

    /// Hyper-V: reference TSC page, TIME_REF_COUNT and frequency MSRs,
    /// invariant TSC at 2.4 GHz, no HPET, 24-bit PM timer (synthetic
    /// CPUID: Hyper-V enlightenments cannot be booted on the recording
    /// machine).
    pub fn hyperv() -> SimMachine {
        Self::hyperv_config().build()
    }

    /// The configuration behind [`SimMachine::hyperv`].
    pub fn hyperv_config() -> SimConfig {
        SimConfig::cpu(2_400_000_000)
            .with_invariant_tsc(true)
            .with_hyperv(HypervConfig::default())
            .with_pm_timer(PmTimerConfig::default())
    }

    /// QEMU TCG `-M q35 -cpu max` (matrix row `tcg-q35`): CPUID as recorded
    /// ([`QEMU_TCG_Q35`]: AuthenticAMD, no invariant TSC, leaves past a
    /// maximum answer leaf 0xD), unknown MSRs read 0, 100 MHz HPET, 24-bit
    /// PM timer at 0x608, QEMU's PIT (with the PC speaker's port 0x61) and
    /// RTC.
    pub fn qemu_tcg() -> SimMachine {
        Self::qemu_tcg_config().build()
    }

    /// The configuration behind [`SimMachine::qemu_tcg`].
    pub fn qemu_tcg_config() -> SimConfig {
        tcg_cpu(QEMU_TCG_Q35)
            .with_hpet(HpetConfig::qemu())
            .with_pm_timer(PmTimerConfig::default())
            .with_pit(PitConfig::qemu())
            .with_rtc(RtcConfig::qemu())
    }

    /// QEMU TCG `-M pc -cpu qemu64` (`tcg-pc`): the qemu64 CPU
    /// ([`QEMU_TCG_PC`]: no RDTSCP, no XSAVE leaf), HPET, the PIIX4 PM
    /// timer at 0xb008, PIT and RTC.
    pub fn qemu_tcg_pc() -> SimMachine {
        Self::qemu_tcg_pc_config().build()
    }

    /// The configuration behind [`SimMachine::qemu_tcg_pc`].
    pub fn qemu_tcg_pc_config() -> SimConfig {
        tcg_cpu(QEMU_TCG_PC)
            .with_hpet(HpetConfig::qemu())
            .with_pm_timer(PmTimerConfig {
                port: PC_PM_TIMER_PORT,
                ..PmTimerConfig::default()
            })
            .with_pit(PitConfig::qemu())
            .with_rtc(RtcConfig::qemu())
    }

    /// QEMU TCG `-M microvm -cpu max` (`tcg-microvm`): as
    /// [`qemu_tcg`](Self::qemu_tcg) without HPET and PM timer, with the PIT
    /// but no port 0x61 (hw/i386/microvm.c creates the i8254 for
    /// `pit=auto` and no PC speaker) and the RTC (`rtc=auto` creates it
    /// only without KVM). Its ACPI tables are [`AcpiTablesBuilder::microvm`]
    /// (FADT CENTURY = 0).
    ///
    /// [`AcpiTablesBuilder::microvm`]: crate::AcpiTablesBuilder::microvm
    pub fn qemu_tcg_microvm() -> SimMachine {
        Self::qemu_tcg_microvm_config().build()
    }

    /// The configuration behind [`SimMachine::qemu_tcg_microvm`].
    pub fn qemu_tcg_microvm_config() -> SimConfig {
        tcg_cpu(QEMU_TCG_MICROVM)
            .with_pit(PitConfig::microvm())
            .with_rtc(RtcConfig::qemu())
    }

    /// QEMU/KVM `-M q35 -cpu host` (`kvm-q35`) on the recording machine:
    /// CPUID as recorded ([`QEMU_KVM_Q35`]: GenuineIntel, no invariant TSC,
    /// no RDTSCP, TSC_ADJUST), kvmclock (CLOCKSOURCE2 + stable bit, stable
    /// flag set), 2.6 GHz TSC, unknown MSRs #GP, 100 MHz HPET, 24-bit PM
    /// timer, KVM's in-kernel PIT and QEMU's RTC.
    pub fn qemu_kvm() -> SimMachine {
        Self::qemu_kvm_config().build()
    }

    /// The configuration behind [`SimMachine::qemu_kvm`].
    pub fn qemu_kvm_config() -> SimConfig {
        SimConfig::cpu(KVM_TSC_HZ)
            .with_cpuid_dump(QEMU_KVM_Q35)
            .with_kvm(KvmConfig::default())
            .with_hpet(HpetConfig::qemu())
            .with_pm_timer(PmTimerConfig::default())
            .with_pit(PitConfig::kvm())
            .with_rtc(RtcConfig::qemu())
    }

    /// QEMU/KVM `-M q35 -cpu host,+invtsc` (`kvm-invtsc`): as
    /// [`qemu_kvm`](Self::qemu_kvm) with the invariant TSC bit and the KVM
    /// range up to leaf 0x40000010 (TSC 2,600,000 kHz).
    pub fn qemu_kvm_invtsc() -> SimMachine {
        Self::qemu_kvm_invtsc_config().build()
    }

    /// The configuration behind [`SimMachine::qemu_kvm_invtsc`].
    pub fn qemu_kvm_invtsc_config() -> SimConfig {
        SimConfig {
            cpuid: QEMU_KVM_INVTSC.table(),
            ..Self::qemu_kvm_config()
        }
        .with_kvm(KvmConfig {
            cpuid_max_offset: 0x10,
            ..KvmConfig::default()
        })
    }

    /// QEMU/KVM `-M microvm -cpu host` (`kvm-microvm`): kvmclock and the
    /// TSC; no HPET, no PM timer, no RTC (`rtc=auto` is off under KVM);
    /// KVM's in-kernel PIT without port 0x61.
    pub fn qemu_kvm_microvm() -> SimMachine {
        Self::qemu_kvm_microvm_config().build()
    }

    /// The configuration behind [`SimMachine::qemu_kvm_microvm`].
    pub fn qemu_kvm_microvm_config() -> SimConfig {
        SimConfig::cpu(KVM_TSC_HZ)
            .with_cpuid_dump(QEMU_KVM_MICROVM)
            .with_kvm(KvmConfig::default())
            .with_pit(PitConfig {
                rate: PIT_KVM_RATE,
                ..PitConfig::microvm()
            })
    }
}

/// A QEMU TCG CPU per `dump`: unknown MSRs read 0, TSC at
/// [`TCG_TSC_HZ`].
fn tcg_cpu(dump: CpuidDump) -> SimConfig {
    let mut c = SimConfig::cpu(TCG_TSC_HZ).with_cpuid_dump(dump);
    c.unknown_msr = UnknownMsr::ReadZero;
    c
}
