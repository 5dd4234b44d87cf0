//! COM1 console (16550 UART at 0x3f8, 115200 8N1, polled) with a lock so
//! lines from different CPUs do not interleave.
//!
//! Use the crate's [`print!`](crate::print) and [`println!`](crate::println)
//! macros, or [`lock`] to write several lines as one block. The lock is
//! re-entrant per CPU (a panic or exception while printing still gets its
//! message out) and is stolen after about two seconds, so a CPU that died
//! while holding it cannot silence the others.

use core::fmt::{self, Write};
use core::sync::atomic::{AtomicUsize, Ordering};

use crate::{cpu, smp, timeout::Deadline};

const COM1: u16 = 0x3f8;
/// Line status register: bit 5 = transmit holding register empty.
const LSR: u16 = COM1 + 5;
/// Polls of LSR before a byte is sent regardless (no UART must not hang us).
const TX_SPIN_LIMIT: u32 = 100_000;
/// How long a CPU waits for another CPU's console lock before stealing it.
const LOCK_STEAL_MS: u64 = 2_000;
const UNLOCKED: usize = usize::MAX;

/// CPU index holding the console lock, or `UNLOCKED`.
static OWNER: AtomicUsize = AtomicUsize::new(UNLOCKED);

/// Programs COM1. Called once by the boot code before the kernel runs.
pub(crate) fn init() {
    let setup: [(u16, u8); 7] = [
        (COM1 + 1, 0x00), // no interrupts: we poll
        (COM1 + 3, 0x80), // DLAB on to set the divisor
        (COM1, 0x01),     // divisor 1 = 115200 baud
        (COM1 + 1, 0x00),
        (COM1 + 3, 0x03), // 8N1, DLAB off
        (COM1 + 2, 0xC7), // FIFO on and cleared
        (COM1 + 4, 0x03), // DTR + RTS
    ];
    for (port, value) in setup {
        // SAFETY: COM1 registers belong to this module; no memory effects.
        unsafe { cpu::outb(port, value) };
    }
}

fn put_byte(byte: u8) {
    let mut spins = 0;
    // SAFETY: reading COM1's line status register has no side effects.
    while unsafe { cpu::inb(LSR) } & 0x20 == 0 && spins < TX_SPIN_LIMIT {
        spins += 1;
        core::hint::spin_loop();
    }
    // SAFETY: writing COM1's data register only sends the byte.
    unsafe { cpu::outb(COM1, byte) };
}

/// A byte received on COM1, if one is waiting (LSR bit 0, data ready).
/// Never waits: the host writes to the guest's console input (QEMU
/// `-serial stdio`: the runner's pipe to QEMU's stdin).
pub fn try_read_byte() -> Option<u8> {
    // SAFETY: reading COM1's line status register has no side effects.
    if unsafe { cpu::inb(LSR) } & 0x01 == 0 {
        return None;
    }
    // SAFETY: reading COM1's receive buffer only takes the waiting byte.
    Some(unsafe { cpu::inb(COM1) })
}

fn put_str(s: &str) {
    for byte in s.bytes() {
        if byte == b'\n' {
            put_byte(b'\r');
        }
        put_byte(byte);
    }
}

/// Exclusive access to the console until dropped; implements [`fmt::Write`].
///
/// ```ignore
/// use core::fmt::Write;
/// let mut con = clockhal_boot::serial::lock();
/// writeln!(con, "line 1").ok();
/// writeln!(con, "line 2").ok(); // no other CPU's output in between
/// ```
pub struct SerialGuard {
    /// False when this CPU already held the lock (nested use): do not unlock.
    release: bool,
}

/// Takes the console lock (re-entrant on the same CPU, stolen after ~2 s).
pub fn lock() -> SerialGuard {
    let me = smp::current_cpu();
    if OWNER.load(Ordering::Relaxed) == me {
        return SerialGuard { release: false };
    }
    let try_take = || {
        OWNER
            .compare_exchange(UNLOCKED, me, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    };
    if try_take() {
        return SerialGuard { release: true };
    }
    // Contended: only now pay for reading the TSC.
    let deadline = Deadline::after_ms(LOCK_STEAL_MS);
    while !try_take() {
        if deadline.expired() {
            // The holder is stuck (or dead): a garbled line beats silence.
            OWNER.swap(me, Ordering::Acquire);
            break;
        }
        core::hint::spin_loop();
    }
    SerialGuard { release: true }
}

impl Write for SerialGuard {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        put_str(s);
        Ok(())
    }
}

impl Drop for SerialGuard {
    fn drop(&mut self) {
        if self.release {
            OWNER.store(UNLOCKED, Ordering::Release);
        }
    }
}

#[doc(hidden)]
pub fn _print(args: fmt::Arguments<'_>) {
    // Formatting errors can only come from user Display impls; drop them.
    let _ = lock().write_fmt(args);
}

/// Prints to COM1 (no newline). Safe to use from any CPU.
#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::serial::_print(::core::format_args!($($arg)*))
    };
}

/// Prints a line to COM1 (`\n` becomes `\r\n`). Lines from different CPUs do
/// not interleave.
#[macro_export]
macro_rules! println {
    () => {
        $crate::serial::_print(::core::format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::serial::_print(::core::format_args!("{}\n", ::core::format_args!($($arg)*)))
    };
}
