//! Which CPU registered which pvclock area.
//!
//! Every CPU index that reads kvmclock must first have registered its area
//! (an MSR write on that CPU). The registry remembers, per index, the APIC
//! ID of the CPU that did: a read on an unregistered index is an error
//! path (the value is held, never decoded from whatever the memory holds),
//! and a second CPU claiming an index another CPU holds — an SMP kernel
//! whose `cpu_index()` is 0 everywhere — is refused with both APIC IDs.

use core::sync::atomic::{AtomicU64, Ordering};

/// Most CPUs kvmclock tracks (areas of larger indices are refused).
pub const MAX_CPUS: usize = 256;

/// What [`Registry::claim`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Claim {
    /// The index was free; it is now this CPU's.
    New,
    /// This CPU already held it (re-registration, e.g. after a resume).
    Again,
}

/// The holders of `N` indices (kvmclock: [`MAX_CPUS`]; steal time: one
/// page's worth).
#[derive(Debug)]
pub(crate) struct Registry<const N: usize = MAX_CPUS> {
    /// APIC ID + 1 of the holder; 0: unregistered.
    holder: [AtomicU64; N],
}

impl<const N: usize> Registry<N> {
    pub(crate) const fn new() -> Registry<N> {
        Registry {
            holder: [const { AtomicU64::new(0) }; N],
        }
    }

    /// Claims `index` for the CPU with `apic`. `Err(holder)` if another
    /// CPU holds it (or the index is out of range: `Err(u32::MAX)`).
    pub(crate) fn claim(&self, index: usize, apic: u32) -> Result<Claim, u32> {
        let Some(h) = self.holder.get(index) else {
            return Err(u32::MAX);
        };
        let me = apic as u64 + 1;
        match h.compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Ok(Claim::New),
            Err(v) if v == me => Ok(Claim::Again),
            Err(v) => Err((v - 1) as u32),
        }
    }

    /// Releases `index` if the CPU with `apic` holds it.
    pub(crate) fn release(&self, index: usize, apic: u32) -> bool {
        let me = apic as u64 + 1;
        self.holder.get(index).is_some_and(|h| {
            h.compare_exchange(me, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })
    }

    /// Forgets `index`'s holder (a fresh start of the state it is part of).
    pub(crate) fn clear(&self, index: usize) {
        if let Some(h) = self.holder.get(index) {
            h.store(0, Ordering::Release);
        }
    }

    /// Whether any CPU has registered `index`.
    #[inline]
    pub(crate) fn is_registered(&self, index: usize) -> bool {
        self.holder
            .get(index)
            .is_some_and(|h| h.load(Ordering::Acquire) != 0)
    }

    /// The registered indices.
    pub(crate) fn registered(&self) -> impl Iterator<Item = usize> + '_ {
        (0..N).filter(|&i| self.is_registered(i))
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    #[test]
    fn claims_are_exclusive_and_idempotent() {
        let r: Registry = Registry::new();
        assert_eq!(r.claim(0, 0), Ok(Claim::New));
        assert_eq!(r.claim(0, 0), Ok(Claim::Again));
        assert_eq!(r.claim(0, 1), Err(0), "second CPU on index 0");
        assert!(r.is_registered(0) && !r.is_registered(1));
        assert!(!r.release(0, 1));
        assert!(r.release(0, 0));
        assert!(!r.is_registered(0));
        assert_eq!(r.claim(MAX_CPUS, 0), Err(u32::MAX));
        assert_eq!(r.claim(3, u32::MAX), Ok(Claim::New));
        assert_eq!(r.registered().collect::<std::vec::Vec<_>>(), [3]);
    }
}
