//! The suite over what a clockhal probe found (feature `clockhal`).
//!
//! A kernel that uses clockhal's facade checks every source the probe
//! constructed, against a fixed-rate reference, and reports each source's
//! verdict as a `SOURCE` line ([`line`](mod@crate::line) format). This module
//! holds the parts of that which depend on the facade, so every kernel
//! (clockhal's PVH kernel, the Hermit application, the bootloader_api
//! kernel) does it the same way:
//!
//! ```ignore
//! let report = *probed.report();
//! let clock = probed.into_clock().ok(); // None: nothing usable
//! let sources = ProbedSources::new(clock.as_ref());
//! if let Some(reference) = sources.reference() {
//!     let summary = Suite::new(sources.as_slice(), reference, &cycles)
//!         .selected(sources.selected())
//!         .run(&mut |r: &CheckResult<'_>| { let _ = line::write_check(&mut out, r); });
//! }
//! write_sources(&mut out, &report)?; // the probe's report
//! ```

use crate::line::{self, PresentSource, Text};
use clockhal::x86::Hardware;
use clockhal::{Clock, ClockSource, Note, ReadCost, Report, SourceId, Verdict};
use core::fmt::{self, Write};

/// The sources the result format knows, in report order (one `SOURCE` line
/// each).
pub const SOURCE_IDS: [SourceId; 6] = [
    SourceId::Kvmclock,
    SourceId::HypervPage,
    SourceId::HypervMsr,
    SourceId::Tsc,
    SourceId::Hpet,
    SourceId::AcpiPm,
];

/// Preferred references for the rate checks: fixed-rate devices that do not
/// depend on the TSC first.
pub const REFERENCE_ORDER: [SourceId; 4] = [
    SourceId::Hpet,
    SourceId::AcpiPm,
    SourceId::Tsc,
    SourceId::Kvmclock,
];

/// Every source a probe constructed (and the [`Clock`] built from it now
/// owns), in [`SOURCE_IDS`] order, as the [`Suite`](crate::Suite) takes
/// them, with the reference and the selection.
pub struct ProbedSources<'p> {
    /// `None` when nothing was constructed; otherwise the first `len`
    /// entries are the sources (the rest repeat the first, unused).
    list: Option<[&'p dyn ClockSource; SOURCE_IDS.len()]>,
    len: usize,
    reference: Option<&'p dyn ClockSource>,
    selected: Option<&'static str>,
}

impl<'p> ProbedSources<'p> {
    /// Collects the constructed sources `clock` owns (none without a
    /// clock: the probe found nothing usable).
    pub fn new<H: Hardware + Clone>(clock: Option<&'p Clock<H>>) -> ProbedSources<'p> {
        let found = SOURCE_IDS.map(|id| clock.and_then(|c| c.source_of(id)));
        let mut len = 0;
        let list = found.iter().flatten().next().map(|first| {
            let mut list = [*first; SOURCE_IDS.len()];
            for s in found.iter().flatten() {
                list[len] = *s;
                len += 1;
            }
            list
        });
        ProbedSources {
            list,
            len,
            reference: REFERENCE_ORDER
                .iter()
                .find_map(|id| clock.and_then(|c| c.source_of(*id))),
            selected: clock.and_then(|c| c.report().selected().map(|c| c.name)),
        }
    }

    /// The sources to check.
    pub fn as_slice(&self) -> &[&'p dyn ClockSource] {
        match &self.list {
            Some(list) => &list[..self.len],
            None => &[],
        }
    }

    /// The reference to time the others against (the first constructed
    /// source of [`REFERENCE_ORDER`]); `None` when nothing was constructed.
    pub fn reference(&self) -> Option<&'p dyn ClockSource> {
        self.reference
    }

    /// The name of the selected source, for [`Suite::selected`](crate::Suite::selected).
    pub fn selected(&self) -> Option<&'static str> {
        self.selected
    }
}

/// Writes one `SOURCE` line per source of [`SOURCE_IDS`]: present ones with
/// rating, rate, flags, claimed cost and selection; absent ones with the
/// probe's reason.
pub fn write_sources(out: &mut dyn Write, report: &Report) -> fmt::Result {
    for id in SOURCE_IDS {
        let Some(c) = report.get(id) else {
            line::write_absent_source(out, id.default_name(), format_args!("not probed"))?;
            continue;
        };
        let mut reason = Text::new();
        match c.verdict {
            Verdict::Rejected(r) => {
                line::write_absent_source(out, c.name, format_args!("{r}"))?;
                continue;
            }
            Verdict::Usable(_) if c.note == Note::None => reason.write_str("usable")?,
            Verdict::Usable(_) => write!(reason, "usable: {}", c.note)?,
            Verdict::Demoted { reason: d, .. } => write!(reason, "demoted: {d}")?,
        }
        line::write_present_source(
            out,
            &PresentSource {
                name: c.name,
                quality: c.rating().map_or(0, |q| q.get()),
                freq_hz: c.frequency().map_or(0, |f| f.hz_rounded()),
                flags: c.stability(),
                cost: c.read_cost().unwrap_or(ReadCost::SeveralTraps),
                selected: report.selected_id() == Some(id),
                reason: reason.as_str(),
            },
        )?;
    }
    Ok(())
}

/// Steal time through the clock (`Clock::steal_ns`); the reason is the
/// clock's `StealError`.
impl<H: Hardware + Clone> crate::StealTime for Clock<H> {
    fn steal_ns(&self, why: &mut dyn Write) -> Option<u64> {
        match Clock::steal_ns(self) {
            Ok(d) => Some(d.as_nanos()),
            Err(e) => {
                let _ = write!(why, "{e}");
                None
            }
        }
    }
}

/// The pause check over the clock: `now()`, its source and switches,
/// kvmclock's counted host faults (rejected and reanchored updates), its
/// watchdog, and the report's demotions.
impl<H: Hardware + Clone> crate::PauseClock for Clock<H> {
    fn now_ns(&self) -> u64 {
        self.now().as_nanos()
    }

    fn current_source(&self) -> &'static str {
        self.source_name()
    }

    fn switch_count(&self) -> u32 {
        self.switches()
    }

    fn host_faults(&self) -> u64 {
        self.kvmclock().map_or(0, |k| k.stats().faults())
    }

    fn tick(&self) -> crate::PauseTick {
        match self.watchdog_tick() {
            clockhal::WatchdogEvent::GuestStopped => crate::PauseTick::GuestStopped,
            _ => crate::PauseTick::Other,
        }
    }

    fn demotions(&self, list: &mut dyn Write) -> u32 {
        let mut n = 0;
        for c in self.report().candidates() {
            if let Verdict::Demoted { reason, .. } = c.verdict {
                let _ = write!(
                    list,
                    "{}{}: {reason}",
                    if n > 0 { "; " } else { "" },
                    c.name
                );
                n += 1;
            }
        }
        n
    }
}
