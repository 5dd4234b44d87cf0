//! The human clock table printed after the suite: each source present or
//! why not, rating, frequency, flags, claimed and measured read cost,
//! selection.

use clockhal::{Report, Verdict};
use clockhal_conformance::line::Text;
use clockhal_conformance::probed::SOURCE_IDS;
use core::fmt::{self, Write};

/// Writes the table; `costs[i]` is the measured median read cost of
/// `SOURCE_IDS[i]`.
pub fn write(out: &mut dyn Write, report: &Report, costs: &[Option<u64>; 6]) -> fmt::Result {
    writeln!(
        out,
        "clock table:\n  {:<12} {:<9} {:>6} {:>14}  {:<32} {:<13} {:>12}  notes",
        "source", "state", "rating", "frequency Hz", "flags", "claimed cost", "cycles/read"
    )?;
    for (id, cost) in SOURCE_IDS.iter().zip(costs) {
        let Some(c) = report.get(*id) else { continue };
        let state = match c.verdict {
            _ if report.selected_id() == Some(*id) => "selected",
            Verdict::Usable(_) => "usable",
            Verdict::Demoted { .. } => "demoted",
            Verdict::Rejected(_) => "absent",
        };
        let mut rating = Text::new();
        let mut freq = Text::new();
        let mut flags = Text::new();
        let mut claimed = Text::new();
        let mut measured = Text::new();
        let mut notes = Text::new();
        match c.rating() {
            Some(q) => write!(rating, "{q}")?,
            None => rating.write_str("-")?,
        }
        match c.frequency() {
            Some(f) => write!(freq, "{}", f.hz_rounded())?,
            None => freq.write_str("-")?,
        }
        write!(flags, "{}", c.stability())?;
        match c.read_cost() {
            Some(r) => write!(claimed, "{r}")?,
            None => claimed.write_str("-")?,
        }
        match cost {
            Some(v) => write!(measured, "{v}")?,
            None => measured.write_str("-")?,
        }
        match c.verdict {
            Verdict::Rejected(r) => write!(notes, "{r}")?,
            Verdict::Demoted { reason, .. } => write!(notes, "{reason}")?,
            Verdict::Usable(_) => write!(notes, "{}", c.note)?,
        }
        writeln!(
            out,
            "  {:<12} {:<9} {:>6} {:>14}  {:<32} {:<13} {:>12}  {}",
            c.name,
            state,
            rating.as_str(),
            freq.as_str(),
            flags.as_str(),
            claimed.as_str(),
            measured.as_str(),
            notes.as_str()
        )?;
    }
    Ok(())
}
