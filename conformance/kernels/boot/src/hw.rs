//! clockhal's hardware seam for kernels booted by this crate: the real
//! instructions (`clockhal_x86::Native`), plus the two things only the OS
//! knows — how to survive a #GP from an absent MSR (the IDT's fault fixup)
//! and which CPU is running (the per-CPU index).

use clockhal_x86::{CpuidResult, Hardware, MmioRegion, Msr, Native};
use core::sync::atomic::AtomicU64;

/// [`Native`] with `try_rdmsr` and `cpu_index` filled in by this crate.
#[derive(Clone, Copy, Debug)]
pub struct BootHw {
    native: Native,
}

impl BootHw {
    /// The hardware token.
    ///
    /// # Safety
    /// Call at CPL0 on a kernel booted by clockhal-boot (its IDT recovers
    /// faulting MSR probes and its GS base holds the CPU index), which lets
    /// clockhal read the TSC, CPUID, the clock MSRs CPUID promises and the
    /// ports the ACPI tables name.
    pub unsafe fn new() -> BootHw {
        BootHw {
            // SAFETY: forwarded from this function's contract (CPL0, clock
            // hardware may be read).
            native: unsafe { Native::new() },
        }
    }
}

impl Hardware for BootHw {
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
        self.native.cpuid(leaf, subleaf)
    }
    fn rdmsr(&self, msr: Msr) -> u64 {
        self.native.rdmsr(msr)
    }
    fn try_rdmsr(&self, msr: Msr) -> Option<u64> {
        crate::try_rdmsr(msr.number())
    }
    fn recovers_msr_faults(&self) -> bool {
        true
    }
    unsafe fn wrmsr(&self, msr: Msr, value: u64) {
        // SAFETY: forwarded; the caller upholds `wrmsr`'s contract.
        unsafe { self.native.wrmsr(msr, value) }
    }
    #[inline(always)]
    fn inb(&self, port: u16) -> u8 {
        self.native.inb(port)
    }
    unsafe fn outb(&self, port: u16, value: u8) {
        // SAFETY: forwarded; the caller upholds `outb`'s contract.
        unsafe { self.native.outb(port, value) }
    }
    fn inl(&self, port: u16) -> u32 {
        self.native.inl(port)
    }
    #[inline(always)]
    fn mmio_read32(&self, region: MmioRegion, offset: usize) -> u32 {
        self.native.mmio_read32(region, offset)
    }
    #[inline(always)]
    fn mmio_read64(&self, region: MmioRegion, offset: usize) -> u64 {
        self.native.mmio_read64(region, offset)
    }
    fn mmio_write32(&self, region: MmioRegion, offset: usize, value: u32) {
        self.native.mmio_write32(region, offset, value)
    }
    fn mmio_write64(&self, region: MmioRegion, offset: usize, value: u64) {
        self.native.mmio_write64(region, offset, value)
    }
    #[inline(always)]
    fn cpu_index(&self) -> usize {
        crate::current_cpu()
    }
    /// No preemption: a read never changes CPU (see below).
    #[inline(always)]
    fn cpu_index_is_fixed(&self) -> bool {
        true
    }
    /// This crate's kernels never migrate a running read (no preemption;
    /// `cpu_index` is the GS-based index of the executing CPU), so the
    /// per-CPU floors need only interrupt atomicity.
    #[inline(always)]
    fn fetch_max_local(&self, cell: &AtomicU64, value: u64) -> u64 {
        clockhal_x86::cpu_local_max(cell, value)
    }
}
