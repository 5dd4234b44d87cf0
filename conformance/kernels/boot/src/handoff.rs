//! Handing the machine to another kernel (a loader's last step).
//!
//! The next kernel inherits this crate's page tables (identity map of the
//! low 4 GiB, 4 KiB pages in the first 2 MiB, 3..4 GiB uncached, see
//! `paging`), which live in this kernel's `.bss`, and runs on a stack the
//! caller provides. Everything of this crate stops working at the jump: the
//! IDT stays loaded until the next kernel replaces it, and the per-CPU GS
//! base is cleared, because kernels such as Hermit insist on finding it 0.

use core::arch::asm;
use core::ops::Range;

use crate::{msr, smp};

/// IA32_FS_BASE, IA32_GS_BASE and IA32_KERNEL_GS_BASE.
const SEGMENT_BASE_MSRS: [u32; 3] = [0xC000_0100, 0xC000_0101, 0xC000_0102];

extern "C" {
    static __kernel_start: u8;
    static __kernel_end: u8;
}

/// Physical (= virtual) range of this kernel's image, `.bss` included: what
/// a loaded kernel must not overwrite.
#[must_use]
pub fn kernel_image() -> Range<u64> {
    // Both symbols are defined by linker.ld; only their addresses are taken.
    (&raw const __kernel_start as u64)..(&raw const __kernel_end as u64)
}

/// Jumps to `entry` in 64-bit mode with interrupts off, RSP =
/// `stack_pointer`, RDI = `arg0`, RSI = `arg1`, the FS/GS bases zeroed and
/// this crate's page tables still in CR3. Never returns.
///
/// Panics (before anything is changed) if application processors were
/// started: they would keep running this kernel's code in memory the next
/// kernel owns.
///
/// # Safety
/// `entry` must be the entry point of code that is mapped executable in the
/// identity map and expects exactly this state; `stack_pointer` must point
/// into memory reserved for it; everything `arg0`/`arg1` point to must stay
/// valid for as long as that code uses it. No Rust code of this kernel runs
/// afterwards, so nothing borrowed is ever given back.
pub unsafe fn jump(entry: u64, stack_pointer: u64, arg0: u64, arg1: u64) -> ! {
    assert!(smp::cpu_count() == 1, "handoff with {} CPUs running", smp::cpu_count());
    for m in SEGMENT_BASE_MSRS {
        // SAFETY: these MSRs exist on every x86_64 CPU; zero is a valid base.
        // GS (this crate's per-CPU pointer) is not used after this point.
        unsafe { msr::wrmsr(m, 0) };
    }
    // SAFETY: the caller vouches for `entry`, the stack and the arguments.
    unsafe {
        asm!(
            "cli",
            "mov rsp, {stack}",
            "jmp {entry}",
            stack = in(reg) stack_pointer,
            entry = in(reg) entry,
            in("rdi") arg0,
            in("rsi") arg1,
            options(noreturn)
        )
    }
}
