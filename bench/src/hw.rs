//! A user-space stand-in for a hypervisor's CPUID and MSRs, with the real
//! TSC.
//!
//! The kvmclock and Hyper-V backends are built by probing: CPUID must name
//! the hypervisor and its clock features, and the probe registers the clock
//! memory with an MSR write. A host tool cannot do either for real (and
//! need not: it fills the page itself, with `PvclockVcpuTimeInfo::publish`
//! and `HvReferenceTscPage::publish` from clockhal-x86). So the
//! bench builds those backends on [`UserHw`]: `rdtsc`, `rdtsc_ordered` and
//! `rdtscp` are the real instructions ([`Native::hosted`]), CPUID is real
//! except for the hypervisor leaves, which present a minimal KVM or Hyper-V
//! ([`Persona`]), and MSRs read 0 and drop writes. The read paths being
//! timed are therefore exactly the backends' own, on the real TSC.
//!
//! Every `UserHw` value is a machine of its own: its own clock lease and
//! per-CPU slot pool (leaked, a few dozen KiB per row), so the bench can keep
//! one probed clock per row alive at the same time.

use clockhal_core::SlotPool;
use clockhal_x86::cpuid::{HYPERV_SIGNATURE, KVM_SIGNATURE};
use clockhal_x86::{
    CpuIndex, CpuIndexFn, CpuidResult, Hardware, MmioRegion, Msr, Native, NoCpuIndex, OneCpu,
};
use core::sync::atomic::{AtomicBool, AtomicU64};

/// Which hypervisor [`UserHw`]'s CPUID presents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persona {
    /// KVM with CLOCKSOURCE, CLOCKSOURCE2 and CLOCKSOURCE_STABLE_BIT.
    Kvm,
    /// Hyper-V ("Hv#1") offering only the reference TSC page (no
    /// TIME_REF_COUNT, so no MSR is ever read for time).
    Hyperv,
    /// No hypervisor (CPUID.1:ECX bit 31 clear, no 0x4000xxxx leaves): only
    /// the TSC is on offer, as on bare metal.
    BareMetal,
}

/// Real TSC, real CPUID outside the hypervisor leaves, inert MSRs.
///
/// `RDTSCP`: `rdtsc_ordered` is a bare `rdtscp` instead of `Native`'s
/// (a type parameter, so the rows' read paths carry no test for it). `C`:
/// how `Native` learns the calling CPU, as for a kernel.
#[derive(Clone, Copy, Debug)]
pub struct UserHw<const RDTSCP: bool = false, C: CpuIndex = NoCpuIndex> {
    native: Native<C>,
    persona: Persona,
    lease: &'static AtomicBool,
    pool: &'static SlotPool,
}

impl UserHw {
    /// The stand-in for `persona`; `rdtsc_ordered` is `Native`'s
    /// (`rdtscp` where available, else `lfence; rdtsc`, `mfence; rdtsc` on AMD).
    /// No CPU index (`Native::hosted()`): per-CPU floors are raised with
    /// locked instructions, so any number of threads may read.
    pub fn new(persona: Persona) -> UserHw {
        UserHw {
            native: Native::hosted(),
            persona,
            lease: Box::leak(Box::new(AtomicBool::new(false))),
            pool: Box::leak(Box::new(SlotPool::new())),
        }
    }

    /// The same for an SMP kernel with a per-CPU index
    /// (`Native::with_cpu_index`): each bench thread is one "CPU", with a
    /// per-CPU slot of its own, as each CPU of a kernel has.
    pub fn per_thread(persona: Persona) -> UserHw<false, CpuIndexFn> {
        UserHw::new(persona).with_cpu(CpuIndexFn(thread_index))
    }

    /// The same for an SMP kernel whose CPU index is one load
    /// (`Native::with_cpu` with a [`CpuIndex`] that reads a
    /// const-initialised thread-local, as a kernel's `gs:`-relative
    /// per-CPU field): a read takes it before the TSC read and again after
    /// it (the migration re-check), inlined. Every thread is "CPU 0": read
    /// it from the bench's pinned main thread only (per-CPU state is
    /// updated without locks).
    /// Interrupt-safe: no (allocates the lease and the slot pool).
    pub fn smp(persona: Persona) -> UserHw<false, ThreadLocalCpu> {
        // A store LLVM cannot see past: without one, the never-written
        // thread-local folds to the constant 0 (no load at all).
        CPU.with(|c| c.set(std::hint::black_box(0)));
        UserHw::new(persona).with_cpu(ThreadLocalCpu)
    }

    /// The same for a one-CPU kernel (`Native::new().single_cpu()`): the
    /// per-CPU floor is raised with an unlocked, interrupt-safe `cmpxchg`.
    /// Read it from one thread only (the bench's pinned main thread).
    pub fn one_cpu(persona: Persona) -> UserHw<false, OneCpu> {
        UserHw::new(persona).with_cpu(OneCpu)
    }

    /// The same with the CPU-index strategy `cpu`.
    fn with_cpu<C: CpuIndex>(self, cpu: C) -> UserHw<false, C> {
        self.with_native(self.native.with_cpu(cpu))
    }
}

impl<const R: bool, C: CpuIndex> UserHw<R, C> {
    /// The same machine (persona, lease, pool) on another `Native` token.
    fn with_native<const R2: bool, D: CpuIndex>(self, native: Native<D>) -> UserHw<R2, D> {
        UserHw {
            native,
            persona: self.persona,
            lease: self.lease,
            pool: self.pool,
        }
    }
}

impl<C: CpuIndex> UserHw<false, C> {
    /// This stand-in, but `rdtsc_ordered` is a bare `rdtscp` (what Linux's
    /// `rdtsc_ordered` and its vDSO use when the CPU has it): for measuring
    /// what `Native`'s run-time choice of the fence costs. `None` without
    /// RDTSCP.
    pub fn with_rdtscp_ordering(self) -> Option<UserHw<true, C>> {
        clockhal_x86::cpuid::has_rdtscp(&self.native).then(|| self.with_native(self.native))
    }
}

/// EBX, ECX, EDX of a 12-byte signature.
fn signature(max_leaf: u32, sig: &[u8; 12]) -> CpuidResult {
    let word = |i: usize| u32::from_le_bytes([sig[i], sig[i + 1], sig[i + 2], sig[i + 3]]);
    CpuidResult {
        eax: max_leaf,
        ebx: word(0),
        ecx: word(4),
        edx: word(8),
    }
}

impl<const RDTSCP: bool, C: CpuIndex> Hardware for UserHw<RDTSCP, C> {
    #[inline(always)]
    fn rdtsc(&self) -> u64 {
        self.native.rdtsc()
    }
    #[inline(always)]
    fn rdtsc_ordered(&self) -> u64 {
        // rdtscp waits for every earlier instruction and load, like the
        // fence it replaces.
        if RDTSCP {
            self.native.rdtscp().0
        } else {
            self.native.rdtsc_ordered()
        }
    }
    #[inline(always)]
    fn rdtscp(&self) -> (u64, u32) {
        self.native.rdtscp()
    }
    #[inline(always)]
    fn cpu_index(&self) -> usize {
        self.native.cpu_index()
    }
    #[inline(always)]
    fn cpu_index_is_fixed(&self) -> bool {
        self.native.cpu_index_is_fixed()
    }
    #[inline(always)]
    fn fetch_max_local(&self, cell: &AtomicU64, value: u64) -> u64 {
        self.native.fetch_max_local(cell, value)
    }
    fn clock_lease(&self) -> &AtomicBool {
        self.lease
    }
    #[inline(always)]
    fn slot_pool(&self) -> &SlotPool {
        self.pool
    }
    fn cpuid(&self, leaf: u32, subleaf: u32) -> CpuidResult {
        const NONE: CpuidResult = CpuidResult {
            eax: 0,
            ebx: 0,
            ecx: 0,
            edx: 0,
        };
        match (self.persona, leaf) {
            (persona, 1) => {
                let mut r = self.native.cpuid(1, subleaf);
                if persona == Persona::BareMetal {
                    r.ecx &= !(1 << 31);
                } else {
                    r.ecx |= 1 << 31; // hypervisor present
                }
                r
            }
            (Persona::Kvm, 0x4000_0000) => signature(0x4000_0001, KVM_SIGNATURE),
            // CLOCKSOURCE | CLOCKSOURCE2 | CLOCKSOURCE_STABLE_BIT.
            (Persona::Kvm, 0x4000_0001) => CpuidResult {
                eax: 1 | 1 << 3 | 1 << 24,
                ..NONE
            },
            (Persona::Hyperv, 0x4000_0000) => signature(0x4000_0005, HYPERV_SIGNATURE),
            (Persona::Hyperv, 0x4000_0001) => CpuidResult {
                eax: 0x3123_7648, // "Hv#1"
                ..NONE
            },
            // Partition privileges: AccessPartitionReferenceTsc only.
            (Persona::Hyperv, 0x4000_0003) => CpuidResult {
                eax: 1 << 9,
                ..NONE
            },
            (_, 0x4000_0000..=0x4000_FFFF) => NONE,
            _ => self.native.cpuid(leaf, subleaf),
        }
    }
    fn rdmsr(&self, msr: Msr) -> u64 {
        let _ = msr;
        0
    }
    /// Dropped: the bench writes its pages itself, and no MSR is executed.
    unsafe fn wrmsr(&self, msr: Msr, value: u64) {
        let _ = (msr, value);
    }
    fn inb(&self, port: u16) -> u8 {
        let _ = port;
        u8::MAX
    }
    unsafe fn outb(&self, port: u16, value: u8) {
        let _ = (port, value);
    }
    fn inl(&self, port: u16) -> u32 {
        let _ = port;
        u32::MAX
    }
    fn mmio_read32(&self, region: MmioRegion, offset: usize) -> u32 {
        let _ = (region, offset);
        u32::MAX
    }
    fn mmio_read64(&self, region: MmioRegion, offset: usize) -> u64 {
        let _ = (region, offset);
        u64::MAX
    }
    fn mmio_write32(&self, region: MmioRegion, offset: usize, value: u32) {
        let _ = (region, offset, value);
    }
    fn mmio_write64(&self, region: MmioRegion, offset: usize, value: u64) {
        let _ = (region, offset, value);
    }
    /// Its hypervisor is a stand-in: MSR writes (registrations) go nowhere,
    /// so the simulator's memory is what it accepts.
    fn is_simulated(&self) -> bool {
        true
    }
}

/// The [`UserHw::smp`] CPU index: one load of a const-initialised
/// thread-local (0 on every thread), what a kernel's `gs:`-relative
/// per-CPU index costs in user space. Re-checked after the TSC read, as
/// an OS's index must be unless it is fixed by construction.
#[derive(Clone, Copy, Debug)]
pub struct ThreadLocalCpu;

impl CpuIndex for ThreadLocalCpu {
    #[inline(always)]
    fn index(&self) -> usize {
        CPU.with(std::cell::Cell::get)
    }
}

std::thread_local! {
    /// [`ThreadLocalCpu`]'s index (set by [`UserHw::smp`] on the reading thread).
    static CPU: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// This thread's index, `0..` in the order threads first ask (the bench's
/// stand-in for a kernel's CPU index).
fn thread_index() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    std::thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    INDEX.with(|i| *i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clockhal_x86::cpuid;

    #[test]
    fn personas_are_found_by_the_arch_decoders() {
        let kvm = UserHw::new(Persona::Kvm);
        let (_, f) = cpuid::kvm(&kvm).expect("KVM persona");
        assert!(f.contains(
            cpuid::KvmFeatures::CLOCKSOURCE2 | cpuid::KvmFeatures::CLOCKSOURCE_STABLE_BIT
        ));
        assert!(cpuid::hyperv(&kvm).is_none());
        let hv = UserHw::new(Persona::Hyperv);
        let (_, f) = cpuid::hyperv(&hv).expect("Hyper-V persona");
        assert!(f.reference_tsc() && !f.time_ref_count());
        let bare = UserHw::new(Persona::BareMetal);
        assert!(cpuid::kvm(&bare).is_none() && cpuid::hyperv(&bare).is_none());
        // The TSC is the real one: it advances.
        let a = hv.rdtsc_ordered();
        assert!(hv.rdtsc_ordered() > a);
    }
}
