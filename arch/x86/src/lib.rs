//! # clockhal-x86
//!
//! The x86_64 hardware seam of clockhal — the only clockhal crate with
//! `unsafe`. Backends are written against the [`Hardware`] trait (statically
//! dispatched) and never touch raw pointers, ports or MSRs themselves.
//!
//! - [`Hardware`]: rdtsc (plain, ordered, rdtscp), cpuid, MSR, port and MMIO
//!   access. [`Native`] runs the real instructions; `clockhal_sim::SimMachine`
//!   (crate `clockhal-sim`) is a deterministic simulated machine for host
//!   tests.
//! - [`paravirt`]: hypervisor-shared memory layouts (pvclock, Hyper-V
//!   reference TSC page) as atomics, and the safe operations that register
//!   them with the hypervisor.
//! - [`cpuid`]: decoders for hypervisor signatures, KVM and Hyper-V feature
//!   bits, invariant TSC, leaves 0x15/0x16 and the hypervisor timing leaf.
//! - [`acpi`]: finding the HPET, the PM timer and the RTC's century
//!   register in the ACPI tables.
//! - [`pit`], [`cmos`]: the fixed port sequences clockhal writes to the
//!   8254 PIT's channel 2 and the CMOS RTC's index port (the only port
//!   writes clockhal makes).
//! - [`PhysMemory`]: how the OS lets clockhal read firmware tables.
//!
//! Safety model: reading clock hardware is safe *once the OS has vouched for
//! it*. The OS does so by creating a [`Native`] (`unsafe`: it runs at CPL0 and
//! lets clockhal use the clock MSRs and ports, including programming PIT
//! channel 2 and selecting CMOS registers), an [`MmioRegion`] (`unsafe`:
//! the address really maps device registers) and a
//! [`PhysMapped`](paravirt::PhysMapped) (`unsafe`: the physical address really
//! belongs to that memory). Everything downstream is safe code.
#![no_std]

pub mod acpi;
pub mod cmos;
pub mod cpuid;
mod hardware;
mod memory;
#[cfg(target_arch = "x86_64")]
mod native;
pub mod paravirt;
pub mod pit;
mod sync;

pub use hardware::{rdmsr_checked, CpuidResult, Hardware, MmioRegion, Msr};
pub use memory::{OffsetMapping, PhysMemory, SliceMemory};
#[cfg(target_arch = "x86_64")]
pub use native::{cpu_local_max, Native};
