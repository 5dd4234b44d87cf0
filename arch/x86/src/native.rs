//! The real instructions.

use crate::{CpuIndex, CpuIndexFn, CpuidResult, Hardware, MmioRegion, Msr, NoCpuIndex, OneCpu};
use clockhal_user::TscRead;
use core::sync::atomic::{AtomicU64, Ordering};

/// Hardware access through the real x86_64 instructions.
///
/// How it knows the calling CPU (its type parameter, a [`CpuIndex`]: no
/// run-time test on the read path) decides how clockhal's per-CPU read
/// state is updated:
///
/// | constructor | type | `cpu_index()` | per-CPU floor update |
/// |---|---|---|---|
/// | [`Native::new`] | `Native` (= `Native<NoCpuIndex>`) | 0 | locked `fetch_max` (correct on any number of CPUs) |
/// | [`.single_cpu()`](Native::single_cpu) | `Native<OneCpu>` | 0 | unlocked `cmpxchg` (one CPU: interrupts are the only concurrency) |
/// | [`.with_cpu_index(f)`](Native::with_cpu_index) | `Native<CpuIndexFn>` | `f()` | unlocked `cmpxchg` on the calling CPU's own slot |
/// | [`.with_cpu(c)`](Native::with_cpu) | `Native<C>` | `c.index()`, inlined | as `C` says ([`CpuIndex::LOCAL`]) |
///
/// With `with_cpu_index`, a read calls `f` a second time after the TSC read
/// to confirm that it did not change CPU (see
/// [`Hardware::cpu_index_is_fixed`]); the first two forms are fixed.
///
/// The unlocked form is interrupt-safe and costs about a fifth of a locked
/// one; it is what makes [`Clock::now`](https://docs.rs/clockhal) as cheap
/// as a vDSO read. Use it whenever the OS can say which CPU it runs on.
///
/// ```no_run
/// use clockhal_x86::{Hardware, Native};
/// fn this_cpu() -> usize { 0 /* e.g. read a GS-relative per-CPU field */ }
/// // SAFETY: we are a kernel running at CPL0 and let clockhal use the clock
/// // MSRs and the ports our firmware tables name.
/// let hw = unsafe { Native::new() }.with_cpu_index(this_cpu);
/// let t = hw.rdtsc_ordered();
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Native<C: CpuIndex = NoCpuIndex> {
    cpu: C,
    /// A user-space token: MSRs and ports are never touched.
    user: bool,
    /// How `rdtsc_ordered` orders the read, chosen once at construction
    /// (a field, not a global: the read waits for no extra load).
    fence: TscRead,
}

impl Native {
    /// Creates the token and picks how `rdtsc_ordered` orders the TSC read,
    /// as Linux's `rdtsc_ordered` does: `rdtscp` where CPUID offers it (it
    /// waits for all earlier instructions and is the cheapest ordered read on
    /// current CPUs), else `mfence; rdtsc` on AMD/Hygon (LFENCE is only
    /// dispatch-serialising there when the OS set `DE_CFG[1]`), else
    /// `lfence; rdtsc`.
    /// Interrupt-safe: yes.
    ///
    /// # Safety
    /// The caller runs at CPL0 and allows clockhal to read the TSC, CPUID,
    /// the clock MSRs that CPUID
    /// promises, and the I/O ports that the OS or its firmware tables name
    /// (the ACPI PM timer). MMIO and hypervisor-shared memory need their own
    /// tokens ([`MmioRegion`], [`PhysMapped`](crate::paravirt::PhysMapped)).
    ///
    /// It also allows the legacy-device accesses of the PIT and RTC
    /// backends, when the OS probes them (and only then):
    /// - **PIT** ([`pit`](crate::pit)): clockhal reads port 0x61 and writes
    ///   it back with bit 0 (channel-2 gate) set and bit 1 (speaker data)
    ///   clear, writes control word 0xB0 (channel 2, mode 0) and count 0 to
    ///   ports 0x43/0x42, and then writes latch commands (0x80) to 0x43 and
    ///   reads 0x42. From then on the OS leaves channel 2 and bits 0–1 of
    ///   port 0x61 alone. Channels 0 and 1 are never touched.
    /// - **CMOS RTC** ([`cmos`](crate::cmos)): clockhal writes register
    ///   indices below 0x80 (never 0x0C) to port 0x70, with bit 7 (NMI
    ///   disable) as the OS chose, and reads port 0x71; it never writes
    ///   CMOS data. The OS keeps other CMOS users off while clockhal reads.
    ///
    /// In user space (hosted mode, benchmarks) the token is sound as long as
    /// only `rdtsc`, `rdtsc_ordered`, `rdtscp` and `cpuid` are used and the
    /// OS has not set CR4.TSD.
    pub unsafe fn new() -> Native {
        Native {
            cpu: NoCpuIndex,
            user: false,
            // The same choice, and the same instructions, as the clock
            // page's user-space readers.
            fence: TscRead::detect(),
        }
    }

    /// The token for a hosted (user-space) process: std only.
    ///
    /// `rdtsc`, `rdtscp` and `cpuid` run for real (unless the OS set
    /// CR4.TSD); MSRs are never touched — `rdmsr` returns 0, `try_rdmsr`
    /// `None` (so a CPUID-promised MSR reads as absent), `wrmsr` is
    /// ignored — and neither are ports (all ones, writes ignored): in user
    /// space those instructions would only raise #GP. Sound without
    /// `unsafe`; MMIO needs an [`MmioRegion`], whose constructor is unsafe.
    /// Interrupt-safe: yes.
    #[cfg(feature = "std")]
    pub fn hosted() -> Native {
        // SAFETY: user space cannot break CPL0 invariants, and this token
        // executes no privileged instruction (`user`); the constructor's
        // only other effect is choosing the fence.
        let n = unsafe { Native::new() };
        Native { user: true, ..n }
    }
}

impl<C: CpuIndex> Native<C> {
    /// The same token for an OS that runs on one CPU (or keeps clockhal to
    /// one): per-CPU state is updated without locks.
    /// Interrupt-safe: yes.
    pub const fn single_cpu(self) -> Native<OneCpu> {
        self.with_cpu(OneCpu)
    }

    /// The same token with the OS's CPU index: `f` returns the index of the
    /// CPU it runs on, `0..cpu_count`, distinct per CPU and unchanged for
    /// the duration of a clock read (interrupts may run in between, a
    /// migration may not). Per-CPU pvclock areas and clockhal's per-CPU read
    /// state are indexed by it, and updated without locks. A wrong `f`
    /// cannot cause undefined behaviour, only wrong or non-monotonic time.
    /// A read calls `f` through the pointer before the TSC read and, where
    /// the source's map is per CPU and not ordered across CPUs (kvmclock
    /// without a trusted stable bit), again after it;
    /// [`with_cpu`](Self::with_cpu) with a type of the OS's own inlines the
    /// index instead.
    /// Interrupt-safe: yes.
    pub const fn with_cpu_index(self, f: fn() -> usize) -> Native<CpuIndexFn> {
        self.with_cpu(CpuIndexFn(f))
    }

    /// The same token with the CPU-index strategy `cpu` (see [`CpuIndex`]).
    /// Interrupt-safe: yes.
    pub const fn with_cpu<D: CpuIndex>(self, cpu: D) -> Native<D> {
        Native {
            cpu,
            user: self.user,
            fence: self.fence,
        }
    }

    #[inline(always)]
    fn region_ptr(region: MmioRegion, offset: usize, size: usize) -> Option<usize> {
        // A simulated region names no real memory: never dereference it.
        if !region.is_simulated() && region.contains(offset, size) {
            Some(region.base() + offset)
        } else {
            None
        }
    }
}

impl<C: CpuIndex> Hardware for Native<C> {
    #[inline(always)]
    fn rdtsc(&self) -> u64 {
        // SAFETY: `Native::new`'s contract: CPL0, so CR4.TSD cannot fault us.
        unsafe { x86::time::rdtsc() }
    }

    #[inline(always)]
    fn rdtsc_ordered(&self) -> u64 {
        // A memory clobber like Linux's: the compiler does not move loads
        // across it (seqlock windows, the warp test). `rdtscp` only where
        // CPUID reported it (`TscRead::detect`).
        self.fence.read()
    }

    #[inline(always)]
    fn rdtscp(&self) -> (u64, u32) {
        // SAFETY: callers check CPUID's RDTSCP bit (trait contract); CPL0.
        unsafe { x86::time::rdtscp() }
    }

    #[inline]
    fn cpuid(&self, leaf: u32, subleaf: u32) -> CpuidResult {
        let r = raw_cpuid::native_cpuid::cpuid_count(leaf, subleaf);
        CpuidResult {
            eax: r.eax,
            ebx: r.ebx,
            ecx: r.ecx,
            edx: r.edx,
        }
    }

    #[inline]
    fn rdmsr(&self, msr: Msr) -> u64 {
        if self.user {
            return 0;
        }
        // SAFETY: CPL0 (`Native::new`); reading clock MSRs has no side
        // effects; an absent MSR raises #GP, which the OS handles or dies on
        // (callers gate on CPUID).
        unsafe { x86::msr::rdmsr(msr.number()) }
    }

    fn recovers_msr_faults(&self) -> bool {
        // In user space every MSR is absent, and `try_rdmsr` says so.
        self.user
    }

    unsafe fn wrmsr(&self, msr: Msr, value: u64) {
        if self.user {
            return;
        }
        // SAFETY: CPL0 (`Native::new`); the caller upholds the value's contract.
        unsafe { x86::msr::wrmsr(msr.number(), value) }
    }

    #[inline(always)]
    fn inb(&self, port: u16) -> u8 {
        if self.user {
            return u8::MAX;
        }
        // SAFETY: CPL0, and `Native::new`'s contract lets clockhal read the
        // ports the OS or firmware named (PIT counters, CMOS data).
        unsafe { x86::io::inb(port) }
    }

    unsafe fn outb(&self, port: u16, value: u8) {
        if self.user {
            return;
        }
        // SAFETY: CPL0 (`Native::new`); the caller upholds `outb`'s contract.
        unsafe { x86::io::outb(port, value) }
    }

    #[inline(always)]
    fn inl(&self, port: u16) -> u32 {
        if self.user {
            return u32::MAX;
        }
        // SAFETY: CPL0, and `Native::new`'s contract lets clockhal read the
        // ports the OS or firmware named; reading the PM timer has no effects.
        unsafe { x86::io::inl(port) }
    }

    #[inline(always)]
    fn mmio_read32(&self, region: MmioRegion, offset: usize) -> u32 {
        match Self::region_ptr(region, offset, 4) {
            // SAFETY: in bounds and aligned within a region the OS vouched
            // for (`MmioRegion::new`).
            Some(a) => unsafe { core::ptr::read_volatile(a as *const u32) },
            None => u32::MAX,
        }
    }

    #[inline(always)]
    fn mmio_read64(&self, region: MmioRegion, offset: usize) -> u64 {
        match Self::region_ptr(region, offset, 8) {
            // SAFETY: as in `mmio_read32`; one 8-byte aligned load (`mov`).
            Some(a) => unsafe { core::ptr::read_volatile(a as *const u64) },
            None => u64::MAX,
        }
    }

    fn mmio_write32(&self, region: MmioRegion, offset: usize, value: u32) {
        if let Some(a) = Self::region_ptr(region, offset, 4) {
            // SAFETY: in bounds and aligned within a vouched-for region.
            unsafe { core::ptr::write_volatile(a as *mut u32, value) }
        }
    }

    fn mmio_write64(&self, region: MmioRegion, offset: usize, value: u64) {
        if let Some(a) = Self::region_ptr(region, offset, 8) {
            // SAFETY: in bounds and aligned within a vouched-for region.
            unsafe { core::ptr::write_volatile(a as *mut u64, value) }
        }
    }

    #[inline(always)]
    fn cpu_index(&self) -> usize {
        self.cpu.index()
    }

    #[inline(always)]
    fn cpu_index_is_fixed(&self) -> bool {
        C::FIXED
    }

    #[inline(always)]
    fn fetch_max_local(&self, cell: &AtomicU64, value: u64) -> u64 {
        if C::LOCAL {
            cpu_local_max(cell, value)
        } else {
            cell.fetch_max(value, Ordering::AcqRel).max(value)
        }
    }
}

/// `max(*cell, value)` stored into `cell` and returned, with an unlocked
/// `cmpxchg`: atomic with respect to interrupts and NMIs on the calling CPU
/// (an instruction either ran or did not), not with respect to other CPUs.
///
/// For per-CPU data that only its own CPU writes (clockhal's per-CPU
/// floors, through [`Hardware::fetch_max_local`]), where a locked
/// instruction would cost four times as much for nothing. Used on a cell
/// that another CPU writes at the same time, an update can be lost (time
/// could then step back by the difference of the two values); that is a
/// logic error, never undefined behaviour: each of the instruction's load
/// and store is a single-copy-atomic aligned 8-byte access.
/// Interrupt-safe: yes (NMI too: one cmpxchg).
#[inline(always)]
pub fn cpu_local_max(cell: &AtomicU64, value: u64) -> u64 {
    let mut current = cell.load(Ordering::Relaxed);
    loop {
        if value <= current {
            return current;
        }
        let seen: u64;
        // SAFETY: `cell.as_ptr()` is a valid, aligned `u64` for the
        // duration of the call (it is borrowed); `cmpxchg` reads it and
        // writes it only if it still holds `current`. Both accesses are
        // aligned 8-byte accesses, atomic on x86_64 like the relaxed loads
        // and stores other code makes to the cell. No other memory is
        // touched; the flags are clobbered (no `preserves_flags`).
        unsafe {
            core::arch::asm!(
                "cmpxchg qword ptr [{cell}], {new}",
                cell = in(reg) cell.as_ptr(),
                new = in(reg) value,
                inout("rax") current => seen,
                options(nostack),
            );
        }
        if seen == current {
            return value;
        }
        current = seen;
    }
}
