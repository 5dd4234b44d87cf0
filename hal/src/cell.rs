//! A 64-bit cell updated atomically: lock-free where the target has 64-bit
//! atomics, a `critical-section` otherwise.

use core::cell::Cell;

/// Storage for a shared `u64` that [`WrapExtender`](crate::WrapExtender) and
/// [`MonotonicClamp`](crate::MonotonicClamp) update read-modify-write.
pub trait Cell64: Sync {
    /// A cell holding `v`.
    /// Interrupt-safe: yes.
    fn new(v: u64) -> Self;
    /// Current value.
    /// Interrupt-safe: yes (`CriticalSectionCell`: not NMI).
    fn get(&self) -> u64;
    /// Overwrites the value.
    /// Interrupt-safe: yes (`CriticalSectionCell`: not NMI).
    fn set(&self, v: u64);
    /// Atomically applies `f` to the current value until it returns `None`
    /// (keep) or its `Some(new)` is stored; returns the value left in the cell.
    /// Interrupt-safe: yes (`CriticalSectionCell`: not NMI).
    fn update(&self, f: impl FnMut(u64) -> Option<u64>) -> u64;
}

/// Lock-free cell (targets with 64-bit atomics, e.g. x86_64).
#[cfg(target_has_atomic = "64")]
#[derive(Debug)]
pub struct AtomicCell(crate::sync::AtomicU64);

#[cfg(target_has_atomic = "64")]
impl Cell64 for AtomicCell {
    fn new(v: u64) -> Self {
        AtomicCell(crate::sync::AtomicU64::new(v))
    }
    #[inline(always)]
    fn get(&self) -> u64 {
        self.0.load(crate::sync::Ordering::Acquire)
    }
    fn set(&self, v: u64) {
        self.0.store(v, crate::sync::Ordering::Release)
    }
    #[inline(always)]
    fn update(&self, mut f: impl FnMut(u64) -> Option<u64>) -> u64 {
        use crate::sync::Ordering::{AcqRel, Acquire};
        let mut cur = self.0.load(Acquire);
        loop {
            match f(cur) {
                None => return cur,
                Some(new) => match self.0.compare_exchange_weak(cur, new, AcqRel, Acquire) {
                    Ok(_) => return new,
                    Err(actual) => cur = actual,
                },
            }
        }
    }
}

/// Cell guarded by `critical_section::with` (targets without 64-bit atomics;
/// the OS provides the critical-section implementation).
pub struct CriticalSectionCell(critical_section::Mutex<Cell<u64>>);

impl core::fmt::Debug for CriticalSectionCell {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("CriticalSectionCell")
    }
}

impl Cell64 for CriticalSectionCell {
    fn new(v: u64) -> Self {
        CriticalSectionCell(critical_section::Mutex::new(Cell::new(v)))
    }
    fn get(&self) -> u64 {
        critical_section::with(|cs| self.0.borrow(cs).get())
    }
    fn set(&self, v: u64) {
        critical_section::with(|cs| self.0.borrow(cs).set(v))
    }
    fn update(&self, mut f: impl FnMut(u64) -> Option<u64>) -> u64 {
        critical_section::with(|cs| {
            let c = self.0.borrow(cs);
            match f(c.get()) {
                None => c.get(),
                Some(new) => {
                    c.set(new);
                    new
                }
            }
        })
    }
}

/// The cell clockhal uses by default on this target.
#[cfg(target_has_atomic = "64")]
pub type DefaultCell = AtomicCell;
/// The cell clockhal uses by default on this target.
#[cfg(not(target_has_atomic = "64"))]
pub type DefaultCell = CriticalSectionCell;
