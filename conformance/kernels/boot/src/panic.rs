//! Panic reporting for kernels: print, then fail the QEMU run.

use core::panic::PanicInfo;
use core::sync::atomic::{AtomicUsize, Ordering};

use crate::timeout::Deadline;
use crate::{exit_qemu, smp, EXIT_FAILURE};

const NOBODY: usize = usize::MAX;
/// CPU index reporting the first panic.
static PANICKING_CPU: AtomicUsize = AtomicUsize::new(NOBODY);

/// Prints the panic message with the CPU index on COM1 and exits QEMU with
/// [`EXIT_FAILURE`] (status 35).
///
/// [`entry!`](crate::entry) installs this as the `#[panic_handler]`; a kernel
/// using `entry!(kmain, no_panic_handler)` can call it from its own handler.
/// A panic while panicking exits at once; a second CPU panicking meanwhile
/// gives the first a few seconds to finish its report.
pub fn panic(info: &PanicInfo<'_>) -> ! {
    let me = smp::current_cpu();
    match PANICKING_CPU.compare_exchange(NOBODY, me, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {
            crate::println!("clockhal-boot: PANIC on cpu {me}: {info}");
            exit_qemu(EXIT_FAILURE)
        }
        Err(first) if first == me => exit_qemu(EXIT_FAILURE),
        Err(_) => {
            let deadline = Deadline::after_ms(5_000);
            while !deadline.expired() {
                core::hint::spin_loop();
            }
            exit_qemu(EXIT_FAILURE)
        }
    }
}
