//! # clockhal-user
//!
//! A clock page for an OS's user space: user programs read the kernel's
//! clock without a system call (what Linux's vDSO and FreeBSD's timehands
//! give libc), for every source a program can read without privileges —
//! the TSC, kvmclock and the Hyper-V reference TSC page — and get a clear
//! "ask the kernel" answer for the others (PM timer, HPET, Hyper-V MSR).
//!
//! No dependencies beyond `core`; `#![no_std]`. Three parts:
//!
//! - the **ABI** ([`ClockPage`], [`abi`]): one 4 KiB page, versioned,
//!   seqlocked, read-only for user code;
//! - the **kernel-side writer** ([`ClockPageWriter::publish`]): one call per
//!   clock event (clock creation, source switch, resume, paravirtual rate
//!   change);
//! - the **user-side reader** ([`UserClock`], [`ClockReader`]): any thread,
//!   never torn, bounded retries, the kernel's own plausibility checks on the
//!   hypervisor pages, and [`AskKernel`] (with the reason) when the program
//!   must fall back to its system call.
//!
//! It also holds the hypervisor page layouts and their arithmetic
//! ([`paravirt`]), so that kernel (`clockhal_x86::paravirt` re-exports them)
//! and user programs share one copy.
//!
//! ## The clock window
//!
//! The OS maps, read-only and contiguous, into every process that wants the
//! clock:
//!
//! ```text
//!  base                    base + P*4096           base + H*4096
//!  +-----------------------+-----------------------+-----------------------+
//!  | page 0: clock page    | page P: pvclock areas | page H: Hyper-V       |
//!  | (this ABI)            | (KVM, 32 B per vCPU)  | reference TSC page    |
//!  +-----------------------+-----------------------+-----------------------+
//!   P and H come from the clock page header (0 = not mapped). The pvclock
//!   and Hyper-V pages are the hypervisor's own frames, mapped again: the
//!   host rewrites them at any time (a copy would go stale at a migration).
//! ```
//!
//! and tells the process `base` (e.g. in its auxiliary vector); the program
//! calls [`UserClock::from_window`].
//!
//! ## The clock page, version 1
//!
//! Little endian, every field naturally aligned and accessed atomically.
//!
//! ```text
//!  off   type  field          meaning
//!  0x00  u32   magic          "CHPG"                                   header
//!  0x04  u32   version        ABI major version: 1                     header
//!  0x08  u32   size           bytes defined by the writer (>= 0x60)    header
//!  0x0C  u32   seq            seqlock: odd while the kernel writes
//!  ---- seqlocked state ------------------------------------------------------
//!  0x10  u32   mode           0 ask-kernel | 1 tsc | 2 pvclock | 3 hyperv
//!  0x14  u32   arg            ask-kernel: AskReason code | pvclock: area index
//!  0x18  u64   floor_ns       no reading of this state is below it
//!  0x20  u64   tsc_mul        tsc: 64.64 fixed-point ns per tick
//!  0x28  u64   tsc_add_lo     tsc: 128-bit addend, low half
//!  0x30  u64   tsc_add_hi     tsc: 128-bit addend, high half
//!  0x38  u64   pv_offset_ns   pvclock, hyperv: ns added to the page's time
//!  ---- (second cache line) -------------------------------------------------
//!  0x40  u64   boot_wall_ns   unix_ns = boot_wall_ns + clock_ns
//!  0x48  u32   flags          bit 0: boot_wall_ns valid
//!  ---- header, continued ---------------------------------------------------
//!  0x4C  u32   tsc_read       0 lfence;rdtsc | 1 mfence;rdtsc | 2 rdtscp
//!  0x50  u32   window_pages   pages the OS maps from base
//!  0x54  u32   pvclock_page   window page of the pvclock areas (0 = none)
//!  0x58  u32   pvclock_areas  32-byte areas on it (<= 128)
//!  0x5C  u32   hyperv_page    window page of the Hyper-V page (0 = none)
//!  0x60  ...   reserved       zero, to 0x1000
//! ```
//!
//! What a reading is, per mode (all arithmetic wrapping, as unsigned):
//!
//! ```text
//!  tsc      clock_ns = max(floor, high64(tsc * tsc_mul + tsc_add))        (128-bit)
//!  pvclock  clock_ns = max(floor, pvclock_ns(area[arg]) + pv_offset_ns)
//!           pvclock_ns = system_time + scale(tsc - tsc_timestamp, mul, shift)
//!           only while the area's version is even and stable across the read,
//!           mul != 0, shift in -32..=32, and the TSC-stable flag is set
//!  hyperv   clock_ns = max(floor, hv_units * 100 + pv_offset_ns)
//!           hv_units = high64(tsc * scale) + offset, only while the sequence
//!           is valid (not 0, not 0xFFFFFFFF) and stable, and scale != 0
//!  ask      no reading: AskKernel::Page(reason)
//! ```
//!
//! The header is written once by [`ClockPageWriter::new`] before the page is
//! mapped. A later version may define fields from `0x60` on (and say so in
//! `size`); it changes `version` only for changes a v1 reader would misread.
//!
//! ## The seqlock protocol
//!
//! ```text
//!  kernel: ClockPageWriter::publish         user: UserClock::now (<= 64 tries)
//!  -------------------------------------    ----------------------------------
//!  s = seq; CAS seq s -> s+1 (odd)          s1 = seq (relaxed); fence(acquire)
//!  fence(release)                           s1 odd? pause, try again
//!  t = ordered rdtsc                        load mode, floor, mode's fields
//!  old = the replaced state, read at t      [pvclock/hyperv: that page's own
//!  floor = max(floor, old, requested)        bounded seqlock and checks]
//!  store mode, arg, fields, floor, wall     t = ordered rdtsc
//!  seq = s+2 (release)                      fence(acquire); s2 = seq (relaxed,
//!                                            its address made dependent on t)
//!                                           s2 == s1? return max(value, floor)
//!                                           (64 tries failed: AskKernel::Busy)
//! ```
//!
//! A reader therefore never returns a value built from two publications (it
//! would see the sequence change), and never one below a floor it could see.
//! Since the writer reads the replaced state *after* the odd sequence is
//! visible and the reader reads the TSC *before* its re-check (the
//! re-check's address depends on the value read, so the CPU cannot perform
//! it earlier — cheaper than a fence after `rdtscp`), every reading
//! of the old state is at most the floor the new state starts from: readings
//! do not go backwards across a publication, on any CPU, while the TSC is
//! synchronised (the only case the kernel publishes a TSC-based state for).
//! [`ClockReader`] adds a per-handle "never below my last value" on top,
//! which holds whatever the hardware does. The reader only loads (relaxed
//! loads and fences), which is valid on read-only memory.
//!
//! ## Example (kernel and reader in one address space)
//!
//! ```
//! use clockhal_user::{
//!     tsc_mul, AskKernel, AskReason, ClockPage, ClockPageWriter, ClockReader, PageSource,
//!     Publication, TscRead, UserClock, WindowLayout,
//! };
//! static PAGE: ClockPage = ClockPage::new();
//! let tsc = TscRead::detect();
//! let writer = ClockPageWriter::new(&PAGE, WindowLayout::CLOCK_PAGE_ONLY, &[], None, tsc).unwrap();
//! let mut reader = ClockReader::new(UserClock::new(&PAGE, &[], None).unwrap());
//! assert_eq!(reader.now(), Err(AskKernel::Page(AskReason::NotPublished)));
//!
//! // The kernel's clock: a (pretend) 3 GHz TSC, at 1 s now.
//! let mul = tsc_mul(3_000_000_000, 1).unwrap();
//! writer
//!     .publish(&Publication {
//!         source: PageSource::tsc_anchored(mul, tsc.read(), 1_000_000_000),
//!         floor_ns: 1_000_000_000,
//!         boot_wall_ns: Some(1_700_000_000_000_000_000),
//!     })
//!     .unwrap();
//! let t = reader.now().unwrap();
//! assert!(t >= 1_000_000_000);
//! assert!(reader.now().unwrap() >= t);
//! ```
//!
//! ## Safety
//!
//! The crate's unsafe code is the named exception to "unsafe only in the
//! hardware seam": the `rdtsc`/`rdtscp`/`cpuid` instructions ([`TscRead`])
//! and [`UserClock::from_window`], which turns the address the OS gave the
//! process into references.
#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod abi;
pub mod paravirt;
mod reader;
mod tsc;
mod writer;

pub use abi::{AskReason, ClockPage, WindowLayout};
pub use reader::{
    tsc_map, AskKernel, ClockReader, PageError, Reading, Source, UserClock, READ_ATTEMPTS,
};
pub use tsc::TscRead;
pub use writer::{tsc_mul, ClockPageWriter, PageSource, Publication, PublishError, Published};
