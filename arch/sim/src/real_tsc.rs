//! The simulator with this machine's real TSC, for host benchmarks.

use super::SimMachine;
use clockhal_x86::{CpuidResult, Hardware, MmioRegion, Msr, Native};

/// A [`SimMachine`] whose `rdtsc` family runs the real instructions.
///
/// Benchmarks probe a backend in user space (CPUID, MSR, port and MMIO
/// traffic goes to the simulated hypervisor and devices), then measure reads
/// that touch only shared memory and the real TSC — what a vDSO does.
/// `cpu_index` is always 0, as on a one-CPU kernel (the simulator's
/// thread-local CPU lookup would cost more than an OS's per-CPU load).
///
/// ```
/// use clockhal_sim::{RealTsc, SimMachine};
/// use clockhal_x86::Hardware;
/// let hw = RealTsc::new(SimMachine::kvm());
/// let a = hw.rdtsc_ordered();
/// assert!(hw.rdtsc_ordered() >= a);
/// ```
#[derive(Debug)]
pub struct RealTsc {
    native: Native,
    sim: SimMachine,
}

impl RealTsc {
    /// `sim` with the real TSC.
    pub fn new(sim: SimMachine) -> RealTsc {
        RealTsc {
            native: Native::hosted(),
            sim,
        }
    }

    /// The simulated rest of the machine.
    pub fn sim(&self) -> &SimMachine {
        &self.sim
    }

    /// The real instructions.
    pub fn native(&self) -> &Native {
        &self.native
    }
}

impl Hardware for RealTsc {
    #[inline(always)]
    fn rdtsc(&self) -> u64 {
        self.native.rdtsc()
    }
    #[inline(always)]
    fn rdtsc_ordered(&self) -> u64 {
        self.native.rdtsc_ordered()
    }
    fn rdtscp(&self) -> (u64, u32) {
        self.native.rdtscp()
    }
    fn cpuid(&self, leaf: u32, subleaf: u32) -> CpuidResult {
        self.sim.cpuid(leaf, subleaf)
    }
    fn rdmsr(&self, msr: Msr) -> u64 {
        self.sim.rdmsr(msr)
    }
    fn try_rdmsr(&self, msr: Msr) -> Option<u64> {
        self.sim.try_rdmsr(msr)
    }
    fn recovers_msr_faults(&self) -> bool {
        true
    }
    // Forwarded to the simulator, whose "hypervisor" only writes memory it
    // allocated itself.
    #[allow(unsafe_code)]
    unsafe fn wrmsr(&self, msr: Msr, value: u64) {
        self.sim.write_msr(msr, value)
    }
    fn inb(&self, port: u16) -> u8 {
        self.sim.inb(port)
    }
    // Forwarded to the simulator's devices.
    #[allow(unsafe_code)]
    unsafe fn outb(&self, port: u16, value: u8) {
        self.sim.write_port8(port, value)
    }
    fn inl(&self, port: u16) -> u32 {
        self.sim.inl(port)
    }
    fn is_simulated(&self) -> bool {
        true
    }
    fn clock_lease(&self) -> &core::sync::atomic::AtomicBool {
        self.sim.clock_lease()
    }
    /// The bench reads from one pinned thread: the per-CPU slot is its own.
    #[inline(always)]
    fn fetch_max_local(&self, cell: &core::sync::atomic::AtomicU64, value: u64) -> u64 {
        clockhal_x86::cpu_local_max(cell, value)
    }
    fn mmio_read32(&self, region: MmioRegion, offset: usize) -> u32 {
        self.sim.mmio_read32(region, offset)
    }
    fn mmio_read64(&self, region: MmioRegion, offset: usize) -> u64 {
        self.sim.mmio_read64(region, offset)
    }
    fn mmio_write32(&self, region: MmioRegion, offset: usize, value: u32) {
        self.sim.mmio_write32(region, offset, value)
    }
    fn mmio_write64(&self, region: MmioRegion, offset: usize, value: u64) {
        self.sim.mmio_write64(region, offset, value)
    }
}
