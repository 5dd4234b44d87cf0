//! blog_os's hardware interrupts (post 7): an IDT, the two 8259 PICs
//! remapped to vectors 32..47, and the PIT's channel 0 on IRQ 0 — which
//! here drives clockhal's watchdog, as an OS's timer would.

use clockhal::WatchdogEvent;
use core::sync::atomic::{AtomicU32, Ordering};
use pic8259::ChainedPics;
use spin::{Mutex, Once};
use x86_64::instructions::port::Port;
use x86_64::structures::idt::{InterruptDescriptorTable, InterruptStackFrame};

/// The master PIC's first vector (IRQ 0, the timer).
const PIC_1_OFFSET: u8 = 32;
const PIC_2_OFFSET: u8 = PIC_1_OFFSET + 8;
const TIMER_VECTOR: u8 = PIC_1_OFFSET;

/// The PIT's input clock.
const PIT_HZ: u32 = 1_193_182;
/// Timer interrupts per second.
pub const TIMER_HZ: u32 = 100;
/// A watchdog tick every 25 interrupts: every 250 ms, the period
/// `Clock::watchdog_tick` recommends.
pub const IRQS_PER_WATCHDOG_TICK: u32 = TIMER_HZ / 4;

static IDT: Once<InterruptDescriptorTable> = Once::new();
static PICS: Mutex<ChainedPics> =
    // SAFETY: the offsets map the PICs past the CPU's exception vectors.
    Mutex::new(unsafe { ChainedPics::new(PIC_1_OFFSET, PIC_2_OFFSET) });

/// What the timer interrupt did, for the kernel's log.
static IRQS: AtomicU32 = AtomicU32::new(0);
static JUDGED: AtomicU32 = AtomicU32::new(0);
static BUSY: AtomicU32 = AtomicU32::new(0);
static OTHER: AtomicU32 = AtomicU32::new(0);

/// The clock the timer interrupt ticks (set before interrupts are enabled).
static TICKED: Once<&'static clockhal::Clock<clockhal::x86::Native>> = Once::new();

/// Loads the IDT, remaps the PICs (only IRQ 0 unmasked) and programs the
/// PIT's channel 0 to [`TIMER_HZ`]. Interrupts stay disabled.
///
/// Interrupt-safe: no (reprograms the PICs: once, interrupts disabled).
pub fn init() {
    let idt = IDT.call_once(|| {
        let mut idt = InterruptDescriptorTable::new();
        idt[TIMER_VECTOR].set_handler_fn(timer_interrupt);
        idt
    });
    idt.load();
    let mut pics = PICS.lock();
    // SAFETY: the PICs exist on every PC-compatible machine and nothing
    // else programs them; interrupts are disabled (the loader enters the
    // kernel so, and we have not enabled them).
    unsafe {
        pics.initialize();
        // IRQ 0 only: no handler is installed for the others.
        pics.write_masks(0xfe, 0xff);
    }
    let divisor = (PIT_HZ / TIMER_HZ) as u16;
    let (mut command, mut channel0) = (Port::<u8>::new(0x43), Port::<u8>::new(0x40));
    // SAFETY: the PIT's command and channel-0 ports; channel 0 is the OS's
    // (clockhal only ever programs channel 2).
    unsafe {
        // Channel 0, low then high byte, mode 3 (square wave), binary.
        command.write(0x36);
        channel0.write(divisor as u8);
        channel0.write((divisor >> 8) as u8);
    }
}

/// From now on the timer interrupt ticks `clock`'s watchdog. Then enables
/// interrupts.
///
/// Interrupt-safe: no (enables interrupts: once, from the main code).
pub fn tick(clock: &'static clockhal::Clock<clockhal::x86::Native>) {
    TICKED.call_once(|| clock);
    x86_64::instructions::interrupts::enable();
}

/// Watchdog ticks so far: (judged, busy, other events).
///
/// Interrupt-safe: yes (atomic loads).
pub fn watchdog_ticks() -> (u32, u32, u32) {
    (
        JUDGED.load(Ordering::Relaxed),
        BUSY.load(Ordering::Relaxed),
        OTHER.load(Ordering::Relaxed),
    )
}

/// Timer interrupts so far.
///
/// Interrupt-safe: yes (an atomic load).
pub fn irqs() -> u32 {
    IRQS.load(Ordering::Relaxed)
}

extern "x86-interrupt" fn timer_interrupt(_frame: InterruptStackFrame) {
    let n = IRQS.fetch_add(1, Ordering::Relaxed) + 1;
    if n.is_multiple_of(IRQS_PER_WATCHDOG_TICK) {
        if let Some(clock) = TICKED.get() {
            // Interrupt-safe: never waits for the lock the interrupted code
            // may hold (returns Busy instead).
            let counter = match clock.watchdog_tick() {
                WatchdogEvent::Judged { .. } => &JUDGED,
                WatchdogEvent::Busy => &BUSY,
                _ => &OTHER,
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }
    // SAFETY: this is the handler of TIMER_VECTOR; the main code never holds
    // PICS once interrupts are enabled (only `init` takes it, before).
    unsafe { PICS.lock().notify_end_of_interrupt(TIMER_VECTOR) };
}
