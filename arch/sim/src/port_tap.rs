//! A [`Hardware`] wrapper that logs and can rewrite 8-bit port accesses:
//! for asserting exactly which ports a backend touches, and for hostile or
//! descheduled devices that the simulated ones do not model.

use super::SimMachine;
use clockhal_core::SlotPool;
use clockhal_x86::{CpuidResult, Hardware, MmioRegion, Msr};
use core::sync::atomic::AtomicBool;
use std::boxed::Box;
use std::sync::{Mutex, MutexGuard};
use std::vec::Vec;

/// One 8-bit port access seen by a [`PortTap`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortAccess {
    /// `inb`: the value the device returned (before any rewrite).
    Read {
        /// Port.
        port: u16,
        /// Value.
        value: u8,
    },
    /// `outb`.
    Write {
        /// Port.
        port: u16,
        /// Value.
        value: u8,
    },
}

type Hook = Box<dyn FnMut(&SimMachine, &PortAccess) -> Option<u8> + Send>;
type InlHook = Box<dyn FnMut(&SimMachine, u16, u32) -> Option<u32> + Send>;

/// Wraps a [`SimMachine`]: every `inb`/`outb` is logged, and a hook may
/// replace what an `inb` returns (or advance time, to model a vCPU that is
/// descheduled between two accesses). Everything else is forwarded.
///
/// ```
/// use clockhal_sim::{PortAccess, PortTap, SimMachine};
/// use clockhal_x86::Hardware;
/// let m = SimMachine::qemu_tcg();
/// let tap = PortTap::new(&m);
/// tap.set_hook(|_, a| match a {
///     PortAccess::Read { port: 0x71, .. } => Some(0xEE), // hostile RTC data
///     _ => None,
/// });
/// assert_eq!(tap.inb(0x71), 0xEE);
/// assert_eq!(tap.log().len(), 1);
/// // The rest is the machine's own, its lease and per-CPU memory too.
/// assert!(std::ptr::eq(tap.slot_pool(), m.slot_pool()));
/// assert!(tap.recovers_msr_faults());
/// ```
pub struct PortTap<'a> {
    m: &'a SimMachine,
    log: Mutex<Vec<PortAccess>>,
    hook: Mutex<Option<Hook>>,
    inl_hook: Mutex<Option<InlHook>>,
}

impl<'a> PortTap<'a> {
    /// A tap on `m` with no hook.
    pub fn new(m: &'a SimMachine) -> Self {
        PortTap {
            m,
            log: Mutex::new(Vec::new()),
            hook: Mutex::new(None),
            inl_hook: Mutex::new(None),
        }
    }

    /// The machine underneath.
    pub fn machine(&self) -> &'a SimMachine {
        self.m
    }

    /// Installs `hook`, called after every port access with the machine and
    /// the access; for a read, `Some(v)` makes the caller see `v`. Port
    /// accesses made by the hook itself (through this tap) do not run it
    /// again.
    pub fn set_hook(
        &self,
        hook: impl FnMut(&SimMachine, &PortAccess) -> Option<u8> + Send + 'static,
    ) {
        *lock(&self.hook) = Some(Box::new(hook));
    }

    /// Removes the hook.
    pub fn clear_hook(&self) {
        *lock(&self.hook) = None;
    }

    /// Installs `hook`, called after every 32-bit port read (`inl`: the PM
    /// timer) with the machine, the port and the value read; `Some(v)`
    /// makes the caller see `v`. It may block (a vCPU preempted right
    /// after its read, while other threads go on); while it runs, other
    /// `inl`s do not run it. Not logged.
    pub fn set_inl_hook(
        &self,
        hook: impl FnMut(&SimMachine, u16, u32) -> Option<u32> + Send + 'static,
    ) {
        *lock(&self.inl_hook) = Some(Box::new(hook));
    }

    /// Every port access so far, in order.
    pub fn log(&self) -> Vec<PortAccess> {
        lock(&self.log).clone()
    }

    /// Forgets the log.
    pub fn clear_log(&self) {
        lock(&self.log).clear();
    }

    fn seen(&self, a: PortAccess) -> Option<u8> {
        lock(&self.log).push(a);
        // Taken out while it runs, so that it may use the tap itself.
        let mut hook = lock(&self.hook).take()?;
        let r = hook(self.m, &a);
        let mut slot = lock(&self.hook);
        if slot.is_none() {
            *slot = Some(hook);
        }
        r
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Hardware for PortTap<'_> {
    fn rdtsc(&self) -> u64 {
        self.m.rdtsc()
    }
    fn rdtsc_ordered(&self) -> u64 {
        self.m.rdtsc_ordered()
    }
    fn rdtscp(&self) -> (u64, u32) {
        self.m.rdtscp()
    }
    fn cpuid(&self, leaf: u32, subleaf: u32) -> CpuidResult {
        self.m.cpuid(leaf, subleaf)
    }
    fn rdmsr(&self, msr: Msr) -> u64 {
        self.m.rdmsr(msr)
    }
    fn try_rdmsr(&self, msr: Msr) -> Option<u64> {
        self.m.try_rdmsr(msr)
    }
    fn recovers_msr_faults(&self) -> bool {
        self.m.recovers_msr_faults()
    }
    // Unsafe only because the trait is: the simulated machine's MSRs.
    #[allow(unsafe_code)]
    unsafe fn wrmsr(&self, msr: Msr, value: u64) {
        self.m.write_msr(msr, value)
    }
    fn inb(&self, port: u16) -> u8 {
        let value = self.m.inb(port);
        self.seen(PortAccess::Read { port, value }).unwrap_or(value)
    }
    // As `wrmsr`: simulated ports only.
    #[allow(unsafe_code)]
    unsafe fn outb(&self, port: u16, value: u8) {
        self.m.write_port8(port, value);
        self.seen(PortAccess::Write { port, value });
    }
    fn inl(&self, port: u16) -> u32 {
        let value = self.m.inl(port);
        // Taken out while it runs, as `seen` does.
        let Some(mut hook) = lock(&self.inl_hook).take() else {
            return value;
        };
        let r = hook(self.m, port, value);
        let mut slot = lock(&self.inl_hook);
        if slot.is_none() {
            *slot = Some(hook);
        }
        r.unwrap_or(value)
    }
    fn mmio_read32(&self, region: MmioRegion, offset: usize) -> u32 {
        self.m.mmio_read32(region, offset)
    }
    fn mmio_read64(&self, region: MmioRegion, offset: usize) -> u64 {
        self.m.mmio_read64(region, offset)
    }
    fn mmio_write32(&self, region: MmioRegion, offset: usize, value: u32) {
        self.m.mmio_write32(region, offset, value)
    }
    fn mmio_write64(&self, region: MmioRegion, offset: usize, value: u64) {
        self.m.mmio_write64(region, offset, value)
    }
    fn cpu_index(&self) -> usize {
        self.m.cpu_index()
    }
    fn cpu_index_is_fixed(&self) -> bool {
        self.m.cpu_index_is_fixed()
    }
    fn is_simulated(&self) -> bool {
        true
    }
    // The machine's own lease and per-CPU memory, not the program-wide
    // defaults that real machines share.
    fn clock_lease(&self) -> &AtomicBool {
        self.m.clock_lease()
    }
    fn slot_pool(&self) -> &SlotPool {
        self.m.slot_pool()
    }
}
