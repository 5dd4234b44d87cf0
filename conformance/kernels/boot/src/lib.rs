//! Boot support for clockhal's QEMU test kernels (`x86_64-unknown-none`).
//!
//! The crate turns a `#![no_std] #![no_main]` binary into a kernel that QEMU
//! boots with `-kernel kernel.elf` through the PVH entry point:
//!
//! * PVH note and 32-bit entry, identity map of the low 4 GiB with 2 MiB pages
//!   (the top GiB uncached for MMIO), GDT, long mode, stack, `.bss` zeroing;
//! * [`BootInfo`] from the PVH `hvm_start_info` (RSDP, command line, memory
//!   map, modules);
//! * COM1 console with [`print!`]/[`println!`], [`exit_qemu`] through
//!   `isa-debug-exit`, and a panic handler;
//! * an IDT for vectors 0..31 whose #GP/#UD handler recovers [`try_rdmsr`] and
//!   [`try_wrmsr`]; any other exception is reported and fails the run;
//! * interrupts (vectors 32..=255) on the boot CPU: [`irq`] (handlers, LAPIC
//!   EOI, the 8259 remapped and masked, a bounded [`irq::wait`] with
//!   interrupts on) and [`ioapic`] (a GSI from the MADT routed to a vector);
//! * with feature `critical-section`, the kernel's `critical-section`
//!   implementation (interrupts masked while held; boot CPU only);
//! * ring 3: [`ring3::init`], [`ring3::enter`] / [`ring3::resume`] run a
//!   function of the image at CPL3 until its next system call or fault;
//! * [`handoff::jump`]: a loader's jump into another kernel that inherits
//!   these page tables;
//! * SMP: [`smp::start_aps`] (INIT-SIPI-SIPI for the CPUs in the ACPI MADT),
//!   per-CPU mailboxes ([`smp::run_on`], [`smp::post`]) and a one-load
//!   [`smp::current_cpu`].
//!
//! A kernel uses it like this (see the README for `build.rs`):
//!
//! ```ignore
//! #![no_std]
//! #![no_main]
//! clockhal_boot::entry!(kmain);
//!
//! fn kmain(info: &clockhal_boot::BootInfo) -> ! {
//!     clockhal_boot::println!("rsdp = {:?}", info.rsdp_paddr);
//!     clockhal_boot::exit_qemu(clockhal_boot::EXIT_SUCCESS)
//! }
//! ```
//!
//! Never enable SSE or XSAVE: under the project's KVM host that kills the guest.
//! The target is soft-float and nothing here touches CR4.OSFXSR/OSXSAVE.
#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod acpi;
mod apic_timer;
mod cpu;
#[cfg(feature = "critical-section")]
mod critical_section;
mod entry;
mod exit;
mod gdt;
pub mod handoff;
mod hw;
mod idt;
pub mod ioapic;
pub mod irq;
mod lapic;
mod msr;
mod paging;
mod panic;
mod percpu;
mod phys;
pub mod ring3;
pub mod serial;
pub mod smp;
mod stack;
mod start_info;
mod timeout;
mod trampoline;

pub use apic_timer::ApicTimer;
pub use exit::{exit_qemu, EXIT_FAILURE, EXIT_SUCCESS};
pub use hw::BootHw;
pub use msr::{try_rdmsr, try_wrmsr};
pub use panic::panic;
pub use smp::current_cpu;
pub use stack::{boot_stack_high_water, BOOT_STACK_SIZE};
pub use start_info::{BootInfo, MemoryRegion, Module, RsdpSource};

/// Declares the kernel's entry function and (by default) its panic handler.
///
/// `entry!(kmain)` requires `fn kmain(info: &clockhal_boot::BootInfo) -> !`.
/// It runs on CPU 0 after the console, IDT and [`BootInfo`] are ready; the
/// other CPUs are only started by [`smp::start_aps`].
///
/// The macro also defines the crate's `#[panic_handler]`, which calls
/// [`panic()`](crate::panic()) (print, then exit QEMU with [`EXIT_FAILURE`]).
/// Use `entry!(kmain, no_panic_handler)` to write your own handler instead.
#[macro_export]
macro_rules! entry {
    ($kmain:path) => {
        $crate::entry!($kmain, no_panic_handler);

        #[panic_handler]
        fn __clockhal_boot_panic_handler(info: &::core::panic::PanicInfo<'_>) -> ! {
            $crate::panic(info)
        }
    };
    ($kmain:path, no_panic_handler) => {
        #[doc(hidden)]
        #[unsafe(no_mangle)]
        pub fn __clockhal_boot_kmain(info: &'static $crate::BootInfo) -> ! {
            // Type-checks the user's function against the documented signature.
            let kmain: fn(&'static $crate::BootInfo) -> ! = $kmain;
            kmain(info)
        }
    };
}

/// The [`BootInfo`] handed to the kernel's entry function.
///
/// Returns `None` only before the entry function runs.
#[must_use]
pub fn boot_info() -> Option<&'static BootInfo> {
    start_info::get()
}

/// The present entries of `items`, in order, as `(array, n)` with the
/// entries in `array[..n]` (the slots past `n` repeat the first): a list
/// of optional devices (the timer candidates a kernel hands to
/// `Clock::select_timer`) as a slice, without an allocator or a
/// placeholder device. `None` when no entry is present.
pub fn present<T: Copy, const N: usize>(items: [Option<T>; N]) -> Option<([T; N], usize)> {
    let first = items.iter().flatten().next().copied()?;
    let mut out = [first; N];
    let mut n = 0;
    for item in items.into_iter().flatten() {
        out[n] = item;
        n += 1;
    }
    Some((out, n))
}

extern "Rust" {
    /// Defined by [`entry!`] in the kernel binary.
    fn __clockhal_boot_kmain(info: &'static BootInfo) -> !;
}

/// First Rust code on CPU 0, called by the entry assembly in long mode with
/// the PVH `hvm_start_info` physical address (EBX at entry).
#[unsafe(no_mangle)]
extern "C" fn clockhal_boot_rust_start(start_info_paddr: u64) -> ! {
    // GS must hold this CPU's data before anything calls current_cpu()
    // (the console lock does).
    percpu::init_this_cpu(0, cpu::initial_apic_id());
    serial::init();
    idt::init();
    idt::load();
    msr::set_tsc_aux(0);
    let info = start_info::init(start_info_paddr);
    // SAFETY: `entry!` defines this symbol with exactly this signature; it is
    // called once, on the boot CPU, with the initialized 'static BootInfo.
    unsafe { __clockhal_boot_kmain(info) }
}
