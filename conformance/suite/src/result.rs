//! What one check reports: [`CheckResult`], and where it goes: [`Sink`].

use core::fmt;

/// The checks the suite runs, in the order it runs them (the pause check
/// runs last, after the timer checks).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Check {
    /// Many consecutive reads on one CPU never go backwards.
    Monotonic,
    /// Smallest nonzero step between consecutive reads.
    Resolution,
    /// Median cost of one `read()` in cycles.
    ReadCost,
    /// Rate against the reference (and so against the source's own
    /// `frequency()`), in ppm, under majority logic.
    Rate,
    /// Elapsed time over the same intervals agrees with the consensus of all
    /// sources, in ppm, under majority logic.
    Agreement,
    /// A software-extended counter stays monotonic and on rate across a wrap
    /// of its hardware counter.
    Wrap,
    /// Reads alternating between two CPUs never go backwards (warp test).
    CrossCpu,
    /// The selected source passed everything and is the fastest, or outranks
    /// the fastest by the documented ranking.
    Selected,
    /// KVM steal time never decreases and never grows faster than the
    /// reference (skipped without steal time).
    StealTime,
    /// Across a host pause (QEMU `stop`/`cont`) the clock never goes back,
    /// keeps its source, and counts no fault or demotion (skipped where no
    /// pause is planned).
    Pause,
    /// Per timer device: 1,000 one-shot deadlines (50 µs–10 ms) are each
    /// delivered once, never before `now()` reaches them; lateness median
    /// and max measured.
    TimerDeadlines,
    /// Per timer device: a deadline in the past is delivered at once.
    TimerPast,
    /// Per timer device: a cancelled deadline is not delivered and raises
    /// no interrupt.
    TimerCancel,
    /// Per timer device: a deadline longer than the device's (capped)
    /// reach arrives in pieces, never early.
    TimerLong,
    /// The OS's timer device selection names a present device that
    /// delivered its deadlines.
    TimerSelected,
}

impl Check {
    /// Every check, in run order.
    pub const ALL: [Check; 15] = [
        Check::Monotonic,
        Check::Resolution,
        Check::ReadCost,
        Check::Rate,
        Check::Agreement,
        Check::Wrap,
        Check::CrossCpu,
        Check::Selected,
        Check::StealTime,
        Check::Pause,
        Check::TimerDeadlines,
        Check::TimerPast,
        Check::TimerCancel,
        Check::TimerLong,
        Check::TimerSelected,
    ];

    /// The stable name used in result lines (`monotonic`, `read-cost`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Check::Monotonic => "monotonic",
            Check::Resolution => "resolution",
            Check::ReadCost => "read-cost",
            Check::Rate => "rate",
            Check::Agreement => "agreement",
            Check::Wrap => "wrap",
            Check::CrossCpu => "cross-cpu",
            Check::Selected => "selected",
            Check::StealTime => "steal-time",
            Check::Pause => "pause",
            Check::TimerDeadlines => "timer-deadlines",
            Check::TimerPast => "timer-past",
            Check::TimerCancel => "timer-cancel",
            Check::TimerLong => "timer-long",
            Check::TimerSelected => "timer-selected",
        }
    }

    /// The check with this [`name`](Self::name).
    pub fn from_name(name: &str) -> Option<Check> {
        Check::ALL.into_iter().find(|c| c.name() == name)
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Outcome of one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// The property held.
    Pass,
    /// The property was violated (see the detail).
    Fail,
    /// The check could not run here (the detail says why). Never a pass.
    Skip,
}

impl Status {
    /// `pass`, `fail` or `skip`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "fail",
            Status::Skip => "skip",
        }
    }

    /// The status spelled `s` (as [`as_str`](Self::as_str) writes it).
    pub fn parse(s: &str) -> Option<Status> {
        match s {
            "pass" => Some(Status::Pass),
            "fail" => Some(Status::Fail),
            "skip" => Some(Status::Skip),
            _ => None,
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A check's measured value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Value {
    /// A signed measurement (e.g. a rate error in ppm).
    I64(i64),
    /// An unsigned measurement (e.g. cycles, nanoseconds).
    U64(u64),
    /// Nothing was measured (skipped checks); written as `-`.
    None,
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::I64(v) => write!(f, "{v}"),
            Value::U64(v) => write!(f, "{v}"),
            Value::None => f.write_str("-"),
        }
    }
}

/// One check's result for one source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckResult<'a> {
    /// The source's [`name`](clockhal_core::ClockSource::name).
    pub source: &'a str,
    /// Which check.
    pub check: Check,
    /// Pass, fail or skip.
    pub status: Status,
    /// The measurement behind the verdict.
    pub value: Value,
    /// Unit of `value` (`ns`, `ppm`, `cycles`, ...).
    pub unit: &'static str,
    /// One line of explanation (no newlines).
    pub detail: &'a str,
}

impl fmt::Display for CheckResult<'_> {
    /// `hpet rate pass -12 ppm (detail)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} {} {} ({})",
            self.source, self.check, self.status, self.value, self.unit, self.detail
        )
    }
}

/// Where results go. Implemented for any `FnMut(&CheckResult)`.
///
/// A kernel typically prints each result as a line (see
/// [`line::write_check`](crate::line::write_check)); a host test collects
/// them.
pub trait Sink {
    /// Receives one result. Called once per check and source.
    fn record(&mut self, result: &CheckResult<'_>);
}

impl<F: FnMut(&CheckResult<'_>)> Sink for F {
    fn record(&mut self, result: &CheckResult<'_>) {
        self(result)
    }
}

/// Counts of results by status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Summary {
    /// Checks that passed.
    pub passed: u32,
    /// Checks that failed.
    pub failed: u32,
    /// Checks that were skipped.
    pub skipped: u32,
}

impl Summary {
    /// Counts one more result with `status`.
    pub fn add(&mut self, status: Status) {
        match status {
            Status::Pass => self.passed += 1,
            Status::Fail => self.failed += 1,
            Status::Skip => self.skipped += 1,
        }
    }

    /// Whether nothing failed.
    pub const fn ok(&self) -> bool {
        self.failed == 0
    }
}

impl fmt::Display for Summary {
    /// `12 passed, 0 failed, 3 skipped` (the result format's last line).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} passed, {} failed, {} skipped",
            self.passed, self.failed, self.skipped
        )
    }
}

/// Capacity of a detail line in bytes; longer text is cut at a character
/// boundary.
pub const DETAIL_CAPACITY: usize = 200;

/// A fixed-capacity, newline-free text buffer for result details (the suite
/// allocates nothing).
#[derive(Clone)]
pub(crate) struct Detail {
    buf: [u8; DETAIL_CAPACITY],
    len: usize,
}

impl Detail {
    pub(crate) const fn new() -> Detail {
        Detail {
            buf: [0; DETAIL_CAPACITY],
            len: 0,
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        // Only whole UTF-8 characters are ever copied in (see write_str).
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl fmt::Write for Detail {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for ch in s.chars() {
            let ch = if ch == '\n' || ch == '\r' { ' ' } else { ch };
            let mut tmp = [0u8; 4];
            let enc = ch.encode_utf8(&mut tmp).as_bytes();
            if self.len + enc.len() > DETAIL_CAPACITY {
                break; // truncate silently: details are diagnostics
            }
            self.buf[self.len..self.len + enc.len()].copy_from_slice(enc);
            self.len += enc.len();
        }
        Ok(())
    }
}

/// Formats into a [`Detail`].
macro_rules! detail {
    ($($arg:tt)*) => {{
        let mut d = $crate::result::Detail::new();
        let _ = core::fmt::Write::write_fmt(&mut d, format_args!($($arg)*));
        d
    }};
}
pub(crate) use detail;

#[cfg(test)]
mod tests {
    use super::*;
    use core::fmt::Write;

    #[test]
    fn detail_truncates_on_char_boundary_and_drops_newlines() {
        let mut d = Detail::new();
        for _ in 0..100 {
            d.write_str("é\n").unwrap();
        }
        assert!(d.as_str().len() <= DETAIL_CAPACITY);
        assert!(!d.as_str().contains('\n'));
        assert!(d.as_str().starts_with("é é"));
    }

    #[test]
    fn names_round_trip() {
        for c in Check::ALL {
            assert_eq!(Check::from_name(c.name()), Some(c));
        }
        for s in [Status::Pass, Status::Fail, Status::Skip] {
            assert_eq!(Status::parse(s.as_str()), Some(s));
        }
    }
}
