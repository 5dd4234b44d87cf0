//! Wall time from the CMOS RTC onto the clock's timeline (feature `rtc`):
//! [`Clock::set_wall_clock_from_rtc`], whose docs say how accurate it is.

use crate::Clock;
use clockhal_core::Duration;
use clockhal_rtc::{Rtc, RtcEdge, RtcError, RtcOptions};
use clockhal_x86::Hardware;

/// Second edges tried when a read ends too late after one
/// ([`RtcError::EdgeLost`]: the vCPU was descheduled).
const EDGE_ATTEMPTS: u32 = 3;

impl<H: Hardware + Clone> Clock<H> {
    /// How [`set_wall_clock_from_rtc`](Self::set_wall_clock_from_rtc)
    /// reads the RTC: the century register the FADT names, if the probe
    /// had ACPI tables and the index is a CMOS RAM register (else `None`:
    /// the [`PIVOT_YEAR`](clockhal_rtc::PIVOT_YEAR) rule), NMIs enabled
    /// ([`NmiBit::Clear`](clockhal_x86::cmos::NmiBit::Clear)).
    /// Interrupt-safe: yes.
    ///
    /// ```
    /// use clockhal::Platform;
    /// use clockhal_sim::{AcpiTablesBuilder, SimMachine};
    ///
    /// let m = SimMachine::bare_metal();
    /// let tables = AcpiTablesBuilder::q35().build(); // FADT CENTURY = 0x32
    /// let memory = tables.memory();
    /// let platform = Platform::new().acpi(tables.rsdp(), &memory);
    /// let clock = clockhal::probe(&m, platform).into_clock().unwrap();
    /// assert_eq!(clock.rtc_options().century_index, Some(0x32));
    /// ```
    pub fn rtc_options(&self) -> RtcOptions {
        let century_index = match &self.backends.acpi {
            Some(Ok(acpi)) => acpi.rtc.ok().and_then(|r| r.century_index),
            _ => None,
        };
        let named = RtcOptions {
            century_index,
            ..RtcOptions::default()
        };
        // A FADT naming an impossible register (firmware garbage) costs the
        // century register, not the wall time.
        if Rtc::new(self.hw.clone(), &named).is_ok() {
            named
        } else {
            RtcOptions::default()
        }
    }

    /// Reads the CMOS RTC at its next second edge, timed on this clock,
    /// and sets the clock's wall time from it: the clock's instant of the
    /// edge becomes that second's start ([`set_unix_time`](Self::set_unix_time));
    /// [`unix_time_ns`](Self::unix_time_ns) follows the clock from there.
    /// Returns the edge: the RTC's time, the clock's instant of the edge
    /// (`at_ns`, on [`now`](Self::now)'s timeline) and its uncertainty.
    ///
    /// Waits at most `max_wait` of clock time (pass at least 1.1 s to be
    /// sure to see an edge), trying up to three edges when a read ends too
    /// late after one, and a second longer for each edge a preemption of
    /// the vCPU may have hidden (UIP rises only 244 µs before the edge; at
    /// most [`MAX_HIDDEN_EDGES`](clockhal_rtc::MAX_HIDDEN_EDGES)). Errors
    /// are the RTC's ([`RtcError`]): no device, a dead battery, no edge in
    /// time, an invalid register, a time outside
    /// [`PLAUSIBLE_UNIX_SECONDS`](crate::PLAUSIBLE_UNIX_SECONDS)
    /// ([`RtcError::ImplausibleTime`]). The wall time is left as it was on
    /// error. After [`resume`](Self::resume) call it again: the clock does
    /// not count the time the machine was off.
    ///
    /// # How accurate
    /// The RTC counts whole seconds: read at an arbitrary moment it is up
    /// to a second behind. Aligned to an edge, the wall time is right to
    /// - [`RtcEdge::uncertainty_ns`]: half the poll window in which the
    ///   RTC's update-in-progress flag rose (a few µs under QEMU TCG; an
    ///   ISA-bus poll takes ~2 µs) and the clock's resolution, plus
    /// - the error of that flag's 244 µs lead before the edge, which the
    ///   MC146818 data sheet fixes and QEMU emulates exactly.
    ///
    /// Not covered: how well the RTC itself was set (a hypervisor sets it
    /// to the host's time at start; on bare metal it is as good as the last
    /// OS that wrote it), an RTC kept in local time rather than UTC
    /// (clockhal takes it as UTC), and the clock's own rate error
    /// afterwards (the selected source's ppm; the RTC's drift no longer
    /// matters).
    ///
    /// # Hardware and the OS
    /// Ports 0x70/0x71 only: reads of the time and status registers (never
    /// status C, never a data write) with the NMI bit of
    /// [`RtcOptions::nmi`]. It takes up to a second (one edge) plus ~2 ms,
    /// during which the OS keeps every other CMOS user off (see
    /// [`clockhal_x86::cmos`]).
    ///
    /// ```
    /// use clockhal::{Duration, Platform};
    /// use clockhal_sim::SimMachine;
    ///
    /// let m = SimMachine::bare_metal(); // its RTC: 2026-12-01 12:34:56.25 UTC at power-on
    /// let clock = clockhal::probe(&m, Platform::new()).into_clock().unwrap();
    /// let edge = clock.set_wall_clock_from_rtc(Duration::from_millis(1_100)).unwrap();
    /// assert_eq!(edge.time.to_string(), "2026-12-01T12:34:57Z");
    /// assert!(edge.uncertainty_ns < 50_000);
    /// let unix = clock.unix_time_ns().unwrap();
    /// assert_eq!(unix / 1_000_000_000, 1_796_128_497);
    /// ```
    ///
    /// Interrupt-safe: no (waits up to seconds; takes the watchdog lock).
    pub fn set_wall_clock_from_rtc(&self, max_wait: Duration) -> Result<RtcEdge, RtcError> {
        self.set_wall_clock_from_rtc_with(&self.rtc_options(), max_wait)
    }

    /// [`set_wall_clock_from_rtc`](Self::set_wall_clock_from_rtc) with
    /// the OS's own [`RtcOptions`] (another NMI bit, a century register it
    /// knows better).
    ///
    /// ```
    /// use clockhal::{rtc::RtcOptions, x86::cmos::NmiBit, Duration, Platform};
    /// use clockhal_sim::SimMachine;
    ///
    /// let m = SimMachine::bare_metal();
    /// let clock = clockhal::probe(&m, Platform::new()).into_clock().unwrap();
    /// let options = RtcOptions { nmi: NmiBit::Set, ..clock.rtc_options() };
    /// let edge = clock.set_wall_clock_from_rtc_with(&options, Duration::from_millis(1_100)).unwrap();
    /// assert_eq!(edge.time.unix_seconds(), 1_796_128_497);
    /// ```
    ///
    /// Interrupt-safe: no (as [`set_wall_clock_from_rtc`](Self::set_wall_clock_from_rtc)).
    pub fn set_wall_clock_from_rtc_with(
        &self,
        options: &RtcOptions,
        max_wait: Duration,
    ) -> Result<RtcEdge, RtcError> {
        let rtc = Rtc::new(self.hw.clone(), options)?;
        let deadline = self.now_ns().saturating_add(max_wait.as_nanos());
        let mut result = Err(RtcError::NoUpdateEdge);
        for _ in 0..EDGE_ATTEMPTS {
            let left = deadline.saturating_sub(self.now_ns());
            if left == 0 {
                break;
            }
            result = rtc.read_at_second_edge(|| self.now_ns(), left);
            if result != Err(RtcError::EdgeLost) {
                break;
            }
        }
        let mut edge = result?;
        // The polls were timed with this clock: known only to its resolution.
        edge.uncertainty_ns = edge.uncertainty_ns.saturating_add(self.resolution_ns());
        // The offset from the edge's own instant: time that passed since
        // (a preemption) must not be taken from the wall time.
        self.set_unix_time_at(edge.unix_ns_at(edge.at_ns), edge.at_ns)
            .map_err(|_| RtcError::ImplausibleTime {
                year: edge.time.year,
            })?;
        Ok(edge)
    }
}
