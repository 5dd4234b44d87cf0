//! The peer rule: clockhal must not read a trapping clock (or none) where
//! Linux, in the same configuration, reads a no-trap one, unless the
//! configuration's peer row says why clockhal is right
//! ([`PeerRow::exception`]) or lists it as a known gap
//! ([`PeerRow::known_gap`]).

use crate::expectations::PeerRow;

/// How a clock is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// A TSC-based read: no exit to the hypervisor.
    NoTrap,
    /// Every read exits to the hypervisor (device register or MSR).
    Trap,
    /// No counter (Linux's jiffies) or no clock at all (`none`: the kernel
    /// hung without one): worse than any hardware clock.
    Tick,
}

/// clockhal source name, Linux clocksource name, how it is read.
const CLOCKS: &[(&str, &str, Class)] = &[
    ("kvmclock", "kvm-clock", Class::NoTrap),
    ("hyperv-page", "hyperv_clocksource_tsc_page", Class::NoTrap),
    ("tsc", "tsc", Class::NoTrap),
    ("hyperv-msr", "hyperv_clocksource_msr", Class::Trap),
    ("hpet", "hpet", Class::Trap),
    ("acpi-pm", "acpi_pm", Class::Trap),
];

/// Linux clocksources with no clockhal counterpart.
const LINUX_ONLY: &[(&str, Class)] = &[
    ("tsc-early", Class::NoTrap),
    ("pit", Class::Trap),
    ("jiffies", Class::Tick),
    ("refined-jiffies", Class::Tick),
    ("none", Class::Tick),
];

/// How a clockhal source is read (`None`: not a clockhal source name).
pub fn clockhal_class(name: &str) -> Option<Class> {
    CLOCKS.iter().find(|c| c.0 == name).map(|c| c.2)
}

/// How a Linux clocksource is read (`None`: a name this table lacks).
pub fn linux_class(name: &str) -> Option<Class> {
    CLOCKS
        .iter()
        .find(|c| c.1 == name)
        .map(|c| c.2)
        .or_else(|| LINUX_ONLY.iter().find(|c| c.0 == name).map(|c| c.1))
}

/// Linux's name for a clockhal source.
pub fn linux_name(clockhal: &str) -> Option<&'static str> {
    CLOCKS.iter().find(|c| c.0 == clockhal).map(|c| c.1)
}

/// What clockhal did in the configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clockhal<'a> {
    /// Its kernel was not booted (the configuration was skipped).
    NotRun,
    /// It selected this source (`None`: nothing).
    Selected(Option<&'a str>),
}

/// What Linux picks, and how we know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinuxPick<'a> {
    /// The peer booted and reported it.
    Measured(&'a str),
    /// Not booted: Linux's documented rule (the row's `linux_rule`).
    Rule(&'a str),
}

impl LinuxPick<'_> {
    /// `measured` or `rule`.
    pub fn basis(&self) -> &'static str {
        match self {
            LinuxPick::Measured(_) => "measured",
            LinuxPick::Rule(_) => "rule",
        }
    }

    /// The clocksource name.
    pub fn name(&self) -> &str {
        match self {
            LinuxPick::Measured(n) | LinuxPick::Rule(n) => n,
        }
    }
}

/// The outcome of the rule in one configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// clockhal reads no trapping clock where Linux has a no-trap one.
    Holds,
    /// Violated, and the row says why clockhal is right.
    Excepted(&'static str),
    /// Violated: a known gap the row lists with its issue (not a failure).
    KnownGap(&'static str),
    /// Violated, and the row gives no reason: the run fails.
    Fails(String),
    /// The row lists a gap or exception that no longer applies: the run
    /// fails until the row is updated, so a closed gap cannot hide.
    Stale(String),
    /// Nothing to compare, with why.
    NoComparison(String),
}

impl Verdict {
    /// Short word for tables and JSON.
    pub fn word(&self) -> &'static str {
        match self {
            Verdict::Holds => "ok",
            Verdict::Excepted(_) => "exception",
            Verdict::KnownGap(_) => "known-gap",
            Verdict::Fails(_) => "FAIL",
            Verdict::Stale(_) => "STALE",
            Verdict::NoComparison(_) => "SKIP",
        }
    }

    /// The reason behind the word.
    pub fn reason(&self) -> &str {
        match self {
            Verdict::Holds => "",
            Verdict::Excepted(r) | Verdict::KnownGap(r) => r,
            Verdict::Fails(r) | Verdict::Stale(r) | Verdict::NoComparison(r) => r,
        }
    }

    /// The message for `Outcome::unexpected`, when this fails the run.
    pub fn unexpected(&self) -> Option<String> {
        match self {
            Verdict::Fails(r) | Verdict::Stale(r) => Some(format!("linux peer: {r}")),
            _ => None,
        }
    }
}

/// Applies the rule.
pub fn judge(clockhal: Clockhal<'_>, linux: LinuxPick<'_>, row: &PeerRow) -> Verdict {
    let Clockhal::Selected(pick) = clockhal else {
        return Verdict::NoComparison("clockhal's kernel did not run".into());
    };
    let ours = pick.and_then(clockhal_class);
    let theirs = linux_class(linux.name());
    let picked = pick.unwrap_or("nothing");
    if ours == Some(Class::NoTrap) {
        return match (row.known_gap, row.exception) {
            (Some(gap), _) => Verdict::Stale(format!(
                "the row lists the known gap \"{gap}\", but clockhal now picks {picked} \
                 (no trap): remove known_gap from the peer row of {}",
                row.config
            )),
            (None, Some(why)) => Verdict::Stale(format!(
                "the row excuses a trapping pick (\"{why}\"), but clockhal picks {picked} \
                 (no trap): remove the exception from the peer row of {}",
                row.config
            )),
            (None, None) => Verdict::Holds,
        };
    }
    if theirs != Some(Class::NoTrap) {
        return Verdict::Holds;
    }
    if let Some(why) = row.exception {
        return Verdict::Excepted(why);
    }
    if let Some(gap) = row.known_gap {
        return Verdict::KnownGap(gap);
    }
    Verdict::Fails(format!(
        "clockhal picks {picked} ({}) where Linux picks {} (no trap, {}), and the row \
         states no reason",
        if pick.is_some() { "traps" } else { "no clock" },
        linux.name(),
        linux.basis()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expectations::LinuxRule;

    const PLAIN: PeerRow = PeerRow {
        config: "tcg-q35",
        linux_rule: LinuxRule {
            pick: "tsc",
            why: "test",
        },
        exception: None,
        known_gap: None,
    };

    fn sel(name: &str) -> Clockhal<'_> {
        Clockhal::Selected(Some(name))
    }

    #[test]
    fn every_clockhal_source_has_a_linux_name_and_class() {
        for s in crate::expectations::SOURCES {
            let l = linux_name(s).unwrap_or_else(|| panic!("{s}"));
            assert_eq!(linux_class(l), clockhal_class(s), "{s}");
        }
        assert_eq!(linux_class("acpi_pm"), Some(Class::Trap));
        assert_eq!(linux_class("jiffies"), Some(Class::Tick));
        assert_eq!(linux_class("acpi-pm"), None, "clockhal spelling");
    }

    #[test]
    fn a_trapping_pick_where_linux_has_a_no_trap_one_fails() {
        let v = judge(sel("hpet"), LinuxPick::Measured("tsc"), &PLAIN);
        let msg = v.unexpected().expect("must fail the run");
        assert!(
            msg.contains("clockhal picks hpet (traps) where Linux picks tsc (no trap, measured)"),
            "{msg}"
        );
        // No clock at all is worse still.
        let v = judge(Clockhal::Selected(None), LinuxPick::Measured("tsc"), &PLAIN);
        assert!(v
            .unexpected()
            .expect("fails")
            .contains("picks nothing (no clock)"));
        // The documented rule counts where the peer cannot boot.
        let v = judge(sel("acpi-pm"), LinuxPick::Rule("kvm-clock"), &PLAIN);
        assert!(v
            .unexpected()
            .expect("fails")
            .contains("kvm-clock (no trap, rule)"));
    }

    #[test]
    fn the_rule_holds_when_clockhal_does_not_trap_or_linux_traps_too() {
        let holds = [
            (sel("kvmclock"), LinuxPick::Measured("kvm-clock")),
            (sel("kvmclock"), LinuxPick::Rule("tsc")),
            (sel("tsc"), LinuxPick::Measured("tsc")),
            (sel("hpet"), LinuxPick::Measured("hpet")),
            (sel("acpi-pm"), LinuxPick::Measured("hpet")),
            (sel("hpet"), LinuxPick::Measured("jiffies")),
            (
                Clockhal::Selected(None),
                LinuxPick::Measured("refined-jiffies"),
            ),
        ];
        for (c, l) in holds {
            assert_eq!(judge(c, l, &PLAIN), Verdict::Holds, "{c:?} {l:?}");
        }
    }

    #[test]
    fn a_row_reason_turns_a_violation_into_a_listed_gap_or_exception() {
        let gap = PeerRow {
            known_gap: Some("issue 14"),
            ..PLAIN
        };
        let v = judge(sel("hpet"), LinuxPick::Measured("tsc"), &gap);
        assert_eq!(v, Verdict::KnownGap("issue 14"));
        assert_eq!(v.unexpected(), None);
        let excused = PeerRow {
            exception: Some("Linux's tsc is wrong here because ..."),
            ..PLAIN
        };
        let v = judge(sel("hpet"), LinuxPick::Measured("tsc"), &excused);
        assert_eq!(v.word(), "exception");
        assert_eq!(v.unexpected(), None);
        // A gap that Linux did not show this run (its watchdog demoted the
        // TSC) is not stale: clockhal still traps.
        let v = judge(sel("hpet"), LinuxPick::Measured("hpet"), &gap);
        assert_eq!(v, Verdict::Holds);
    }

    #[test]
    fn a_closed_gap_fails_until_the_row_is_updated() {
        for row in [
            PeerRow {
                known_gap: Some("issue 14"),
                ..PLAIN
            },
            PeerRow {
                exception: Some("why"),
                ..PLAIN
            },
        ] {
            let v = judge(sel("tsc"), LinuxPick::Measured("tsc"), &row);
            let msg = v.unexpected().expect("stale rows fail");
            assert!(
                msg.contains("clockhal now picks tsc") || msg.contains("clockhal picks tsc"),
                "{msg}"
            );
            assert!(msg.contains("peer row of tcg-q35"), "{msg}");
        }
    }

    #[test]
    fn nothing_to_compare_is_a_skip_not_a_pass() {
        let v = judge(Clockhal::NotRun, LinuxPick::Rule("kvm-clock"), &PLAIN);
        assert_eq!(v.word(), "SKIP");
        assert_eq!(v.unexpected(), None);
    }
}
