//! Ring 3 for test kernels: run a function of the kernel image at CPL3
//! until it makes a system call or faults, then continue in the kernel.
//!
//! [`init`] (boot CPU, once) sets up:
//! * a GDT with the boot GDT's descriptors (same selectors) plus user data
//!   and 64-bit user code (DPL 3), and a TSS whose RSP0 is a dedicated
//!   stack: interrupts and exceptions from ring 3 switch to it;
//! * the system call: ring 3 calls a stub whose `ud2` raises #UD; the
//!   exception handler recognises the stub's address and treats it as a
//!   system call. Neither SYSCALL nor `int 0x80` work here: under this
//!   project's KVM host (`kvm_pvm`) the SYSCALL entry ran with user
//!   privilege and `int 0x80` raised #UD, while exceptions from ring 3 and
//!   IRETQ work under both KVM and TCG;
//! * paging: the kernel image below `.bss` (code, constants, initialised
//!   data) user-readable and read-only, so that ring-3 code can be the
//!   kernel's own functions; and a user region at [`USER_BASE`] of 4 KiB
//!   pages the kernel maps with [`map_user_page`] (stacks, shared pages).
//!
//! [`enter`] starts `entry(arg)` at CPL3; it returns [`Exit::Syscall`] when
//! ring 3 makes a system call ([`syscall`]) — continue it with [`resume`] —
//! or [`Exit::Fault`] when ring 3 faults (#GP, #PF, #UD, ...): the IDT
//! handler ends the ring-3 run and reports the fault instead of stopping
//! the machine. One CPU runs ring 3 at a time (the context is a static).
//!
//! Simplifications of a test kernel: no SMEP/SMAP; interrupts stay off in
//! ring 3; the kernel image is readable from ring 3; the GS base (the
//! per-CPU pointer) is saved before and restored after every ring-3 run,
//! since returning to ring 3 may null GS.

use core::arch::{asm, global_asm};
use core::cell::UnsafeCell;
use core::fmt;
use core::mem::offset_of;
use core::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use crate::{cpu, gdt, smp};

/// Start of the user region: PDPT entry 4 of the identity map's PML4 entry.
pub const USER_BASE: u64 = 4 << 30;
/// Pages in the user region.
pub const USER_PAGES: usize = 512;

/// User data (DPL 3).
const USER_DATA: u16 = 0x20 | 3;
/// User 64-bit code (DPL 3).
const USER_CODE: u16 = 0x28 | 3;
/// The TSS.
const TSS_SELECTOR: u16 = 0x30;
/// Ring-3 RFLAGS: reserved bit 1 only (interrupts off, IOPL 0).
const USER_RFLAGS: u64 = 0x2;

const PTE_P: u64 = 1;
const PTE_RW: u64 = 1 << 1;
const PTE_US: u64 = 1 << 2;
const PTE_CACHE: u64 = 0x18; // PWT | PCD
const PTE_PS: u64 = 1 << 7;
const PTE_ADDR: u64 = 0x000F_FFFF_FFFF_F000;
const CR0_WP: u64 = 1 << 16;

/// Why ring 3 is not available, or a call is out of order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ring3Error {
    /// [`init`] must run on the boot CPU.
    NotBootCpu,
    /// CR0.WP is set: the kernel could not write its own data once the
    /// image is mapped read-only for ring 3.
    WriteProtect,
    /// The image below `.bss` does not fit in the first 2 MiB page.
    ImageTooLarge,
    /// The boot page tables are not the ones this crate builds.
    UnexpectedPaging,
    /// [`init`] has not run.
    NotInitialised,
    /// A ring-3 run is already in progress.
    Busy,
    /// [`resume`] without a pending system call.
    NotInSyscall,
    /// A page index outside the user region.
    NoSuchPage,
}

impl fmt::Display for Ring3Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Ring3Error::NotBootCpu => "ring 3 is set up on the boot CPU only",
            Ring3Error::WriteProtect => "CR0.WP is set",
            Ring3Error::ImageTooLarge => "kernel image below .bss exceeds 2 MiB",
            Ring3Error::UnexpectedPaging => "unexpected boot page tables",
            Ring3Error::NotInitialised => "ring3::init has not run",
            Ring3Error::Busy => "a ring-3 run is in progress",
            Ring3Error::NotInSyscall => "no pending system call to resume",
            Ring3Error::NoSuchPage => "page index outside the user region",
        })
    }
}

/// Why ring 3 stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// A system call: `nr` (RAX) and the arguments (RDI, RSI, RDX). Continue
    /// with [`resume`].
    Syscall {
        /// RAX.
        nr: u64,
        /// RDI, RSI, RDX.
        args: [u64; 3],
    },
    /// An exception at CPL3; the ring-3 run is over.
    Fault {
        /// Exception vector (13 #GP, 14 #PF, 6 #UD, ...).
        vector: u64,
        /// Error code (0 where the CPU pushes none).
        error: u64,
        /// Faulting RIP.
        rip: u64,
        /// CR2 (the faulting address of a #PF).
        cr2: u64,
    },
}

/// The ring-3 context, shared with the assembly below.
#[repr(C)]
struct Context {
    kernel_rsp: u64,
    gs_base: u64,
    user_rip: u64,
    user_rsp: u64,
    user_rflags: u64,
    rbx: u64,
    rbp: u64,
    r12: u64,
    r13: u64,
    r14: u64,
    r15: u64,
    rax: u64,
    rdi: u64,
    /// 1 = syscall, 2 = fault.
    kind: u64,
    nr: u64,
    args: [u64; 3],
    vector: u64,
    error: u64,
    fault_rip: u64,
    cr2: u64,
}

struct ContextCell(UnsafeCell<Context>);

// SAFETY: only the CPU holding `RUNNING` (one at a time) touches the
// context, in `enter`/`resume`, the assembly they call, and `user_fault`
// (which runs on that CPU while its ring-3 code is stopped in a fault).
unsafe impl Sync for ContextCell {}

static CTX: ContextCell = ContextCell(UnsafeCell::new(Context {
    kernel_rsp: 0,
    gs_base: 0,
    user_rip: 0,
    user_rsp: 0,
    user_rflags: 0,
    rbx: 0,
    rbp: 0,
    r12: 0,
    r13: 0,
    r14: 0,
    r15: 0,
    rax: 0,
    rdi: 0,
    kind: 0,
    nr: 0,
    args: [0; 3],
    vector: 0,
    error: 0,
    fault_rip: 0,
    cr2: 0,
}));

/// 0 = not set up, 1 = setting up, 2 = ready.
static STATE: AtomicU8 = AtomicU8::new(0);
/// Set while a ring-3 run (entered, not yet faulted or abandoned) exists.
static RUNNING: AtomicBool = AtomicBool::new(false);
/// Set while ring 3 waits in a system call.
static IN_SYSCALL: AtomicBool = AtomicBool::new(false);

global_asm!(
    r#"
.section .text.clockhal_boot_ring3, "ax"
.code64
/* Enters ring 3 with the context's user state (IRETQ); "returns" when ring
 * 3 makes a system call or faults. Saves and restores the callee-saved
 * registers and the GS base. */
.global clockhal_boot_ring3_switch
clockhal_boot_ring3_switch:
    pushq %rbx
    pushq %rbp
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, {ctx}+{k_rsp}(%rip)
    movl $0xC0000101, %ecx          /* IA32_GS_BASE */
    rdmsr
    movl %eax, {ctx}+{gs}(%rip)
    movl %edx, {ctx}+{gs}+4(%rip)
    pushq ${user_ss}
    pushq {ctx}+{u_rsp}(%rip)
    pushq {ctx}+{u_rflags}(%rip)
    pushq ${user_cs}
    pushq {ctx}+{u_rip}(%rip)
    movq {ctx}+{rbx}(%rip), %rbx
    movq {ctx}+{rbp}(%rip), %rbp
    movq {ctx}+{r12}(%rip), %r12
    movq {ctx}+{r13}(%rip), %r13
    movq {ctx}+{r14}(%rip), %r14
    movq {ctx}+{r15}(%rip), %r15
    movq {ctx}+{rax}(%rip), %rax
    movq {ctx}+{rdi}(%rip), %rdi
    xorl %ecx, %ecx                 /* no kernel values leak to ring 3 */
    xorl %edx, %edx
    xorl %esi, %esi
    xorl %r8d, %r8d
    xorl %r9d, %r9d
    xorl %r10d, %r10d
    xorl %r11d, %r11d
    iretq

/* Ring 3's system call: RAX = number, RDI/RSI/RDX = arguments; the #UD
 * (at a known address) takes it to the kernel, which resumes it after the
 * ud2 with the answer in RAX. */
.global clockhal_boot_ring3_syscall_stub
clockhal_boot_ring3_syscall_stub:
    ud2
    ret

/* The exception handler's IRETQ target for a trap from ring 3 (CPL0, the
 * ring-3 callee-saved registers still live): keeps them for `resume`. */
.global clockhal_boot_ring3_trap_return
clockhal_boot_ring3_trap_return:
    movq %rbx, {ctx}+{rbx}(%rip)
    movq %rbp, {ctx}+{rbp}(%rip)
    movq %r12, {ctx}+{r12}(%rip)
    movq %r13, {ctx}+{r13}(%rip)
    movq %r14, {ctx}+{r14}(%rip)
    movq %r15, {ctx}+{r15}(%rip)
/* Back to the caller of clockhal_boot_ring3_switch. */
clockhal_boot_ring3_return:
    movq {ctx}+{k_rsp}(%rip), %rsp
    movl $0xC0000101, %ecx
    movl {ctx}+{gs}(%rip), %eax
    movl {ctx}+{gs}+4(%rip), %edx
    wrmsr
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbp
    popq %rbx
    ret
"#,
    ctx = sym CTX,
    k_rsp = const offset_of!(Context, kernel_rsp),
    gs = const offset_of!(Context, gs_base),
    u_rip = const offset_of!(Context, user_rip),
    u_rsp = const offset_of!(Context, user_rsp),
    u_rflags = const offset_of!(Context, user_rflags),
    rbx = const offset_of!(Context, rbx),
    rbp = const offset_of!(Context, rbp),
    r12 = const offset_of!(Context, r12),
    r13 = const offset_of!(Context, r13),
    r14 = const offset_of!(Context, r14),
    r15 = const offset_of!(Context, r15),
    rax = const offset_of!(Context, rax),
    rdi = const offset_of!(Context, rdi),
    user_ss = const USER_DATA,
    user_cs = const USER_CODE,
    options(att_syntax)
);

extern "C" {
    fn clockhal_boot_ring3_switch();
    fn clockhal_boot_ring3_syscall_stub();
    fn clockhal_boot_ring3_trap_return();
    static __kernel_start: u8;
    static __bss_start: u8;
}

/// 4 KiB-aligned page table.
#[repr(C, align(4096))]
struct Table(UnsafeCell<[u64; 512]>);

// SAFETY: written only by `init` (boot CPU, once, `STATE` = setting up) and
// `map_user_page` (the caller serialises it, see its contract); the MMU
// reads it.
unsafe impl Sync for Table {}

/// Replaces the first 2 MiB page of the identity map with 4 KiB pages.
static IMAGE_PT: Table = Table(UnsafeCell::new([0; 512]));
/// The user region's page directory and page table.
static USER_PD: Table = Table(UnsafeCell::new([0; 512]));
static USER_PT: Table = Table(UnsafeCell::new([0; 512]));

/// GDT: the boot GDT's four descriptors, user data, user code, and the
/// 16-byte TSS descriptor.
#[repr(C, align(16))]
struct Gdt(UnsafeCell<[u64; 9]>);
// SAFETY: written by `init` only, before LGDT; afterwards only the CPU
// touches it (LTR sets the TSS busy bit).
unsafe impl Sync for Gdt {}
static GDT: Gdt = Gdt(UnsafeCell::new([0; 9]));

/// The 64-bit TSS (104 bytes) as dwords: RSP0 at byte 4, I/O map base at
/// byte 102 (= 104: no I/O bitmap, so ring 3 has no port access).
#[repr(C, align(16))]
struct Tss(UnsafeCell<[u32; 26]>);
// SAFETY: as for the GDT.
unsafe impl Sync for Tss {}
static TSS: Tss = Tss(UnsafeCell::new([0; 26]));

/// The stack exceptions from ring 3 run on (TSS.RSP0).
#[repr(C, align(16))]
struct Stack(UnsafeCell<[u8; 16 * 1024]>);
// SAFETY: only the CPU uses it, as the RSP0 stack.
unsafe impl Sync for Stack {}
static RSP0_STACK: Stack = Stack(UnsafeCell::new([0; 16 * 1024]));

/// Sets up ring 3 on the boot CPU (idempotent).
pub fn init() -> Result<(), Ring3Error> {
    if smp::current_cpu() != 0 {
        return Err(Ring3Error::NotBootCpu);
    }
    match STATE.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {}
        Err(2) => return Ok(()),
        Err(_) => return Err(Ring3Error::Busy),
    }
    let result = setup();
    STATE.store(if result.is_ok() { 2 } else { 0 }, Ordering::Release);
    result
}

fn setup() -> Result<(), Ring3Error> {
    if cpu::cr0() & CR0_WP != 0 {
        return Err(Ring3Error::WriteProtect);
    }
    let image_start = core::ptr::addr_of!(__kernel_start) as u64;
    let image_end = core::ptr::addr_of!(__bss_start) as u64;
    if image_end > 2 << 20 {
        return Err(Ring3Error::ImageTooLarge);
    }
    setup_paging(image_start & !0xFFF, (image_end + 0xFFF) & !0xFFF)?;
    setup_gdt_tss();
    Ok(())
}

/// Makes the identity map's first 2 MiB 4 KiB pages (splitting a 2 MiB
/// page, or editing the boot tables' page table) — those of
/// `[image_start, image_end)` user-readable, read-only — and hangs the
/// user region below PDPT entry 4.
fn setup_paging(image_start: u64, image_end: u64) -> Result<(), Ring3Error> {
    let pml4 = cpu::cr3() & PTE_ADDR;
    // SAFETY: CR3 holds the boot page tables, built by this crate's entry
    // code in `.bss`, which the identity map makes addressable at their
    // physical addresses; only the boot CPU runs this (once), and the
    // entries changed keep every existing translation (same physical page,
    // same cacheability, supervisor access unchanged; CR0.WP is clear, so
    // read-only pages stay writable for the kernel).
    unsafe {
        let pml4 = pml4 as *mut u64;
        let pdpt = (*pml4 & PTE_ADDR) as *mut u64;
        if *pml4 & PTE_P == 0 || *pdpt & PTE_P == 0 || *pdpt.add(4) != 0 {
            return Err(Ring3Error::UnexpectedPaging);
        }
        let pd0 = (*pdpt & PTE_ADDR) as *mut u64;
        let first = *pd0;
        let image_page = |addr: u64| (image_start..image_end).contains(&addr);
        if first & (PTE_P | PTE_PS) == (PTE_P | PTE_PS) {
            // One 2 MiB page: split it into this crate's page table.
            if first & PTE_ADDR != 0 {
                return Err(Ring3Error::UnexpectedPaging);
            }
            let image = &mut *IMAGE_PT.0.get();
            for (i, e) in image.iter_mut().enumerate() {
                let addr = (i as u64) << 12;
                let access = if image_page(addr) { PTE_US } else { PTE_RW };
                *e = addr | PTE_P | access | (first & PTE_CACHE);
            }
            *pd0 = table_addr(&IMAGE_PT) | PTE_P | PTE_RW | PTE_US;
        } else if first & PTE_P != 0 {
            // Already 4 KiB pages (the boot tables map the first 2 MiB so,
            // for kernels that map single pages there): edit them in place.
            let pt = (first & PTE_ADDR) as *mut u64;
            for i in 0..512 {
                let addr = (i as u64) << 12;
                if *pt.add(i) & (PTE_ADDR | PTE_P) != addr | PTE_P {
                    return Err(Ring3Error::UnexpectedPaging);
                }
            }
            for i in 0..512 {
                let addr = (i as u64) << 12;
                if image_page(addr) {
                    *pt.add(i) = (*pt.add(i) & !PTE_RW) | PTE_US;
                }
            }
            *pd0 |= PTE_US;
        } else {
            return Err(Ring3Error::UnexpectedPaging);
        }
        (*USER_PD.0.get())[0] = table_addr(&USER_PT) | PTE_P | PTE_RW | PTE_US;
        // Upper levels allow user access; the leaves decide.
        *pml4 |= PTE_US;
        *pdpt |= PTE_US;
        *pdpt.add(4) = table_addr(&USER_PD) | PTE_P | PTE_RW | PTE_US;
        cpu::write_cr3(cpu::cr3());
    }
    Ok(())
}

fn table_addr(t: &Table) -> u64 {
    t.0.get() as u64 // identity mapped: virtual = physical
}

/// Builds the GDT and TSS and loads them (LGDT, LTR) on this CPU.
fn setup_gdt_tss() {
    let tss = TSS.0.get() as u64;
    let rsp0 = RSP0_STACK.0.get() as u64 + 16 * 1024;
    // SAFETY: only `init` (boot CPU, once) writes these, before loading them.
    unsafe {
        let t = &mut *TSS.0.get();
        t[1] = rsp0 as u32;
        t[2] = (rsp0 >> 32) as u32;
        t[25] = 104 << 16; // I/O map base = limit + 1: no bitmap
        let g = &mut *GDT.0.get();
        g[1] = 0x00CF_9A00_0000_FFFF; // 0x08 code32 (as the boot GDT)
        g[2] = 0x00CF_9200_0000_FFFF; // 0x10 data
        g[3] = 0x00AF_9A00_0000_FFFF; // 0x18 code64
        g[4] = 0x00CF_F200_0000_FFFF; // 0x20 user data, DPL 3
        g[5] = 0x00AF_FA00_0000_FFFF; // 0x28 user code64, DPL 3
        g[6] = 103 | ((tss & 0xFF_FFFF) << 16) | (0x89 << 40) | (((tss >> 24) & 0xFF) << 56);
        g[7] = tss >> 32;
    }
    #[repr(C, packed)]
    struct Pointer {
        limit: u16,
        base: u64,
    }
    let pointer = Pointer {
        limit: (core::mem::size_of::<Gdt>() - 1) as u16,
        base: GDT.0.get() as u64,
    };
    // SAFETY: the GDT keeps the boot GDT's selectors (0x08, 0x10, 0x18) with
    // identical descriptors, so the loaded CS/SS/DS stay valid; the TSS
    // descriptor points at the static TSS, which LTR marks busy.
    unsafe {
        asm!("lgdt [{}]", in(reg) &pointer, options(readonly, nostack, preserves_flags));
        asm!("ltr {0:x}", in(reg) TSS_SELECTOR, options(nostack, preserves_flags));
    }
}

/// Maps user-region page `index` (at `USER_BASE + index * 4096`) to the
/// physical page `phys`, read-only or writable for ring 3.
///
/// # Safety
/// `phys` is a 4 KiB page that ring 3 may read (and write, if `writable`)
/// for as long as it stays mapped, e.g. a page the kernel reserved for it.
/// Not concurrently with another `map_user_page` or a ring-3 run.
pub unsafe fn map_user_page(index: usize, phys: u64, writable: bool) -> Result<(), Ring3Error> {
    if STATE.load(Ordering::Acquire) != 2 {
        return Err(Ring3Error::NotInitialised);
    }
    if index >= USER_PAGES {
        return Err(Ring3Error::NoSuchPage);
    }
    let rw = if writable { PTE_RW } else { 0 };
    // SAFETY: the caller serialises page-table updates; the entry maps only
    // the page the caller vouches for.
    unsafe {
        (*USER_PT.0.get())[index] = (phys & PTE_ADDR) | PTE_P | PTE_US | rw;
        cpu::invlpg(user_addr(index));
    }
    Ok(())
}

/// The user address of user-region page `index`.
pub const fn user_addr(index: usize) -> u64 {
    USER_BASE + (index as u64) * 4096
}

/// Starts `entry(arg)` at CPL3 on `stack_top` (16-byte aligned, in a
/// writable user page) and runs it until it makes a system call or faults.
///
/// `entry` must be code of the kernel image (user-readable after
/// [`init`]) that touches only user-accessible memory; anything else
/// faults, and the fault is the answer.
pub fn enter(entry: extern "C" fn(u64) -> !, arg: u64, stack_top: u64) -> Result<Exit, Ring3Error> {
    if STATE.load(Ordering::Acquire) != 2 {
        return Err(Ring3Error::NotInitialised);
    }
    if smp::current_cpu() != 0 {
        return Err(Ring3Error::NotBootCpu);
    }
    if RUNNING.swap(true, Ordering::AcqRel) {
        return Err(Ring3Error::Busy);
    }
    // SAFETY: this CPU holds RUNNING, so it is the only user of the context.
    unsafe {
        let c = &mut *CTX.0.get();
        c.user_rip = entry as usize as u64;
        // As after a call: the ABI wants RSP = 8 mod 16 at function entry.
        c.user_rsp = (stack_top & !0xF) - 8;
        c.user_rflags = USER_RFLAGS;
        c.rdi = arg;
        c.rax = 0;
        c.rbx = 0;
        c.rbp = 0;
        c.r12 = 0;
        c.r13 = 0;
        c.r14 = 0;
        c.r15 = 0;
    }
    Ok(run())
}

/// Continues ring 3 after [`Exit::Syscall`], with `ret` as the system
/// call's result (RAX).
pub fn resume(ret: u64) -> Result<Exit, Ring3Error> {
    if !IN_SYSCALL.swap(false, Ordering::AcqRel) {
        return Err(Ring3Error::NotInSyscall);
    }
    // SAFETY: this CPU holds RUNNING (a system call is pending on it).
    unsafe { (*CTX.0.get()).rax = ret };
    Ok(run())
}

/// Ends a ring-3 run stopped in a system call without resuming it.
pub fn abandon() {
    if IN_SYSCALL.swap(false, Ordering::AcqRel) {
        RUNNING.store(false, Ordering::Release);
    }
}

fn run() -> Exit {
    // SAFETY: the context holds a complete user state (set by `enter`, or
    // saved by the system call entry), the GDT/TSS/IDT gate/page tables are set up
    // (`STATE` = 2), and the assembly returns here with the callee-saved
    // registers, the stack and the GS base restored.
    unsafe { clockhal_boot_ring3_switch() };
    // SAFETY: ring 3 is stopped; this CPU holds RUNNING.
    let c = unsafe { &*CTX.0.get() };
    if c.kind == 1 {
        IN_SYSCALL.store(true, Ordering::Release);
        Exit::Syscall { nr: c.nr, args: c.args }
    } else {
        RUNNING.store(false, Ordering::Release);
        Exit::Fault {
            vector: c.vector,
            error: c.error,
            rip: c.fault_rip,
            cr2: c.cr2,
        }
    }
}

/// What the exception handler saw when ring 3 trapped.
pub(crate) struct Trap {
    pub vector: u64,
    pub error: u64,
    pub rip: u64,
    pub rsp: u64,
    pub rflags: u64,
    pub rax: u64,
    pub rdi: u64,
    pub rsi: u64,
    pub rdx: u64,
}

/// The CPL0 frame the exception handler's IRETQ uses to continue the
/// kernel where it entered ring 3.
pub(crate) struct KernelReturn {
    pub rip: u64,
    pub cs: u64,
    pub rflags: u64,
    pub rsp: u64,
    pub ss: u64,
}

/// #UD, as raised by the system call stub's `ud2`.
const UD: u64 = 6;

/// Handles an exception from ring 3 (called by the IDT handler): a #UD at
/// the system call stub is a system call (ring 3 continues after the
/// `ud2` on [`resume`]); anything else is a fault that ends the run.
pub(crate) fn user_trap(t: &Trap) -> KernelReturn {
    // SAFETY: ring 3 runs only under RUNNING, on this CPU, and is stopped
    // in this exception.
    let c = unsafe { &mut *CTX.0.get() };
    let stub = clockhal_boot_ring3_syscall_stub as *const () as u64;
    if t.vector == UD && t.rip == stub {
        c.kind = 1;
        c.nr = t.rax;
        c.args = [t.rdi, t.rsi, t.rdx];
        c.user_rip = stub + 2; // past the ud2, to the stub's ret
        c.user_rsp = t.rsp;
        c.user_rflags = t.rflags;
    } else {
        c.kind = 2;
        c.vector = t.vector;
        c.error = t.error;
        c.fault_rip = t.rip;
        c.cr2 = cpu::cr2();
    }
    KernelReturn {
        rip: clockhal_boot_ring3_trap_return as *const () as u64,
        cs: u64::from(gdt::CODE64),
        rflags: USER_RFLAGS,
        rsp: c.kernel_rsp,
        ss: u64::from(gdt::DATA),
    }
}

/// A system call from ring 3: `nr` in RAX, `args` in RDI, RSI, RDX; the
/// kernel's answer ([`resume`]'s `ret`) comes back in RAX.
///
/// # Safety
/// Only from code running at CPL3 under [`enter`] (at CPL0 the stub's
/// `ud2` is a kernel #UD, which stops the machine).
#[inline(always)]
pub unsafe fn syscall(nr: u64, args: [u64; 3]) -> u64 {
    let ret: u64;
    // SAFETY: the caller runs at CPL3 under `enter`: the stub's #UD stops
    // it and the kernel resumes it after the `ud2` with the callee-saved
    // registers and the stack intact; every other register is declared
    // clobbered. The call pushes on the user stack (no red zone on this
    // target).
    unsafe {
        asm!(
            "call {stub}",
            stub = sym clockhal_boot_ring3_syscall_stub,
            inlateout("rax") nr => ret,
            in("rdi") args[0],
            in("rsi") args[1],
            in("rdx") args[2],
            clobber_abi("C"),
        );
    }
    ret
}
