//! Boot page tables: identity map of the low 4 GiB, 2 MiB pages.
//!
//! One PML4 entry -> one PDPT with 4 entries -> 4 page directories of 512
//! 2 MiB pages each, except that the first 2 MiB are one page table of 4 KiB
//! pages: a kernel these tables are handed to ([`crate::handoff`]) can then
//! map single pages there (Hermit maps its SMP start-up page at 0x8000 and
//! refuses a 2 MiB page above it). 0..3 GiB is write-back (RAM); 3..4 GiB is uncached
//! (PCD|PWT) because that is where the MMIO lives: HPET at 0xFED00000, the
//! local APIC at 0xFEE00000, IOAPIC, PCI BARs. Nothing above 4 GiB is mapped.
//! All CPUs share these tables (the APs load the boot CPU's CR3).
//!
//! The tables are built by 32-bit code before paging is on, so this module is
//! assembly: `clockhal_boot_build_page_tables` is called by the PVH entry.

use core::arch::global_asm;

/// First 2 MiB page (index into the 2048 PD entries) mapped uncached: 3 GiB.
const FIRST_UNCACHED_PAGE: u32 = 3 * 512;
/// PD entry flags: present, writable, 2 MiB page.
const PDE_FLAGS: u32 = 0x83;
/// Table entry flags: present, writable (PD -> page table, PT -> 4 KiB page).
const TABLE_FLAGS: u32 = 0x03;
/// Extra PD entry flags for MMIO: page-level write-through + cache disable.
const PDE_UNCACHED: u32 = 0x18;

global_asm!(
    r#"
.section .bss.clockhal_boot_page_tables, "aw", @nobits
.balign 4096
.global clockhal_boot_pml4
clockhal_boot_pml4: .skip 4096
clockhal_boot_pdpt: .skip 4096
clockhal_boot_pd:   .skip 4 * 4096
clockhal_boot_pt0:  .skip 4096

.section .text.clockhal_boot_entry, "ax"
.code32
/* Fills the (already zeroed) tables. 32-bit mode, paging off. Clobbers eax, ecx, edi. */
.global clockhal_boot_build_page_tables
clockhal_boot_build_page_tables:
    movl $clockhal_boot_pdpt, %eax
    orl $3, %eax
    movl %eax, clockhal_boot_pml4

    movl $clockhal_boot_pd, %eax
    orl $3, %eax
    movl $clockhal_boot_pdpt, %edi
    xorl %ecx, %ecx
1:
    movl %eax, (%edi,%ecx,8)
    addl $4096, %eax
    incl %ecx
    cmpl $4, %ecx
    jb 1b

    movl $clockhal_boot_pd, %edi
    xorl %ecx, %ecx
2:
    movl %ecx, %eax
    shll $21, %eax
    orl ${flags}, %eax
    cmpl ${first_uncached}, %ecx
    jb 3f
    orl ${uncached}, %eax
3:
    movl %eax, (%edi,%ecx,8)
    incl %ecx
    cmpl $2048, %ecx
    jb 2b

    /* 0..2 MiB: 4 KiB pages instead of the first 2 MiB page. */
    movl $clockhal_boot_pt0, %edi
    xorl %ecx, %ecx
4:
    movl %ecx, %eax
    shll $12, %eax
    orl ${table}, %eax
    movl %eax, (%edi,%ecx,8)
    incl %ecx
    cmpl $512, %ecx
    jb 4b
    movl $clockhal_boot_pt0, %eax
    orl ${table}, %eax
    movl %eax, clockhal_boot_pd
    ret
.code64
"#,
    flags = const PDE_FLAGS,
    table = const TABLE_FLAGS,
    first_uncached = const FIRST_UNCACHED_PAGE,
    uncached = const PDE_UNCACHED,
    options(att_syntax)
);
