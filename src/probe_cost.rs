//! What the probe cost at boot: how long it took and how many reads of
//! trapping clocks (each a hypervisor exit or more) it made, per phase.
//!
//! Counted on the probe's own path only: the calibration references and
//! the self-check read the sources through [`Counted`], never the clock's
//! read path.

use crate::{SourceId, MAX_CANDIDATES};
use clockhal_core::{ClockSource, Duration, Frequency, Quality, ReadCost, Stability};
use core::fmt;
use core::sync::atomic::{AtomicU32, Ordering};

/// The probe's cost: its duration and its reads of trapping clocks (HPET,
/// PM timer, PIT, Hyper-V MSR: every source whose read costs an exit), by
/// phase and candidate. [`Report::cost`](crate::Report::cost); printed by
/// `Display` as
///
/// ```text
/// probe 41.237 ms; 5213 trapping reads (calibration: hpet 2104; self-check: hpet 2061, acpi-pm 1048)
/// ```
///
/// Not counted: a backend's own probe reads of its registers (a handful),
/// and a source's exits beyond one per read (a PIT read is three port
/// accesses; see its read cost).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeCost {
    tsc_ticks: u64,
    duration: Option<Duration>,
    calibration: [u32; MAX_CANDIDATES],
    os_reference: u32,
    self_check: [u32; MAX_CANDIDATES],
}

impl ProbeCost {
    /// Nothing probed.
    pub(crate) const NONE: ProbeCost = ProbeCost {
        tsc_ticks: 0,
        duration: None,
        calibration: [0; MAX_CANDIDATES],
        os_reference: 0,
        self_check: [0; MAX_CANDIDATES],
    };

    /// How long [`probe`](crate::probe) took, from the TSC converted with
    /// the TSC candidate's rate; `None` when the TSC has no rate (rejected)
    /// or nothing was probed (the hardware was owned).
    ///
    /// Interrupt-safe: yes (reads a copy).
    pub fn duration(&self) -> Option<Duration> {
        self.duration
    }

    /// TSC ticks the probe took (0 when nothing was probed).
    ///
    /// Interrupt-safe: yes (reads a copy).
    pub fn tsc_ticks(&self) -> u64 {
        self.tsc_ticks
    }

    /// Reads of `id` as the TSC's calibration reference (0 for a source
    /// that does not trap or was no reference).
    ///
    /// Interrupt-safe: yes (reads a copy).
    pub fn calibration_reads(&self, id: SourceId) -> u32 {
        self.calibration[id.index()]
    }

    /// Reads of the OS's calibration reference
    /// ([`Platform::tsc_reference`](crate::Platform::tsc_reference)) where
    /// it traps.
    ///
    /// Interrupt-safe: yes (reads a copy).
    pub fn os_reference_reads(&self) -> u32 {
        self.os_reference
    }

    /// Reads of `id` by the self-check (advance, monotonicity, rate
    /// brackets, pacing), 0 where it does not trap.
    ///
    /// Interrupt-safe: yes (reads a copy).
    pub fn self_check_reads(&self, id: SourceId) -> u32 {
        self.self_check[id.index()]
    }

    /// Every counted trapping read.
    ///
    /// Interrupt-safe: yes (reads a copy).
    pub fn trapping_reads(&self) -> u64 {
        let sum = |a: &[u32]| a.iter().map(|&n| n as u64).sum::<u64>();
        sum(&self.calibration) + self.os_reference as u64 + sum(&self.self_check)
    }

    pub(crate) fn set_calibration(&mut self, id: SourceId, reads: u32) {
        self.calibration[id.index()] = reads;
    }

    pub(crate) fn set_os_reference(&mut self, reads: u32) {
        self.os_reference = reads;
    }

    pub(crate) fn set_self_check(&mut self, id: SourceId, reads: u32) {
        self.self_check[id.index()] = reads;
    }

    /// The probe took `ticks` TSC ticks; at `rate` when the TSC has one.
    pub(crate) fn set_time(&mut self, ticks: u64, rate: Option<Frequency>) {
        self.tsc_ticks = ticks;
        self.duration =
            rate.map(|f| Duration::from_nanos(clockhal_core::Scale::new(f).ticks_to_ns(ticks)));
    }
}

impl Default for ProbeCost {
    fn default() -> Self {
        ProbeCost::NONE
    }
}

impl fmt::Display for ProbeCost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.duration {
            Some(d) => {
                let us = d.as_nanos() / 1_000;
                write!(f, "probe {}.{:03} ms", us / 1_000, us % 1_000)?
            }
            None => write!(f, "probe {} TSC ticks", self.tsc_ticks)?,
        }
        write!(f, "; {} trapping reads", self.trapping_reads())?;
        let mut open = false;
        let mut phase = |f: &mut fmt::Formatter<'_>, name: &str, reads: &[u32], os: u32| {
            if reads.iter().all(|&n| n == 0) && os == 0 {
                return Ok(());
            }
            f.write_str(if open { "; " } else { " (" })?;
            open = true;
            write!(f, "{name}:")?;
            let mut sep = " ";
            for id in SourceId::ALL {
                let n = reads[id.index()];
                if n > 0 {
                    write!(f, "{sep}{} {n}", id.default_name())?;
                    sep = ", ";
                }
            }
            if os > 0 {
                write!(f, "{sep}os reference {os}")?;
            }
            Ok(())
        };
        phase(f, "calibration", &self.calibration, self.os_reference)?;
        phase(f, "self-check", &self.self_check, 0)?;
        if open {
            f.write_str(")")?;
        }
        Ok(())
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for ProbeCost {
    fn format(&self, f: defmt::Formatter) {
        defmt::write!(f, "{}", defmt::Display2Format(self))
    }
}

/// A clock source whose reads are counted where one costs an exit.
pub(crate) struct Counted<'a> {
    inner: &'a dyn ClockSource,
    traps: bool,
    reads: AtomicU32,
}

impl<'a> Counted<'a> {
    pub(crate) fn new(inner: &'a dyn ClockSource) -> Counted<'a> {
        Counted {
            inner,
            traps: inner.read_cost() != ReadCost::NoTrap,
            reads: AtomicU32::new(0),
        }
    }

    /// Trapping reads so far (0 for a source that does not trap).
    pub(crate) fn reads(&self) -> u32 {
        self.reads.load(Ordering::Relaxed)
    }
}

impl ClockSource for Counted<'_> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn read(&self) -> u64 {
        if self.traps {
            // The probe runs on one CPU; Relaxed is enough for a tally.
            self.reads.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.read()
    }
    fn frequency(&self) -> Frequency {
        self.inner.frequency()
    }
    fn quality(&self) -> Quality {
        self.inner.quality()
    }
    fn stability(&self) -> Stability {
        self.inner.stability()
    }
    fn read_cost(&self) -> ReadCost {
        self.inner.read_cost()
    }
    fn max_read_interval(&self) -> Option<u64> {
        self.inner.max_read_interval()
    }
    fn descriptor(&self) -> clockhal_core::select::Descriptor {
        self.inner.descriptor()
    }
    fn counter_domain(&self) -> Option<clockhal_core::CounterDomain> {
        self.inner.counter_domain()
    }
}
