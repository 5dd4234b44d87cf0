//! This kernel's side of clockhal's hardware seam.
//!
//! clockhal reaches the hardware only through a `Hardware` implementation.
//! `Native` runs the real instructions; this wrapper adds the two things only
//! the OS knows: how to survive a #GP from an absent MSR (clockhal-boot's
//! fault fixup) and which CPU is running (clockhal-boot's per-CPU index).

use clockhal::x86::{CpuidResult, Hardware, MmioRegion, Msr, Native};

/// The machine as clockhal sees it (zero-sized, `Copy`).
#[derive(Clone, Copy, Debug)]
pub struct Machine(Native);

impl Machine {
    /// The hardware-access token for this kernel.
    pub fn new() -> Machine {
        // SAFETY: this is the kernel: it runs at CPL0, and it lets clockhal
        // read the TSC, CPUID, the clock MSRs CPUID promises and the I/O
        // ports its ACPI tables name (the PM timer).
        Machine(unsafe { Native::new() })
    }
}

impl Hardware for Machine {
    #[inline(always)]
    fn rdtsc(&self) -> u64 {
        self.0.rdtsc()
    }
    #[inline(always)]
    fn rdtsc_ordered(&self) -> u64 {
        self.0.rdtsc_ordered()
    }
    #[inline(always)]
    fn rdtscp(&self) -> (u64, u32) {
        self.0.rdtscp()
    }
    fn cpuid(&self, leaf: u32, subleaf: u32) -> CpuidResult {
        self.0.cpuid(leaf, subleaf)
    }
    fn rdmsr(&self, msr: Msr) -> u64 {
        self.0.rdmsr(msr)
    }
    /// The boot crate's IDT resumes a faulting RDMSR and reports `None`.
    fn try_rdmsr(&self, msr: Msr) -> Option<u64> {
        clockhal_boot::try_rdmsr(msr.number())
    }
    unsafe fn wrmsr(&self, msr: Msr, value: u64) {
        // SAFETY: forwarded; our caller upholds `Hardware::wrmsr`'s contract.
        unsafe { self.0.wrmsr(msr, value) }
    }
    #[inline(always)]
    fn inl(&self, port: u16) -> u32 {
        self.0.inl(port)
    }
    #[inline(always)]
    fn mmio_read32(&self, region: MmioRegion, offset: usize) -> u32 {
        self.0.mmio_read32(region, offset)
    }
    #[inline(always)]
    fn mmio_read64(&self, region: MmioRegion, offset: usize) -> u64 {
        self.0.mmio_read64(region, offset)
    }
    fn mmio_write32(&self, region: MmioRegion, offset: usize, value: u32) {
        self.0.mmio_write32(region, offset, value)
    }
    fn mmio_write64(&self, region: MmioRegion, offset: usize, value: u64) {
        self.0.mmio_write64(region, offset, value)
    }
    /// One load through the GS base (clockhal-boot's per-CPU slot).
    #[inline(always)]
    fn cpu_index(&self) -> usize {
        clockhal_boot::current_cpu()
    }
}
