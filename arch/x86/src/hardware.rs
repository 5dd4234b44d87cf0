//! The hardware-access trait every backend is generic over.

use clockhal_core::SlotPool;
use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Result of one `cpuid` instruction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CpuidResult {
    /// EAX.
    pub eax: u32,
    /// EBX.
    pub ebx: u32,
    /// ECX.
    pub ecx: u32,
    /// EDX.
    pub edx: u32,
}

/// A model-specific register number.
///
/// Reading the clock MSRs named here has no side effects; an MSR the CPU or
/// hypervisor does not implement raises #GP (a fault, not memory unsafety),
/// so backends gate every access on the CPUID bit that promises it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Msr(u32);

impl Msr {
    /// KVM old wall clock (CLOCKSOURCE).
    pub const KVM_WALL_CLOCK: Msr = Msr(0x11);
    /// KVM old system time (CLOCKSOURCE).
    pub const KVM_SYSTEM_TIME: Msr = Msr(0x12);
    /// KVM new wall clock (CLOCKSOURCE2).
    pub const KVM_WALL_CLOCK_NEW: Msr = Msr(0x4b56_4d00);
    /// KVM new system time (CLOCKSOURCE2).
    pub const KVM_SYSTEM_TIME_NEW: Msr = Msr(0x4b56_4d01);
    /// KVM steal time (STEAL_TIME): a 64-byte-aligned area | enable bit 0.
    pub const KVM_STEAL_TIME: Msr = Msr(0x4b56_4d03);
    /// Hyper-V guest OS identity; must be non-zero before other Hyper-V MSRs.
    pub const HV_GUEST_OS_ID: Msr = Msr(0x4000_0000);
    /// Hyper-V partition reference counter (100 ns units, read traps).
    pub const HV_TIME_REF_COUNT: Msr = Msr(0x4000_0020);
    /// Hyper-V reference TSC page control.
    pub const HV_REFERENCE_TSC: Msr = Msr(0x4000_0021);
    /// Hyper-V TSC frequency in Hz.
    pub const HV_TSC_FREQUENCY: Msr = Msr(0x4000_0022);
    /// Hyper-V APIC timer frequency in Hz.
    pub const HV_APIC_FREQUENCY: Msr = Msr(0x4000_0023);
    /// `IA32_TSC_ADJUST`: the TSC's per-CPU offset, which firmware or an OS
    /// may write; equal on every CPU when the TSCs are in step (CPUID.7:EBX
    /// bit 1 says it exists).
    pub const IA32_TSC_ADJUST: Msr = Msr(0x3B);
    /// `IA32_TSC_AUX` (what `rdtscp` returns in ECX; OSes store the CPU index).
    pub const IA32_TSC_AUX: Msr = Msr(0xC000_0103);

    /// Any MSR by number.
    /// Interrupt-safe: yes.
    pub const fn new(number: u32) -> Msr {
        Msr(number)
    }

    /// The MSR's number (ECX for rdmsr/wrmsr).
    /// Interrupt-safe: yes.
    pub const fn number(self) -> u32 {
        self.0
    }
}

impl fmt::Debug for Msr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Msr({:#x})", self.0)
    }
}

/// A window of device registers mapped into the address space (e.g. the
/// 1 KiB HPET block). Accesses through [`Hardware`] are bounds-checked
/// against it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct MmioRegion {
    base: usize,
    len: usize,
    simulated: bool,
}

impl MmioRegion {
    /// A region of `len` bytes of device registers at virtual address `base`.
    ///
    /// `None` when `base` is not 8-byte aligned (every register access must
    /// be naturally aligned, including 64-bit ones), `len` is 0, or
    /// `base + len` overflows.
    /// Interrupt-safe: yes.
    ///
    /// # Safety
    /// For as long as any copy of the region is used: `base..base + len` must
    /// be mapped (uncached) to the device's registers, and reading or writing
    /// them as the backend documents must not violate the OS's invariants.
    /// For the simulator, use [`MmioRegion::simulated`] instead.
    pub const unsafe fn new(base: usize, len: usize) -> Option<MmioRegion> {
        if base % 8 != 0 || len == 0 || base.checked_add(len).is_none() {
            return None;
        }
        Some(MmioRegion {
            base,
            len,
            simulated: false,
        })
    }

    /// A region that only a simulated machine understands: `base` is the
    /// device's (fake) physical address. Safe, because real hardware access
    /// ([`Native`](crate::Native)) refuses simulated regions (reads return
    /// all ones, writes are dropped) and never dereferences them.
    /// Interrupt-safe: yes.
    pub const fn simulated(base: usize, len: usize) -> MmioRegion {
        MmioRegion {
            base,
            len,
            simulated: true,
        }
    }

    /// Start address.
    /// Interrupt-safe: yes.
    pub const fn base(&self) -> usize {
        self.base
    }

    /// Length in bytes.
    /// Interrupt-safe: yes.
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty.
    /// Interrupt-safe: yes.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether it was made by [`MmioRegion::simulated`].
    /// Interrupt-safe: yes.
    pub const fn is_simulated(&self) -> bool {
        self.simulated
    }

    /// Whether an access of `size` bytes (1, 2, 4 or 8) at `offset` is in
    /// bounds and naturally aligned. `false` for any other size.
    /// Interrupt-safe: yes.
    pub const fn contains(&self, offset: usize, size: usize) -> bool {
        matches!(size, 1 | 2 | 4 | 8)
            && offset % size == 0
            && offset <= self.len
            && self.len - offset >= size
    }
}

/// Access to the clock hardware of one x86_64 machine.
///
/// Statically dispatched: backends are generic over `H: Hardware`, so the
/// read path compiles to the instructions themselves. Implemented by
/// [`Native`](crate::Native) (real instructions), by
/// `clockhal_sim::SimMachine` (crate `clockhal-sim`), and by any OS
/// wrapper that adds, for example, #GP recovery ([`try_rdmsr`](Self::try_rdmsr))
/// or its CPU index ([`cpu_index`](Self::cpu_index)).
///
/// Out-of-bounds or misaligned MMIO accesses (relative to the region) read as
/// all ones and writes are dropped, like a PCI master abort: never UB.
pub trait Hardware: Sync {
    /// `rdtsc`: may execute before earlier loads retire.
    /// Interrupt-safe: yes (NMI too).
    fn rdtsc(&self) -> u64;
    /// The TSC read after every earlier instruction has executed and every
    /// earlier load is done, and after every earlier memory access in
    /// program order as far as the compiler is concerned (a memory clobber,
    /// like Linux's `rdtsc_ordered`): what a seqlock window or a warp test
    /// needs. [`Native`](crate::Native) uses `rdtscp` where CPUID offers it,
    /// else `lfence; rdtsc` (Intel, and AMD with a dispatch-serialising
    /// LFENCE) or `mfence; rdtsc`. Later instructions may still start
    /// before the TSC is read.
    /// Interrupt-safe: yes (NMI too).
    fn rdtsc_ordered(&self) -> u64;
    /// `rdtscp`: TSC and `IA32_TSC_AUX`. Only when CPUID says RDTSCP exists
    /// ([`cpuid::has_rdtscp`](crate::cpuid::has_rdtscp)); otherwise #UD.
    /// Interrupt-safe: yes (NMI too).
    fn rdtscp(&self) -> (u64, u32);
    /// `cpuid` with EAX = `leaf`, ECX = `subleaf`.
    /// Interrupt-safe: yes.
    fn cpuid(&self, leaf: u32, subleaf: u32) -> CpuidResult;
    /// `rdmsr`. Only MSRs that CPUID promises (absent ones #GP, or read 0
    /// under QEMU TCG).
    /// Interrupt-safe: yes.
    fn rdmsr(&self, msr: Msr) -> u64;
    /// `rdmsr` that reports a #GP as `None` instead of faulting. The default
    /// cannot recover and returns `None` without executing anything; an OS
    /// with a #GP fixup overrides it.
    /// Interrupt-safe: yes.
    fn try_rdmsr(&self, msr: Msr) -> Option<u64> {
        let _ = msr;
        None
    }
    /// Whether [`try_rdmsr`](Self::try_rdmsr) really executes `rdmsr` and
    /// recovers from a #GP (an OS with a fault fixup, the simulator). The
    /// default, `false`, means `try_rdmsr` tests nothing; clockhal then
    /// reads MSRs that CPUID promises with plain `rdmsr` ([`rdmsr_checked`](crate::rdmsr_checked)).
    /// Interrupt-safe: yes.
    fn recovers_msr_faults(&self) -> bool {
        false
    }
    /// `wrmsr`.
    /// Interrupt-safe: yes.
    ///
    /// # Safety
    /// The write must not violate the OS's invariants. In particular, a value
    /// that hands guest memory to the hypervisor (KVM system time / wall
    /// clock, Hyper-V reference TSC) must name memory reserved for that use;
    /// use the safe wrappers in [`paravirt`](crate::paravirt) instead.
    unsafe fn wrmsr(&self, msr: Msr, value: u64);
    /// 8-bit port read (`in al, dx`): the PIT's counters and status, the
    /// CMOS RTC's data port. Only ports the OS or firmware tables name.
    /// Interrupt-safe: yes.
    fn inb(&self, port: u16) -> u8;
    /// 8-bit port write (`out dx, al`): PIT commands, the CMOS RTC's index.
    /// Interrupt-safe: yes.
    ///
    /// # Safety
    /// The write must not violate the OS's invariants: the port belongs to
    /// a device the OS lets clockhal program (e.g. PIT channel 2, which the
    /// OS leaves alone; the CMOS index register, with the NMI-disable bit
    /// as the OS wants it). Backends reach it only through the safe,
    /// device-specific wrappers of this crate ([`pit`](crate::pit),
    /// [`cmos`](crate::cmos)).
    unsafe fn outb(&self, port: u16, value: u8);
    /// 32-bit port read (`in eax, dx`).
    /// Interrupt-safe: yes.
    fn inl(&self, port: u16) -> u32;
    /// 32-bit MMIO load at `region.base() + offset`.
    /// Interrupt-safe: yes.
    fn mmio_read32(&self, region: MmioRegion, offset: usize) -> u32;
    /// 64-bit MMIO load (one instruction: never split into halves).
    /// Interrupt-safe: yes.
    fn mmio_read64(&self, region: MmioRegion, offset: usize) -> u64;
    /// 32-bit MMIO store.
    /// Interrupt-safe: yes.
    fn mmio_write32(&self, region: MmioRegion, offset: usize, value: u32);
    /// 64-bit MMIO store.
    /// Interrupt-safe: yes.
    fn mmio_write64(&self, region: MmioRegion, offset: usize, value: u64);
    /// Index of the CPU executing this call, `0..cpu_count`. The default is
    /// `0` (single-CPU OS); SMP kernels override it: per-CPU pvclock areas
    /// and clockhal's per-CPU read state are indexed by it. It must name the
    /// calling CPU for the whole of a clock read (interrupts may run in
    /// between; a migration to another CPU may not), so two CPUs never use
    /// the same index at the same time.
    /// Interrupt-safe: yes (NMI too; an implementation must not lock).
    fn cpu_index(&self) -> usize {
        0
    }
    /// Whether [`cpu_index`](Self::cpu_index) names the calling CPU for a
    /// whole clock read by construction: a constant index (one CPU, or an
    /// OS that gave none) or one per thread (hosted mode). clockhal then
    /// reads it once per read. With the default, `false`, every read also
    /// confirms after the TSC read that the index did not change, so an OS
    /// that migrates a thread mid-read (against the contract above) gets a
    /// retry or a held value, never another CPU's state.
    /// Interrupt-safe: yes (NMI too).
    #[inline(always)]
    fn cpu_index_is_fixed(&self) -> bool {
        false
    }
    /// `max(*cell, value)` stored into `cell` and returned, atomically with
    /// respect to everything that may run on the calling CPU meanwhile
    /// (interrupts, NMIs) and to other CPUs that update `cell` the same way.
    ///
    /// clockhal calls it on the calling CPU's own per-CPU slot (by
    /// [`cpu_index`](Self::cpu_index)) on every clock read. The default is a
    /// locked `fetch_max`, correct wherever it is used; an OS whose
    /// `cpu_index` is truthful lets [`Native`](crate::Native) use an
    /// unlocked `cmpxchg` instead ([`cpu_local_max`](crate::cpu_local_max):
    /// interrupt-atomic, a fifth of the cost).
    /// Interrupt-safe: yes (NMI too: must be atomic with them).
    #[inline(always)]
    fn fetch_max_local(&self, cell: &AtomicU64, value: u64) -> u64 {
        cell.fetch_max(value, Ordering::AcqRel).max(value)
    }
    /// The flag that makes one machine's clock hardware owned by one probe
    /// result at a time (see `clockhal::probe`): the default is one flag
    /// for the whole program, right for every real machine; a simulator
    /// has one per simulated machine.
    /// Interrupt-safe: yes.
    fn clock_lease(&self) -> &AtomicBool {
        static LEASE: AtomicBool = AtomicBool::new(false);
        &LEASE
    }
    /// Where the clock objects of this machine keep their per-CPU read
    /// state (floors and cached maps, one cache line per CPU each). Like
    /// [`clock_lease`](Self::clock_lease): the default is one pool for the
    /// whole program, right for every real machine (a `static`, so the
    /// clock objects stay small and a kernel's boot stack need not hold
    /// them); a simulator has one per simulated machine.
    /// Interrupt-safe: yes.
    #[inline(always)]
    fn slot_pool(&self) -> &SlotPool {
        static POOL: SlotPool = SlotPool::new();
        &POOL
    }
    /// Whether this is a simulated machine, which accepts simulated memory
    /// and MMIO regions ([`PhysMapped::simulated`](crate::paravirt::PhysMapped::simulated),
    /// [`MmioRegion::simulated`]). Real hardware returns `false` (the
    /// default) and refuses them.
    /// Interrupt-safe: yes.
    fn is_simulated(&self) -> bool {
        false
    }
}

impl<T: Hardware + ?Sized> Hardware for &T {
    #[inline(always)]
    fn rdtsc(&self) -> u64 {
        (**self).rdtsc()
    }
    #[inline(always)]
    fn rdtsc_ordered(&self) -> u64 {
        (**self).rdtsc_ordered()
    }
    #[inline(always)]
    fn rdtscp(&self) -> (u64, u32) {
        (**self).rdtscp()
    }
    #[inline(always)]
    fn cpuid(&self, leaf: u32, subleaf: u32) -> CpuidResult {
        (**self).cpuid(leaf, subleaf)
    }
    #[inline(always)]
    fn rdmsr(&self, msr: Msr) -> u64 {
        (**self).rdmsr(msr)
    }
    #[inline(always)]
    fn try_rdmsr(&self, msr: Msr) -> Option<u64> {
        (**self).try_rdmsr(msr)
    }
    #[inline(always)]
    fn recovers_msr_faults(&self) -> bool {
        (**self).recovers_msr_faults()
    }
    #[inline(always)]
    unsafe fn wrmsr(&self, msr: Msr, value: u64) {
        // SAFETY: forwarded; the caller upholds `wrmsr`'s contract.
        unsafe { (**self).wrmsr(msr, value) }
    }
    #[inline(always)]
    fn inb(&self, port: u16) -> u8 {
        (**self).inb(port)
    }
    #[inline(always)]
    unsafe fn outb(&self, port: u16, value: u8) {
        // SAFETY: forwarded; the caller upholds `outb`'s contract.
        unsafe { (**self).outb(port, value) }
    }
    #[inline(always)]
    fn inl(&self, port: u16) -> u32 {
        (**self).inl(port)
    }
    #[inline(always)]
    fn mmio_read32(&self, region: MmioRegion, offset: usize) -> u32 {
        (**self).mmio_read32(region, offset)
    }
    #[inline(always)]
    fn mmio_read64(&self, region: MmioRegion, offset: usize) -> u64 {
        (**self).mmio_read64(region, offset)
    }
    #[inline(always)]
    fn mmio_write32(&self, region: MmioRegion, offset: usize, value: u32) {
        (**self).mmio_write32(region, offset, value)
    }
    #[inline(always)]
    fn mmio_write64(&self, region: MmioRegion, offset: usize, value: u64) {
        (**self).mmio_write64(region, offset, value)
    }
    #[inline(always)]
    fn cpu_index(&self) -> usize {
        (**self).cpu_index()
    }
    #[inline(always)]
    fn cpu_index_is_fixed(&self) -> bool {
        (**self).cpu_index_is_fixed()
    }
    #[inline(always)]
    fn is_simulated(&self) -> bool {
        (**self).is_simulated()
    }
    #[inline(always)]
    fn fetch_max_local(&self, cell: &AtomicU64, value: u64) -> u64 {
        (**self).fetch_max_local(cell, value)
    }
    #[inline(always)]
    fn clock_lease(&self) -> &AtomicBool {
        (**self).clock_lease()
    }
    #[inline(always)]
    fn slot_pool(&self) -> &SlotPool {
        (**self).slot_pool()
    }
}

/// Reads an MSR that CPUID promises: `None` when the read raised #GP (the
/// hypervisor's CPUID lied), where the OS can tell
/// ([`Hardware::recovers_msr_faults`]); elsewhere a plain `rdmsr`, which
/// trusts the promise as every OS must without a fault fixup.
/// Interrupt-safe: yes.
pub fn rdmsr_checked<H: Hardware + ?Sized>(hw: &H, msr: Msr) -> Option<u64> {
    if hw.recovers_msr_faults() {
        hw.try_rdmsr(msr)
    } else {
        Some(hw.rdmsr(msr))
    }
}

/// Any [`Hardware`] as the one read loop in `clockhal-core` needs it
/// ([`clockhal_core::timeline`]).
#[derive(Debug)]
pub struct Seam<'a, H: ?Sized>(pub &'a H);

impl<H: ?Sized> Clone for Seam<'_, H> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<H: ?Sized> Copy for Seam<'_, H> {}

impl<H: Hardware + ?Sized> clockhal_core::ReadHw for Seam<'_, H> {
    #[inline(always)]
    fn cpu_index(&self) -> usize {
        self.0.cpu_index()
    }
    #[inline(always)]
    fn cpu_index_is_fixed(&self) -> bool {
        self.0.cpu_index_is_fixed()
    }
    #[inline(always)]
    fn rdtsc_ordered(&self) -> u64 {
        self.0.rdtsc_ordered()
    }
    #[inline(always)]
    fn fetch_max_local(&self, cell: &AtomicU64, value: u64) -> u64 {
        self.0.fetch_max_local(cell, value)
    }
}
