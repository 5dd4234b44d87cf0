#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![no_std]

#[cfg(test)]
extern crate std;

pub mod acpi;
pub mod boot;
pub mod cmos;
mod cpu_index;
pub mod cpuid;
mod hardware;
mod memory;
#[cfg(target_arch = "x86_64")]
mod native;
#[cfg(feature = "x86_64")]
#[cfg_attr(docsrs, doc(cfg(feature = "x86_64")))]
pub mod paging;
pub mod paravirt;
pub mod pit;
mod sync;
pub mod timer_regs;

pub use cpu_index::{CpuIndex, CpuIndexFn, NoCpuIndex, OneCpu};
pub use hardware::{rdmsr_checked, CpuidResult, Hardware, MmioRegion, Msr, Seam};
pub use memory::{OffsetMapping, PhysMemory, SliceMemory};
#[cfg(target_arch = "x86_64")]
pub use native::{cpu_local_max, Native};
