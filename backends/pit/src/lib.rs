#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![no_std]
#![forbid(unsafe_code)]

use clockhal_core::{ClockSource, Frequency, Quality, ReadCost, Stability, WrapExtender};
use clockhal_x86::{cpuid, pit, Hardware};
use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub mod channel0;

/// The PIT's input clock: 14.31818 MHz / 12 = 105/88 MHz, exactly.
pub const PIT_FREQUENCY: Frequency = match Frequency::from_ratio(105_000_000, 88) {
    Ok(f) => f,
    Err(_) => panic!("PIT rate out of range"),
};
/// Counter period in ticks (16 bits): 54.925 ms.
pub const WRAP_TICKS: u64 = 1 << 16;
/// Rating as a clock (band 1..=99, "last resort": below the ACPI PM timer).
pub const CLOCK_QUALITY: Quality = Quality::new(50);
/// Longest read interval an OS may commit to. Reads must be less than half
/// a wrap apart (2^15 ticks = 27.46 ms); the rest is slack for interrupt
/// latency.
pub const MAX_COMMITMENT_MS: u32 = 20;

/// Reads spent waiting for the counter to move at probe (it moves every
/// 0.84 µs; one read takes three port accesses of ≥ 0.5 µs each).
const MAX_START_READS: u32 = 10_000;
/// Back-to-back reads of the direction test.
const DIRECTION_READS: u32 = 64;
/// Steps of the direction test that may look backwards (a vCPU descheduled
/// for more than half a wrap between two reads) before the PIT is called
/// erratic; a device returning garbage fails about half of them.
const DIRECTION_SLACK: u32 = 2;
/// Rounds of the TSC-per-tick measurement (the smallest ratio wins: it is
/// the least disturbed).
const RATIO_ROUNDS: u32 = 3;
/// Ticks per ratio round (0.86 ms).
const RATIO_TICKS: u64 = 1024;
/// Reads allowed per ratio round before the PIT is called too slow.
const MAX_RATIO_READS: u32 = 20_000;
/// A read more than this many ticks (3/4 of the half wrap), as measured by
/// the TSC, after the previous one counts as a possible overrun.
const OVERRUN_TICKS: u64 = 3 * (WRAP_TICKS / 2) / 4;
/// Attempts at the read lock before returning the last value.
const LOCK_SPINS: u32 = 1 << 12;

/// What the OS promises about how often it reads the PIT clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ReadCommitment {
    /// No promise: the PIT is a calibration reference only.
    #[default]
    None,
    /// Some CPU calls [`ClockSource::read`] (through the facade's clock:
    /// `now()`, or its watchdog tick) at least every this many
    /// milliseconds, e.g. from the OS's periodic timer interrupt, for as
    /// long as the PIT is the selected clock. At most
    /// [`MAX_COMMITMENT_MS`].
    EveryMs(u32),
}

/// How the OS wants the PIT probed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PitOptions {
    /// Whether the PIT may serve as a clock (default: no, calibration only).
    pub as_clock: ReadCommitment,
}

/// What the probed PIT may be used for, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PitRole {
    /// A clock of last resort ([`CLOCK_QUALITY`]): the OS reads it at least
    /// every `every_ms`.
    Clock {
        /// The committed read interval.
        every_ms: u32,
    },
    /// Calibration reference only ([`Quality::UNUSABLE`]): the OS made no
    /// read commitment.
    NoCommitment,
    /// Calibration reference only: the committed interval is longer than
    /// [`MAX_COMMITMENT_MS`] (or zero).
    CommitmentUnusable {
        /// The interval offered.
        every_ms: u32,
    },
}

impl PitRole {
    fn from_commitment(c: ReadCommitment) -> PitRole {
        match c {
            ReadCommitment::None => PitRole::NoCommitment,
            ReadCommitment::EveryMs(ms) if (1..=MAX_COMMITMENT_MS).contains(&ms) => {
                PitRole::Clock { every_ms: ms }
            }
            ReadCommitment::EveryMs(ms) => PitRole::CommitmentUnusable { every_ms: ms },
        }
    }

    /// Whether the PIT may be selected as a clock.
    /// Interrupt-safe: yes.
    pub fn is_clock(&self) -> bool {
        matches!(self, PitRole::Clock { .. })
    }
}

impl fmt::Display for PitRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PitRole::Clock { every_ms } => {
                write!(
                    f,
                    "clock of last resort (the OS reads it every {every_ms} ms)"
                )
            }
            PitRole::NoCommitment => f.write_str(
                "calibration reference only: its 16-bit counter wraps every 54.9 ms \
                 and the OS made no commitment to read it that often",
            ),
            PitRole::CommitmentUnusable { every_ms } => write!(
                f,
                "calibration reference only: a read every {every_ms} ms does not keep \
                 up with the 54.9 ms wrap (at most {MAX_COMMITMENT_MS} ms)"
            ),
        }
    }
}

/// Why [`Pit::probe`] refused the PIT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PitError {
    /// Channel 2 reads 0xFFFF every time: nothing decodes ports 0x40–0x43.
    Absent,
    /// The counter did not move within the probe's reads.
    NotCounting {
        /// The value it kept returning.
        value: u16,
    },
    /// The counter moved, but not like a down-counter: too many
    /// back-to-back reads went backwards.
    Erratic {
        /// Backward steps seen.
        backward: u32,
        /// Steps examined.
        of: u32,
    },
    /// The counter moved far slower than any PIT: fewer than 1,024 ticks in
    /// 20,000 reads.
    TooSlow {
        /// Ticks it advanced.
        ticks: u64,
    },
}

impl fmt::Display for PitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PitError::Absent => {
                f.write_str("PIT channel 2 reads 0xFFFF: no PIT at ports 0x40-0x43")
            }
            PitError::NotCounting { value } => {
                write!(f, "PIT channel 2 is stuck at {value:#06x}")
            }
            PitError::Erratic { backward, of } => write!(
                f,
                "PIT channel 2 does not count down: {backward} of {of} reads stepped back"
            ),
            PitError::TooSlow { ticks } => write!(
                f,
                "PIT channel 2 advanced only {ticks} ticks in {MAX_RATIO_READS} reads"
            ),
        }
    }
}

/// Reads under [`Pit::checked`] may have missed a wrap: the PIT's value
/// over that span is not trustworthy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Overrun {
    /// Reads that came too long after the previous one.
    pub reads: u64,
}

impl fmt::Display for Overrun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} PIT read(s) came more than half a wrap (27 ms) after the previous one",
            self.reads
        )
    }
}

/// The up-counting value of a channel-2 reading (the hardware counts down;
/// 0 stands for 65,536).
fn up(raw: u16) -> u64 {
    0u16.wrapping_sub(raw) as u64
}

/// The PIT's channel 2, probed.
pub struct Pit<H: Hardware> {
    hw: H,
    role: PitRole,
    stability: Stability,
    ext: WrapExtender,
    /// Serialises the latch-and-read sequence (shared device state).
    busy: AtomicBool,
    /// TSC after the previous latch (under `busy`).
    last_tsc: AtomicU64,
    /// TSC before the previous latch (under `busy`).
    last_tsc_before: AtomicU64,
    /// TSC ticks that make a gap between reads suspect; 0 when the TSC gave
    /// no usable measure at probe.
    overrun_tsc: u64,
    overruns: AtomicU64,
}

impl<H: Hardware> Pit<H> {
    /// Starts channel 2 ([`clockhal_x86::pit::start_channel2`]), checks
    /// that it exists and counts down (bounded: at most about 10,000 +
    /// 64 + 3 × 1,024 ticks' worth of reads), measures the TSC ticks per
    /// PIT tick for the overrun check, and rates it per `options`.
    /// Interrupt-safe: no (one-time probe: busy-waits for ms).
    pub fn probe(hw: H, options: &PitOptions) -> Result<Pit<H>, PitError> {
        pit::start_channel2(&hw);
        let read = || pit::read_channel2(&hw);
        // An absent PIT floats to 0xFFFF forever; a live one shows 0xFFFF
        // for one tick per wrap (several reads where port I/O is fast).
        let first = read();
        let Some(mut prev) = (0..MAX_START_READS).find_map(|_| {
            let v = read();
            (v != first).then_some(v)
        }) else {
            return Err(match first {
                0xFFFF => PitError::Absent,
                value => PitError::NotCounting { value },
            });
        };
        let backward = (0..DIRECTION_READS)
            .filter(|_| {
                let v = read();
                let step = up(v).wrapping_sub(up(prev)) % WRAP_TICKS;
                prev = v;
                step >= WRAP_TICKS / 2
            })
            .count() as u32;
        if backward > DIRECTION_SLACK {
            return Err(PitError::Erratic {
                backward,
                of: DIRECTION_READS,
            });
        }
        let overrun_tsc = tsc_per_ticks(&hw, OVERRUN_TICKS)?;
        let stability = Stability::device_counter(cpuid::hypervisor_present(&hw), true);
        let ext = WrapExtender::new(16, up(pit::read_channel2(&hw)));
        let now = hw.rdtsc();
        Ok(Pit {
            last_tsc: AtomicU64::new(now),
            last_tsc_before: AtomicU64::new(now),
            hw,
            role: PitRole::from_commitment(options.as_clock),
            stability,
            ext,
            busy: AtomicBool::new(false),
            overrun_tsc,
            overruns: AtomicU64::new(0),
        })
    }

    /// What the PIT may be used for.
    /// Interrupt-safe: yes.
    pub fn role(&self) -> PitRole {
        self.role
    }

    /// The hardware handle.
    /// Interrupt-safe: yes.
    pub fn hardware(&self) -> &H {
        &self.hw
    }

    /// Reads so far whose latch may have come, by the TSC, more than 3/4 of
    /// the half wrap (20.6 ms) after the previous read's (a preemption
    /// inside either read counts): each may have lost a wrap where the TSC
    /// could not place it, so the extended count may be behind by
    /// multiples of 54.9 ms (never ahead, never backwards). With TSCs that
    /// differ across CPUs this may over-count; a TSC that stood still at
    /// probe disables the check.
    ///
    /// Interrupt-safe: yes (one atomic load).
    pub fn overruns(&self) -> u64 {
        self.overruns.load(Ordering::Relaxed)
    }

    /// Runs `f` (a measurement over the PIT, e.g. a TSC calibration with
    /// the PIT as reference) and returns its result only if no read
    /// inside it may have lost a wrap ([`overruns`](Self::overruns)): a
    /// calibration whose reference silently lost 54.9 ms would be wrong by
    /// far more than its stated uncertainty. Reads once first, so the gap
    /// since the PIT's last use does not count.
    /// Interrupt-safe: no (runs `f`, a calibration, between two reads).
    ///
    /// ```
    /// use clockhal_core::Duration;
    /// use clockhal_pit::{Pit, PitOptions};
    /// use clockhal_sim::SimMachine;
    /// let m = SimMachine::qemu_tcg_microvm(); // TSC at 2 GHz, rate unstated
    /// let pit = Pit::probe(&m, &PitOptions::default()).unwrap();
    /// let c = pit
    ///     .checked(|p| clockhal_tsc::calibrate(&m, p, Duration::from_millis(50)))
    ///     .expect("no overrun")
    ///     .expect("calibrated");
    /// let err_ppm = c.rate.ppb_from(&clockhal_core::Frequency::from_hz(2_000_000_000).unwrap()) / 1000;
    /// assert!(err_ppm.unsigned_abs() <= c.uncertainty_ppm as u64 + 1);
    /// ```
    pub fn checked<R>(&self, f: impl FnOnce(&Self) -> R) -> Result<R, Overrun> {
        self.read();
        let before = self.overruns();
        let r = f(self);
        match self.overruns() - before {
            0 => Ok(r),
            reads => Err(Overrun { reads }),
        }
    }

    /// One latch-and-read under the lock, extended and gap-checked. The
    /// TSC brackets each latch, so the time between this latch and the
    /// previous one is known to lie between `lo` and `hi` TSC ticks, even
    /// when the vCPU was preempted inside a read (between a latch and its
    /// TSC read). A read that may have come late (`hi` past
    /// [`OVERRUN_TICKS`]) counts as an overrun (a calibration spanning it is
    /// not trusted) and is placed by that range
    /// ([`WrapExtender::extend_after`]): read 27-55 ms after the previous
    /// one it moves on instead of holding for up to 27 ms (a loaded host's
    /// preempted vCPU), and whole wraps missed are counted where the range
    /// makes them clear.
    fn read_locked(&self) -> u64 {
        let before = self.hw.rdtsc();
        let raw = pit::read_channel2(&self.hw);
        let after = self.hw.rdtsc();
        let prev_before = self.last_tsc_before.swap(before, Ordering::Relaxed);
        let prev_after = self.last_tsc.swap(after, Ordering::Relaxed);
        let (lo, hi) = (
            before.wrapping_sub(prev_after),
            after.wrapping_sub(prev_before),
        );
        // A "negative" gap is another CPU's TSC being behind: not an overrun.
        if self.overrun_tsc != 0 && hi > self.overrun_tsc && hi < 1 << 63 {
            self.overruns.fetch_add(1, Ordering::Relaxed);
            let ticks = |tsc: u64| {
                let t = tsc as u128 * OVERRUN_TICKS as u128 / self.overrun_tsc as u128;
                t.min(u64::MAX as u128) as u64
            };
            let lo = if lo < 1 << 63 { ticks(lo) } else { 0 };
            return self.ext.extend_after(up(raw), lo, ticks(hi));
        }
        self.ext.extend(up(raw))
    }
}

/// TSC ticks per `ticks` PIT ticks: the smallest of [`RATIO_ROUNDS`]
/// measurements over [`RATIO_TICKS`] each (0 if the TSC stood still).
fn tsc_per_ticks<H: Hardware>(hw: &H, ticks: u64) -> Result<u64, PitError> {
    let mut best = u64::MAX;
    for _ in 0..RATIO_ROUNDS {
        let start = up(pit::read_channel2(hw));
        let t0 = hw.rdtsc();
        let mut advanced = 0;
        for _ in 0..MAX_RATIO_READS {
            advanced = up(pit::read_channel2(hw)).wrapping_sub(start) % WRAP_TICKS;
            if advanced >= RATIO_TICKS {
                break;
            }
        }
        if advanced < RATIO_TICKS {
            return Err(PitError::TooSlow { ticks: advanced });
        }
        let tsc = hw.rdtsc().wrapping_sub(t0);
        let per = (tsc as u128 * ticks as u128 / advanced as u128).min(u64::MAX as u128);
        best = best.min(per as u64);
    }
    Ok(best)
}

impl<H: Hardware> ClockSource for Pit<H> {
    fn counter_domain(&self) -> Option<clockhal_core::CounterDomain> {
        Some(clockhal_core::CounterDomain::Pit)
    }
    fn name(&self) -> &'static str {
        "pit"
    }

    /// A counter latch command and two byte reads (three port accesses),
    /// serialised across CPUs. If the lock stays taken (another CPU is mid
    /// read, or an interrupt handler on this CPU interrupted a read) the
    /// last extended value is returned: time stalls for one read instead
    /// of spinning without bound. A read the TSC shows came more than half
    /// a wrap late is placed by the TSC rather than held.
    ///
    /// Interrupt-safe: yes (a bounded try-lock; the last value if taken).
    fn read(&self) -> u64 {
        for _ in 0..LOCK_SPINS {
            if self
                .busy
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                let v = self.read_locked();
                self.busy.store(false, Ordering::Release);
                return v;
            }
            core::hint::spin_loop();
        }
        self.ext.last()
    }

    fn frequency(&self) -> Frequency {
        PIT_FREQUENCY
    }

    fn quality(&self) -> Quality {
        if self.role.is_clock() {
            CLOCK_QUALITY
        } else {
            Quality::UNUSABLE
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
}

impl<H: Hardware> fmt::Debug for Pit<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pit")
            .field("role", &self.role)
            .field("overruns", &self.overruns())
            .finish()
    }
}
