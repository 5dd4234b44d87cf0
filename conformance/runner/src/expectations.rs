//! What each configuration must show: ONE table, one row per fact, each with
//! its reason. Any result that differs fails the run.
//!
//! Besides the rows, every configuration that ran must (see
//! `Outcome::global_violations`): exit through isa-debug-exit with success,
//! print the header and the summary line, report each of the six sources
//! exactly once, select exactly one present source, fail no check, and have
//! a summary that matches its CHECK lines, and select at most one source:
//! the one with a `Selected` row, or none where the configuration has no
//! `Selected` row.
//!
//! [`PEER_EXPECTATIONS`] adds one row per configuration for the Linux peer:
//! what Linux's rules pick there, and any reason clockhal may trap where
//! Linux does not.

/// What a row demands of one source in one configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Reported present.
    Present,
    /// Reported absent.
    Absent,
    /// Present and selected.
    Selected,
    /// Present, and its cross-CPU (warp) check ran and passed.
    CrossCpuPass,
    /// Its user clock page check (`user-page`: read in ring 3 while the
    /// kernel switches sources) ran and passed.
    UserPagePass,
    /// Its steal-time check (`steal-time`: never back, never above the
    /// elapsed reference time) ran and passed.
    StealTimePass,
    /// Its steal-time check was skipped (the row says why there is none).
    StealTimeSkip,
}

impl Expect {
    /// Short word for reports.
    pub fn word(self) -> &'static str {
        match self {
            Expect::Present => "present",
            Expect::Absent => "absent",
            Expect::Selected => "selected",
            Expect::CrossCpuPass => "cross-cpu pass",
            Expect::UserPagePass => "user-page pass",
            Expect::StealTimePass => "steal-time pass",
            Expect::StealTimeSkip => "steal-time skip",
        }
    }

    /// The CHECK line (by name) that must pass, for rows that demand one.
    pub fn check(self) -> Option<&'static str> {
        match self {
            Expect::CrossCpuPass => Some("cross-cpu"),
            Expect::UserPagePass => Some("user-page"),
            Expect::StealTimePass | Expect::StealTimeSkip => Some("steal-time"),
            Expect::Present | Expect::Absent | Expect::Selected => None,
        }
    }
}

/// One expectation.
#[derive(Clone, Copy, Debug)]
pub struct Row {
    /// Configuration name (see `configs::CONFIGS`).
    pub config: &'static str,
    /// Source name.
    pub source: &'static str,
    /// What must hold.
    pub expect: Expect,
    /// Why (a QEMU fact or a clockhal policy).
    pub reason: &'static str,
}

/// The six source names every kernel run reports.
pub const SOURCES: [&str; 6] = [
    "kvmclock",
    "hyperv-page",
    "hyperv-msr",
    "tsc",
    "hpet",
    "acpi-pm",
];

pub(crate) const fn row(
    config: &'static str,
    source: &'static str,
    expect: Expect,
    reason: &'static str,
) -> Row {
    Row {
        config,
        source,
        expect,
        reason,
    }
}

use Expect::*;

// Reasons shared by many rows.
pub(crate) const NO_HV: &str =
    "Hyper-V enlightenments cannot be booted on this host (KVM_CAP_HYPERV = 0)";
pub(crate) const TCG_NO_KVMCLOCK: &str = "TCG has no KVM signature in CPUID";
const HPET: &str = "q35/pc have an HPET (ACPI HPET table, 100 MHz, 64-bit)";
pub(crate) const PM: &str = "q35/pc FADTs name a 24-bit PM timer";
const MICROVM_NO_HPET: &str = "microvm has no HPET";
const MICROVM_NO_PM: &str = "microvm's hardware-reduced FADT has PM_TMR_BLK = 0";
const MICROVM_TSC_PIT: &str =
    "no stated rate, no HPET, no PM timer: the TSC is calibrated against the PIT (channel 2), the \
    only counter left, and selected; nothing can supervise it (Linux: the same PIT calibration)";
const MICROVM_TSC_RTC: &str =
    "no stated rate, no HPET, no PM timer, no PIT: the TSC is calibrated against the CMOS RTC's second \
    edges (feature rtc; three to six edges, 2-6 s of boot; measured ±2 ppm), the reference of last resort, and selected \
    (Linux: no TSC rate, no clock)";
const KVMCLOCK_WINS: &str =
    "kvmclock (CLOCKSOURCE2, stable bit) is the migration-safe no-exit source (400)";
const TSC_PV_RATE: &str =
    "rate from pvclock; KVM hides the invariant-TSC bit without +invtsc, so a supervised TSC (290), below kvmclock (400)";
const TSC_TCG: &str =
    "rate calibrated against the HPET/PM timer (a few ppm); TCG sets no invariant-TSC bit, so the TSC is \
    selected supervised (290, as Linux keeps it under its clocksource watchdog) over the trapping HPET (250)";
const TSC_KVM_CAL: &str =
    "the boot calibration is loose (each HPET read exits: ~±470 ppm in 50 ms), the watchdog's ticks refine \
    it to <50 ppm within a second, then the TSC is selected supervised (290, not invariant without +invtsc), \
    as Linux refines tsc-early and switches to tsc";
const HPET_TCG: &str = "the watchdog's reference for the supervised TSC (250, traps)";
const HPET_KVM: &str = "the HPET (250) is selected at probe, until the refined TSC outranks it";
const SMP: &str = "two vCPUs: the warp test must run, and pass, on both";
const USER_TSC: &str =
    "ring 3 reads the TSC through the user clock page while the kernel switches sources and rates";
const STEAL_KVM: &str =
    "KVM offers steal time (CPUID 0x40000001 EAX bit 5): it never goes back and never outgrows the HPET/PM timer";
const STEAL_KVM_NOREF: &str =
    "KVM offers steal time (CPUID 0x40000001 EAX bit 5): it never goes back and never outgrows the reference (the TSC here)";
const STEAL_TCG: &str = "TCG has no KVM CPUID: no steal time (skipped with the reason)";
const USER_KVMCLOCK: &str =
    "ring 3 reads the mapped kvmclock area through the user clock page (stable bit trusted)";

/// The expectation table.
#[rustfmt::skip]
pub const EXPECTATIONS: &[Row] = &[
    // ---- TCG q35 -------------------------------------------------------
    row("tcg-q35", "kvmclock", Absent, TCG_NO_KVMCLOCK),
    row("tcg-q35", "kvmclock", StealTimeSkip, STEAL_TCG),
    row("tcg-q35", "hyperv-page", Absent, NO_HV),
    row("tcg-q35", "hyperv-msr", Absent, NO_HV),
    row("tcg-q35", "tsc", Selected, TSC_TCG),
    row("tcg-q35", "tsc", UserPagePass, USER_TSC),
    row("tcg-q35", "hpet", Present, HPET_TCG),
    row("tcg-q35", "acpi-pm", Present, PM),
    // ---- TCG pc (qemu64 CPU) -------------------------------------------
    row("tcg-pc", "kvmclock", Absent, TCG_NO_KVMCLOCK),
    row("tcg-pc", "kvmclock", StealTimeSkip, STEAL_TCG),
    row("tcg-pc", "hyperv-page", Absent, NO_HV),
    row("tcg-pc", "hyperv-msr", Absent, NO_HV),
    row("tcg-pc", "tsc", Selected, TSC_TCG),
    row("tcg-pc", "tsc", UserPagePass, USER_TSC),
    row("tcg-pc", "hpet", Present, HPET_TCG),
    row("tcg-pc", "acpi-pm", Present, PM),
    // ---- TCG pc, hpet=off ----------------------------------------------
    row("tcg-pc-nohpet", "kvmclock", Absent, TCG_NO_KVMCLOCK),
    row("tcg-pc-nohpet", "kvmclock", StealTimeSkip, STEAL_TCG),
    row("tcg-pc-nohpet", "hyperv-page", Absent, NO_HV),
    row("tcg-pc-nohpet", "hyperv-msr", Absent, NO_HV),
    row("tcg-pc-nohpet", "tsc", Selected, TSC_TCG),
    row("tcg-pc-nohpet", "tsc", UserPagePass, USER_TSC),
    row("tcg-pc-nohpet", "hpet", Absent, "hpet=off removes the HPET and its ACPI table"),
    row("tcg-pc-nohpet", "acpi-pm", Present, "no HPET: the PM timer is the supervised TSC's reference"),
    // ---- TCG microvm: nothing clockhal can use -------------------------
    row("tcg-microvm", "kvmclock", Absent, TCG_NO_KVMCLOCK),
    row("tcg-microvm", "kvmclock", StealTimeSkip, STEAL_TCG),
    row("tcg-microvm", "hyperv-page", Absent, NO_HV),
    row("tcg-microvm", "hyperv-msr", Absent, NO_HV),
    row("tcg-microvm", "tsc", Selected, MICROVM_TSC_PIT),
    row("tcg-microvm", "hpet", Absent, MICROVM_NO_HPET),
    row("tcg-microvm", "acpi-pm", Absent, MICROVM_NO_PM),
    // ---- TCG microvm, pit=off: only the RTC ---------------------------
    row("tcg-microvm-nopit", "kvmclock", Absent, TCG_NO_KVMCLOCK),
    row("tcg-microvm-nopit", "hyperv-page", Absent, NO_HV),
    row("tcg-microvm-nopit", "hyperv-msr", Absent, NO_HV),
    row("tcg-microvm-nopit", "tsc", Selected, MICROVM_TSC_RTC),
    row("tcg-microvm-nopit", "hpet", Absent, MICROVM_NO_HPET),
    row("tcg-microvm-nopit", "acpi-pm", Absent, MICROVM_NO_PM),
    // ---- TCG q35, 2 vCPUs ----------------------------------------------
    row("tcg-q35-smp2", "kvmclock", Absent, TCG_NO_KVMCLOCK),
    row("tcg-q35-smp2", "kvmclock", StealTimeSkip, STEAL_TCG),
    row("tcg-q35-smp2", "hyperv-page", Absent, NO_HV),
    row("tcg-q35-smp2", "hyperv-msr", Absent, NO_HV),
    row("tcg-q35-smp2", "tsc", Selected, "two vCPUs on one TCG thread (thread=single): the warp test proves the TSCs in step (within ~600 ticks, limit ~4,450) and the supervised TSC (290) is selected over the HPET. (With one host thread per vCPU it decides only when the host runs both at once.) Linux picks hpet: TCG's CPU is AuthenticAMD without constant_tsc, so Linux deems the TSCs unsynchronized without a warp test"),
    row("tcg-q35-smp2", "tsc", UserPagePass, USER_TSC),
    row("tcg-q35-smp2", "tsc", CrossCpuPass, SMP),
    row("tcg-q35-smp2", "hpet", Present, HPET_TCG),
    row("tcg-q35-smp2", "hpet", CrossCpuPass, SMP),
    row("tcg-q35-smp2", "acpi-pm", CrossCpuPass, SMP),
    // ---- TCG q35, -icount shift=8 ---------------------------------------
    row("tcg-q35-icount", "kvmclock", Absent, TCG_NO_KVMCLOCK),
    row("tcg-q35-icount", "kvmclock", StealTimeSkip, STEAL_TCG),
    row("tcg-q35-icount", "hyperv-page", Absent, NO_HV),
    row("tcg-q35-icount", "hyperv-msr", Absent, NO_HV),
    row("tcg-q35-icount", "tsc", Selected, TSC_TCG),
    row("tcg-q35-icount", "tsc", UserPagePass, "ring 3 reads the TSC through the user clock page with a TSC within 100 ppm of 1 GHz (a +100 ppm publication once wrapped its multiplier: the page stood still)"),
    row("tcg-q35-icount", "hpet", Present, HPET_TCG),
    row("tcg-q35-icount", "acpi-pm", Present, PM),
    // ---- KVM q35 -------------------------------------------------------
    row("kvm-q35", "kvmclock", Selected, KVMCLOCK_WINS),
    row("kvm-q35", "kvmclock", StealTimePass, STEAL_KVM),
    row("kvm-q35", "kvmclock", UserPagePass, USER_KVMCLOCK),
    row("kvm-q35", "hyperv-page", Absent, NO_HV),
    row("kvm-q35", "hyperv-msr", Absent, NO_HV),
    row("kvm-q35", "tsc", Present, TSC_PV_RATE),
    row("kvm-q35", "tsc", UserPagePass, USER_TSC),
    row("kvm-q35", "hpet", Present, HPET),
    row("kvm-q35", "acpi-pm", Present, PM),
    // ---- KVM pc --------------------------------------------------------
    row("kvm-pc", "kvmclock", Selected, KVMCLOCK_WINS),
    row("kvm-pc", "kvmclock", StealTimePass, STEAL_KVM),
    row("kvm-pc", "kvmclock", UserPagePass, USER_KVMCLOCK),
    row("kvm-pc", "hyperv-page", Absent, NO_HV),
    row("kvm-pc", "hyperv-msr", Absent, NO_HV),
    row("kvm-pc", "tsc", Present, TSC_PV_RATE),
    row("kvm-pc", "tsc", UserPagePass, USER_TSC),
    row("kvm-pc", "hpet", Present, HPET),
    row("kvm-pc", "acpi-pm", Present, PM),
    // ---- KVM, -kvmclock: selection falls back --------------------------
    row("kvm-nokvmclock", "kvmclock", Absent, "-kvmclock clears the CLOCKSOURCE feature bits"),
    row("kvm-nokvmclock", "kvmclock", StealTimePass, STEAL_KVM),
    row("kvm-nokvmclock", "hyperv-page", Absent, NO_HV),
    row("kvm-nokvmclock", "hyperv-msr", Absent, NO_HV),
    row("kvm-nokvmclock", "tsc", Selected, TSC_KVM_CAL),
    row("kvm-nokvmclock", "tsc", UserPagePass, USER_TSC),
    row("kvm-nokvmclock", "hpet", Present, HPET_KVM),
    row("kvm-nokvmclock", "acpi-pm", Present, PM),
    // ---- KVM, kvm=off --------------------------------------------------
    row("kvm-kvm-off", "kvmclock", Absent, "kvm=off hides the KVM signature (the MSR still reads 0)"),
    row("kvm-kvm-off", "kvmclock", StealTimeSkip, "kvm=off hides the KVM signature: no steal time"),
    row("kvm-kvm-off", "hyperv-page", Absent, NO_HV),
    row("kvm-kvm-off", "hyperv-msr", Absent, NO_HV),
    row("kvm-kvm-off", "tsc", Selected, TSC_KVM_CAL),
    row("kvm-kvm-off", "tsc", UserPagePass, USER_TSC),
    row("kvm-kvm-off", "hpet", Present, HPET_KVM),
    row("kvm-kvm-off", "acpi-pm", Present, PM),
    // ---- KVM, +invtsc --------------------------------------------------
    row("kvm-invtsc", "kvmclock", Selected, "kvmclock (400) stays first while the guest may migrate (default policy)"),
    row("kvm-invtsc", "kvmclock", StealTimePass, STEAL_KVM),
    row("kvm-invtsc", "kvmclock", UserPagePass, USER_KVMCLOCK),
    row("kvm-invtsc", "hyperv-page", Absent, NO_HV),
    row("kvm-invtsc", "hyperv-msr", Absent, NO_HV),
    row("kvm-invtsc", "tsc", Present, "+invtsc adds the invariant bit and leaf 0x40000010: rated 300..=390"),
    row("kvm-invtsc", "tsc", UserPagePass, USER_TSC),
    row("kvm-invtsc", "hpet", Present, HPET),
    row("kvm-invtsc", "acpi-pm", Present, PM),
    // ---- KVM microvm ---------------------------------------------------
    row("kvm-microvm", "kvmclock", Selected, KVMCLOCK_WINS),
    row("kvm-microvm", "kvmclock", StealTimePass, STEAL_KVM_NOREF),
    row("kvm-microvm", "kvmclock", UserPagePass, USER_KVMCLOCK),
    row("kvm-microvm", "hyperv-page", Absent, NO_HV),
    row("kvm-microvm", "hyperv-msr", Absent, NO_HV),
    row("kvm-microvm", "tsc", Present, TSC_PV_RATE),
    row("kvm-microvm", "tsc", UserPagePass, USER_TSC),
    row("kvm-microvm", "hpet", Absent, MICROVM_NO_HPET),
    row("kvm-microvm", "acpi-pm", Absent, MICROVM_NO_PM),
    // ---- KVM q35, 2 vCPUs ----------------------------------------------
    row("kvm-q35-smp2", "kvmclock", Selected, KVMCLOCK_WINS),
    row("kvm-q35-smp2", "kvmclock", StealTimePass, STEAL_KVM),
    row("kvm-q35-smp2", "kvmclock", UserPagePass, USER_KVMCLOCK),
    row("kvm-q35-smp2", "kvmclock", CrossCpuPass, SMP),
    row("kvm-q35-smp2", "hyperv-page", Absent, NO_HV),
    row("kvm-q35-smp2", "hyperv-msr", Absent, NO_HV),
    row("kvm-q35-smp2", "tsc", Present, "rate from pvclock; not invariant without +invtsc: a supervised TSC (290) when the warp test proves the vCPUs' TSCs in step (within ~10,000-22,000 ticks, limit ~32,500: every rdtsc traps here), -100 when the host made the vCPUs take turns on one core (Unknown: ~100,000-tick crossings); below kvmclock (400) either way"),
    row("kvm-q35-smp2", "tsc", UserPagePass, USER_TSC),
    row("kvm-q35-smp2", "tsc", CrossCpuPass, SMP),
    row("kvm-q35-smp2", "hpet", CrossCpuPass, SMP),
    row("kvm-q35-smp2", "acpi-pm", CrossCpuPass, SMP),
];

/// The rows for `config` (this table's, or the foreign rows' table).
pub fn for_config(config: &str) -> impl Iterator<Item = &'static Row> + '_ {
    EXPECTATIONS
        .iter()
        .chain(crate::foreign::EXPECTATIONS)
        .filter(move |r| r.config == config)
}

// ---- The Linux peer ----------------------------------------------------

/// What Linux picks in a configuration by its documented rules: a rule
/// (ratings and flags from the Linux sources), not a measurement. It stands
/// in for the peer where the peer cannot boot, and explains the measurement
/// where it can.
#[derive(Clone, Copy, Debug)]
pub struct LinuxRule {
    /// Linux clocksource name.
    pub pick: &'static str,
    /// The rule that picks it.
    pub why: &'static str,
}

/// How clockhal's pick must compare with the Linux peer's in one
/// configuration (`linux_peer::rule`): never a trapping source, or none,
/// where Linux reads a no-trap one, unless the row says why.
#[derive(Clone, Copy, Debug)]
pub struct PeerRow {
    /// Configuration name (see `configs::CONFIGS`).
    pub config: &'static str,
    /// What Linux's rules pick there.
    pub linux_rule: LinuxRule,
    /// Why clockhal is right to trap (or have no clock) where Linux does not.
    pub exception: Option<&'static str>,
    /// A known gap with its issue: the violation is listed, not failed. A
    /// gap that has closed (clockhal picks a no-trap source) fails the run
    /// until this is removed.
    pub known_gap: Option<&'static str>,
}

const fn peer(
    config: &'static str,
    pick: &'static str,
    why: &'static str,
    known_gap: Option<&'static str>,
) -> PeerRow {
    PeerRow {
        config,
        linux_rule: LinuxRule { pick, why },
        exception: None,
        known_gap,
    }
}

// Linux 6.1 ratings: kvm-clock 400 (arch/x86/kernel/kvmclock.c), tsc 300
// (arch/x86/kernel/tsc.c), hpet 250, acpi_pm 200; the highest-rated wins
// (kernel/time/clocksource.c).
const L_TSC_TCG: &str =
    "tsc 300 beats hpet 250 and acpi_pm 200; TCG sets no constant_tsc/nonstop_tsc, \
    so the TSC keeps CLOCK_SOURCE_MUST_VERIFY and stays while the clocksource watchdog (hpet) sees \
    no skew";
const L_TSC_NOKVMCLOCK: &str =
    "no kvm-clock; tsc 300 beats hpet 250: without +invtsc there is no nonstop_tsc, \
    so the TSC stays only while the clocksource watchdog (hpet) sees no skew";
const L_KVMCLOCK: &str =
    "kvm-clock 400 (KVM signature, CLOCKSOURCE2): not demoted to 299, since without \
    +invtsc the guest has no nonstop_tsc";

/// One row per configuration.
#[rustfmt::skip]
pub const PEER_EXPECTATIONS: &[PeerRow] = &[
    peer("tcg-q35", "tsc", L_TSC_TCG, None),
    peer("tcg-pc", "tsc", L_TSC_TCG, None),
    peer("tcg-pc-nohpet", "tsc", "tsc 300 beats acpi_pm 200 while the clocksource watchdog sees no skew; \
        until acpi_pm registers (fs_initcall) the watchdog is refined-jiffies, and jiffies that lag \
        under TCG get tsc-early marked unstable, leaving acpi_pm", None),
    peer("tcg-microvm", "tsc", "tsc 300 is the only clocksource (no HPET, no PM timer); its rate comes from \
        PIT calibration and no watchdog can check it", None),
    peer("tcg-microvm-nopit", "none", "no PIT, no HPET, no PM timer: Linux finds no reference for the \
        TSC (\"could not calculate TSC khz\") and hangs without a clock; clockhal's TSC, calibrated \
        against the RTC, is no trap", None),
    // The extra PVH peers of the foreign rows (foreign::PEER_CONFIGS).
    peer("tcg-pc-max", "tsc", L_TSC_TCG, None),
    peer("tcg-microvm-io1", "tsc", "as tcg-microvm (one I/O APIC): the TSC from PIT calibration is \
        the only clocksource", None),
    peer("tcg-q35-icount", "tsc", L_TSC_TCG, None),
    peer("tcg-q35-smp2", "hpet", "two CPUs and a non-Intel TSC (TCG's max CPU is AuthenticAMD) without \
        constant_tsc: Linux deems the TSCs unsynchronized and marks the TSC unstable at boot \
        (arch/x86/kernel/tsc.c unsynchronized_tsc); hpet 250 wins", None),
    peer("kvm-q35", "kvm-clock", L_KVMCLOCK, None),
    peer("kvm-pc", "kvm-clock", L_KVMCLOCK, None),
    peer("kvm-nokvmclock", "tsc", L_TSC_NOKVMCLOCK, None),
    peer("kvm-kvm-off", "tsc", "kvm=off hides the KVM signature, so no kvm-clock; tsc 300 beats hpet 250, \
        supervised by the clocksource watchdog (no nonstop_tsc without +invtsc)", None),
    peer("kvm-invtsc", "tsc", "constant_tsc and nonstop_tsc (invtsc) demote kvm-clock from 400 to 299 \
        (\"Invariant TSC exposed by host means kvmclock is not necessary\"); tsc 300 wins", None),
    peer("kvm-microvm", "kvm-clock", L_KVMCLOCK, None),
    peer("kvm-q35-smp2", "kvm-clock", L_KVMCLOCK, None),
];

/// The peer row for `config`.
pub fn peer_row(config: &str) -> Option<&'static PeerRow> {
    PEER_EXPECTATIONS.iter().find(|r| r.config == config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configs::CONFIGS;

    #[test]
    fn every_row_names_a_config_and_a_source() {
        for r in EXPECTATIONS {
            assert!(CONFIGS.iter().any(|c| c.name == r.config), "{r:?}");
            assert!(SOURCES.contains(&r.source), "{r:?}");
            assert!(!r.reason.is_empty());
        }
    }

    #[test]
    fn every_config_states_every_source_and_at_most_one_selection() {
        for c in CONFIGS {
            for s in SOURCES {
                assert!(
                    for_config(c.name).any(|r| r.source == s),
                    "{} lacks a row for {s}",
                    c.name
                );
            }
            let selected = for_config(c.name)
                .filter(|r| r.expect == Expect::Selected)
                .count();
            assert!(selected <= 1, "{}", c.name);
        }
    }

    #[test]
    fn every_config_has_one_peer_row_with_a_known_linux_pick() {
        for c in CONFIGS.iter().chain(crate::foreign::PEER_CONFIGS) {
            let rows = PEER_EXPECTATIONS
                .iter()
                .filter(|r| r.config == c.name)
                .count();
            assert_eq!(rows, 1, "{}", c.name);
        }
        for r in PEER_EXPECTATIONS {
            assert!(
                CONFIGS
                    .iter()
                    .chain(crate::foreign::PEER_CONFIGS)
                    .any(|c| c.name == r.config),
                "{r:?}"
            );
            assert!(
                crate::linux_peer::rule::linux_class(r.linux_rule.pick).is_some(),
                "{r:?}"
            );
            assert!(!r.linux_rule.why.is_empty());
            assert!(
                r.exception.is_none() || r.known_gap.is_none(),
                "{}: a gap or an exception, not both",
                r.config
            );
        }
    }
}
