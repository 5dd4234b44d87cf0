//! The candidate list with verdicts, and how it prints.

use crate::{Candidate, ProbeCost, SourceId, Verdict, MAX_CANDIDATES};
use core::fmt::{self, Write};

/// Every candidate a probe considered, with its verdict, and which one is
/// selected.
///
/// `Display` prints the one-line "choice" (like FreeBSD's
/// `kern.timecounter.choice`, but with reasons), present candidates in rank
/// order, the selected one first:
///
/// ```text
/// kvmclock(400, selected) tsc(300, rate from pvclock) hpet(250, traps) acpi-pm(120, verified mode)
/// ```
///
/// The alternate form (`{:#}`) appends the rejected candidates with their
/// reasons; [`Report::table`] prints one line per candidate with every
/// descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Report {
    slots: [Option<Candidate>; MAX_CANDIDATES],
    selected: Option<SourceId>,
    force: Option<&'static str>,
    forced: bool,
    cost: ProbeCost,
}

impl Default for Report {
    fn default() -> Self {
        Report::new()
    }
}

impl Report {
    /// The counter domain whose rate `id`'s rate rests on: its own, except a
    /// TSC calibrated (or refined) against another candidate, whose rate is
    /// that candidate's by construction: it cannot vouch for it.
    pub(crate) fn rate_domain(&self, id: SourceId) -> clockhal_core::CounterDomain {
        #[cfg(feature = "tsc")]
        if let Some(crate::Note::Tsc {
            rate:
                clockhal_tsc::RateProvenance::Calibrated { reference, .. }
                | clockhal_tsc::RateProvenance::Refined { reference, .. },
            ..
        }) = self.get(id).map(|c| c.note)
        {
            let from = SourceId::ALL
                .into_iter()
                .find(|r| *r != id && r.default_name() == reference && self.get(*r).is_some());
            if let Some(r) = from {
                return r.domain();
            }
        }
        id.domain()
    }
    /// An empty report (no candidates).
    /// Interrupt-safe: yes.
    pub const fn new() -> Report {
        Report {
            slots: [None; MAX_CANDIDATES],
            selected: None,
            force: None,
            forced: false,
            cost: ProbeCost::NONE,
        }
    }

    /// Adds or replaces the entry for `c.id`.
    /// Interrupt-safe: yes.
    pub fn insert(&mut self, c: Candidate) {
        self.slots[c.id.index()] = Some(c);
    }

    /// The entry for `id`, if that source was considered.
    /// Interrupt-safe: yes.
    pub fn get(&self, id: SourceId) -> Option<&Candidate> {
        self.slots[id.index()].as_ref()
    }

    pub(crate) fn get_mut(&mut self, id: SourceId) -> Option<&mut Candidate> {
        self.slots[id.index()].as_mut()
    }

    pub(crate) fn slots(&self) -> &[Option<Candidate>; MAX_CANDIDATES] {
        &self.slots
    }

    /// Every considered candidate, in [`SourceId`] order.
    /// Interrupt-safe: yes.
    pub fn candidates(&self) -> impl Iterator<Item = &Candidate> {
        self.slots.iter().flatten()
    }

    /// Candidates in rank order: the selected one, then eligible ones best
    /// first, then demoted ones (by rating), then rejected ones.
    /// Interrupt-safe: yes.
    pub fn ranked(&self) -> impl Iterator<Item = &Candidate> {
        let mut order = [0usize; MAX_CANDIDATES];
        let mut n = 0;
        for (i, s) in self.slots.iter().enumerate() {
            if s.is_some() {
                order[n] = i;
                n += 1;
            }
        }
        let group = |c: &Candidate| match c.verdict {
            _ if Some(c.id) == self.selected => 0,
            Verdict::Usable(_) => 1,
            Verdict::Demoted { .. } => 2,
            Verdict::Rejected(_) => 3,
        };
        // Insertion sort: a handful of entries, stable, no allocation.
        for i in 1..n {
            let mut j = i;
            while j > 0 {
                let (a, b) = (self.entry(order[j - 1]), self.entry(order[j]));
                let worse = group(a)
                    .cmp(&group(b))
                    .then_with(|| crate::select::compare(a, b))
                    .is_gt();
                if !worse {
                    break;
                }
                order.swap(j - 1, j);
                j -= 1;
            }
        }
        (0..n).map(move |k| self.entry(order[k]))
    }

    fn entry(&self, i: usize) -> &Candidate {
        // Only called with indices of occupied slots.
        self.slots[i].as_ref().unwrap_or(&EMPTY)
    }

    /// The selected candidate, if any is usable.
    /// Interrupt-safe: yes.
    pub fn selected(&self) -> Option<&Candidate> {
        self.selected.and_then(|id| self.get(id))
    }

    /// The selected source's id.
    /// Interrupt-safe: yes.
    pub fn selected_id(&self) -> Option<SourceId> {
        self.selected
    }

    pub(crate) fn set_selected(&mut self, id: Option<SourceId>, forced: bool) {
        self.selected = id;
        self.forced = forced;
    }

    pub(crate) fn set_force_request(&mut self, name: Option<&'static str>) {
        self.force = name;
    }

    /// Whether the selection was forced by [`Policy::force`](clockhal_core::Policy).
    /// Interrupt-safe: yes.
    pub fn is_forced(&self) -> bool {
        self.forced
    }

    /// The name the policy asked to force, if any (honoured or not: see
    /// [`is_forced`](Self::is_forced)).
    /// Interrupt-safe: yes.
    pub fn force_request(&self) -> Option<&'static str> {
        self.force
    }

    /// What the probe cost: its duration and its reads of trapping
    /// clocks, per phase and candidate (the table's last line).
    ///
    /// Interrupt-safe: yes (reads a copy).
    pub fn cost(&self) -> &ProbeCost {
        &self.cost
    }

    pub(crate) fn cost_mut(&mut self) -> &mut ProbeCost {
        &mut self.cost
    }

    /// The multi-line table form: name, state (or why not), rating,
    /// frequency, flags, read cost, notes.
    /// Interrupt-safe: yes.
    ///
    /// ```text
    /// source        state     rating frequency          flags                      read cost     notes
    /// kvmclock      selected  400    1000000000 Hz      mono,smp,inv,migr,percpu   no-trap
    /// hyperv-page   rejected  -      -                  -                          -             no "Microsoft Hv" signature
    /// hyperv-msr    rejected  -      -                  -                          -             no "Microsoft Hv" signature
    /// tsc           usable    -100   2600000000.726 Hz  mono,smp                   no-trap       rate from pvclock
    /// hpet          usable    250    100000000 Hz       mono,smp,inv,migr,trap     one-trap      traps
    /// acpi-pm       usable    150    3579545 Hz         mono,smp,inv,migr,trap,ext several-traps fast mode
    /// probe 3.120 ms; 2118 trapping reads (self-check: hpet 1060, acpi-pm 1058)
    /// ```
    ///
    /// Flags are [`Stability`](clockhal_core::Stability)'s short tags; a
    /// footer line says when a forced source was unavailable or nothing is
    /// usable; the last line is the probe's [`cost`](Self::cost) (absent
    /// when nothing was probed).
    pub fn table(&self) -> Table<'_> {
        Table(self)
    }
}

static EMPTY: Candidate = Candidate::rejected(SourceId::Extra, crate::Rejection::FeatureDisabled);

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut sep = |f: &mut fmt::Formatter<'_>| {
            let r = if first { Ok(()) } else { f.write_str(" ") };
            first = false;
            r
        };
        let with_rejected = f.alternate();
        for c in self.ranked() {
            if matches!(c.verdict, Verdict::Rejected(_)) && !with_rejected {
                continue;
            }
            sep(f)?;
            write!(f, "{}(", c.name)?;
            match c.rating() {
                Some(q) => write!(f, "{q}")?,
                None => f.write_str("-")?,
            }
            if Some(c.id) == self.selected {
                f.write_str(if self.forced {
                    ", selected, forced"
                } else {
                    ", selected"
                })?;
            }
            match c.verdict {
                Verdict::Usable(_) => {
                    if c.note != crate::Note::None {
                        write!(f, ", {}", c.note)?;
                    }
                }
                Verdict::Demoted { reason, .. } => write!(f, ", demoted: {reason}")?,
                Verdict::Rejected(r) => write!(f, ", {r}")?,
            }
            f.write_str(")")?;
        }
        if first {
            f.write_str("(no candidates)")?;
        }
        Ok(())
    }
}

/// Multi-line table view of a [`Report`] (see [`Report::table`]).
#[derive(Clone, Copy, Debug)]
pub struct Table<'a>(&'a Report);

/// Formats `value` into a stack buffer so that it can be padded (most
/// `Display` impls ignore width). Truncates past 63 bytes.
struct Cell<T>(T, usize);

impl<T: fmt::Display> fmt::Display for Cell<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = Buf::default();
        // A full buffer reports an error: keep the truncated text.
        let _ = write!(buf, "{}", self.0);
        write!(f, "{:<w$}", buf.as_str(), w = self.1)
    }
}

struct Buf {
    bytes: [u8; 64],
    len: usize,
}

impl Default for Buf {
    fn default() -> Self {
        Buf {
            bytes: [0; 64],
            len: 0,
        }
    }
}

impl Buf {
    fn as_str(&self) -> &str {
        match core::str::from_utf8(&self.bytes[..self.len]) {
            Ok(s) => s,
            // Truncated inside a multi-byte character: drop the partial one.
            Err(e) => core::str::from_utf8(&self.bytes[..e.valid_up_to()]).unwrap_or(""),
        }
    }
}

impl Write for Buf {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = self.bytes.len() - self.len;
        let n = s.len().min(room);
        self.bytes[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        if n < s.len() {
            Err(fmt::Error)
        } else {
            Ok(())
        }
    }
}

/// A value or `-`.
struct OrDash<T>(Option<T>);

impl<T: fmt::Display> fmt::Display for OrDash<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(v) => write!(f, "{v}"),
            None => f.write_str("-"),
        }
    }
}

impl fmt::Display for Table<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.0;
        writeln!(
            f,
            "{:<13} {:<9} {:<6} {:<18} {:<26} {:<13} notes",
            "source", "state", "rating", "frequency", "flags", "read cost"
        )?;
        for c in r.candidates() {
            let state = match c.verdict {
                _ if Some(c.id) == r.selected => "selected",
                Verdict::Usable(_) => "usable",
                Verdict::Demoted { .. } => "demoted",
                Verdict::Rejected(_) => "rejected",
            };
            let flags = OrDash(c.is_constructed().then_some(c.stability()));
            let forced = Some(c.id) == r.selected && r.forced;
            let plain = matches!(c.verdict, Verdict::Usable(_)) && c.note == crate::Note::None;
            write!(
                f,
                "{} {} {} {} {} ",
                Cell(c.name, 13),
                Cell(state, 9),
                Cell(OrDash(c.rating()), 6),
                Cell(OrDash(c.frequency()), 18),
                Cell(flags, 26),
            )?;
            if plain && !forced {
                // No notes: no trailing padding either.
                write!(f, "{}", OrDash(c.read_cost()))?;
            } else {
                write!(f, "{} ", Cell(OrDash(c.read_cost()), 13))?;
            }
            if forced {
                f.write_str("forced")?;
                if !plain {
                    f.write_str("; ")?;
                }
            }
            match c.verdict {
                Verdict::Usable(_) => write!(f, "{}", c.note)?,
                Verdict::Demoted { reason, .. } => write!(f, "{reason}")?,
                Verdict::Rejected(why) => write!(f, "{why}")?,
            }
            writeln!(f)?;
        }
        if let (Some(name), false) = (r.force, r.forced) {
            writeln!(
                f,
                "policy forced {name:?}, which is not available: selected automatically"
            )?;
        }
        if r.selected.is_none() {
            writeln!(f, "no usable clock source")?;
        }
        if r.cost.tsc_ticks() > 0 {
            writeln!(f, "{}", r.cost)?;
        }
        Ok(())
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for Report {
    fn format(&self, f: defmt::Formatter) {
        defmt::write!(f, "{}", defmt::Display2Format(self))
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for Table<'_> {
    fn format(&self, f: defmt::Formatter) {
        defmt::write!(f, "{}", defmt::Display2Format(self))
    }
}
