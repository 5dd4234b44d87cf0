//! Ending the QEMU run through the `isa-debug-exit` device.
//!
//! QEMU must be started with `-device isa-debug-exit,iobase=0xf4,iosize=0x04`;
//! writing `value` there makes QEMU exit with status `(value << 1) | 1`.

use crate::cpu;

/// I/O port of `isa-debug-exit` (`iobase=0xf4`).
const DEBUG_EXIT_PORT: u16 = 0xf4;

/// Exit value for a passing run: QEMU's status is `(0x10 << 1) | 1 = 33`.
pub const EXIT_SUCCESS: u32 = 0x10;

/// Exit value for a failing run: QEMU's status is `(0x11 << 1) | 1 = 35`.
pub const EXIT_FAILURE: u32 = 0x11;

/// Ends the QEMU run with status `(code << 1) | 1`.
///
/// Callable from any CPU. Without the `isa-debug-exit` device (or outside
/// QEMU) the write is ignored and this CPU halts forever with interrupts off;
/// run QEMU under `timeout` so such a machine still ends.
pub fn exit_qemu(code: u32) -> ! {
    // SAFETY: port 0xf4 is the debug-exit device (or nothing); the write has
    // no memory effects.
    unsafe { cpu::outl(DEBUG_EXIT_PORT, code) };
    cpu::halt_forever()
}
