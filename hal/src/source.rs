//! What a clock source is: the [`ClockSource`] trait and its descriptors.

use crate::Frequency;
use core::fmt;

/// A free-running counter that clockhal can read, scale and rank.
///
/// Object safe: an OS keeps the chosen one as `&'static dyn ClockSource`.
///
/// Contract for implementors:
/// - [`read`](Self::read) is infallible once the source is constructed, never
///   goes backwards on one CPU and never wraps in practice (narrow hardware
///   counters are extended to 64 bits in software, see
///   [`WrapExtender`](crate::WrapExtender)).
/// - [`frequency`](Self::frequency) is the exact rate of `read()`'s ticks.
/// - [`quality`](Self::quality) and [`stability`](Self::stability) describe
///   this source *on this machine*, decided at probe time (and possibly
///   lowered later, e.g. by a watchdog).
///
/// ```
/// use clockhal_core::{ClockSource, Frequency, Quality, ReadCost, Stability};
/// use core::sync::atomic::{AtomicU64, Ordering};
///
/// /// A test clock that advances by one tick per read.
/// struct Counter(AtomicU64);
/// impl ClockSource for Counter {
///     fn name(&self) -> &'static str { "counter" }
///     fn read(&self) -> u64 { self.0.fetch_add(1, Ordering::Relaxed) }
///     fn frequency(&self) -> Frequency { Frequency::from_hz(1_000_000).unwrap() }
///     fn quality(&self) -> Quality { Quality::new(1) }
///     fn stability(&self) -> Stability { Stability::MONOTONIC_PER_CPU }
///     fn read_cost(&self) -> ReadCost { ReadCost::NoTrap }
/// }
/// let c: &dyn ClockSource = &Counter(AtomicU64::new(0));
/// assert!(c.read() < c.read());
/// ```
pub trait ClockSource: Sync {
    /// Short stable identifier (`"kvmclock"`, `"hpet"`, ...).
    /// Interrupt-safe: yes.
    fn name(&self) -> &'static str;

    /// The current counter value in ticks of [`frequency`](Self::frequency).
    /// Interrupt-safe: yes (clockhal's backends; an implementation must never wait for a lock).
    fn read(&self) -> u64;

    /// Exact tick rate.
    /// Interrupt-safe: yes.
    fn frequency(&self) -> Frequency;

    /// Rating used by [`select`](crate::select); see [`Quality`] for the bands.
    /// Interrupt-safe: yes.
    fn quality(&self) -> Quality;

    /// Properties that matter for choosing and trusting this source.
    /// Interrupt-safe: yes.
    fn stability(&self) -> Stability;

    /// What one `read()` costs in hypervisor exits.
    /// Interrupt-safe: yes.
    fn read_cost(&self) -> ReadCost;

    /// For software-extended counters: the longest interval, in ticks, that
    /// may pass between two reads without losing a wrap. `None` when any
    /// interval is fine.
    /// Interrupt-safe: yes.
    fn max_read_interval(&self) -> Option<u64> {
        None
    }

    /// [`read`](Self::read) after a gap: about `span` ticks of this counter
    /// passed since its previous read, within `within` ticks, as an
    /// independent counter measured (for a software-extended counter left
    /// unread longer than [`max_read_interval`](Self::max_read_interval):
    /// its lost wraps are recovered from `span` where that bound is at most
    /// an eighth of a wrap, [`WrapExtender::extend_spanning`](crate::WrapExtender::extend_spanning)).
    /// Counters without an extension just read.
    ///
    /// Interrupt-safe: as [`read`](Self::read).
    fn read_spanning(&self, span: u64, within: u64) -> u64 {
        let _ = (span, within);
        self.read()
    }

    /// [`read`](Self::read) after a gap whose wraps nothing could place: a
    /// software-extended counter takes its raw count as the first value of
    /// its phase after its last one ([`WrapExtender::extend_forward`](crate::WrapExtender::extend_forward)),
    /// losing the gap's whole wraps rather than holding until its raw count
    /// passes its last value. Counters without an extension just read.
    ///
    /// Interrupt-safe: as [`read`](Self::read).
    fn read_forward(&self) -> u64 {
        self.read()
    }

    /// [`read`](Self::read) where an independent counter estimates this
    /// one's count now (`estimate`, on the scale of `read`'s values: the
    /// TSC since an earlier reading of this source on the same CPU, with
    /// that measure's error bound). A software-extended counter places its
    /// raw reading at the wrap nearest the estimate where they agree within
    /// that bound and an eighth of a wrap
    /// ([`WrapExtender::extend_near`](crate::WrapExtender::extend_near)),
    /// so wraps a gap in the reads hid are counted, and says whether the
    /// result is its count now ([`Extended::current`](crate::Extended)).
    /// Counters without an extension just read (always current).
    ///
    /// Interrupt-safe: as [`read`](Self::read).
    fn read_near(&self, estimate: Option<crate::Estimate>) -> crate::Extended {
        let _ = estimate;
        crate::Extended {
            ticks: self.read(),
            current: true,
        }
    }

    /// The counter this source reads, if it says (a source reading the
    /// TSC through a map is in [`CounterDomain::Tsc`](crate::consensus::CounterDomain)):
    /// sources of one domain fail together, so they vote once. `None`: the
    /// caller decides (an OS-supplied source: a domain of its own).
    /// Interrupt-safe: yes.
    fn counter_domain(&self) -> Option<crate::consensus::CounterDomain> {
        None
    }

    /// What ranking needs: rating, exit cost, flags and rate
    /// ([`select`](crate::select)).
    /// Interrupt-safe: yes.
    fn descriptor(&self) -> crate::select::Descriptor {
        crate::select::Descriptor {
            rating: self.quality(),
            read_cost: self.read_cost(),
            stability: self.stability(),
            frequency: self.frequency(),
        }
    }
}

impl<T: ClockSource + ?Sized> ClockSource for &T {
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn read(&self) -> u64 {
        (**self).read()
    }
    fn frequency(&self) -> Frequency {
        (**self).frequency()
    }
    fn quality(&self) -> Quality {
        (**self).quality()
    }
    fn stability(&self) -> Stability {
        (**self).stability()
    }
    fn read_cost(&self) -> ReadCost {
        (**self).read_cost()
    }
    fn max_read_interval(&self) -> Option<u64> {
        (**self).max_read_interval()
    }
    fn read_spanning(&self, span: u64, within: u64) -> u64 {
        (**self).read_spanning(span, within)
    }
    fn read_forward(&self) -> u64 {
        (**self).read_forward()
    }
    fn read_near(&self, estimate: Option<crate::Estimate>) -> crate::Extended {
        (**self).read_near(estimate)
    }
    fn counter_domain(&self) -> Option<crate::consensus::CounterDomain> {
        (**self).counter_domain()
    }
}

/// A source's rating. Higher is better; `<= 0` is never chosen automatically
/// (the source stays usable by explicit choice, like FreeBSD's negative
/// `tc_quality`).
///
/// Bands (modelled on Linux's clocksource rating guide, shifted so that the
/// hypervisor-exit cost and migration safety decide the order):
///
/// | band | meaning | clockhal backends |
/// |---|---|---|
/// | `..=0` | failed a check or unfit: never auto-selected | broken TSC (-100) |
/// | 1..=99 | usable only as a last resort | |
/// | 100..=199 | every read traps, slow | ACPI PM (150 fast, 120 verified) |
/// | 200..=299 | every read traps, but fine-grained or exact | HPET 250, Hyper-V MSR 280 |
/// | 300..=399 | no exits, but not migration-safe | TSC 300..=390 |
/// | 400..=499 | no exits and migration-safe (paravirtual) | kvmclock 400, Hyper-V page 450 |
/// | 500.. | reserved for an OS's policy override | TSC with a no-migration policy 500 |
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Quality(i32);

impl Quality {
    /// Never selected automatically.
    pub const UNUSABLE: Quality = Quality(-100);

    /// A rating of `value`.
    /// Interrupt-safe: yes.
    pub const fn new(value: i32) -> Quality {
        Quality(value)
    }

    /// The raw number.
    /// Interrupt-safe: yes.
    pub const fn get(self) -> i32 {
        self.0
    }

    /// Whether automatic selection may pick this source.
    /// Interrupt-safe: yes.
    pub const fn auto_selectable(self) -> bool {
        self.0 > 0
    }
}

impl fmt::Display for Quality {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

bitflags::bitflags! {
    /// What a source guarantees on this machine.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct Stability: u32 {
        /// Consecutive reads on one CPU never go backwards.
        const MONOTONIC_PER_CPU = 1 << 0;
        /// Reads on different CPUs are ordered too (a read that happens after
        /// another, on any CPU, is not smaller).
        const MONOTONIC_ACROSS_CPUS = 1 << 1;
        /// The rate does not change with P-/C-states or host frequency.
        const INVARIANT_RATE = 1 << 2;
        /// Stays correct across live migration to a host with another rate.
        const SURVIVES_MIGRATION = 1 << 3;
        /// Keeps counting while the VM is paused (time jumps at resume).
        const COUNTS_WHILE_PAUSED = 1 << 4;
        /// Every read is a hypervisor exit (MMIO, port or MSR).
        const TRAPS_EVERY_READ = 1 << 5;
        /// The hardware counter is narrower than 64 bits and extended in
        /// software: see [`ClockSource::max_read_interval`].
        const SOFTWARE_EXTENDED = 1 << 6;
        /// Needs setup on every CPU before reads there are valid.
        const PER_CPU_SETUP = 1 << 7;
    }
}

impl Stability {
    /// What a platform device counter guarantees (the HPET, the ACPI PM
    /// timer, the PIT): one fixed-rate counter for every CPU, emulated by
    /// a VMM at its nominal rate wherever the VM runs; each read exits to
    /// the hypervisor when there is one; `extended` when narrower than 64
    /// bits.
    /// Interrupt-safe: yes.
    ///
    /// ```
    /// use clockhal_core::Stability;
    /// let pm = Stability::device_counter(true, true);
    /// assert_eq!(pm.to_string(), "mono,smp,inv,migr,trap,ext");
    /// assert!(!Stability::device_counter(false, false).contains(Stability::TRAPS_EVERY_READ));
    /// ```
    pub const fn device_counter(under_hypervisor: bool, extended: bool) -> Stability {
        let mut s = Stability::MONOTONIC_PER_CPU
            .union(Stability::MONOTONIC_ACROSS_CPUS)
            .union(Stability::INVARIANT_RATE)
            .union(Stability::SURVIVES_MIGRATION);
        if under_hypervisor {
            s = s.union(Stability::TRAPS_EVERY_READ);
        }
        if extended {
            s = s.union(Stability::SOFTWARE_EXTENDED);
        }
        s
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for Stability {
    fn format(&self, f: defmt::Formatter) {
        defmt::write!(f, "Stability({=u32:#x})", self.bits())
    }
}

impl fmt::Display for Stability {
    /// Short tags: `mono,smp,inv,migr,paused,trap,ext,percpu`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const TAGS: [(Stability, &str); 8] = [
            (Stability::MONOTONIC_PER_CPU, "mono"),
            (Stability::MONOTONIC_ACROSS_CPUS, "smp"),
            (Stability::INVARIANT_RATE, "inv"),
            (Stability::SURVIVES_MIGRATION, "migr"),
            (Stability::COUNTS_WHILE_PAUSED, "paused"),
            (Stability::TRAPS_EVERY_READ, "trap"),
            (Stability::SOFTWARE_EXTENDED, "ext"),
            (Stability::PER_CPU_SETUP, "percpu"),
        ];
        let mut first = true;
        for (flag, tag) in TAGS {
            if self.contains(flag) {
                if !first {
                    f.write_str(",")?;
                }
                f.write_str(tag)?;
                first = false;
            }
        }
        if first {
            f.write_str("-")?;
        }
        Ok(())
    }
}

/// Hypervisor exits per read: the dominant cost in a VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ReadCost {
    /// Memory and `rdtsc` only (TSC, kvmclock, Hyper-V page).
    NoTrap,
    /// One exit (HPET MMIO, PM timer port, Hyper-V MSR).
    OneTrap,
    /// Several exits (PM timer verified read: three port reads).
    SeveralTraps,
}

impl fmt::Display for ReadCost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReadCost::NoTrap => "no-trap",
            ReadCost::OneTrap => "one-trap",
            ReadCost::SeveralTraps => "several-traps",
        })
    }
}
