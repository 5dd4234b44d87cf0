//! The AP start-up trampoline: 16-bit real mode -> 32-bit protected mode ->
//! long mode, then a call into Rust.
//!
//! A start-up IPI starts the AP in real mode at `vector << 12`, so the code is
//! copied to a page below 1 MiB. It is position independent: it derives its
//! base from CS, and everything address-dependent (far-jump targets, CR3,
//! stack, entry point) comes from the data block the boot CPU fills in with
//! [`Trampoline::prepare`] before each start-up.

use core::arch::global_asm;

use crate::{gdt, phys};

/// Offset of the data block in the page (right after the first short jump).
const DATA_OFF: u64 = 8;
// Data block fields (offsets from the start of the page).
const D_GDTR: u64 = DATA_OFF; // u16 limit + u32 base (LGDT operand, o32)
const D_FAR32: u64 = DATA_OFF + 8; // u32 offset + u16 selector -> 32-bit code
const D_FAR64: u64 = DATA_OFF + 16; // u32 offset + u16 selector -> 64-bit code
const D_CR3: u64 = DATA_OFF + 24; // u32: the page tables are below 4 GiB
const D_STACK: u64 = DATA_OFF + 32; // u64 stack top
const D_ARG: u64 = DATA_OFF + 40; // u64 first argument of the entry (CPU index)
const D_ENTRY: u64 = DATA_OFF + 48; // u64 extern "C" fn(usize) -> !
const D_SIZE: u64 = 56;

/// CR0 bits INIT leaves set that must go: CD (30) and NW (29).
const CR0_CACHE_OFF: u32 = 0x6000_0000;

global_asm!(
    r#"
.section .rodata.clockhal_boot_ap_trampoline, "a"
.balign 16
.global clockhal_boot_ap_start
clockhal_boot_ap_start:
.code16
    jmp clockhal_boot_ap_16         /* SIPI enters at offset 0; data follows */
.balign 8
.global clockhal_boot_ap_data
clockhal_boot_ap_data:
    .skip {d_size}

clockhal_boot_ap_16:
    cli
    cld
    movw %cs, %ax
    movw %ax, %ds
    movzwl %ax, %ebx
    shll $4, %ebx                   /* ebx = physical base of this page */
    lgdtl {d_gdtr}
    movl %cr0, %eax
    andl $~{cr0_cache_off}, %eax    /* caches on */
    orl $1, %eax                    /* PE */
    movl %eax, %cr0
    ljmpl *{d_far32}

.code32
.global clockhal_boot_ap_32
clockhal_boot_ap_32:
    movw ${data}, %ax
    movw %ax, %ds
    movw %ax, %es
    movw %ax, %ss
    movl %cr4, %eax
    orl $0x20, %eax                 /* PAE only, like the boot CPU */
    movl %eax, %cr4
    movl {d_cr3}(%ebx), %eax
    movl %eax, %cr3
    movl $0xC0000080, %ecx          /* IA32_EFER.LME */
    rdmsr
    orl $0x100, %eax
    wrmsr
    movl %cr0, %eax
    orl $0x80000000, %eax           /* PG: long mode active */
    movl %eax, %cr0
    ljmp *{d_far64}(%ebx)

.code64
.global clockhal_boot_ap_64
clockhal_boot_ap_64:
    movw ${data}, %ax
    movw %ax, %ds
    movw %ax, %es
    movw %ax, %ss
    movw %ax, %fs
    movw %ax, %gs
    movq {d_stack}(%rbx), %rsp
    movq {d_arg}(%rbx), %rdi
    movq {d_entry}(%rbx), %rax
    xorl %ebp, %ebp
    call *%rax
    ud2
.global clockhal_boot_ap_end
clockhal_boot_ap_end:
"#,
    d_gdtr = const D_GDTR,
    d_far32 = const D_FAR32,
    d_far64 = const D_FAR64,
    d_cr3 = const D_CR3,
    d_stack = const D_STACK,
    d_arg = const D_ARG,
    d_entry = const D_ENTRY,
    d_size = const D_SIZE,
    cr0_cache_off = const CR0_CACHE_OFF,
    data = const gdt::DATA,
    options(att_syntax)
);

extern "C" {
    static clockhal_boot_ap_start: u8;
    static clockhal_boot_ap_data: u8;
    static clockhal_boot_ap_32: u8;
    static clockhal_boot_ap_64: u8;
    static clockhal_boot_ap_end: u8;
}

/// Offset of a trampoline symbol from its start.
fn offset_of(symbol: *const u8) -> u64 {
    symbol as u64 - core::ptr::addr_of!(clockhal_boot_ap_start) as u64
}

fn code_len() -> u64 {
    offset_of(core::ptr::addr_of!(clockhal_boot_ap_end))
}

/// A low page holding the trampoline; restores the page's old contents on drop.
pub(crate) struct Trampoline {
    page: u64,
    saved: [u8; 4096],
}

impl Trampoline {
    /// Copies the trampoline to `page` (4 KiB aligned, in 0x1000..0xA0000),
    /// saving what was there.
    ///
    /// # Safety
    /// `page` must be RAM that nothing else uses until the trampoline is
    /// dropped (and no AP executes it after that).
    pub(crate) unsafe fn install(page: u64) -> Trampoline {
        assert!(page % 4096 == 0 && (0x1000..0xA0000).contains(&page));
        let len = code_len() as usize;
        assert!(len <= 4096, "AP trampoline larger than a page");
        assert_eq!(offset_of(core::ptr::addr_of!(clockhal_boot_ap_data)), DATA_OFF);
        let mut saved = [0u8; 4096];
        // SAFETY: the caller gives us the page; the source is our own rodata.
        unsafe {
            core::ptr::copy_nonoverlapping(page as *const u8, saved.as_mut_ptr(), 4096);
            let code = core::ptr::addr_of!(clockhal_boot_ap_start);
            core::ptr::copy_nonoverlapping(code, page as *mut u8, len);
        }
        let tramp = Trampoline { page, saved };
        // SAFETY: the 6-byte GDT pseudo-descriptor is our own rodata.
        let gdtr: [u8; 6] = unsafe { phys::read(gdt::pseudo_descriptor_addr()) };
        tramp.write(D_GDTR, gdtr);
        let far32 = page + offset_of(core::ptr::addr_of!(clockhal_boot_ap_32));
        tramp.write(D_FAR32, far_pointer(far32, gdt::CODE32));
        let far64 = page + offset_of(core::ptr::addr_of!(clockhal_boot_ap_64));
        tramp.write(D_FAR64, far_pointer(far64, gdt::CODE64));
        tramp.write(D_CR3, current_cr3() as u32);
        tramp
    }

    /// Start-up IPI vector: the page number.
    pub(crate) fn vector(&self) -> u32 {
        (self.page >> 12) as u32
    }

    /// Sets what the next AP started through this page runs:
    /// `entry(arg)` on a stack ending at `stack_top`.
    pub(crate) fn prepare(&self, entry: extern "C" fn(usize) -> !, arg: usize, stack_top: u64) {
        self.write(D_STACK, stack_top);
        self.write(D_ARG, arg as u64);
        self.write(D_ENTRY, entry as usize as u64);
        // The IPI is an MMIO/MSR write; make the data visible before it.
        core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
    }

    fn write<T>(&self, offset: u64, value: T) {
        assert!(offset + core::mem::size_of::<T>() as u64 <= code_len());
        // SAFETY: inside the installed trampoline page (checked above), which
        // `install`'s caller gave to us.
        unsafe { core::ptr::write_unaligned((self.page + offset) as *mut T, value) };
    }
}

impl Drop for Trampoline {
    fn drop(&mut self) {
        // SAFETY: the page was handed to us by `install`'s caller until now.
        unsafe { core::ptr::copy_nonoverlapping(self.saved.as_ptr(), self.page as *mut u8, 4096) };
    }
}

/// An m16:32 far pointer: 32-bit offset, then the selector.
fn far_pointer(target: u64, selector: u16) -> [u8; 6] {
    let mut far = [0u8; 6];
    far[..4].copy_from_slice(&(target as u32).to_le_bytes());
    far[4..].copy_from_slice(&selector.to_le_bytes());
    far
}

fn current_cr3() -> u64 {
    let cr3: u64;
    // SAFETY: reading CR3 at CPL 0 has no side effects.
    unsafe { core::arch::asm!("mov {}, cr3", out(reg) cr3, options(nomem, nostack, preserves_flags)) };
    cr3
}
