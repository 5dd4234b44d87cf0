//! Exception and interrupt entry: one IDT of 256 vectors shared by all CPUs.
//!
//! Vectors 32..=255 are interrupts: they go to [`crate::irq::dispatch`]
//! (the kernel's registered handler, then the LAPIC EOI), at any CPL.
//! #GP and #UD at an MSR-probe instruction resume at the probe's fault stub
//! (see [`crate::msr`]); every exception at CPL3 goes to [`crate::ring3`]
//! (its system calls, and ring-3 faults, which end that run). Every other
//! exception prints the vector, error code,
//! RIP, CR2 and CPU and exits QEMU with [`EXIT_FAILURE`](crate::EXIT_FAILURE).
//! Interrupts are enabled only where a kernel asks ([`crate::irq::wait`]).

use core::arch::{asm, global_asm};
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};

use crate::{cpu, gdt, msr, smp};

/// Exceptions: vectors 0..31, each with its own stub.
const EXCEPTIONS: usize = 32;
/// The whole IDT.
const VECTORS: usize = 256;
/// Bytes per interrupt stub (vectors 32..255; `.balign`ed, see the asm).
const IRQ_STUB_SIZE: u64 = 16;
const GP: u64 = 13;
const UD: u64 = 6;

// Stubs push a dummy error code where the CPU pushes none, then the vector,
// so the Rust handler always sees the same frame.
global_asm!(
    r#"
.section .text.clockhal_boot_isr, "ax"
.code64
.macro CLOCKHAL_ISR_NOERR n
clockhal_boot_isr\n:
    pushq $0
    pushq $\n
    jmp clockhal_boot_isr_common
.endm
.macro CLOCKHAL_ISR_ERR n
clockhal_boot_isr\n:
    pushq $\n
    jmp clockhal_boot_isr_common
.endm
CLOCKHAL_ISR_NOERR 0
CLOCKHAL_ISR_NOERR 1
CLOCKHAL_ISR_NOERR 2
CLOCKHAL_ISR_NOERR 3
CLOCKHAL_ISR_NOERR 4
CLOCKHAL_ISR_NOERR 5
CLOCKHAL_ISR_NOERR 6
CLOCKHAL_ISR_NOERR 7
CLOCKHAL_ISR_ERR 8
CLOCKHAL_ISR_NOERR 9
CLOCKHAL_ISR_ERR 10
CLOCKHAL_ISR_ERR 11
CLOCKHAL_ISR_ERR 12
CLOCKHAL_ISR_ERR 13
CLOCKHAL_ISR_ERR 14
CLOCKHAL_ISR_NOERR 15
CLOCKHAL_ISR_NOERR 16
CLOCKHAL_ISR_ERR 17
CLOCKHAL_ISR_NOERR 18
CLOCKHAL_ISR_NOERR 19
CLOCKHAL_ISR_NOERR 20
CLOCKHAL_ISR_ERR 21
CLOCKHAL_ISR_NOERR 22
CLOCKHAL_ISR_NOERR 23
CLOCKHAL_ISR_NOERR 24
CLOCKHAL_ISR_NOERR 25
CLOCKHAL_ISR_NOERR 26
CLOCKHAL_ISR_NOERR 27
CLOCKHAL_ISR_NOERR 28
CLOCKHAL_ISR_ERR 29
CLOCKHAL_ISR_ERR 30
CLOCKHAL_ISR_NOERR 31

/* Interrupt vectors 32..255: one 16-byte stub each (push 0 = 2 bytes, push
 * vector <= 5, jmp rel32 = 5), so stub n is at
 * clockhal_boot_irq_stubs + 16 * (n - 32). */
.balign 16
.global clockhal_boot_irq_stubs
clockhal_boot_irq_stubs:
.set clockhal_boot_irq_vector, 32
.rept 224
.balign 16
    pushq $0
    pushq $clockhal_boot_irq_vector
    jmp clockhal_boot_isr_common
.set clockhal_boot_irq_vector, clockhal_boot_irq_vector + 1
.endr

/* Saves the caller-saved registers (the handler saves the rest), passes the
 * frame in rdi. The stack stays 16-byte aligned at the call: the CPU aligns
 * it before pushing 5 words, plus error, vector and 9 registers = 16 words. */
clockhal_boot_isr_common:
    pushq %rax
    pushq %rcx
    pushq %rdx
    pushq %rsi
    pushq %rdi
    pushq %r8
    pushq %r9
    pushq %r10
    pushq %r11
    cld
    movq %rsp, %rdi
    call clockhal_boot_exception
    popq %r11
    popq %r10
    popq %r9
    popq %r8
    popq %rdi
    popq %rsi
    popq %rdx
    popq %rcx
    popq %rax
    addq $16, %rsp                  /* vector + error code */
    iretq

.section .rodata.clockhal_boot_isr_table, "a"
.balign 8
.global clockhal_boot_isr_table
clockhal_boot_isr_table:
    .quad clockhal_boot_isr0, clockhal_boot_isr1, clockhal_boot_isr2, clockhal_boot_isr3
    .quad clockhal_boot_isr4, clockhal_boot_isr5, clockhal_boot_isr6, clockhal_boot_isr7
    .quad clockhal_boot_isr8, clockhal_boot_isr9, clockhal_boot_isr10, clockhal_boot_isr11
    .quad clockhal_boot_isr12, clockhal_boot_isr13, clockhal_boot_isr14, clockhal_boot_isr15
    .quad clockhal_boot_isr16, clockhal_boot_isr17, clockhal_boot_isr18, clockhal_boot_isr19
    .quad clockhal_boot_isr20, clockhal_boot_isr21, clockhal_boot_isr22, clockhal_boot_isr23
    .quad clockhal_boot_isr24, clockhal_boot_isr25, clockhal_boot_isr26, clockhal_boot_isr27
    .quad clockhal_boot_isr28, clockhal_boot_isr29, clockhal_boot_isr30, clockhal_boot_isr31
"#,
    options(att_syntax)
);

extern "C" {
    static clockhal_boot_isr_table: [u64; EXCEPTIONS];
    static clockhal_boot_irq_stubs: u8;
}

/// What `clockhal_boot_isr_common` leaves on the stack.
#[repr(C)]
struct ExceptionFrame {
    r11: u64,
    r10: u64,
    r9: u64,
    r8: u64,
    rdi: u64,
    rsi: u64,
    rdx: u64,
    rcx: u64,
    rax: u64,
    vector: u64,
    error: u64,
    rip: u64,
    cs: u64,
    rflags: u64,
    rsp: u64,
    ss: u64,
}

/// Set by the first unrecoverable exception.
static REPORTING: AtomicBool = AtomicBool::new(false);

#[unsafe(no_mangle)]
extern "C" fn clockhal_boot_exception(frame: &mut ExceptionFrame) {
    // An interrupt (at any CPL: the kernel may enable interrupts around
    // ring 3 too): the registered handler, EOI, back where it hit.
    if frame.vector >= EXCEPTIONS as u64 {
        crate::irq::dispatch(frame.vector as u8);
        return;
    }
    if frame.cs & 3 == 3 {
        // An exception in ring 3 (a system call or a fault): the kernel
        // continues where it entered ring 3 (see ring3).
        let k = crate::ring3::user_trap(&crate::ring3::Trap {
            vector: frame.vector,
            error: frame.error,
            rip: frame.rip,
            rsp: frame.rsp,
            rflags: frame.rflags,
            rax: frame.rax,
            rdi: frame.rdi,
            rsi: frame.rsi,
            rdx: frame.rdx,
        });
        frame.rip = k.rip;
        frame.cs = k.cs;
        frame.rflags = k.rflags;
        frame.rsp = k.rsp;
        frame.ss = k.ss;
        return;
    }
    if frame.vector == GP || frame.vector == UD {
        if let Some(resume) = msr::fixup_for(frame.rip) {
            frame.rip = resume;
            return;
        }
    }
    // A fault while reporting a fault (or two CPUs faulting at once): just exit.
    if REPORTING.swap(true, Ordering::AcqRel) {
        crate::exit_qemu(crate::EXIT_FAILURE);
    }
    crate::println!(
        "clockhal-boot: EXCEPTION {} ({}) on cpu {}: error={:#x} rip={:#x} cs={:#x} rflags={:#x} rsp={:#x} cr2={:#x}\n  rax={:#x} rcx={:#x} rdx={:#x} rsi={:#x} rdi={:#x}",
        frame.vector,
        name(frame.vector),
        smp::current_cpu(),
        frame.error,
        frame.rip,
        frame.cs,
        frame.rflags,
        frame.rsp,
        cpu::cr2(),
        frame.rax,
        frame.rcx,
        frame.rdx,
        frame.rsi,
        frame.rdi,
    );
    crate::exit_qemu(crate::EXIT_FAILURE)
}

fn name(vector: u64) -> &'static str {
    const NAMES: [&str; 21] = [
        "#DE divide",
        "#DB debug",
        "NMI",
        "#BP breakpoint",
        "#OF overflow",
        "#BR bound",
        "#UD invalid opcode",
        "#NM no FPU",
        "#DF double fault",
        "coprocessor overrun",
        "#TS invalid TSS",
        "#NP segment not present",
        "#SS stack fault",
        "#GP general protection",
        "#PF page fault",
        "reserved",
        "#MF x87",
        "#AC alignment",
        "#MC machine check",
        "#XM SIMD",
        "#VE virtualization",
    ];
    NAMES.get(vector as usize).copied().unwrap_or("reserved/other")
}

/// 16-byte interrupt gate descriptors.
#[repr(C, align(16))]
struct Idt(UnsafeCell<[[u64; 2]; VECTORS]>);

// SAFETY: written once by the boot CPU in `init`, before any other CPU runs
// or any CPU loads it; read-only (by the hardware) afterwards.
unsafe impl Sync for Idt {}

static IDT: Idt = Idt(UnsafeCell::new([[0; 2]; VECTORS]));

/// Fills the IDT. Boot CPU only, once, before [`load`] runs anywhere.
pub(crate) fn init() {
    // SAFETY: the table holds 32 handler addresses emitted by the asm above.
    let handlers = unsafe { &*core::ptr::addr_of!(clockhal_boot_isr_table) };
    // The interrupt stubs: 224 of IRQ_STUB_SIZE bytes from this symbol.
    let irq_stubs = core::ptr::addr_of!(clockhal_boot_irq_stubs) as u64;
    let irq_handlers = (EXCEPTIONS as u64..VECTORS as u64).map(|v| irq_stubs + IRQ_STUB_SIZE * (v - EXCEPTIONS as u64));
    // SAFETY: only the boot CPU runs now and nothing has loaded the IDT yet,
    // so this is the only reference to the table.
    let idt = unsafe { &mut *IDT.0.get() };
    for (gate, handler) in idt.iter_mut().zip(handlers.iter().copied().chain(irq_handlers)) {
        // Present, DPL 0, 64-bit interrupt gate (IF cleared on entry), IST 0.
        let type_attr: u64 = 0x8E;
        gate[0] =
            (handler & 0xFFFF) | (u64::from(gdt::CODE64) << 16) | (type_attr << 40) | ((handler >> 16) & 0xFFFF) << 48;
        gate[1] = handler >> 32;
    }
}

/// Loads the IDT on the executing CPU.
pub(crate) fn load() {
    #[repr(C, packed)]
    struct Pointer {
        limit: u16,
        base: u64,
    }
    let pointer = Pointer {
        limit: (core::mem::size_of::<Idt>() - 1) as u16,
        base: IDT.0.get() as u64,
    };
    // SAFETY: the IDT is 'static and fully initialized by `init` (run on the
    // boot CPU before any CPU calls `load`); LIDT reads the 10-byte pointer.
    unsafe { asm!("lidt [{}]", in(reg) &pointer, options(readonly, nostack, preserves_flags)) };
}
