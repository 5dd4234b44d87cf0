//! COM1 output, the panic handler, and leaving QEMU.
//!
//! Also compiled into the bootloader 0.9 example (`#[path]` in
//! `examples/bootloader-09/src/main.rs`): keep it free of loader types.

use core::fmt::{self, Write};
use uart_16550::SerialPort;
use x86_64::instructions::port::Port;

/// COM1.
const COM1: u16 = 0x3f8;
/// QEMU's `-device isa-debug-exit,iobase=0xf4,iosize=0x04`.
const DEBUG_EXIT_PORT: u16 = 0xf4;
/// QEMU exits with status (code << 1) | 1: 33 for success...
pub const EXIT_SUCCESS: u32 = 0x10;
/// ... and 35 for failure (the values clockhal's test kernels use).
pub const EXIT_FAILURE: u32 = 0x11;

/// The serial console.
pub struct Console(SerialPort);

impl Console {
    /// Initialises COM1 (115200 8N1).
    pub fn init() -> Console {
        // SAFETY: 0x3f8 is COM1 on every PC-compatible QEMU machine, and
        // nothing else in this kernel drives it (the panic handler makes a
        // second one only when this one can no longer be used).
        let mut port = unsafe { SerialPort::new(COM1) };
        port.init();
        Console(port)
    }
}

impl Write for Console {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.write_str(s)
    }
}

/// Ends the QEMU run with status `(code << 1) | 1`.
pub fn exit_qemu(code: u32) -> ! {
    // SAFETY: writing to the debug-exit port has no memory effects (without
    // the device, it does nothing and we halt below).
    unsafe { Port::new(DEBUG_EXIT_PORT).write(code) };
    loop {
        x86_64::instructions::interrupts::disable();
        x86_64::instructions::hlt();
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    let _ = writeln!(Console::init(), "kernel panic: {info}");
    exit_qemu(EXIT_FAILURE)
}
