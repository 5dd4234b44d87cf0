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
}

impl Expect {
    /// Short word for reports.
    pub fn word(self) -> &'static str {
        match self {
            Expect::Present => "present",
            Expect::Absent => "absent",
            Expect::Selected => "selected",
            Expect::CrossCpuPass => "cross-cpu pass",
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

const fn row(
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
const NO_HV: &str = "Hyper-V enlightenments cannot be booted on this host (KVM_CAP_HYPERV = 0)";
const TCG_NO_KVMCLOCK: &str = "TCG has no KVM signature in CPUID";
const HPET: &str = "q35/pc have an HPET (ACPI HPET table, 100 MHz, 64-bit)";
const PM: &str = "q35/pc FADTs name a 24-bit PM timer";
const MICROVM_NO_HPET: &str = "microvm has no HPET";
const MICROVM_NO_PM: &str = "microvm's hardware-reduced FADT has PM_TMR_BLK = 0";
const KVMCLOCK_WINS: &str =
    "kvmclock (CLOCKSOURCE2, stable bit) is the migration-safe no-exit source (400)";
const TSC_PV_RATE: &str =
    "rate from pvclock, but rated -100: KVM hides the invariant-TSC bit without +invtsc";
const TSC_TCG: &str =
    "rate calibrated against HPET/PM timer, but rated -100: TCG sets no invariant-TSC bit";
const TSC_KVM_CAL: &str =
    "rate calibrated against the HPET, rated -100: not invariant without +invtsc";
const HPET_TCG: &str = "no kvmclock, TSC rated -100: the HPET (250) outranks the PM timer (150)";
const HPET_KVM: &str =
    "no kvmclock, TSC not invariant without +invtsc (-100): the HPET (250) is next";
const SMP: &str = "two vCPUs: the warp test must run, and pass, on both";

/// The expectation table.
#[rustfmt::skip]
pub const EXPECTATIONS: &[Row] = &[
    // ---- TCG q35 -------------------------------------------------------
    row("tcg-q35", "kvmclock", Absent, TCG_NO_KVMCLOCK),
    row("tcg-q35", "hyperv-page", Absent, NO_HV),
    row("tcg-q35", "hyperv-msr", Absent, NO_HV),
    row("tcg-q35", "tsc", Present, TSC_TCG),
    row("tcg-q35", "hpet", Selected, HPET_TCG),
    row("tcg-q35", "acpi-pm", Present, PM),
    // ---- TCG pc (qemu64 CPU) -------------------------------------------
    row("tcg-pc", "kvmclock", Absent, TCG_NO_KVMCLOCK),
    row("tcg-pc", "hyperv-page", Absent, NO_HV),
    row("tcg-pc", "hyperv-msr", Absent, NO_HV),
    row("tcg-pc", "tsc", Present, TSC_TCG),
    row("tcg-pc", "hpet", Selected, HPET_TCG),
    row("tcg-pc", "acpi-pm", Present, PM),
    // ---- TCG pc, hpet=off ----------------------------------------------
    row("tcg-pc-nohpet", "kvmclock", Absent, TCG_NO_KVMCLOCK),
    row("tcg-pc-nohpet", "hyperv-page", Absent, NO_HV),
    row("tcg-pc-nohpet", "hyperv-msr", Absent, NO_HV),
    row("tcg-pc-nohpet", "tsc", Present, TSC_TCG),
    row("tcg-pc-nohpet", "hpet", Absent, "hpet=off removes the HPET and its ACPI table"),
    row("tcg-pc-nohpet", "acpi-pm", Selected, "no kvmclock, no HPET, TSC rated -100: the PM timer is left"),
    // ---- TCG microvm: nothing clockhal can use -------------------------
    row("tcg-microvm", "kvmclock", Absent, TCG_NO_KVMCLOCK),
    row("tcg-microvm", "hyperv-page", Absent, NO_HV),
    row("tcg-microvm", "hyperv-msr", Absent, NO_HV),
    row("tcg-microvm", "tsc", Absent, "no TSC rate: no CPUID/hypervisor rate and no HPET or PM timer to calibrate against (no PIT backend); nothing selected"),
    row("tcg-microvm", "hpet", Absent, MICROVM_NO_HPET),
    row("tcg-microvm", "acpi-pm", Absent, MICROVM_NO_PM),
    // ---- TCG q35, 2 vCPUs ----------------------------------------------
    row("tcg-q35-smp2", "kvmclock", Absent, TCG_NO_KVMCLOCK),
    row("tcg-q35-smp2", "hyperv-page", Absent, NO_HV),
    row("tcg-q35-smp2", "hyperv-msr", Absent, NO_HV),
    row("tcg-q35-smp2", "tsc", Present, TSC_TCG),
    row("tcg-q35-smp2", "tsc", CrossCpuPass, SMP),
    row("tcg-q35-smp2", "hpet", Selected, HPET_TCG),
    row("tcg-q35-smp2", "hpet", CrossCpuPass, SMP),
    row("tcg-q35-smp2", "acpi-pm", CrossCpuPass, SMP),
    // ---- KVM q35 -------------------------------------------------------
    row("kvm-q35", "kvmclock", Selected, KVMCLOCK_WINS),
    row("kvm-q35", "hyperv-page", Absent, NO_HV),
    row("kvm-q35", "hyperv-msr", Absent, NO_HV),
    row("kvm-q35", "tsc", Present, TSC_PV_RATE),
    row("kvm-q35", "hpet", Present, HPET),
    row("kvm-q35", "acpi-pm", Present, PM),
    // ---- KVM pc --------------------------------------------------------
    row("kvm-pc", "kvmclock", Selected, KVMCLOCK_WINS),
    row("kvm-pc", "hyperv-page", Absent, NO_HV),
    row("kvm-pc", "hyperv-msr", Absent, NO_HV),
    row("kvm-pc", "tsc", Present, TSC_PV_RATE),
    row("kvm-pc", "hpet", Present, HPET),
    row("kvm-pc", "acpi-pm", Present, PM),
    // ---- KVM, -kvmclock: selection falls back --------------------------
    row("kvm-nokvmclock", "kvmclock", Absent, "-kvmclock clears the CLOCKSOURCE feature bits"),
    row("kvm-nokvmclock", "hyperv-page", Absent, NO_HV),
    row("kvm-nokvmclock", "hyperv-msr", Absent, NO_HV),
    row("kvm-nokvmclock", "tsc", Present, TSC_KVM_CAL),
    row("kvm-nokvmclock", "hpet", Selected, HPET_KVM),
    row("kvm-nokvmclock", "acpi-pm", Present, PM),
    // ---- KVM, kvm=off --------------------------------------------------
    row("kvm-kvm-off", "kvmclock", Absent, "kvm=off hides the KVM signature (the MSR still reads 0)"),
    row("kvm-kvm-off", "hyperv-page", Absent, NO_HV),
    row("kvm-kvm-off", "hyperv-msr", Absent, NO_HV),
    row("kvm-kvm-off", "tsc", Present, TSC_KVM_CAL),
    row("kvm-kvm-off", "hpet", Selected, HPET_KVM),
    row("kvm-kvm-off", "acpi-pm", Present, PM),
    // ---- KVM, +invtsc --------------------------------------------------
    row("kvm-invtsc", "kvmclock", Selected, "kvmclock (400) stays first while the guest may migrate (default policy)"),
    row("kvm-invtsc", "hyperv-page", Absent, NO_HV),
    row("kvm-invtsc", "hyperv-msr", Absent, NO_HV),
    row("kvm-invtsc", "tsc", Present, "+invtsc adds the invariant bit and leaf 0x40000010: rated 300..=390"),
    row("kvm-invtsc", "hpet", Present, HPET),
    row("kvm-invtsc", "acpi-pm", Present, PM),
    // ---- KVM microvm ---------------------------------------------------
    row("kvm-microvm", "kvmclock", Selected, KVMCLOCK_WINS),
    row("kvm-microvm", "hyperv-page", Absent, NO_HV),
    row("kvm-microvm", "hyperv-msr", Absent, NO_HV),
    row("kvm-microvm", "tsc", Present, TSC_PV_RATE),
    row("kvm-microvm", "hpet", Absent, MICROVM_NO_HPET),
    row("kvm-microvm", "acpi-pm", Absent, MICROVM_NO_PM),
    // ---- KVM q35, 2 vCPUs ----------------------------------------------
    row("kvm-q35-smp2", "kvmclock", Selected, KVMCLOCK_WINS),
    row("kvm-q35-smp2", "kvmclock", CrossCpuPass, SMP),
    row("kvm-q35-smp2", "hyperv-page", Absent, NO_HV),
    row("kvm-q35-smp2", "hyperv-msr", Absent, NO_HV),
    row("kvm-q35-smp2", "tsc", Present, TSC_PV_RATE),
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
}
