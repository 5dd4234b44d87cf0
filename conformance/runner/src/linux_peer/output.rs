//! The peer's console report: `LINUX-PEER <kind> key=value ...` lines,
//! written by `conformance/linux-peer/init.c` (format in that folder's
//! README). Anything else on the console is ignored.

/// The format version `init.c` writes in its `begin` line.
pub const VERSION: u32 = 1;

const TAG: &str = "LINUX-PEER ";

/// One measured read cost.
#[derive(Clone, Debug, PartialEq)]
pub struct Cost {
    /// Linux clocksource name (`tsc`, `hpet`, `acpi_pm`, `kvm-clock`, ...).
    pub source: String,
    /// Best-of-batches ns per `clock_gettime(CLOCK_MONOTONIC)` from a process.
    pub ns: f64,
    /// Calls per batch.
    pub calls: u64,
}

/// Everything one peer boot reported.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// Format version from the `begin` line.
    pub version: Option<u32>,
    /// `uname -r` of the guest kernel.
    pub kernel_release: Option<String>,
    /// The clocksource once the boot-time choice settled.
    pub boot_current: Option<String>,
    /// `available_clocksource` at that time.
    pub available: Vec<String>,
    /// Online CPUs.
    pub cpus: Option<u32>,
    /// CPU vendor (`GenuineIntel`, `AuthenticAMD`, ...).
    pub vendor: Option<String>,
    /// TSC-related CPU flags from /proc/cpuinfo, in report order.
    pub cpu_flags: Vec<(String, bool)>,
    /// Read cost per clocksource, in measurement order.
    pub costs: Vec<Cost>,
    /// Clocksources that could not be measured, with why.
    pub not_measured: Vec<(String, String)>,
    /// The clocksource the kernel picks after the run (override cleared).
    pub end_current: Option<String>,
    /// Whether clearing the override succeeded (else `end_current` is ours).
    pub override_cleared: bool,
    /// The kernel's clock messages.
    pub klog: Vec<String>,
    /// `error` lines from init and lines this parser could not read.
    pub errors: Vec<String>,
    /// The `done` line was seen.
    pub done: bool,
}

/// `key=value` tokens of one line.
fn fields(rest: &str) -> impl Iterator<Item = (&str, &str)> {
    rest.split_whitespace().filter_map(|t| t.split_once('='))
}

fn field<'a>(rest: &'a str, key: &str) -> Option<&'a str> {
    fields(rest).find(|(k, _)| *k == key).map(|(_, v)| v)
}

fn names(list: &str) -> Vec<String> {
    list.split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

impl Report {
    /// Parses a console log.
    pub fn parse(text: &str) -> Report {
        let mut r = Report::default();
        for raw in text.lines() {
            let Some(at) = raw.find(TAG) else { continue };
            let line = raw[at + TAG.len()..].trim_end_matches('\r');
            let (kind, rest) = line.split_once(' ').unwrap_or((line, ""));
            if let Err(why) = r.take(kind, rest) {
                r.errors.push(format!("unreadable line {line:?}: {why}"));
            }
        }
        r
    }

    fn take(&mut self, kind: &str, rest: &str) -> Result<(), &'static str> {
        let need = |key| field(rest, key).ok_or("missing field");
        match kind {
            "begin" => {
                self.version = Some(need("version")?.parse().map_err(|_| "bad version")?);
                self.kernel_release = Some(need("kernel")?.to_string());
            }
            "boot" => {
                self.boot_current = Some(need("current")?.to_string());
                self.available = names(need("available")?);
            }
            "cpu" => {
                for (k, v) in fields(rest) {
                    if k == "cpus" {
                        self.cpus = Some(v.parse().map_err(|_| "bad cpus")?);
                    } else if k == "vendor" {
                        self.vendor = Some(v.to_string());
                    } else {
                        self.cpu_flags.push((k.to_string(), v == "1"));
                    }
                }
            }
            "cost" => {
                let ns: f64 = need("ns")?.parse().map_err(|_| "bad ns")?;
                if !ns.is_finite() || ns <= 0.0 {
                    return Err("ns not positive");
                }
                self.costs.push(Cost {
                    source: need("source")?.to_string(),
                    ns,
                    calls: need("calls")?.parse().map_err(|_| "bad calls")?,
                });
            }
            "nocost" => self.not_measured.push((
                need("source")?.to_string(),
                fields(rest)
                    .filter(|(k, _)| *k != "source")
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(" "),
            )),
            "end" => {
                self.end_current = Some(need("current")?.to_string());
                self.override_cleared = need("override_cleared")? == "1";
            }
            "klog" => self.klog.push(rest.to_string()),
            "error" => self.errors.push(format!("init failed: {rest}")),
            "done" => self.done = true,
            _ => return Err("unknown kind"),
        }
        Ok(())
    }

    /// Linux's pick: the kernel's choice after the run (it includes any
    /// demotion by the clocksource watchdog meanwhile), or the boot-time one
    /// when the override could not be cleared.
    pub fn chosen(&self) -> Option<&str> {
        match (&self.end_current, self.override_cleared) {
            (Some(end), true) => Some(end),
            _ => self.boot_current.as_deref(),
        }
    }

    /// Measured ns per read of `source`.
    pub fn cost(&self, source: &str) -> Option<f64> {
        self.costs.iter().find(|c| c.source == source).map(|c| c.ns)
    }

    /// Why this report is not a complete measurement (empty when it is).
    pub fn problems(&self) -> Vec<String> {
        let mut p = self.errors.clone();
        match self.version {
            None => p.push("no LINUX-PEER begin line (init did not start)".into()),
            Some(VERSION) => {}
            Some(v) => p.push(format!("peer format version {v}, runner reads {VERSION}")),
        }
        match self.chosen() {
            None => p.push("no clocksource reported".into()),
            Some(c) if self.cost(c).is_none() => {
                p.push(format!("no read cost for Linux's pick {c}"))
            }
            Some(_) => {}
        }
        if !self.done {
            p.push("no LINUX-PEER done line (run did not complete)".into());
        }
        p
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A real tcg-pc boot (kernel messages trimmed).
    pub const TCG_PC: &str = "\
SeaBIOS (version 1.16.2-debian-1.16.2-1)
Booting from ROM..
LINUX-PEER begin version=1 kernel=6.1.0-57-cloud-amd64
LINUX-PEER boot current=tsc available=tsc,hpet,acpi_pm uptime_ms=2600
LINUX-PEER cpu cpus=1 vendor=AuthenticAMD tsc=1 constant_tsc=0 nonstop_tsc=0 tsc_known_freq=0 tsc_reliable=0 hypervisor=1
LINUX-PEER cost source=tsc ns=62.5 calls=646007 batches=5
LINUX-PEER cost source=hpet ns=640.4 calls=61865 batches=5\r
LINUX-PEER cost source=acpi_pm ns=560.5 calls=65149 batches=5
LINUX-PEER end current=tsc available=tsc,hpet,acpi_pm override_cleared=1
LINUX-PEER klog [    1.960419] clocksource: Switched to clocksource tsc
LINUX-PEER done
";

    #[test]
    fn a_complete_report_parses() {
        let r = Report::parse(TCG_PC);
        assert_eq!(r.problems(), Vec::<String>::new());
        assert_eq!(r.kernel_release.as_deref(), Some("6.1.0-57-cloud-amd64"));
        assert_eq!(r.chosen(), Some("tsc"));
        assert_eq!(r.available, ["tsc", "hpet", "acpi_pm"]);
        assert_eq!(r.cpus, Some(1));
        assert_eq!(r.vendor.as_deref(), Some("AuthenticAMD"));
        assert!(r.cpu_flags.contains(&("hypervisor".into(), true)));
        assert!(r.cpu_flags.contains(&("nonstop_tsc".into(), false)));
        assert_eq!(r.cost("hpet"), Some(640.4));
        assert_eq!(r.costs[0].calls, 646007);
        assert_eq!(r.cost("kvm-clock"), None);
        assert_eq!(r.klog.len(), 1);
    }

    #[test]
    fn the_pick_is_the_kernels_choice_after_the_run() {
        let demoted = TCG_PC.replace(
            "end current=tsc available=tsc,hpet,acpi_pm override_cleared=1",
            "end current=hpet available=tsc,hpet,acpi_pm override_cleared=1",
        );
        assert_eq!(Report::parse(&demoted).chosen(), Some("hpet"));
        // An override that stuck says nothing about the kernel's choice.
        let stuck = TCG_PC.replace("override_cleared=1", "override_cleared=0");
        let stuck = stuck.replace("end current=tsc", "end current=acpi_pm");
        assert_eq!(Report::parse(&stuck).chosen(), Some("tsc"));
    }

    #[test]
    fn incomplete_and_broken_reports_say_why() {
        let truncated: String = TCG_PC.lines().take(5).map(|l| format!("{l}\n")).collect();
        let p = Report::parse(&truncated).problems().join("\n");
        assert!(p.contains("no LINUX-PEER done line"), "{p}");
        assert!(p.contains("no read cost for Linux's pick tsc"), "{p}");

        let p = Report::parse("Kernel panic - not syncing\n")
            .problems()
            .join("\n");
        assert!(p.contains("no LINUX-PEER begin line"), "{p}");

        let bad = TCG_PC
            .replace("version=1", "version=7")
            .replace("source=tsc ns=62.5", "source=tsc ns=fast")
            .replace(
                "LINUX-PEER done",
                "LINUX-PEER error what=sysfs errno=2\nLINUX-PEER done",
            );
        let p = Report::parse(&bad).problems().join("\n");
        assert!(p.contains("version 7"), "{p}");
        assert!(p.contains("bad ns"), "{p}");
        assert!(p.contains("no read cost for Linux's pick tsc"), "{p}");
        assert!(p.contains("init failed: what=sysfs errno=2"), "{p}");

        let refused = Report::parse(
            "LINUX-PEER nocost source=hpet reason=switch-refused errno=22 current=tsc\n",
        );
        assert_eq!(
            refused.not_measured,
            [(
                "hpet".to_string(),
                "reason=switch-refused errno=22 current=tsc".to_string()
            )]
        );
    }
}
