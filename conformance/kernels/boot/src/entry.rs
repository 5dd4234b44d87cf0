//! PVH entry: from QEMU's 32-bit hand-off to the first Rust function.
//!
//! QEMU (`-kernel kernel.elf`) finds the `XEN_ELFNOTE_PHYS32_ENTRY` note and
//! jumps to `clockhal_boot_pvh_start` in flat 32-bit protected mode, paging
//! off, interrupts off, EBX = physical address of `hvm_start_info`. We zero
//! `.bss`, build the page tables, enable PAE + EFER.LME + paging, load the
//! GDT, far-jump to 64-bit code and call `clockhal_boot_rust_start(ebx)`.

use core::arch::global_asm;

use crate::gdt;

/// Boot CPU stack size. 128 KiB: the demo kernel's boot path (probe,
/// `into_clock`, the comparison and workload steps) already reached the
/// whole 64 KiB (its painted high-water mark: 65,528 bytes) and its async
/// step overran it into the `.bss` below (no guard page).
pub(crate) const BOOT_STACK_SIZE: usize = 128 * 1024;

global_asm!(
    r#"
/* ELF note: name "Xen", type 18 (XEN_ELFNOTE_PHYS32_ENTRY), desc = entry.
 * 4-byte alignment matters: QEMU aligns the note name by p_align. */
.section .note.pvh, "a", @note
.balign 4
.long 4
.long 4
.long 18
.asciz "Xen"
.long clockhal_boot_pvh_start
.balign 4

.section .bss.clockhal_boot_stack, "aw", @nobits
.balign 16
.global clockhal_boot_stack_bottom
clockhal_boot_stack_bottom:
.skip {stack_size}
clockhal_boot_stack_top:

.section .text.clockhal_boot_entry, "ax"
.code32
.global clockhal_boot_pvh_start
clockhal_boot_pvh_start:
    cli
    cld
    movl %ebx, %esi                 /* hvm_start_info; kept until the Rust call */

    /* .bss first: the page tables and the stack live there. */
    movl $__bss_start, %edi
    movl $__bss_end, %ecx
    subl %edi, %ecx
    xorl %eax, %eax
    rep stosb

    /* Paint the boot stack (crate::stack measures its high-water mark). */
    movl $clockhal_boot_stack_bottom, %edi
    movl $clockhal_boot_stack_top, %ecx
    subl %edi, %ecx
    movb ${paint}, %al
    rep stosb

    movl $clockhal_boot_stack_top, %esp
    call clockhal_boot_build_page_tables

    movl %cr4, %eax
    orl $0x20, %eax                 /* CR4.PAE (and nothing else: no OSFXSR/OSXSAVE) */
    movl %eax, %cr4
    movl $clockhal_boot_pml4, %eax
    movl %eax, %cr3
    movl $0xC0000080, %ecx          /* IA32_EFER */
    rdmsr
    orl $0x100, %eax                /* LME */
    wrmsr
    movl %cr0, %eax
    orl $0x80000001, %eax           /* PG | PE: long mode becomes active */
    movl %eax, %cr0

    lgdt clockhal_boot_gdt_ptr
    ljmp ${code64}, $clockhal_boot_long_mode

.code64
clockhal_boot_long_mode:
    movw ${data}, %ax
    movw %ax, %ds
    movw %ax, %es
    movw %ax, %ss
    movw %ax, %fs
    movw %ax, %gs
    movq $clockhal_boot_stack_top, %rsp
    xorl %ebp, %ebp
    movl %esi, %edi                 /* zero-extends: start_info < 4 GiB */
    call clockhal_boot_rust_start
    ud2
"#,
    stack_size = const BOOT_STACK_SIZE,
    paint = const crate::stack::PAINT,
    code64 = const gdt::CODE64,
    data = const gdt::DATA,
    options(att_syntax)
);
