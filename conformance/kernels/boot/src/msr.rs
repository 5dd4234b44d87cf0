//! MSR access, including probing MSRs that may not exist.
//!
//! [`try_rdmsr`]/[`try_wrmsr`] run RDMSR/WRMSR at fixed instruction addresses;
//! if that instruction raises #GP (absent MSR under KVM, bad value) or #UD,
//! the exception handler sees the faulting RIP in [`fixup_for`]'s table and
//! resumes at a stub that returns "faulted". No global "expecting a fault"
//! flag is involved, so probing is safe on every CPU at once and re-entrant.
//!
//! Under TCG unknown MSRs read as 0 without faulting: a successful read is not
//! a feature test. Use CPUID to decide what exists.

use core::arch::{asm, global_asm};

use crate::cpu;

global_asm!(
    r#"
.section .text.clockhal_boot_msr, "ax"
.code64

/* u32 clockhal_boot_rdmsr_probe(u32 msr [edi], u64 *out [rsi]): 0 = ok, 1 = fault */
.global clockhal_boot_rdmsr_probe
clockhal_boot_rdmsr_probe:
    movl %edi, %ecx
.global clockhal_boot_rdmsr_insn
clockhal_boot_rdmsr_insn:
    rdmsr
    shlq $32, %rdx
    orq %rdx, %rax
    movq %rax, (%rsi)
    xorl %eax, %eax
    ret

/* u32 clockhal_boot_wrmsr_probe(u32 msr [edi], u64 value [rsi]): 0 = ok, 1 = fault */
.global clockhal_boot_wrmsr_probe
clockhal_boot_wrmsr_probe:
    movl %edi, %ecx
    movl %esi, %eax
    movq %rsi, %rdx
    shrq $32, %rdx
.global clockhal_boot_wrmsr_insn
clockhal_boot_wrmsr_insn:
    wrmsr
    xorl %eax, %eax
    ret

/* Resume point after a recovered fault: same stack as at the instruction. */
.global clockhal_boot_msr_fault
clockhal_boot_msr_fault:
    movl $1, %eax
    ret
"#,
    options(att_syntax)
);

extern "C" {
    fn clockhal_boot_rdmsr_probe(msr: u32, out: *mut u64) -> u32;
    fn clockhal_boot_wrmsr_probe(msr: u32, value: u64) -> u32;
    static clockhal_boot_rdmsr_insn: u8;
    static clockhal_boot_wrmsr_insn: u8;
    static clockhal_boot_msr_fault: u8;
}

/// If `rip` is one of the probing instructions, where to resume after #GP/#UD.
pub(crate) fn fixup_for(rip: u64) -> Option<u64> {
    let rd = core::ptr::addr_of!(clockhal_boot_rdmsr_insn) as u64;
    let wr = core::ptr::addr_of!(clockhal_boot_wrmsr_insn) as u64;
    (rip == rd || rip == wr).then_some(core::ptr::addr_of!(clockhal_boot_msr_fault) as u64)
}

/// Reads `msr`, or `None` if RDMSR faulted (#GP: the MSR does not exist).
///
/// Works on any CPU started by this crate, concurrently. Cost: one RDMSR plus
/// a call; a fault costs an exception round trip. Requires the crate's IDT
/// (do not replace it). Under TCG absent MSRs read as `Some(0)`.
#[must_use]
pub fn try_rdmsr(msr: u32) -> Option<u64> {
    let mut value = 0u64;
    // SAFETY: the probe only executes RDMSR and writes `value`, a live local;
    // a fault is turned into a return value by the IDT's fixup.
    let faulted = unsafe { clockhal_boot_rdmsr_probe(msr, &mut value) };
    (faulted == 0).then_some(value)
}

/// Writes `value` to `msr`; `false` if WRMSR faulted (absent MSR, reserved
/// bits, bad value), in which case nothing was written.
///
/// Works on any CPU started by this crate, concurrently. Requires the crate's
/// IDT (do not replace it).
///
/// # Safety
/// Writing an MSR can break memory safety: e.g. EFER, PAT, GS base (owned by
/// this crate), or a paravirtual-clock MSR that makes the hypervisor write
/// into guest memory at the given address. The caller must ensure the write
/// (if it succeeds) is sound: any memory it tells the hypervisor to use must
/// be reserved for that purpose for as long as the setting is in effect.
pub unsafe fn try_wrmsr(msr: u32, value: u64) -> bool {
    // SAFETY: the caller vouches for the effect of the write; a fault is
    // turned into a return value by the IDT's fixup.
    unsafe { clockhal_boot_wrmsr_probe(msr, value) == 0 }
}

/// Writes an MSR that is known to exist.
///
/// # Safety
/// `msr` must exist (or the CPU takes an unrecoverable #GP) and the write
/// must be sound, as for [`try_wrmsr`].
pub(crate) unsafe fn wrmsr(msr: u32, value: u64) {
    // SAFETY: the caller guarantees the MSR exists and the write is sound.
    unsafe {
        asm!(
            "wrmsr",
            in("ecx") msr,
            in("eax") value as u32,
            in("edx") (value >> 32) as u32,
            options(nostack, preserves_flags),
        );
    }
}

/// Reads an MSR that is known to exist.
///
/// # Safety
/// `msr` must exist, or the CPU takes an unrecoverable #GP.
pub(crate) unsafe fn rdmsr(msr: u32) -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: the caller guarantees the MSR exists; RDMSR has no memory effects.
    unsafe {
        asm!("rdmsr", in("ecx") msr, out("eax") lo, out("edx") hi, options(nomem, nostack, preserves_flags));
    }
    (u64::from(hi) << 32) | u64::from(lo)
}

/// IA32_TSC_AUX: what RDTSCP/RDPID return in ECX/the register.
const MSR_TSC_AUX: u32 = 0xC000_0103;

/// Stores the CPU index in IA32_TSC_AUX when RDTSCP exists, so a kernel can
/// read (TSC, CPU) atomically with RDTSCP.
pub(crate) fn set_tsc_aux(cpu_index: usize) {
    if cpu::has_rdtscp() {
        // SAFETY: TSC_AUX only changes what RDTSCP/RDPID report; no memory
        // effects. A fault (not expected when CPUID lists RDTSCP) is ignored.
        let _ = unsafe { try_wrmsr(MSR_TSC_AUX, cpu_index as u64) };
    }
}
