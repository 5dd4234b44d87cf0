//! Ranking timer devices by their own descriptors, with reasons.

use super::{TimerDescriptor, TimerDevice, TimerMode};
use crate::Clock;
use clockhal_core::Frequency;
use clockhal_x86::Hardware;
use core::fmt;

/// Candidates one [`Clock::select_timer`] considers (the rest are ignored).
pub const MAX_TIMER_CANDIDATES: usize = 8;

/// Why a timer device cannot serve this clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum TimerRejection {
    /// It accepts no count (`max_delta_ticks` 0, or min above max).
    Unprogrammable,
    /// A delta device whose rate is unknown (not calibrated yet).
    NoRate,
    /// An absolute (TSC-deadline) device, and the clock's current source
    /// gives this CPU no TSC map (HPET, PM timer, a switch in progress).
    NoTscMap,
}

impl fmt::Display for TimerRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimerRejection::Unprogrammable => "accepts no count",
            TimerRejection::NoRate => "rate unknown (calibrate it first)",
            TimerRejection::NoTscMap => "clock source has no TSC map to convert deadlines",
        })
    }
}

/// One candidate's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TimerVerdict {
    /// The best usable device.
    Selected,
    /// Usable, ranked below the selected one.
    Usable,
    /// Not usable, and why.
    Rejected(TimerRejection),
}

/// The candidates of one [`Clock::select_timer`], ranked, with verdicts.
///
/// `Display` prints one line like the clock report's choice:
/// `hyperv-stimer0(1000, selected: ...) lapic-oneshot(100) hpet-comparator(rejected: ...)`;
/// the alternate form (`{:#}`) adds each one's rating reason and flags.
#[derive(Clone, Copy)]
pub struct TimerChoice<'a> {
    entries: [Option<(&'a dyn TimerDevice, TimerDescriptor, TimerVerdict)>; MAX_TIMER_CANDIDATES],
}

impl<'a> TimerChoice<'a> {
    /// The selected device, if any candidate is usable.
    /// Interrupt-safe: yes.
    pub fn selected(&self) -> Option<&'a dyn TimerDevice> {
        self.entries
            .iter()
            .flatten()
            .find(|e| e.2 == TimerVerdict::Selected)
            .map(|e| e.0)
    }

    /// Candidates in rank order (usable ones first, by rating) with their
    /// descriptors and verdicts.
    /// Interrupt-safe: yes.
    pub fn iter(
        &self,
    ) -> impl Iterator<Item = (&'a dyn TimerDevice, TimerDescriptor, TimerVerdict)> + '_ {
        self.entries.iter().flatten().copied()
    }

    /// The verdict on the candidate named `name`.
    /// Interrupt-safe: yes.
    pub fn verdict(&self, name: &str) -> Option<TimerVerdict> {
        self.iter().find(|e| e.1.name == name).map(|e| e.2)
    }
}

impl fmt::Display for TimerChoice<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (_, d, v) in self.iter() {
            if !first {
                f.write_str(" ")?;
            }
            first = false;
            match v {
                TimerVerdict::Selected => write!(f, "{}({}, selected", d.name, d.rating)?,
                TimerVerdict::Usable => write!(f, "{}({}", d.name, d.rating)?,
                TimerVerdict::Rejected(r) => write!(f, "{}(rejected: {r}", d.name)?,
            }
            if f.alternate() {
                write!(f, "; {}; {}", d.rating_reason, d.scope)?;
                if d.stops_in_deep_idle {
                    f.write_str(", stops in deep C-states")?;
                }
                if d.traps_per_arm > 0 {
                    write!(f, ", {} traps per arm", d.traps_per_arm)?;
                }
            }
            f.write_str(")")?;
        }
        Ok(())
    }
}

impl fmt::Debug for TimerChoice<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TimerChoice({self:#})")
    }
}

/// Why `desc` cannot serve `clock`, if it cannot.
pub(super) fn rejection<H: Hardware + Clone>(
    clock: &Clock<H>,
    desc: &TimerDescriptor,
    rate: Option<Frequency>,
) -> Option<TimerRejection> {
    let min = desc.min_delta_ticks.max(1);
    if desc.max_delta_ticks == 0 || min > desc.max_delta_ticks {
        return Some(TimerRejection::Unprogrammable);
    }
    match desc.mode {
        TimerMode::Delta if rate.is_none() => Some(TimerRejection::NoRate),
        TimerMode::AbsoluteCounter if clock.converter(false).is_none() => {
            Some(TimerRejection::NoTscMap)
        }
        _ => None,
    }
}

impl<H: Hardware + Clone> Clock<H> {
    /// Ranks timer devices for this clock (the first
    /// [`MAX_TIMER_CANDIDATES`]): usable ones by their
    /// descriptors' ratings (ties: fewer traps per arm, then the order
    /// given), the best selected; the others rejected with a reason.
    /// Each device describes itself; no device is special here.
    /// Interrupt-safe: yes.
    pub fn select_timer<'a>(&self, candidates: &[&'a dyn TimerDevice]) -> TimerChoice<'a> {
        let mut entries = [None; MAX_TIMER_CANDIDATES];
        let mut n = 0;
        for d in candidates.iter().take(MAX_TIMER_CANDIDATES) {
            let desc = d.descriptor();
            let verdict = match rejection(self, &desc, d.rate()) {
                Some(r) => TimerVerdict::Rejected(r),
                None => TimerVerdict::Usable,
            };
            entries[n] = Some((*d, desc, verdict));
            n += 1;
        }
        // Rank: usable before rejected, higher rating, fewer traps; stable.
        let key = |e: &Option<(&dyn TimerDevice, TimerDescriptor, TimerVerdict)>| match e {
            Some((_, d, v)) => (
                matches!(v, TimerVerdict::Rejected(_)),
                u16::MAX - d.rating,
                d.traps_per_arm,
            ),
            None => (true, u16::MAX, u8::MAX),
        };
        // Insertion sort: stable, no allocation, at most 8 entries.
        for i in 1..n {
            let mut j = i;
            while j > 0 && key(&entries[j]) < key(&entries[j - 1]) {
                entries.swap(j, j - 1);
                j -= 1;
            }
        }
        if let Some(Some(e)) = entries.first_mut() {
            if e.2 == TimerVerdict::Usable {
                e.2 = TimerVerdict::Selected;
            }
        }
        TimerChoice { entries }
    }
}
