//! From a boot loader's boot information to a [`Platform`]: one module per
//! protocol, each behind its feature.
//!
//! A protocol module's constructor (of [`BootMemory`], in the seam;
//! `unsafe` where it trusts a mapping the loader made) reads the protocol
//! crate's own boot information type; [`BootPlatform::platform`]
//! hands out a `Platform` borrowing it, with the ACPI tables (the loader's
//! RSDP, else one found in the BIOS areas). `BootMemory` is owned, so it
//! can live in the kernel's `init` while the `Platform` borrows it.
//!
//! What no protocol says and the OS must still give: the executing CPU's
//! index ([`Native::with_cpu_index`](clockhal_x86::Native::with_cpu_index)),
//! a mapping of the HPET's registers ([`Platform::hpet_mapper`]), memory
//! for kvmclock and the Hyper-V page ([`Platform::pvclock_page`],
//! [`Platform::hyperv_tsc_page`]) and, without a MADT, the CPU count.
//!
//! | protocol | feature | constructor (module with the example) |
//! |---|---|---|
//! | bootloader_api 0.11 | `bootloader_api` | `BootMemory::from_bootloader_api` (`boot::bootloader_api`) |
//! | bootloader 0.9 | `bootloader` | `BootMemory::from_bootloader_0_9` (`boot::bootloader`) |
//! | Multiboot2 (multiboot2 0.24) | `multiboot2` | `BootMemory::from_multiboot2` (`boot::multiboot2`) |
//! | Limine (limine 0.5) | `limine` | `BootMemory::from_limine` (`boot::limine`) |
//! | any other | - | [`BootMemory::from_parts`] (the kernel's own mapping and RSDP) |

#[cfg(feature = "bootloader")]
#[cfg_attr(docsrs, doc(cfg(feature = "bootloader")))]
pub mod bootloader;
#[cfg(feature = "bootloader_api")]
#[cfg_attr(docsrs, doc(cfg(feature = "bootloader_api")))]
pub mod bootloader_api;
#[cfg(feature = "limine")]
#[cfg_attr(docsrs, doc(cfg(feature = "limine")))]
pub mod limine;
#[cfg(feature = "multiboot2")]
#[cfg_attr(docsrs, doc(cfg(feature = "multiboot2")))]
pub mod multiboot2;

use crate::Platform;
#[doc(inline)]
pub use clockhal_x86::boot::{BootError, BootMemory};

/// A [`Platform`] from what the boot loader said.
pub trait BootPlatform {
    /// `Platform::new()` with the ACPI tables: [`BootMemory::rsdp`] (the
    /// loader's RSDP, else one found in the EBDA or BIOS area) read through
    /// the loader's mapping. Without an RSDP the platform has no ACPI
    /// (the HPET and PM timer are then rejected, "not configured"; ask
    /// [`BootMemory::rsdp`] why).
    ///
    /// Interrupt-safe: no (may search 129 KiB of memory; a boot-time call).
    fn platform(&self) -> Platform<'_>;
}

impl BootPlatform for BootMemory {
    fn platform(&self) -> Platform<'_> {
        let platform = Platform::new();
        match self.rsdp() {
            Ok(rsdp) => platform.acpi(rsdp, self.phys_memory()),
            Err(_) => platform,
        }
    }
}
