//! The pvclock wall clock: Unix time at kvmclock 0.

use crate::sync::{
    fence,
    Ordering::{Acquire, Relaxed},
};
use crate::MAX_READ_ATTEMPTS;
use clockhal_x86::paravirt::PvclockWallClock;

const NS_PER_SEC: u64 = 1_000_000_000;

/// Wall-clock time at which kvmclock read 0 (the host's boot epoch for
/// this guest), as KVM last wrote it.
///
/// ```
/// use clockhal_kvmclock::WallClock;
/// let w = WallClock { sec: 1_700_000_000, nsec: 500 };
/// assert_eq!(w.unix_ns(1_000), 1_700_000_000_000_000_000 + 1_500);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct WallClock {
    /// Seconds since the Unix epoch.
    pub sec: u32,
    /// Nanoseconds part (below 10^9).
    pub nsec: u32,
}

impl WallClock {
    /// Unix time in ns at kvmclock 0.
    /// Interrupt-safe: yes.
    pub const fn epoch_ns(&self) -> u64 {
        self.sec as u64 * NS_PER_SEC + self.nsec as u64
    }

    /// Unix time in ns when kvmclock reads `clock_ns` (saturating).
    /// Interrupt-safe: yes.
    pub const fn unix_ns(&self, clock_ns: u64) -> u64 {
        self.epoch_ns().saturating_add(clock_ns)
    }

    /// Reads the structure under its seqlock (bounded). `None` if the
    /// version stays odd, is 0 (never written), or `nsec` is not below 10^9.
    pub(crate) fn read(w: &PvclockWallClock) -> Option<WallClock> {
        for _ in 0..MAX_READ_ATTEMPTS {
            let v = w.version.load(Acquire);
            if v & 1 == 0 {
                let sec = w.sec.load(Relaxed);
                let nsec = w.nsec.load(Relaxed);
                fence(Acquire);
                if w.version.load(Relaxed) == v {
                    return (v != 0 && (nsec as u64) < NS_PER_SEC)
                        .then_some(WallClock { sec, nsec });
                }
            }
            core::hint::spin_loop();
        }
        None
    }
}
