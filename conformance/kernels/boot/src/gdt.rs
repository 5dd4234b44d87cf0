//! The one GDT every CPU uses: flat 32-bit code (for the AP trampoline's
//! protected-mode step), flat data, and 64-bit code.
//!
//! No TSS: the kernel never leaves ring 0 and uses no IST stacks (so a stack
//! overflow is not caught; stacks are sized generously instead).
//! The selector constants below must match the descriptor order in the asm.

use core::arch::global_asm;

/// Flat 32-bit code segment.
pub(crate) const CODE32: u16 = 0x08;
/// Flat data segment (also used for SS in long mode).
pub(crate) const DATA: u16 = 0x10;
/// 64-bit code segment.
pub(crate) const CODE64: u16 = 0x18;

global_asm!(
    r#"
.section .rodata.clockhal_boot_gdt, "a"
.balign 16
.global clockhal_boot_gdt
clockhal_boot_gdt:
    .quad 0                     /* null */
    .quad 0x00CF9A000000FFFF    /* 0x08 CODE32: 32-bit code, base 0, 4 GiB */
    .quad 0x00CF92000000FFFF    /* 0x10 DATA: data, base 0, 4 GiB */
    .quad 0x00AF9A000000FFFF    /* 0x18 CODE64: 64-bit code (L=1) */
clockhal_boot_gdt_end:

/* Pseudo-descriptor with a 32-bit base: usable by LGDT in 32-bit mode and,
 * with an operand-size prefix, in real mode (the AP trampoline). Long mode
 * keeps the zero-extended base, which is correct: the GDT is below 4 GiB. */
.balign 4
.global clockhal_boot_gdt_ptr
clockhal_boot_gdt_ptr:
    .word clockhal_boot_gdt_end - clockhal_boot_gdt - 1
    .long clockhal_boot_gdt
"#,
    options(att_syntax)
);

extern "C" {
    static clockhal_boot_gdt_ptr: [u8; 6];
}

/// Physical (= virtual) address of the 6-byte GDT pseudo-descriptor.
pub(crate) fn pseudo_descriptor_addr() -> u64 {
    core::ptr::addr_of!(clockhal_boot_gdt_ptr) as u64
}
