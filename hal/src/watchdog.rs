//! Run-time cross-checking of one source against another.
//!
//! Each sample reads the reference, the source, then the reference again.
//! The source read lies somewhere inside that window, so the window's width
//! (the reference's own read-back delay, a few microseconds for an emulated
//! HPET or PM timer, far more if the vCPU was descheduled) bounds how well
//! the sample is timed. Linux's watchdog ignored this and demoted good TSCs
//! in VMs because its HPET/PM reads were slow; this one:
//! - discards samples whose window exceeds [`WatchdogConfig::max_read_delay`];
//! - places each sample at the window's midpoint and subtracts the windows'
//!   half-widths from the measured skew before comparing with the bound;
//! - demotes only after [`WatchdogConfig::strikes`] consecutive bad intervals.

use crate::{ClockSource, Duration, Frequency, Scale};

/// Tuning for a [`Watchdog`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct WatchdogConfig {
    /// Largest tolerated rate difference, in ppm (default 500: Linux warns
    /// about CPUID TSC rates at ~490 ppm).
    pub max_skew_ppm: u64,
    /// Samples whose reference read-back window is wider are discarded
    /// (default 100 us).
    pub max_read_delay: Duration,
    /// Intervals shorter than this are not judged (default 100 ms): the
    /// read-back uncertainty would dominate.
    pub min_interval: Duration,
    /// Consecutive over-bound intervals before demotion (default 3).
    pub strikes: u32,
}

impl Default for WatchdogConfig {
    fn default() -> Self {
        WatchdogConfig {
            max_skew_ppm: 500,
            max_read_delay: Duration::from_micros(100),
            min_interval: Duration::from_millis(100),
            strikes: 3,
        }
    }
}

/// One reading of the source bracketed by two readings of the reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct WatchdogSample {
    /// Reference ticks before the source read.
    pub ref_before: u64,
    /// Source ticks.
    pub source: u64,
    /// Reference ticks after the source read.
    pub ref_after: u64,
}

impl WatchdogSample {
    /// Takes a sample: reference, source, reference.
    pub fn take(source: &dyn ClockSource, reference: &dyn ClockSource) -> Self {
        let ref_before = reference.read();
        let s = source.read();
        let ref_after = reference.read();
        WatchdogSample {
            ref_before,
            source: s,
            ref_after,
        }
    }
}

/// What one [`Watchdog::check`] concluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum WatchdogVerdict {
    /// First usable sample: nothing to compare yet.
    Started,
    /// Not enough time since the last judged sample; sample ignored.
    TooSoon,
    /// The reference took too long to read around the source; the sample is
    /// discarded (the `Duration` is the observed window).
    Discarded(Duration),
    /// Within the bound.
    Ok {
        /// Measured skew of the source relative to the reference, ppm.
        skew_ppm: i64,
        /// How much of it the read-back windows can explain, ppm.
        uncertainty_ppm: u64,
    },
    /// Outside the bound, but not yet for enough consecutive intervals.
    Suspect {
        /// Measured skew, ppm.
        skew_ppm: i64,
        /// Read-back uncertainty, ppm.
        uncertainty_ppm: u64,
        /// Consecutive bad intervals so far.
        strikes: u32,
    },
    /// Demote the source: its rate drifted beyond the bound for
    /// `strikes` intervals, or it went backwards.
    Demote {
        /// Last measured skew, ppm (`i64::MIN` when the source went backwards).
        skew_ppm: i64,
    },
}

/// Compares a source's rate with a reference's over successive intervals.
///
/// ```
/// use clockhal_core::*;
/// let mut w = Watchdog::new(
///     Frequency::from_hz(1_000_000_000).unwrap(), // source: 1 GHz
///     Frequency::from_hz(3_579_545).unwrap(),     // reference: PM timer
///     WatchdogConfig::default(),
/// );
/// let s = |src, r| WatchdogSample { ref_before: r, source: src, ref_after: r + 4 };
/// assert_eq!(w.check(s(0, 0)), WatchdogVerdict::Started);
/// // 1 s later on both clocks, source 100 ppm fast: fine.
/// match w.check(s(1_000_100_000, 3_579_545)) {
///     WatchdogVerdict::Ok { skew_ppm, .. } => assert_eq!(skew_ppm, 100),
///     v => panic!("{v:?}"),
/// }
/// ```
#[derive(Clone, Debug)]
pub struct Watchdog {
    config: WatchdogConfig,
    source: Scale,
    reference: Scale,
    base: Option<WatchdogSample>,
    strikes: u32,
}

impl Watchdog {
    /// A watchdog for a source of rate `source` checked against `reference`.
    pub fn new(source: Frequency, reference: Frequency, config: WatchdogConfig) -> Self {
        Watchdog {
            config,
            source: Scale::new(source),
            reference: Scale::new(reference),
            base: None,
            strikes: 0,
        }
    }

    /// Forgets the baseline (call after a legitimate time jump, e.g. when a
    /// pvclock reports the guest was stopped).
    pub fn restart(&mut self) {
        self.base = None;
        self.strikes = 0;
    }

    /// Judges a new sample against the baseline.
    pub fn check(&mut self, s: WatchdogSample) -> WatchdogVerdict {
        let window = self
            .reference
            .ticks_to_ns(s.ref_after.wrapping_sub(s.ref_before));
        if s.ref_after < s.ref_before || window > self.config.max_read_delay.as_nanos() {
            return WatchdogVerdict::Discarded(Duration::from_nanos(window));
        }
        let Some(base) = self.base else {
            self.base = Some(s);
            return WatchdogVerdict::Started;
        };
        if s.source < base.source {
            self.base = Some(s);
            return WatchdogVerdict::Demote { skew_ppm: i64::MIN };
        }
        // Reference interval between window midpoints, in ns.
        let mid = |x: &WatchdogSample| {
            x.ref_before / 2 + x.ref_after / 2 + (x.ref_before & x.ref_after & 1)
        };
        let ref_ns = self
            .reference
            .ticks_to_ns(mid(&s).saturating_sub(mid(&base)));
        if ref_ns < self.config.min_interval.as_nanos() {
            return WatchdogVerdict::TooSoon;
        }
        let src_ns = self.source.ticks_to_ns(s.source - base.source);
        let half_windows =
            (self.reference.ticks_to_ns(base.ref_after - base.ref_before) + window) / 2;
        let skew_ppm = ppm(src_ns as i128 - ref_ns as i128, ref_ns);
        let uncertainty_ppm = ppm(half_windows as i128, ref_ns).unsigned_abs();
        self.base = Some(s);
        if skew_ppm.unsigned_abs().saturating_sub(uncertainty_ppm) <= self.config.max_skew_ppm {
            self.strikes = 0;
            WatchdogVerdict::Ok {
                skew_ppm,
                uncertainty_ppm,
            }
        } else {
            self.strikes += 1;
            if self.strikes >= self.config.strikes.max(1) {
                self.strikes = 0;
                WatchdogVerdict::Demote { skew_ppm }
            } else {
                WatchdogVerdict::Suspect {
                    skew_ppm,
                    uncertainty_ppm,
                    strikes: self.strikes,
                }
            }
        }
    }
}

/// `num / den` in ppm, rounded toward zero, saturating.
fn ppm(num: i128, den: u64) -> i64 {
    let v = num.saturating_mul(1_000_000) / den.max(1) as i128;
    v.clamp(i64::MIN as i128 + 1, i64::MAX as i128) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wd() -> Watchdog {
        Watchdog::new(
            Frequency::from_hz(1_000_000_000).unwrap(),
            Frequency::from_hz(100_000_000).unwrap(),
            WatchdogConfig::default(),
        )
    }

    #[test]
    fn slow_reference_reads_do_not_demote_a_good_source() {
        // Reference read-back takes 80 us (slow emulated HPET) and the source
        // read sits at a random point of the window: the raw skew over 100 ms
        // looks like up to 800 ppm, but it is all read delay.
        let mut w = wd();
        assert_eq!(
            w.check(WatchdogSample {
                ref_before: 0,
                source: 0,
                ref_after: 8_000
            }),
            WatchdogVerdict::Started
        );
        for i in 1..=10u64 {
            let r = i * 10_000_000; // 100 ms of 100 MHz ticks
            let src = r * 10 + if i % 2 == 0 { 80_000 } else { 0 };
            let v = w.check(WatchdogSample {
                ref_before: r,
                source: src,
                ref_after: r + 8_000,
            });
            assert!(matches!(v, WatchdogVerdict::Ok { .. }), "{v:?}");
        }
    }

    #[test]
    fn drift_demotes_after_strikes_only() {
        let mut w = wd();
        w.check(WatchdogSample {
            ref_before: 0,
            source: 0,
            ref_after: 10,
        });
        let mut src = 0u64;
        let mut verdicts = std::vec::Vec::new();
        for i in 1..=3u64 {
            src += 100_000_000 + 100_000; // 1000 ppm fast
            let r = i * 10_000_000;
            verdicts.push(w.check(WatchdogSample {
                ref_before: r,
                source: src,
                ref_after: r + 10,
            }));
        }
        assert!(matches!(
            verdicts[0],
            WatchdogVerdict::Suspect {
                strikes: 1,
                skew_ppm: 1000,
                ..
            }
        ));
        assert!(matches!(
            verdicts[1],
            WatchdogVerdict::Suspect { strikes: 2, .. }
        ));
        assert_eq!(verdicts[2], WatchdogVerdict::Demote { skew_ppm: 1000 });
    }

    #[test]
    fn discards_and_too_soon_and_backwards() {
        let mut w = wd();
        let v = w.check(WatchdogSample {
            ref_before: 0,
            source: 0,
            ref_after: 100_000,
        });
        assert_eq!(v, WatchdogVerdict::Discarded(Duration::from_millis(1)));
        w.check(WatchdogSample {
            ref_before: 0,
            source: 50,
            ref_after: 10,
        });
        let v = w.check(WatchdogSample {
            ref_before: 100,
            source: 1_000,
            ref_after: 110,
        });
        assert_eq!(v, WatchdogVerdict::TooSoon);
        let v = w.check(WatchdogSample {
            ref_before: 20_000_000,
            source: 10,
            ref_after: 20_000_010,
        });
        assert_eq!(v, WatchdogVerdict::Demote { skew_ppm: i64::MIN });
    }
}
