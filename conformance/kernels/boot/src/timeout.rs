//! Coarse TSC deadlines for bounded waits (AP start-up, mailboxes, locks).
//!
//! Only needs to be right within a small factor: the TSC rate comes from CPUID
//! (hypervisor leaf 0x40000010, leaf 0x15, leaf 0x16) when offered, otherwise
//! it is assumed to be 4 GHz, which makes waits longer, never shorter, on the
//! usual slower TSCs. Not a clock: clockhal is what measures time properly.

use core::sync::atomic::{AtomicU64, Ordering};

use crate::cpu;

/// Rate used when CPUID does not say.
const FALLBACK_TSC_KHZ: u64 = 4_000_000;

/// Cached estimate; 0 = not computed yet.
static TSC_KHZ: AtomicU64 = AtomicU64::new(0);

fn estimate_tsc_khz() -> u64 {
    // KVM/VMware timing leaf; only valid when the hypervisor range covers it
    // (above its max CPUID returns garbage).
    if cpu::cpuid(1, 0).ecx & (1 << 31) != 0 && cpu::cpuid(0x4000_0000, 0).eax >= 0x4000_0010 {
        let khz = u64::from(cpu::cpuid(0x4000_0010, 0).eax);
        if khz != 0 {
            return khz;
        }
    }
    let max = cpu::max_leaf();
    if max >= 0x15 {
        let l = cpu::cpuid(0x15, 0);
        if l.eax != 0 && l.ebx != 0 && l.ecx != 0 {
            return u64::from(l.ecx) * u64::from(l.ebx) / u64::from(l.eax) / 1000;
        }
    }
    if max >= 0x16 {
        let mhz = u64::from(cpu::cpuid(0x16, 0).eax & 0xffff);
        if mhz != 0 {
            return mhz * 1000;
        }
    }
    FALLBACK_TSC_KHZ
}

fn tsc_khz() -> u64 {
    let khz = TSC_KHZ.load(Ordering::Relaxed);
    if khz != 0 {
        return khz;
    }
    let khz = estimate_tsc_khz();
    TSC_KHZ.store(khz, Ordering::Relaxed);
    khz
}

/// A point in (approximate) time after which a wait gives up.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deadline {
    end: u64,
}

impl Deadline {
    /// About `ms` milliseconds from now.
    pub(crate) fn after_ms(ms: u64) -> Self {
        Self::after_us(ms.saturating_mul(1000))
    }

    /// About `us` microseconds from now.
    pub(crate) fn after_us(us: u64) -> Self {
        let cycles = us.saturating_mul(tsc_khz()) / 1000;
        Deadline {
            end: cpu::rdtsc().saturating_add(cycles),
        }
    }

    /// Whether the deadline has passed.
    pub(crate) fn expired(&self) -> bool {
        cpu::rdtsc() >= self.end
    }
}

/// Busy-waits about `us` microseconds (never less, if the estimate is not
/// below the real TSC rate).
pub(crate) fn delay_us(us: u64) {
    let deadline = Deadline::after_us(us);
    while !deadline.expired() {
        core::hint::spin_loop();
    }
}
