//! What each configuration must show of the timer checks (`timer-*` CHECK
//! lines, one `source` per timer device): one row per (configuration,
//! device) fact, each with its reason, like the source table in
//! `expectations`.

use crate::outcome::{CheckOut, Outcome};
use clockhal_conformance::{Status, TIMER_DEVICES};
use serde_json::{json, Value as Json};

/// What a row demands of one timer device in one configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimerExpect {
    /// `timer-deadlines`, `timer-past` and `timer-cancel` pass;
    /// `timer-long` passes, or is skipped as not applicable (64-bit reach).
    Pass,
    /// All four device checks are skipped (the device is absent; the
    /// detail says why).
    Skip,
    /// `timer-selected` passes naming this device.
    Selected,
    /// The kernel runs no timer checks at all (foreign kernels: no IRQ
    /// plumbing there): every `timer-*` line is a skip. `device` is `*`.
    AllSkip,
    /// The device's checks pass, or are all skipped with the reason (the
    /// row says when each happens); never a failure.
    PassOrSkip,
    /// `timer-selected` passes, whichever device it names, or is skipped
    /// (the selected device became unusable before the checks: a switch
    /// of the clock's source) (`device` `*`).
    AnySelected,
    /// The `timer-selected` detail says the LAPIC was reached as
    /// `device` says (`x2APIC` or `xAPIC`).
    LapicVia,
}

impl TimerExpect {
    /// Short word for reports.
    pub fn word(self) -> &'static str {
        match self {
            TimerExpect::Pass => "timer checks pass",
            TimerExpect::Skip => "timer checks skip",
            TimerExpect::Selected => "timer selected",
            TimerExpect::AllSkip => "no timer checks",
            TimerExpect::PassOrSkip => "timer checks pass or skip",
            TimerExpect::AnySelected => "a timer selected",
            TimerExpect::LapicVia => "LAPIC access",
        }
    }
}

/// One expectation.
#[derive(Clone, Copy, Debug)]
pub struct TimerRow {
    /// Configuration name.
    pub config: &'static str,
    /// Timer device name (`lapic-oneshot`, ...), `*` for [`TimerExpect::AllSkip`].
    pub device: &'static str,
    /// What must hold.
    pub expect: TimerExpect,
    /// Why (a QEMU fact or a clockhal policy).
    pub reason: &'static str,
}

const fn t(
    config: &'static str,
    device: &'static str,
    expect: TimerExpect,
    reason: &'static str,
) -> TimerRow {
    TimerRow {
        config,
        device,
        expect,
        reason,
    }
}

/// The per-device checks (`timer-selected` is per run).
pub const DEVICE_CHECKS: [&str; 4] = [
    "timer-deadlines",
    "timer-past",
    "timer-cancel",
    "timer-long",
];

use TimerExpect::*;

const TCG_NO_TSC_DEADLINE: &str =
    "QEMU 7.2's TCG offers no TSC-deadline mode (CPUID.1:ECX[24] clear)";
const ONESHOT: &str = "the LAPIC one-shot timer (calibrated against the clock, or its stated rate) delivers through the LAPIC";
const ONESHOT_TCG_WINS: &str =
    "LAPIC one-shot (100; 80 without ARAT on qemu64) outranks the HPET comparator (50); no TSC-deadline under TCG";
const HPET_Q35: &str =
    "HPET timer 0, legacy replacement off, on the highest GSI of Tn_INT_ROUTE_CAP \
    (q35: 23 of 0xff0104) through the I/O APIC the MADT names (QEMU's HPET has no MSI by default); \
    a 64-bit comparator, so timer-long is not applicable";
const HPET_PC_TCG: &str =
    "pc's HPET offers only GSI 2 (Tn_INT_ROUTE_CAP 0x4); QEMU's own I/O APIC \
    (TCG) takes it on input 2; a 64-bit comparator, so timer-long is not applicable";
const HPET_PC_KVM: &str = "pc's HPET offers only GSI 2, and QEMU's KVM irqchip wires I/O APIC input 2 \
    to the PIT's IRQ 0, not GSI 2: the kernel's route test (a 1 ms comparator) sees no interrupt in \
    200 ms and reports the device absent with that measurement";
const NO_HPET: &str = "no HPET on this machine (hpet=off, microvm)";
const TSC_DEADLINE_KVM: &str =
    "-cpu host sets CPUID.1:ECX[24]; KVM's LAPIC honours IA32_TSC_DEADLINE \
    (the self-test reads it back); the deadline goes through the clock's TSC map";
const TSC_DEADLINE_WINS: &str =
    "TSC-deadline (150) outranks the LAPIC one-shot (100) and the HPET comparator (50)";
const TSC_DEADLINE_SUPERVISED: &str = "a supervised TSC (no kvmclock): TSC-deadline runs where the clock \
    reads the TSC when the timer checks start (the kernel ticks the watchdog until the source holds and \
    a TSC demoted during the long trapping checks is re-admitted); where it still reads the HPET (the \
    TSC's re-admissions spent) there is no TSC map and the device is rejected with that reason";
const X2APIC_KVM: &str =
    "-cpu host offers x2APIC (CPUID.1:ECX[21]): the kernel switches the boot CPU to it, \
    so the LAPIC timers run through MSRs";
const XAPIC_TCG: &str = "QEMU 7.2's TCG offers no x2APIC: the LAPIC timers run through xAPIC MMIO";

/// The expectation table.
#[rustfmt::skip]
pub const TIMER_EXPECTATIONS: &[TimerRow] = &[
    // ---- TCG, with an HPET ------------------------------------------------
    t("tcg-q35", "lapic-tsc-deadline", Skip, TCG_NO_TSC_DEADLINE),
    t("tcg-q35", "lapic-oneshot", Pass, ONESHOT),
    t("tcg-q35", "lapic-oneshot", Selected, ONESHOT_TCG_WINS),
    t("tcg-q35", "hpet-comparator", Pass, HPET_Q35),
    t("tcg-q35", "xAPIC", LapicVia, XAPIC_TCG),
    t("tcg-pc", "lapic-tsc-deadline", Skip, TCG_NO_TSC_DEADLINE),
    t("tcg-pc", "lapic-oneshot", Pass, ONESHOT),
    t("tcg-pc", "lapic-oneshot", Selected, ONESHOT_TCG_WINS),
    t("tcg-pc", "hpet-comparator", Pass, HPET_PC_TCG),
    t("tcg-pc-max", "lapic-tsc-deadline", Skip, TCG_NO_TSC_DEADLINE),
    t("tcg-pc-max", "lapic-oneshot", Pass, ONESHOT),
    t("tcg-pc-max", "lapic-oneshot", Selected, ONESHOT_TCG_WINS),
    t("tcg-pc-max", "hpet-comparator", Pass, HPET_PC_TCG),
    t("tcg-q35-smp2", "lapic-tsc-deadline", Skip, TCG_NO_TSC_DEADLINE),
    t("tcg-q35-smp2", "lapic-oneshot", Pass, "the boot CPU's LAPIC one-shot timer (interrupts on the boot CPU only)"),
    t("tcg-q35-smp2", "lapic-oneshot", Selected, ONESHOT_TCG_WINS),
    t("tcg-q35-smp2", "hpet-comparator", Pass, "as tcg-q35: the GSI is routed to the boot CPU's APIC ID"),
    t("tcg-q35-icount", "lapic-tsc-deadline", Skip, TCG_NO_TSC_DEADLINE),
    t("tcg-q35-icount", "lapic-oneshot", Pass, "LAPIC and clock both on icount time: deadlines land on the instruction count"),
    t("tcg-q35-icount", "lapic-oneshot", Selected, ONESHOT_TCG_WINS),
    t("tcg-q35-icount", "hpet-comparator", Pass, "the HPET's QEMU timer runs on icount time too (measured: delivered, none early)"),
    // ---- TCG, no HPET ----------------------------------------------------
    t("tcg-pc-nohpet", "lapic-tsc-deadline", Skip, TCG_NO_TSC_DEADLINE),
    t("tcg-pc-nohpet", "lapic-oneshot", Pass, ONESHOT),
    t("tcg-pc-nohpet", "lapic-oneshot", Selected, ONESHOT_TCG_WINS),
    t("tcg-pc-nohpet", "hpet-comparator", Skip, NO_HPET),
    t("tcg-microvm", "lapic-tsc-deadline", Skip, TCG_NO_TSC_DEADLINE),
    t("tcg-microvm", "lapic-oneshot", Pass, "calibrated against the PIT-calibrated TSC clock"),
    t("tcg-microvm", "lapic-oneshot", Selected, ONESHOT_TCG_WINS),
    t("tcg-microvm", "hpet-comparator", Skip, NO_HPET),
    t("tcg-microvm-nopit", "lapic-tsc-deadline", Skip, TCG_NO_TSC_DEADLINE),
    t("tcg-microvm-nopit", "lapic-oneshot", Pass, "calibrated against the RTC-calibrated TSC clock"),
    t("tcg-microvm-nopit", "lapic-oneshot", Selected, ONESHOT_TCG_WINS),
    t("tcg-microvm-nopit", "hpet-comparator", Skip, NO_HPET),
    t("tcg-microvm-io1", "lapic-tsc-deadline", Skip, TCG_NO_TSC_DEADLINE),
    t("tcg-microvm-io1", "lapic-oneshot", Pass, ONESHOT),
    t("tcg-microvm-io1", "lapic-oneshot", Selected, ONESHOT_TCG_WINS),
    t("tcg-microvm-io1", "hpet-comparator", Skip, NO_HPET),
    // ---- KVM ---------------------------------------------------------------
    t("kvm-q35", "lapic-tsc-deadline", Pass, TSC_DEADLINE_KVM),
    t("kvm-q35", "lapic-tsc-deadline", Selected, TSC_DEADLINE_WINS),
    t("kvm-q35", "lapic-oneshot", Pass, ONESHOT),
    t("kvm-q35", "hpet-comparator", Pass, HPET_Q35),
    t("kvm-q35", "x2APIC", LapicVia, X2APIC_KVM),
    t("kvm-pc", "lapic-tsc-deadline", Pass, TSC_DEADLINE_KVM),
    t("kvm-pc", "lapic-tsc-deadline", Selected, TSC_DEADLINE_WINS),
    t("kvm-pc", "lapic-oneshot", Pass, ONESHOT),
    t("kvm-pc", "hpet-comparator", Skip, HPET_PC_KVM),
    t("kvm-pc", "x2APIC", LapicVia, X2APIC_KVM),
    t("kvm-nokvmclock", "lapic-tsc-deadline", PassOrSkip, TSC_DEADLINE_SUPERVISED),
    t("kvm-nokvmclock", "*", AnySelected, "TSC-deadline where it runs, else the LAPIC one-shot"),
    t("kvm-nokvmclock", "lapic-oneshot", Pass, ONESHOT),
    t("kvm-nokvmclock", "hpet-comparator", Pass, HPET_Q35),
    t("kvm-nokvmclock", "x2APIC", LapicVia, X2APIC_KVM),
    t("kvm-kvm-off", "lapic-tsc-deadline", PassOrSkip, TSC_DEADLINE_SUPERVISED),
    t("kvm-kvm-off", "*", AnySelected, "TSC-deadline where it runs, else the LAPIC one-shot"),
    t("kvm-kvm-off", "lapic-oneshot", Pass, ONESHOT),
    t("kvm-kvm-off", "hpet-comparator", Pass, HPET_Q35),
    t("kvm-kvm-off", "x2APIC", LapicVia, X2APIC_KVM),
    t("kvm-invtsc", "lapic-tsc-deadline", Pass, TSC_DEADLINE_KVM),
    t("kvm-invtsc", "lapic-tsc-deadline", Selected, TSC_DEADLINE_WINS),
    t("kvm-invtsc", "lapic-oneshot", Pass, "the LAPIC rate is stated here (hypervisor timing leaf 0x40000010)"),
    t("kvm-invtsc", "hpet-comparator", Pass, HPET_Q35),
    t("kvm-invtsc", "x2APIC", LapicVia, X2APIC_KVM),
    t("kvm-microvm", "lapic-tsc-deadline", Pass, TSC_DEADLINE_KVM),
    t("kvm-microvm", "lapic-tsc-deadline", Selected, TSC_DEADLINE_WINS),
    t("kvm-microvm", "lapic-oneshot", Pass, ONESHOT),
    t("kvm-microvm", "hpet-comparator", Skip, NO_HPET),
    t("kvm-microvm", "x2APIC", LapicVia, X2APIC_KVM),
    t("kvm-q35-smp2", "lapic-tsc-deadline", Pass, "the boot CPU's TSC-deadline timer (interrupts on the boot CPU only)"),
    t("kvm-q35-smp2", "lapic-tsc-deadline", Selected, TSC_DEADLINE_WINS),
    t("kvm-q35-smp2", "lapic-oneshot", Pass, ONESHOT),
    t("kvm-q35-smp2", "hpet-comparator", Pass, HPET_Q35),
    t("kvm-q35-smp2", "x2APIC", LapicVia, X2APIC_KVM),
];

/// Why the foreign kernels run no timer checks.
pub const FOREIGN_NO_TIMERS: &str = "no IRQ plumbing for the suite in this kernel (Hermit owns its \
    timer; the bootloader_api and bootloader 0.9 kernels take no interrupts): every timer check skips";

/// The timer rows for `config`: this table's, or one [`AllSkip`] row for
/// a foreign configuration.
pub fn for_config(config: &'static str) -> Vec<TimerRow> {
    let rows: Vec<TimerRow> = TIMER_EXPECTATIONS
        .iter()
        .filter(|r| r.config == config)
        .copied()
        .collect();
    if rows.is_empty() && crate::foreign::is_known(config) {
        return vec![t(config, "*", AllSkip, FOREIGN_NO_TIMERS)];
    }
    rows
}

fn check<'o>(o: &'o Outcome, device: &str, name: &str) -> Option<&'o CheckOut> {
    o.source(device).and_then(|s| s.check(name))
}

fn describe(c: Option<&CheckOut>, name: &str) -> String {
    match c {
        Some(c) => format!("{name} {} ({})", c.status, c.detail),
        None => format!("no {name} line"),
    }
}

/// Every timer row of `o`'s configuration that does not hold.
pub fn violations(o: &Outcome) -> Vec<String> {
    let mut v = Vec::new();
    for row in for_config(o.name) {
        let bad: Option<String> = match row.expect {
            Pass => DEVICE_CHECKS.iter().find_map(|name| {
                let c = check(o, row.device, name);
                let ok = c.is_some_and(|c| {
                    c.status == Status::Pass
                        || (*name == "timer-long"
                            && c.status == Status::Skip
                            && c.detail.starts_with("not applicable"))
                });
                (!ok).then(|| describe(c, name))
            }),
            Skip => DEVICE_CHECKS.iter().find_map(|name| {
                let c = check(o, row.device, name);
                (!c.is_some_and(|c| c.status == Status::Skip)).then(|| describe(c, name))
            }),
            Selected => {
                let c = check(o, row.device, "timer-selected");
                (!c.is_some_and(|c| c.status == Status::Pass)).then(|| match selected(o) {
                    Some((name, status, detail)) => {
                        format!("timer-selected {status} for {name} ({detail})")
                    }
                    None => "no timer-selected line".to_string(),
                })
            }
            PassOrSkip => {
                let all_skip = DEVICE_CHECKS
                    .iter()
                    .all(|n| check(o, row.device, n).is_some_and(|c| c.status == Status::Skip));
                let pass = DEVICE_CHECKS.iter().all(|n| {
                    check(o, row.device, n).is_some_and(|c| {
                        c.status == Status::Pass
                            || (*n == "timer-long"
                                && c.status == Status::Skip
                                && c.detail.starts_with("not applicable"))
                    })
                });
                (!all_skip && !pass).then(|| {
                    DEVICE_CHECKS
                        .iter()
                        .map(|n| describe(check(o, row.device, n), n))
                        .collect::<Vec<_>>()
                        .join("; ")
                })
            }
            AnySelected => match selected(o) {
                Some((_, Status::Pass | Status::Skip, _)) => None,
                Some((name, status, detail)) => {
                    Some(format!("timer-selected {status} for {name} ({detail})"))
                }
                None => Some("no timer-selected line".to_string()),
            },
            LapicVia => match selected(o) {
                Some((_, _, detail)) if detail.contains(&format!("LAPIC via {} ", row.device)) => {
                    None
                }
                Some((name, status, detail)) => {
                    Some(format!("timer-selected {status} for {name} ({detail})"))
                }
                None => Some("no timer-selected line".to_string()),
            },
            AllSkip => o.sources.iter().find_map(|s| {
                s.checks
                    .iter()
                    .find(|c| c.name.starts_with("timer-") && c.status != Status::Skip)
                    .map(|c| format!("{} {} {} ({})", s.name, c.name, c.status, c.detail))
            }),
        };
        if let Some(got) = bad {
            v.push(format!(
                "{} expected {} [{}], got {got}",
                row.device,
                row.expect.word(),
                row.reason
            ));
        }
    }
    v
}

/// The `timer-selected` line: (device, status, detail).
pub fn selected(o: &Outcome) -> Option<(&str, Status, &str)> {
    o.sources.iter().find_map(|s| {
        s.check("timer-selected")
            .map(|c| (s.name.as_str(), c.status, c.detail.as_str()))
    })
}

/// The selected timer device for the table (`-` where none passed).
pub fn selected_cell(o: &Outcome) -> &str {
    match selected(o) {
        Some((name, Status::Pass, _)) => name,
        _ => "-",
    }
}

/// `key=<u64>` in a detail.
fn field(detail: &str, key: &str) -> Option<u64> {
    detail
        .split_ascii_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
}

/// results.json's `timers` object: the selection and its reasons, and per
/// device its checks' statuses with the lateness median and max.
pub fn to_json(o: &Outcome) -> Json {
    let devices: Vec<Json> = TIMER_DEVICES
        .iter()
        .filter_map(|d| o.source(d))
        .map(|s| {
            let deadlines = s.check("timer-deadlines");
            json!({
                "name": s.name,
                "checks": DEVICE_CHECKS.iter().map(|n| (n.to_string(), json!(s.check(n).map(|c| c.status.as_str())))).collect::<serde_json::Map<_, _>>(),
                "lateness_median_ns": deadlines.and_then(|c| field(&c.detail, "median_ns")),
                "lateness_max_ns": deadlines.and_then(|c| field(&c.detail, "max_ns")),
                "lateness_p90_ns": deadlines.and_then(|c| field(&c.detail, "p90_ns")),
                "skip_reason": deadlines.filter(|c| c.status == Status::Skip).map(|c| c.detail.clone()),
            })
        })
        .collect();
    let sel = selected(o);
    json!({
        "selected": sel.filter(|s| s.1 == Status::Pass).map(|s| s.0),
        "selection": sel.map(|s| s.2),
        "devices": devices,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configs::CONFIGS;

    #[test]
    fn every_pvh_config_has_a_row_per_device_and_a_selection() {
        for c in CONFIGS.iter().chain(crate::foreign::PEER_CONFIGS) {
            let rows = for_config(c.name);
            for d in TIMER_DEVICES {
                assert_eq!(
                    rows.iter()
                        .filter(|r| r.device == d && matches!(r.expect, Pass | Skip | PassOrSkip))
                        .count(),
                    1,
                    "{} {d}",
                    c.name
                );
            }
            assert_eq!(
                rows.iter()
                    .filter(|r| matches!(r.expect, Selected | AnySelected))
                    .count(),
                1,
                "{}",
                c.name
            );
        }
    }

    #[test]
    fn foreign_configs_skip_every_timer_check() {
        for c in crate::foreign::CONFIGS {
            let rows = for_config(c.name);
            assert_eq!(rows.len(), 1, "{}", c.name);
            assert_eq!(rows[0].expect, AllSkip);
        }
    }

    #[test]
    fn lateness_fields_are_parsed() {
        let d = "median_ns=56583 max_ns=11784757 p90_ns=3628417 of 1000 deadlines";
        assert_eq!(field(d, "median_ns"), Some(56583));
        assert_eq!(field(d, "max_ns"), Some(11784757));
        assert_eq!(field(d, "min_ns"), None);
    }
}
