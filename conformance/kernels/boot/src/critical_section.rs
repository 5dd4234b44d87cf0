//! The `critical-section` implementation for kernels on this crate
//! (feature `critical-section`): acquiring saves RFLAGS.IF and executes
//! `cli`, releasing sets IF again only if it was set. Interrupts are the
//! only concurrency on the boot CPU (the kernels run with IF clear except
//! inside [`crate::irq::wait`] / [`crate::irq::halt`]), so masking them is
//! mutual exclusion there. Not a lock across CPUs: code holding a
//! critical section must run on the boot CPU only (the APs of these
//! kernels never use one).

use core::arch::asm;

struct BootCriticalSection;
critical_section::set_impl!(BootCriticalSection);

/// RFLAGS.IF.
const IF: u64 = 1 << 9;

// SAFETY: `acquire` leaves interrupts masked until the matching `release`,
// which restores the state `acquire` saw; nested sections see IF clear and
// restore it clear, so only the outermost release can set it again. With
// interrupts masked nothing else runs on this CPU (see the module docs on
// other CPUs).
unsafe impl critical_section::Impl for BootCriticalSection {
    unsafe fn acquire() -> bool {
        let flags: u64;
        // SAFETY: reads RFLAGS through the stack and clears IF; touches no
        // memory but the push/pop slot.
        unsafe { asm!("pushfq", "pop {f}", "cli", f = out(reg) flags, options(nomem)) };
        flags & IF != 0
    }

    unsafe fn release(was_enabled: bool) {
        if was_enabled {
            // SAFETY: IF was set when the section began, so the code that
            // entered it ran with interrupts on and its handlers are
            // installed; this only restores that state.
            unsafe { asm!("sti", options(nomem, nostack)) };
        }
    }
}
