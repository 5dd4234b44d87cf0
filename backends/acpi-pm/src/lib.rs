#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![no_std]
#![forbid(unsafe_code)]

use clockhal_core::{
    ClockSource, Estimate, Extended, Frequency, Placement, Policy, Quality, ReadCost, Stability,
    WrapExtender,
};
use clockhal_x86::{cpuid, Hardware};
use core::fmt;

/// The PM timer's fixed rate (ACPI spec: 3.579545 MHz).
pub const PM_TIMER_HZ: u64 = 3_579_545;
/// [`PM_TIMER_HZ`] as a [`Frequency`] (checked at compile time).
pub const PM_FREQUENCY: Frequency = match Frequency::from_hz(PM_TIMER_HZ) {
    Ok(f) => f,
    Err(_) => panic!("PM timer rate out of range"),
};
/// Rating with the paired read of a latching counter ([`Quality`] band
/// 100..=199).
pub const FAST_RATING: Quality = Quality::new(150);
/// Rating with the triple verified read.
pub const VERIFIED_RATING: Quality = Quality::new(120);

/// Reads spent waiting for the counter to move at probe (it advances by
/// 3.6 ticks per µs; one port read takes ≥ 0.5 µs).
const MAX_START_READS: u32 = 10_000;
/// Latch test: back-to-back reads (FreeBSD tests 10 rounds of reads; here
/// 10 x 32 reads in one run).
const LATCH_READS: u32 = 10 * 32;
/// Largest span of a verified triple read, in ticks (18 ms): a torn value
/// in the middle shows up as a larger span or as a step backwards.
const MAX_STEP: u32 = 1 << 16;
/// Largest step from the first to the second read of a pair, in ticks
/// (1.1 ms: back-to-back port reads are microseconds apart; a pair
/// preempted in between is read again).
const PAIR_STEP: u32 = 1 << 12;
/// Paired or verified read: attempts before giving up on this read.
const VERIFY_TRIES: u32 = 8;

/// How reads are made, chosen at probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PmMode {
    /// The counter latched correctly in every test round: two port reads
    /// per value, the first taken when the second is at most 1.1 ms after
    /// it. A latch test passed at probe cannot prove that the counter never
    /// tears later; the second read makes sure one tear cannot pass (torn
    /// ahead, the second read is behind it; torn back by more than the
    /// step, the pair is too wide). Two reads torn alike can.
    Fast,
    /// The counter tore at least once: three ordered reads per value.
    Verified,
}

/// Why [`AcpiPm::probe`] refused the timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum AcpiPmError {
    /// Port 0: the FADT names no PM timer.
    ZeroPort,
    /// The port reads all ones: nothing decodes it.
    NoDevice,
    /// The counter did not advance.
    NotAdvancing,
}

impl fmt::Display for AcpiPmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AcpiPmError::ZeroPort => "ACPI PM timer port is 0",
            AcpiPmError::NoDevice => "ACPI PM timer port reads all ones: no device",
            AcpiPmError::NotAdvancing => "ACPI PM timer does not advance",
        })
    }
}

/// The ACPI PM timer, probed.
pub struct AcpiPm<H: Hardware> {
    hw: H,
    port: u16,
    mask: u32,
    mode: PmMode,
    stability: Stability,
    ext: WrapExtender,
}

impl<H: Hardware> AcpiPm<H> {
    /// Probes the PM timer at I/O `port`: checks that it exists and
    /// advances, then runs the latch test to choose the [`PmMode`].
    /// `policy` is accepted for symmetry with the other backends.
    ///
    /// The counter is read as 24 bits whatever `bits32` (FADT TMR_VAL_EXT)
    /// says, as Linux does: the low 24 bits of a 32-bit counter wrap just
    /// like a 24-bit counter, while firmware that claims 32 bits on a
    /// 24-bit timer would make a 32-bit reading hold for ever at its first
    /// wrap. The cost is the shorter read interval (2.3 s,
    /// [`max_read_interval`](ClockSource::max_read_interval)).
    /// Interrupt-safe: no (one-time probe: busy-waits for ms).
    pub fn probe(
        hw: H,
        port: u16,
        bits32: bool,
        policy: &Policy,
    ) -> Result<AcpiPm<H>, AcpiPmError> {
        let _ = policy;
        if port == 0 {
            return Err(AcpiPmError::ZeroPort);
        }
        let _ = bits32;
        let mask: u32 = 0x00FF_FFFF;
        // An absent port floats to all ones. A 32-bit counter also passes
        // through 0xFFFFFFFF for one tick per wrap, so insist three times.
        let first = hw.inl(port);
        if first == u32::MAX && (0..2).all(|_| hw.inl(port) == u32::MAX) {
            return Err(AcpiPmError::NoDevice);
        }
        if !(0..MAX_START_READS).any(|_| (hw.inl(port) ^ first) & mask != 0) {
            return Err(AcpiPmError::NotAdvancing);
        }
        let mode = if latches(&hw, port, mask) {
            PmMode::Fast
        } else {
            PmMode::Verified
        };
        let stability = Stability::device_counter(cpuid::hypervisor_present(&hw), true);
        let pm = AcpiPm {
            hw,
            port,
            mask,
            mode,
            stability,
            ext: WrapExtender::new(24, 0),
        };
        pm.restart();
        Ok(pm)
    }

    /// After a resume: the counter may have been reset. Restarts the
    /// software extension at its current value (the timeline restarts; a
    /// `Clock` on top rebases its own and keeps advancing).
    /// Interrupt-safe: no (a per-CPU lifecycle step).
    pub fn resume(&self) {
        self.restart();
    }

    /// Starts the timeline at the counter's current value as this mode
    /// reads it, unless every attempt tore.
    fn restart(&self) {
        let raw = self.raw_now().unwrap_or_else(|| self.raw());
        self.ext.reset(raw as u64);
    }

    /// The read mode the latch test chose.
    /// Interrupt-safe: yes.
    pub fn mode(&self) -> PmMode {
        self.mode
    }

    /// The I/O port.
    /// Interrupt-safe: yes.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Counter width as read: 24 (see [`probe`](Self::probe)).
    /// Interrupt-safe: yes.
    pub fn bits(&self) -> u32 {
        self.mask.count_ones()
    }

    /// The hardware handle.
    /// Interrupt-safe: yes.
    pub fn hardware(&self) -> &H {
        &self.hw
    }

    #[inline(always)]
    fn raw(&self) -> u32 {
        self.hw.inl(self.port) & self.mask
    }

    /// The counter now as this mode reads it: a paired read (fast) or a
    /// verified one (`None` when every attempt tore).
    #[inline]
    fn raw_now(&self) -> Option<u32> {
        match self.mode {
            PmMode::Fast => self.paired_raw(),
            PmMode::Verified => self.verified_raw(),
        }
    }

    /// The counter read inside the extension's update
    /// ([`WrapExtender::place`]: never a stale count against a newer last
    /// value), placed by `how`.
    #[inline(always)]
    fn place(&self, how: Placement) -> Extended {
        self.ext.place(|| self.raw_now().map(u64::from), how)
    }

    /// Two reads, the second at most [`PAIR_STEP`] after the first: the
    /// first is good. `None` when every attempt tore (or was preempted).
    #[inline]
    fn paired_raw(&self) -> Option<u32> {
        for _ in 0..VERIFY_TRIES {
            let (v1, v2) = (self.raw(), self.raw());
            if v2.wrapping_sub(v1) & self.mask <= PAIR_STEP {
                return Some(v1);
            }
        }
        None
    }

    /// Three reads in order modulo the wrap, spanning a plausible interval:
    /// the middle one is good. `None` when every attempt tore.
    fn verified_raw(&self) -> Option<u32> {
        for _ in 0..VERIFY_TRIES {
            let (v1, v2, v3) = (self.raw(), self.raw(), self.raw());
            let d12 = v2.wrapping_sub(v1) & self.mask;
            let d13 = v3.wrapping_sub(v1) & self.mask;
            if d12 <= d13 && d13 <= MAX_STEP {
                return Some(v2);
            }
        }
        None
    }
}

/// FreeBSD-style latch test: no step between back-to-back reads may go
/// backwards. A non-latching counter eventually returns a torn value, and a
/// torn value steps back — below the read before it, or (torn ahead) the
/// next read steps back from it. A large step *forward* alone is not a
/// failure: the vCPU may have been descheduled (or an SMI ran) between two
/// reads; a torn-ahead value is caught by the read after it.
///
/// Backwards means "modulo the wrap, more than half the range forward":
/// only a stall longer than half a wrap period (2.3 s at 24 bits) between
/// two reads could be mistaken for one.
fn latches<H: Hardware>(hw: &H, port: u16, mask: u32) -> bool {
    let half_range = mask / 2;
    let mut prev = hw.inl(port) & mask;
    (0..LATCH_READS).all(|_| {
        let v = hw.inl(port) & mask;
        let step = v.wrapping_sub(prev) & mask;
        prev = v;
        step <= half_range
    })
}

impl<H: Hardware> ClockSource for AcpiPm<H> {
    fn counter_domain(&self) -> Option<clockhal_core::CounterDomain> {
        Some(clockhal_core::CounterDomain::AcpiPm)
    }
    fn name(&self) -> &'static str {
        "acpi-pm"
    }

    /// Fast: two port reads per attempt; verified: three. If every attempt
    /// tears (a broken chipset or a very unlucky preemption) the last value
    /// is returned again, so time stalls for one read instead of jumping.
    #[inline]
    fn read(&self) -> u64 {
        self.place(Placement::Plain).ticks
    }

    fn frequency(&self) -> Frequency {
        PM_FREQUENCY
    }

    fn quality(&self) -> Quality {
        match self.mode {
            PmMode::Fast => FAST_RATING,
            PmMode::Verified => VERIFIED_RATING,
        }
    }

    fn stability(&self) -> Stability {
        self.stability
    }

    fn read_cost(&self) -> ReadCost {
        ReadCost::SeveralTraps
    }

    fn max_read_interval(&self) -> Option<u64> {
        Some(self.ext.max_read_interval())
    }

    fn read_spanning(&self, span: u64, within: u64) -> u64 {
        self.place(Placement::Spanning { span, within }).ticks
    }

    fn read_forward(&self) -> u64 {
        self.place(Placement::Forward).ticks
    }

    /// No reading that agreed with itself: the last value, not known to be
    /// the count now.
    fn read_near(&self, estimate: Option<Estimate>) -> Extended {
        self.place(Placement::Near(estimate))
    }
}

impl<H: Hardware> fmt::Debug for AcpiPm<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AcpiPm")
            .field("port", &self.port)
            .field("bits", &self.bits())
            .field("mode", &self.mode)
            .finish()
    }
}
