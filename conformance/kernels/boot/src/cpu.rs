//! Thin wrappers over single x86 instructions (CPUID, RDTSC, port I/O, HLT).

use core::arch::asm;

/// CPUID output registers.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cpuid {
    pub eax: u32,
    pub ebx: u32,
    pub ecx: u32,
    pub edx: u32,
}

/// Executes CPUID for `leaf`/`subleaf`.
pub(crate) fn cpuid(leaf: u32, subleaf: u32) -> Cpuid {
    let (eax, ebx, ecx, edx): (u32, u32, u32, u32);
    // SAFETY: CPUID has no memory effects. RBX is reserved by LLVM, so it is
    // saved in a scratch register and swapped back.
    unsafe {
        asm!(
            "mov {tmp:r}, rbx",
            "cpuid",
            "xchg {tmp:r}, rbx",
            tmp = out(reg) ebx,
            inout("eax") leaf => eax,
            inout("ecx") subleaf => ecx,
            out("edx") edx,
            options(nomem, nostack, preserves_flags),
        );
    }
    Cpuid { eax, ebx, ecx, edx }
}

/// Highest standard CPUID leaf.
pub(crate) fn max_leaf() -> u32 {
    cpuid(0, 0).eax
}

/// Whether CPUID reports RDTSCP (80000001h:EDX[27]).
pub(crate) fn has_rdtscp() -> bool {
    cpuid(0x8000_0000, 0).eax >= 0x8000_0001 && cpuid(0x8000_0001, 0).edx & (1 << 27) != 0
}

/// Initial APIC ID of the executing CPU (CPUID 1:EBX[31:24]).
pub(crate) fn initial_apic_id() -> u32 {
    cpuid(1, 0).ebx >> 24
}

/// Reads the time-stamp counter (not serialized; fine for timeouts).
#[inline(always)]
pub(crate) fn rdtsc() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: RDTSC only reads the counter (CR4.TSD is never set here).
    unsafe { asm!("rdtsc", out("eax") lo, out("edx") hi, options(nomem, nostack, preserves_flags)) };
    (u64::from(hi) << 32) | u64::from(lo)
}

/// Writes a byte to an I/O port.
///
/// # Safety
/// The port must be one whose write has no memory-safety consequences
/// (device registers this crate owns: COM1, isa-debug-exit).
#[inline(always)]
pub(crate) unsafe fn outb(port: u16, value: u8) {
    // SAFETY: the caller vouches for the port; OUT touches no memory.
    unsafe { asm!("out dx, al", in("dx") port, in("al") value, options(nomem, nostack, preserves_flags)) };
}

/// Reads a byte from an I/O port.
///
/// # Safety
/// As for [`outb`]: reading the port must have no side effects the caller
/// does not own.
#[inline(always)]
pub(crate) unsafe fn inb(port: u16) -> u8 {
    let value: u8;
    // SAFETY: the caller vouches for the port; IN touches no memory.
    unsafe { asm!("in al, dx", out("al") value, in("dx") port, options(nomem, nostack, preserves_flags)) };
    value
}

/// Writes a dword to an I/O port.
///
/// # Safety
/// As for [`outb`].
#[inline(always)]
pub(crate) unsafe fn outl(port: u16, value: u32) {
    // SAFETY: the caller vouches for the port; OUT touches no memory.
    unsafe { asm!("out dx, eax", in("dx") port, in("eax") value, options(nomem, nostack, preserves_flags)) };
}

/// Reads CR2 (the faulting address of the last #PF).
pub(crate) fn cr2() -> u64 {
    let value: u64;
    // SAFETY: reading CR2 at CPL 0 has no side effects.
    unsafe { asm!("mov {}, cr2", out(reg) value, options(nomem, nostack, preserves_flags)) };
    value
}

/// Reads CR0.
pub(crate) fn cr0() -> u64 {
    let value: u64;
    // SAFETY: reading CR0 at CPL 0 has no side effects.
    unsafe { asm!("mov {}, cr0", out(reg) value, options(nomem, nostack, preserves_flags)) };
    value
}

/// Reads CR3 (the page-table root).
pub(crate) fn cr3() -> u64 {
    let value: u64;
    // SAFETY: reading CR3 at CPL 0 has no side effects.
    unsafe { asm!("mov {}, cr3", out(reg) value, options(nomem, nostack, preserves_flags)) };
    value
}

/// Loads CR3 (and so flushes the TLB's non-global entries).
///
/// # Safety
/// `value` must point at page tables that map everything the kernel uses
/// (the current code, stack and data) as before.
pub(crate) unsafe fn write_cr3(value: u64) {
    // SAFETY: the caller guarantees the tables keep the kernel mapped.
    unsafe { asm!("mov cr3, {}", in(reg) value, options(nostack, preserves_flags)) };
}

/// Drops the TLB entry of the page holding `addr` on this CPU.
pub(crate) fn invlpg(addr: u64) {
    // SAFETY: invalidating a TLB entry only makes the next access walk the
    // page tables again; it changes no mapping.
    unsafe { asm!("invlpg [{}]", in(reg) addr, options(nostack, preserves_flags)) };
}

/// Stops this CPU for good (interrupts off, HLT forever).
pub(crate) fn halt_forever() -> ! {
    loop {
        // SAFETY: CLI/HLT only stop this CPU; nothing is ever resumed.
        unsafe { asm!("cli", "hlt", options(nomem, nostack)) };
    }
}
