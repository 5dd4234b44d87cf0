//! The hardware of a Linux process, and its monotonic clock, for
//! clockhal's hosted mode.
//!
//! **"One CPU" means one thread here.** Threads migrate between CPUs at any
//! instruction, so the per-CPU index [`HostedHw`] gives clockhal is the
//! calling thread's: up to 63 threads at a time get a slot of their own
//! (lock-free, like a kernel's per-CPU one), further ones share one updated
//! with locked instructions. A thread's slot is released when it exits.
//! Reads are async-signal-safe, a thread's first included (it claims the
//! slot with atomics and one `pthread_setspecific`, no allocation): signal
//! handlers are a thread's interrupts here.

use clockhal_core::{ClockSource, Frequency, Quality, ReadCost, Stability, PER_CPU_SLOTS};
use clockhal_x86::{cpu_local_max, CpuidResult, Hardware, MmioRegion, Msr, Native};
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

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
    fn counter_domain(&self) -> Option<clockhal_core::CounterDomain> {
        Some(clockhal_core::CounterDomain::HostOs)
    }
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
        init_release_key();
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

/// The shared slot of the threads beyond [`OWN_SLOTS`].
const SHARED_SLOT: usize = PER_CPU_SLOTS - 1;
/// A thread's [`SLOT`] before its first read.
const UNCLAIMED: usize = usize::MAX;

/// Frees slot index `i` for another thread (the shared one is never held).
fn give_back_slot(i: usize) {
    if i < OWN_SLOTS {
        SLOTS_TAKEN.fetch_and(!(1 << i), Ordering::AcqRel);
    }
}

/// Claims a free slot index, or the shared one when all are taken.
fn claim_slot() -> usize {
    let mut taken = SLOTS_TAKEN.load(Ordering::Relaxed);
    loop {
        let free = (!taken).trailing_zeros() as usize;
        if free >= OWN_SLOTS {
            return SHARED_SLOT;
        }
        match SLOTS_TAKEN.compare_exchange_weak(
            taken,
            taken | 1 << free,
            Ordering::AcqRel,
            Ordering::Relaxed,
        ) {
            Ok(_) => return free,
            Err(t) => taken = t,
        }
    }
}

/// The process-wide pthread key whose destructor gives an exiting thread's
/// slot back (`None` if the key could not be created: then every thread
/// shares the last slot). A pthread key, not a Rust thread-local with a
/// destructor: glibc registers those with `__cxa_thread_atexit_impl`,
/// which allocates, and a thread's first read may come from a signal
/// handler that interrupted `malloc` (a deadlock). Setting a key's value
/// takes no lock and, for the first 32 keys of a process, allocates nothing.
static RELEASE_KEY: OnceLock<Option<libc::pthread_key_t>> = OnceLock::new();

/// Creates [`RELEASE_KEY`] (from [`HostedHw::new`]: never in a signal
/// handler, and before any read, which needs a `HostedHw`).
fn init_release_key() {
    RELEASE_KEY.get_or_init(|| {
        let mut key: libc::pthread_key_t = 0;
        // SAFETY: `key` is a valid place for the new key; the destructor is
        // an `extern "C"` function that never unwinds.
        let created = unsafe { libc::pthread_key_create(&mut key, Some(release_slot)) };
        (created == 0).then_some(key)
    });
}

/// The key's destructor: the exiting thread's value is its slot + 1.
/// Later reads on the thread (from other destructors) use the shared slot.
extern "C" fn release_slot(value: *mut libc::c_void) {
    SLOT.with(|s| s.store(SHARED_SLOT, Ordering::Relaxed));
    give_back_slot((value as usize).wrapping_sub(1));
}

std::thread_local! {
    // Const-initialised and without a destructor: a read is one
    // thread-local load (no lazy-init state), possible at any time of the
    // thread's life, destructors included. Atomic only so that a signal
    // handler that interrupts the claim cannot claim a second slot.
    static SLOT: AtomicUsize = const { AtomicUsize::new(UNCLAIMED) };
}

/// The calling thread's slot index (claimed at its first read).
#[inline(always)]
fn thread_slot() -> usize {
    match SLOT.with(|s| s.load(Ordering::Relaxed)) {
        UNCLAIMED => claim_thread_slot(),
        i => i,
    }
}

/// The first read of a thread: async-signal-safe (atomics and one
/// `pthread_setspecific`), so it may be a signal handler's.
#[cold]
#[inline(never)]
fn claim_thread_slot() -> usize {
    let key = RELEASE_KEY.get().copied().flatten();
    let i = if key.is_some() {
        claim_slot()
    } else {
        SHARED_SLOT
    };
    // A handler that interrupted this claim and claimed first wins.
    if let Err(winner) =
        SLOT.with(|s| s.compare_exchange(UNCLAIMED, i, Ordering::Relaxed, Ordering::Relaxed))
    {
        give_back_slot(i);
        return winner;
    }
    if let (Some(key), true) = (key, i < OWN_SLOTS) {
        // SAFETY: `key` was created by `init_release_key` and is never
        // deleted; the value is an integer, never dereferenced.
        let set = unsafe { libc::pthread_setspecific(key, (i + 1) as *const libc::c_void) };
        if set != 0 {
            // No release at exit: not a slot of its own, then.
            SLOT.with(|s| s.store(SHARED_SLOT, Ordering::Relaxed));
            give_back_slot(i);
            return SHARED_SLOT;
        }
    }
    i
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
    /// A thread's index is its own for its whole life.
    #[inline(always)]
    fn cpu_index_is_fixed(&self) -> bool {
        true
    }
    /// clockhal calls it only on the calling thread's own slot (the shared
    /// last slot, of the threads beyond [`PER_CPU_SLOTS`]` - 1`, is raised
    /// with a locked `fetch_max` by `clockhal_core::PerCpuSlots`): written
    /// by that thread only, and by its signal handlers, which an unlocked
    /// `cmpxchg` is atomic against. Like [`Native`]'s, not for a cell
    /// another thread writes.
    #[inline(always)]
    fn fetch_max_local(&self, cell: &AtomicU64, value: u64) -> u64 {
        cpu_local_max(cell, value)
    }
    fn clock_lease(&self) -> &AtomicBool {
        self.lease
    }
    #[inline(always)]
    fn slot_pool(&self) -> &clockhal_core::SlotPool {
        self.pool
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Barrier, Mutex};

    /// The slots are process-wide: these tests take turns.
    static SLOTS: Mutex<()> = Mutex::new(());

    #[test]
    fn exited_threads_give_their_slots_back() {
        // More threads one after another than there are slots: each gets
        // one of its own, because the one before gave its slot back.
        let _turn = SLOTS.lock().unwrap_or_else(|e| e.into_inner());
        let hw = HostedHw::new();
        for _ in 0..3 * OWN_SLOTS {
            let i = std::thread::scope(|s| s.spawn(|| hw.cpu_index()).join().unwrap());
            assert!(i < OWN_SLOTS, "slot {i}");
        }
    }

    #[test]
    fn threads_beyond_the_own_slots_share_the_last_and_own_ones_are_unique() {
        let _turn = SLOTS.lock().unwrap_or_else(|e| e.into_inner());
        let hw = HostedHw::new();
        let n = OWN_SLOTS + 8;
        let barrier = Barrier::new(n);
        let mut seen: Vec<usize> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..n)
                .map(|_| {
                    s.spawn(|| {
                        let i = hw.cpu_index();
                        // Stable for the thread's life.
                        assert_eq!(hw.cpu_index(), i);
                        assert!(hw.cpu_index_is_fixed());
                        // Every thread holds its slot until all have one.
                        barrier.wait();
                        i
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        seen.sort_unstable();
        let own: Vec<_> = seen.iter().copied().filter(|&i| i < OWN_SLOTS).collect();
        let mut unique = own.clone();
        unique.dedup();
        assert_eq!(own, unique, "two live threads shared an own slot");
        assert_eq!(own.len(), OWN_SLOTS);
        assert_eq!(seen.iter().filter(|&&i| i == SHARED_SLOT).count(), 8);
    }
}
