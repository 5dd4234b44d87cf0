//! The hardware of a Linux process, and its monotonic clock, for
//! clockhal's hosted mode.
//!
//! **"One CPU" means one thread here.** Threads migrate between CPUs at any
//! instruction, so the per-CPU index [`HostedHw`] gives clockhal is the
//! calling thread's: up to 63 threads at a time get a slot of their own
//! (lock-free, like a kernel's per-CPU one), further ones share one updated
//! with locked instructions. A thread's slot is released when it exits.

use clockhal_core::{ClockSource, Frequency, Quality, ReadCost, Stability, PER_CPU_SLOTS};
use clockhal_x86::{cpu_local_max, CpuidResult, Hardware, MmioRegion, Msr, Native};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The host's `CLOCK_MONOTONIC_RAW` (not slewed by NTP) as a 1 GHz source.
#[derive(Clone, Copy, Debug, Default)]
pub struct OsClock;

const NS_PER_SEC: u64 = 1_000_000_000;
const GHZ: Frequency = match Frequency::from_hz(NS_PER_SEC) {
    Ok(f) => f,
    Err(_) => panic!("1 GHz is in range"),
};

impl OsClock {
    /// Nanoseconds of `CLOCK_MONOTONIC_RAW`.
    #[cfg(target_os = "linux")]
    pub fn now_ns(&self) -> u64 {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::MonotonicRaw);
        (t.tv_sec as u64)
            .saturating_mul(NS_PER_SEC)
            .saturating_add(t.tv_nsec as u64)
    }

    /// Nanoseconds of the host's monotonic clock (since first use; not
    /// Linux: `std::time::Instant`).
    #[cfg(not(target_os = "linux"))]
    pub fn now_ns(&self) -> u64 {
        static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        let e = *EPOCH.get_or_init(std::time::Instant::now);
        u64::try_from(e.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

impl ClockSource for OsClock {
    fn name(&self) -> &'static str {
        "monotonic-raw"
    }
    fn read(&self) -> u64 {
        self.now_ns()
    }
    fn frequency(&self) -> Frequency {
        GHZ
    }
    /// Below an invariant TSC (a system call per read), above nothing.
    fn quality(&self) -> Quality {
        Quality::new(300)
    }
    fn stability(&self) -> Stability {
        Stability::MONOTONIC_PER_CPU
            | Stability::MONOTONIC_ACROSS_CPUS
            | Stability::INVARIANT_RATE
            | Stability::SURVIVES_MIGRATION
    }
    fn read_cost(&self) -> ReadCost {
        ReadCost::NoTrap
    }
}

/// Hardware access for a Linux process: the real `rdtsc` family and CPUID
/// with the hypervisor hidden (CPUID.1:ECX bit 31 clear, no 0x4000xxxx
/// leaves: a process cannot use a hypervisor's MSRs, so no backend tries),
/// MSRs reading 0, no ports or MMIO (all ones), and the calling thread as
/// "the CPU" (see the module docs).
///
/// A process registers nothing with a hypervisor, so probes do not
/// exclude each other: every `HostedHw::new()` has a lease of its own.
#[derive(Clone, Copy, Debug)]
pub struct HostedHw {
    native: Native,
    lease: &'static AtomicBool,
    /// Per-instance, like the lease (leaked: a few instances per process).
    pool: &'static clockhal_core::SlotPool,
}

impl Default for HostedHw {
    fn default() -> Self {
        HostedHw::new()
    }
}

impl HostedHw {
    /// The process's hardware.
    pub fn new() -> HostedHw {
        HostedHw {
            native: Native::hosted(),
            // One flag per hosted machine (a few bytes per probe, for the
            // life of the process).
            lease: Box::leak(Box::new(AtomicBool::new(false))),
            pool: Box::leak(Box::new(clockhal_core::SlotPool::new())),
        }
    }
}

/// Per-thread slot indices: bit `i` set while a live thread holds slot `i`.
static SLOTS_TAKEN: AtomicU64 = AtomicU64::new(0);
/// Slots a thread may own; the last one is shared by everyone else.
const OWN_SLOTS: usize = if PER_CPU_SLOTS - 1 < 64 {
    PER_CPU_SLOTS - 1
} else {
    63
};

struct ThreadSlot(usize);

impl ThreadSlot {
    fn claim() -> ThreadSlot {
        let mut taken = SLOTS_TAKEN.load(Ordering::Relaxed);
        loop {
            let free = (!taken).trailing_zeros() as usize;
            if free >= OWN_SLOTS {
                return ThreadSlot(PER_CPU_SLOTS - 1);
            }
            match SLOTS_TAKEN.compare_exchange_weak(
                taken,
                taken | 1 << free,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return ThreadSlot(free),
                Err(t) => taken = t,
            }
        }
    }
}

impl Drop for ThreadSlot {
    fn drop(&mut self) {
        if self.0 < OWN_SLOTS {
            SLOTS_TAKEN.fetch_and(!(1 << self.0), Ordering::AcqRel);
        }
    }
}

std::thread_local! {
    static SLOT: ThreadSlot = ThreadSlot::claim();
}

fn thread_slot() -> usize {
    SLOT.try_with(|s| s.0).unwrap_or(PER_CPU_SLOTS - 1)
}

impl Hardware for HostedHw {
    #[inline(always)]
    fn rdtsc(&self) -> u64 {
        self.native.rdtsc()
    }
    #[inline(always)]
    fn rdtsc_ordered(&self) -> u64 {
        self.native.rdtsc_ordered()
    }
    #[inline(always)]
    fn rdtscp(&self) -> (u64, u32) {
        self.native.rdtscp()
    }
    fn cpuid(&self, leaf: u32, subleaf: u32) -> CpuidResult {
        if (0x4000_0000..0x5000_0000).contains(&leaf) {
            return CpuidResult::default();
        }
        let mut r = self.native.cpuid(leaf, subleaf);
        if leaf == 1 {
            r.ecx &= !(1 << 31);
        }
        r
    }
    fn rdmsr(&self, msr: Msr) -> u64 {
        let _ = msr;
        0
    }
    /// A process has no MSRs: `try_rdmsr`'s `None` (the trait's default) is
    /// the truth, as for `Native::hosted()`.
    fn recovers_msr_faults(&self) -> bool {
        true
    }
    /// Ignored: a process has no MSRs (the trait's `unsafe` is for real
    /// hardware).
    unsafe fn wrmsr(&self, msr: Msr, value: u64) {
        let _ = (msr, value);
    }
    fn inb(&self, port: u16) -> u8 {
        let _ = port;
        u8::MAX
    }
    /// Ignored: a process has no ports.
    unsafe fn outb(&self, port: u16, value: u8) {
        let _ = (port, value);
    }
    fn inl(&self, port: u16) -> u32 {
        let _ = port;
        u32::MAX
    }
    fn mmio_read32(&self, _: MmioRegion, _: usize) -> u32 {
        u32::MAX
    }
    fn mmio_read64(&self, _: MmioRegion, _: usize) -> u64 {
        u64::MAX
    }
    fn mmio_write32(&self, _: MmioRegion, _: usize, _: u32) {}
    fn mmio_write64(&self, _: MmioRegion, _: usize, _: u64) {}
    #[inline(always)]
    fn cpu_index(&self) -> usize {
        thread_slot()
    }
    #[inline(always)]
    fn fetch_max_local(&self, cell: &AtomicU64, value: u64) -> u64 {
        // A thread's own slot is written by that thread only (and its
        // signal handlers, which an unlocked cmpxchg is atomic against).
        if thread_slot() < OWN_SLOTS {
            cpu_local_max(cell, value)
        } else {
            cell.fetch_max(value, Ordering::AcqRel).max(value)
        }
    }
    fn clock_lease(&self) -> &AtomicBool {
        self.lease
    }
    #[inline(always)]
    fn slot_pool(&self) -> &clockhal_core::SlotPool {
        self.pool
    }
}
