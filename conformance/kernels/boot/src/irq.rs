//! Interrupts on the boot CPU: handlers per vector, the LAPIC EOI, the
//! legacy PIC remapped and masked, and a bounded wait with interrupts on.
//!
//! Interrupts stay disabled everywhere except inside [`wait`] (`sti`, a few
//! instructions, `cli`), so an interrupt can only preempt that loop: the
//! rest of the kernel (the serial lock, the suite's timed loops) never
//! runs with IF set. Devices deliver to the boot CPU only (the IOAPIC
//! routes in [`crate::ioapic`] name its APIC ID; the LAPIC timer is the
//! boot CPU's own).
//!
//! [`dispatch`] (from the IDT's vectors 32..=255) runs the handler
//! registered for the vector, then writes the LAPIC EOI. The spurious
//! vector ([`SPURIOUS_VECTOR`]) and the remapped PIC's vectors get no EOI
//! (the SDM and the 8259 say none is due), only a count.

use core::arch::asm;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::lapic::Lapic;

/// The LAPIC's spurious-interrupt vector (SVR bits 7:0).
pub const SPURIOUS_VECTOR: u8 = 0xFF;
/// The vector of [`halt`]'s backstop (the LAPIC timer, one-shot).
pub const BACKSTOP_VECTOR: u8 = 0xEE;
/// Where the legacy PIC's 16 inputs are remapped (then masked): 0x20..0x2F,
/// so a stray 8259 interrupt never lands on an exception vector.
pub const PIC_BASE_VECTOR: u8 = 0x20;

const XAPIC_EOI: u64 = 0xB0;
const X2APIC_EOI: u32 = 0x80B;
const XAPIC_TPR: u64 = 0x80;
const X2APIC_TPR: u32 = 0x808;

/// The boot CPU's LAPIC for EOI: 0 = not set up, 1 = x2APIC, else the
/// xAPIC MMIO base (found once in [`init`]: reading IA32_APIC_BASE per
/// EOI would be a VM exit each).
static EOI_LAPIC: AtomicU64 = AtomicU64::new(0);

/// One registered handler: `fn(usize)` and its argument.
struct Slot {
    func: AtomicUsize,
    arg: AtomicUsize,
    count: AtomicU64,
}

static SLOTS: [Slot; 256] = [const {
    Slot {
        func: AtomicUsize::new(0),
        arg: AtomicUsize::new(0),
        count: AtomicU64::new(0),
    }
}; 256];

/// Interrupts that came with no handler registered (besides spurious/PIC).
static UNHANDLED: AtomicU32 = AtomicU32::new(0);

/// Sets up interrupt delivery on the boot CPU: the 8259 PICs remapped to
/// [`PIC_BASE_VECTOR`] and fully masked, PIT channel 0 stopped (its IRQ 0
/// shares IOAPIC input 2 with QEMU's HPET), the LAPIC software-enabled
/// with [`SPURIOUS_VECTOR`] and task priority 0. Returns `false` without
/// a usable local APIC (then no interrupt can be delivered).
///
/// Call on the boot CPU, with interrupts disabled (they stay so).
pub fn init() -> bool {
    // SAFETY: ports 0x20/0x21/0xA0/0xA1 are the 8259 pair on every PC
    // platform QEMU emulates (absent on microvm without a PIC: writes are
    // dropped). ICW1..ICW4 remap, then OCW1 masks every input; nothing
    // else in these kernels uses the PIC.
    unsafe {
        outb(0x20, 0x11);
        outb(0xA0, 0x11);
        outb(0x21, PIC_BASE_VECTOR);
        outb(0xA1, PIC_BASE_VECTOR + 8);
        outb(0x21, 4); // slave on IR2
        outb(0xA1, 2);
        outb(0x21, 1); // 8086 mode
        outb(0xA1, 1);
        outb(0x21, 0xFF);
        outb(0xA1, 0xFF);
    }
    // SAFETY: ports 0x43/0x40 are the PIT's mode register and channel 0.
    // Channel 0, lobyte/hibyte, mode 0 (interrupt on terminal count) with a
    // count of 1: one IRQ 0 edge now (dropped: the PIC is masked and the
    // I/O APIC input not yet routed), then none. A mode word alone would
    // not do: KVM's in-kernel PIT keeps its periodic timer until a count
    // is loaded (measured: 18.2 Hz interrupts kept arriving at I/O APIC
    // input 2). Nothing in these kernels uses channel 0 (clockhal's PIT
    // calibration uses channel 2, which this leaves alone).
    unsafe {
        outb(0x43, 0x30);
        outb(0x40, 1);
        outb(0x40, 0);
    }
    let Some(lapic) = Lapic::this_cpu() else {
        return false;
    };
    // Spurious vector 0xFF, software-enabled (bit 8).
    let svr = lapic.read(0xF0, 0x80F);
    lapic.write(0xF0, 0x80F, (svr & !0xFF) | (1 << 8) | u32::from(SPURIOUS_VECTOR));
    lapic.write(XAPIC_TPR, X2APIC_TPR, 0);
    EOI_LAPIC.store(
        match lapic {
            Lapic::X2Apic => 1,
            Lapic::XApic(base) => base,
        },
        Ordering::Release,
    );
    true
}

/// Switches the calling CPU's LAPIC to x2APIC mode (IA32_APIC_BASE bit
/// 10), where CPUID.1:ECX[21] offers it: its registers are then MSRs
/// (0x800..), and every user of [`Lapic`] in this crate follows (they
/// read the mode each time). There is no way back short of disabling the
/// APIC, so call it only once the CPU's IPIs are done (after
/// [`crate::smp::start_aps`]), before [`init`]. `Ok(true)`: switched;
/// `Ok(false)`: already in x2APIC mode; `Err`: not offered.
pub fn enable_x2apic() -> Result<bool, &'static str> {
    if crate::cpu::cpuid(1, 0).ecx & (1 << 21) == 0 {
        return Err("CPUID.1:ECX[21] clear: no x2APIC");
    }
    let Some(base) = crate::try_rdmsr(0x1B) else {
        return Err("IA32_APIC_BASE faulted");
    };
    if base & (1 << 11) == 0 {
        return Err("the LAPIC is disabled");
    }
    if base & (1 << 10) != 0 {
        return Ok(false);
    }
    // SAFETY: xAPIC -> x2APIC with the APIC enabled is the SDM's legal
    // transition (10.12.5); CPUID promises the mode. Nothing in flight
    // depends on the MMIO page (the caller's contract: IPIs are done).
    if !unsafe { crate::try_wrmsr(0x1B, base | (1 << 10)) } {
        return Err("the write to IA32_APIC_BASE faulted");
    }
    Ok(true)
}

/// Whether the calling CPU's LAPIC is in x2APIC mode.
pub fn x2apic_enabled() -> bool {
    matches!(Lapic::this_cpu(), Some(Lapic::X2Apic))
}

/// Registers `func(arg)` as the handler of `vector` (32..=255, not the
/// spurious vector); replaces any earlier one. It runs with interrupts
/// disabled, in interrupt context: it must not take locks the interrupted
/// code can hold (the serial console's included).
///
/// # Safety
/// `arg` must stay valid for what `func` does with it until
/// [`clear_handler`] for this vector returned (and the device can no
/// longer raise it, or interrupts are off).
pub unsafe fn set_handler(vector: u8, func: fn(usize), arg: usize) {
    let s = &SLOTS[usize::from(vector)];
    s.func.store(0, Ordering::Release);
    s.arg.store(arg, Ordering::Release);
    s.func.store(func as usize, Ordering::Release);
}

/// Removes the handler of `vector` (its interrupts are then counted as
/// unhandled, and EOI'd).
pub fn clear_handler(vector: u8) {
    SLOTS[usize::from(vector)].func.store(0, Ordering::Release);
}

/// Interrupts taken at `vector` so far.
pub fn count(vector: u8) -> u64 {
    SLOTS[usize::from(vector)].count.load(Ordering::Relaxed)
}

/// Interrupts taken at vectors without a handler (not counting spurious
/// and PIC vectors).
pub fn unhandled() -> u32 {
    UNHANDLED.load(Ordering::Relaxed)
}

/// The boot CPU's APIC ID (the destination for IOAPIC routes).
pub fn boot_apic_id() -> Option<u32> {
    crate::smp::apic_id(0).or_else(|| {
        (crate::smp::current_cpu() == 0)
            .then(|| Lapic::this_cpu().map(Lapic::id))
            .flatten()
    })
}

/// Lets pending interrupts be taken: `sti`, a write to port 0x80, a loop
/// of four `pause`s, `cli`. An interrupt is recognised only after the
/// instruction following `sti`. QEMU's TCG checks for one only where a
/// translation block begins: the loop's branches end blocks, so a straight
/// `sti; nop; cli` never takes one under TCG. This machine's KVM
/// (`kvm_pvm`) injects a pending interrupt only when the guest exits with
/// interrupts enabled: the port write (the POST diagnostic port, which
/// nothing decodes) is that exit (measured: without it the LAPIC timer's
/// interrupts never arrive under KVM). Returns soon when none is pending;
/// never blocks (no `hlt`: a device that never fires must not hang the
/// kernel). Boot CPU only.
pub fn wait() {
    // SAFETY: IF is set for a few instructions; every vector has a stub
    // and the handlers are interrupt-safe (see `set_handler`). The
    // stack is this CPU's own and interrupts nest no deeper than one.
    unsafe {
        asm!(
            "sti",
            "out 0x80, al",
            "mov {n:e}, 4",
            "2:",
            "pause",
            "dec {n:e}",
            "jnz 2b",
            "cli",
            n = out(reg) _,
            in("al") 0u8,
            options(nomem, nostack)
        )
    };
}

/// Halts until an interrupt (`sti; hlt; cli`: `sti`'s one-instruction
/// shadow means an interrupt already pending wakes the `hlt` at once),
/// bounded by a backstop: the boot CPU's LAPIC timer, one-shot at
/// [`BACKSTOP_VECTOR`], `ticks` at divide 16 (QEMU's APIC timer counts
/// 1 GHz: 62,500 ticks per ms). A halted vCPU gives its host CPU back, so
/// QEMU's device model thread (the HPET's timers run there) is not starved
/// by a spinning guest. The LAPIC timer is left disarmed and masked: a
/// kernel whose own device is the LAPIC timer must set it up again (and
/// must not use this while that device is armed). Boot CPU only.
pub fn halt(ticks: u32) {
    let Some(lapic) = Lapic::this_cpu() else {
        return wait();
    };
    // LVT timer: one-shot, unmasked, BACKSTOP_VECTOR; divide 16.
    lapic.write(0x320, 0x832, u32::from(BACKSTOP_VECTOR));
    lapic.write(0x3E0, 0x83E, 0b0011);
    lapic.write(0x380, 0x838, ticks.max(1));
    // SAFETY: as for `wait`; the backstop bounds the halt.
    unsafe { asm!("sti", "hlt", "cli", options(nomem, nostack)) };
    lapic.write(0x380, 0x838, 0);
    lapic.write(0x320, 0x832, (1 << 16) | u32::from(BACKSTOP_VECTOR));
}

/// Called by the IDT for vectors 32..=255, with interrupts disabled.
pub(crate) fn dispatch(vector: u8) {
    let slot = &SLOTS[usize::from(vector)];
    slot.count.fetch_add(1, Ordering::Relaxed);
    if vector == SPURIOUS_VECTOR || (PIC_BASE_VECTOR..PIC_BASE_VECTOR + 16).contains(&vector) {
        // No EOI for a spurious LAPIC interrupt (SDM 11.9) nor for a stray
        // 8259 one (masked inputs, IR7/IR15 spurious).
        return;
    }
    let func = slot.func.load(Ordering::Acquire);
    if func == 0 {
        if vector != BACKSTOP_VECTOR {
            UNHANDLED.fetch_add(1, Ordering::Relaxed);
        }
    } else {
        // SAFETY: `func` was stored from a `fn(usize)` by `set_handler`
        // (fn pointers and usize have the same size on x86_64).
        let f: fn(usize) = unsafe { core::mem::transmute::<usize, fn(usize)>(func) };
        f(slot.arg.load(Ordering::Acquire));
    }
    eoi();
}

/// Writes the boot CPU's LAPIC EOI register.
fn eoi() {
    match EOI_LAPIC.load(Ordering::Acquire) {
        0 => {}
        // SAFETY: x2APIC mode (found in `init`): the EOI MSR exists; writing
        // 0 ends the highest-priority in-service interrupt.
        1 => unsafe { crate::msr::wrmsr(X2APIC_EOI, 0) },
        // SAFETY: the xAPIC register page in the uncached identity map
        // (checked mapped by `Lapic::this_cpu`); EOI is write-only.
        base => unsafe { core::ptr::write_volatile((base + XAPIC_EOI) as *mut u32, 0) },
    }
}

/// # Safety
/// The port write must have no effect beyond the device the caller means.
unsafe fn outb(port: u16, value: u8) {
    // SAFETY: forwarded to the caller.
    unsafe { asm!("out dx, al", in("dx") port, in("al") value, options(nomem, nostack, preserves_flags)) };
}
