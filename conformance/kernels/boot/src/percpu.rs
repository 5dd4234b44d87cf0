//! Per-CPU data, reached through the GS segment base.
//!
//! Each CPU's IA32_GS_BASE points at its [`PerCpu`] slot, whose first field
//! is the CPU index, so [`current_cpu`] is a single `mov rax, gs:[0]`: no MSR,
//! no MMIO, no VM exit. The crate owns GS; kernels must not change its base.

use core::arch::asm;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::msr;
use crate::smp::Mailbox;

/// Most CPUs the crate manages (indices `0..MAX_CPUS`).
pub const MAX_CPUS: usize = 16;

/// IA32_GS_BASE.
const MSR_GS_BASE: u32 = 0xC000_0101;

/// One CPU's data. `index` must stay the first field (read via `gs:[0]`).
#[repr(C, align(64))]
pub(crate) struct PerCpu {
    /// Dense CPU index: 0 = boot CPU, then APs in start-up order.
    index: usize,
    /// Local APIC ID (valid once `online`).
    pub apic_id: AtomicU32,
    /// Set by the CPU itself once it runs Rust code with its IDT loaded.
    pub online: AtomicBool,
    /// Work handed to this CPU by [`crate::smp::post`].
    pub mailbox: Mailbox,
}

impl PerCpu {
    const fn new(index: usize) -> Self {
        PerCpu {
            index,
            apic_id: AtomicU32::new(u32::MAX),
            online: AtomicBool::new(false),
            mailbox: Mailbox::new(),
        }
    }
}

static CPUS: [PerCpu; MAX_CPUS] = {
    let mut cpus = [const { PerCpu::new(0) }; MAX_CPUS];
    let mut i = 0;
    while i < MAX_CPUS {
        cpus[i] = PerCpu::new(i);
        i += 1;
    }
    cpus
};

/// The slot of CPU `index`.
pub(crate) fn get(index: usize) -> Option<&'static PerCpu> {
    CPUS.get(index)
}

/// Points this CPU's GS base at slot `index` and records its APIC ID.
///
/// Must run on every CPU before anything calls [`current_cpu`].
pub(crate) fn init_this_cpu(index: usize, apic_id: u32) {
    let slot = &CPUS[index];
    slot.apic_id.store(apic_id, Ordering::Relaxed);
    let base = slot as *const PerCpu as u64;
    // SAFETY: GS is reserved for this module; its base now points at a
    // 'static slot whose first field is the index read by current_cpu().
    unsafe { msr::wrmsr(MSR_GS_BASE, base) };
}

/// Index of the executing CPU (0 = boot CPU). Cost: one memory load.
#[inline]
#[must_use]
pub fn current_cpu() -> usize {
    let index: usize;
    // SAFETY: every CPU sets its GS base (init_this_cpu) before running any
    // other Rust code, and the slot is 'static and never moves.
    unsafe {
        asm!("mov {}, gs:[0]", out(reg) index, options(nostack, readonly, preserves_flags));
    }
    index
}
