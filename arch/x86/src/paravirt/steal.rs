//! KVM steal time: the per-vCPU area the host fills with the time the vCPU
//! was runnable but not running (Linux `Documentation/virt/kvm/x86/msr.rst`,
//! `MSR_KVM_STEAL_TIME`), and the MSR writes that share it.

use super::{check_backing, PhysMapped, RegisterError};
use crate::sync::{array, const_fn, fence, AtomicU32, AtomicU64, AtomicU8, Ordering};
use crate::{rdmsr_checked, Hardware, Msr};

/// `preempted` bit: the host descheduled the vCPU that owns the area.
pub const KVM_VCPU_PREEMPTED: u8 = 1 << 0;

/// The area's size and the alignment the ABI requires (the MSR's bits 5:1
/// are reserved: KVM raises #GP when a registration sets any of them).
pub const KVM_STEAL_TIME_ALIGN: u64 = 64;

/// `struct kvm_steal_time`, 64 bytes, 64-byte aligned, little endian.
///
/// The host updates `steal` under `version` (odd while it writes) and
/// writes `preempted` on its own (no version change) whenever it
/// deschedules the vCPU. The guest zeroes the area before it registers it
/// ([`kvm_register_steal_time`] does).
#[repr(C, align(64))]
#[derive(Debug)]
pub struct KvmStealTime {
    /// Nanoseconds the vCPU was runnable but not running (idle time is not
    /// steal).
    pub steal: AtomicU64,
    /// Odd while the host updates the area.
    pub version: AtomicU32,
    /// Always 0 so far (reserved for changes of the layout).
    pub flags: AtomicU32,
    /// Non-zero (bit 0, [`KVM_VCPU_PREEMPTED`]) while the vCPU is
    /// descheduled; always 0 from a host that does not support it.
    pub preempted: AtomicU8,
    /// Padding.
    pub u8_pad: [AtomicU8; 3],
    /// Padding.
    pub pad: [AtomicU32; 11],
}

/// One consistent reading of a steal-time area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct StealSample {
    /// The host's `steal` (ns since it started counting, not since
    /// registration).
    pub steal: u64,
    /// The (even) version it was read at.
    pub version: u32,
}

impl KvmStealTime {
    const_fn! {
        /// A zeroed area.
        ///
        /// Interrupt-safe: yes.
        pub fn new() -> KvmStealTime {
            KvmStealTime {
                steal: AtomicU64::new(0),
                version: AtomicU32::new(0),
                flags: AtomicU32::new(0),
                preempted: AtomicU8::new(0),
                u8_pad: array![AtomicU8::new(0); 3],
                pad: array![AtomicU32::new(0); 11],
            }
        }
    }

    /// One seqlock attempt: `None` if the version was odd or changed under
    /// the read. Relaxed loads and explicit fences, as for the pvclock area.
    ///
    /// Interrupt-safe: yes (loads only).
    #[inline]
    pub fn try_sample(&self) -> Option<StealSample> {
        let version = self.version.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        if version & 1 != 0 {
            return None;
        }
        let steal = self.steal.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        (self.version.load(Ordering::Relaxed) == version).then_some(StealSample { steal, version })
    }

    /// Bounded retry of [`try_sample`](Self::try_sample): `None` after
    /// `attempts` samples that all found the version odd or changing (a host
    /// stuck mid-update cannot hang the reader).
    ///
    /// Interrupt-safe: yes (bounded loads).
    #[inline]
    pub fn sample(&self, attempts: u32) -> Option<StealSample> {
        for _ in 0..attempts {
            if let Some(s) = self.try_sample() {
                return Some(s);
            }
            core::hint::spin_loop();
        }
        None
    }

    /// Whether the host says the owning vCPU is descheduled now (bit 0 of
    /// `preempted`; the other bits are host-guest requests such as
    /// `KVM_VCPU_FLUSH_TLB`, not a state).
    ///
    /// Interrupt-safe: yes (one load).
    #[inline]
    pub fn preempted(&self) -> bool {
        self.preempted.load(Ordering::Relaxed) & KVM_VCPU_PREEMPTED != 0
    }

    /// Writes `steal` as a KVM host does: version odd while it changes,
    /// even after (an update left open, odd, is finished rather than
    /// restarted). A guest never writes the area; this is for simulators,
    /// benchmarks and tests that play the host.
    ///
    /// Interrupt-safe: yes (stores only; a host's part).
    pub fn publish(&self, steal: u64) {
        let odd = self.version.load(Ordering::SeqCst) | 1;
        self.version.store(odd, Ordering::SeqCst);
        self.steal.store(steal, Ordering::Release);
        self.version.store(odd.wrapping_add(1), Ordering::SeqCst);
    }

    /// Zeroes every field (the guest's duty before registration).
    fn zero(&self) {
        let r = Ordering::Relaxed;
        self.steal.store(0, r);
        self.version.store(0, r);
        self.flags.store(0, r);
        self.preempted.store(0, r);
        self.u8_pad.iter().for_each(|b| b.store(0, r));
        self.pad.iter().for_each(|w| w.store(0, r));
        fence(Ordering::Release);
    }
}

impl Default for KvmStealTime {
    fn default() -> Self {
        KvmStealTime::new()
    }
}

/// One 4 KiB page of steal-time areas, one per vCPU (64): page-aligned, so
/// a single physical frame holds them all and area `i` is at the page's
/// physical address plus `64·i`. Hand it to clockhal as
/// `PhysMapped<StealTimePage>` and take [`PhysMapped::steal_areas`].
#[repr(C, align(4096))]
#[derive(Debug)]
pub struct StealTimePage {
    /// The areas, indexed by CPU.
    pub areas: [KvmStealTime; StealTimePage::AREAS],
}

impl StealTimePage {
    /// Areas per page.
    pub const AREAS: usize = 64;

    const_fn! {
        /// A zeroed page.
        ///
        /// Interrupt-safe: yes.
        pub fn new() -> StealTimePage {
            StealTimePage {
                areas: array![KvmStealTime::new(); StealTimePage::AREAS],
            }
        }
    }
}

impl Default for StealTimePage {
    fn default() -> Self {
        StealTimePage::new()
    }
}

impl PhysMapped<StealTimePage> {
    /// The page's areas, each at its exact physical address (the page is
    /// one frame).
    ///
    /// Interrupt-safe: yes.
    pub fn steal_areas(&self) -> PhysMapped<[KvmStealTime]> {
        PhysMapped {
            virt: &self.virt.areas[..],
            phys: self.phys,
            simulated: self.simulated,
        }
    }
}

// The ABI layout (loom's atomics, for the models only, are larger).
#[cfg(not(loom))]
const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<KvmStealTime>() == 64);
    assert!(align_of::<KvmStealTime>() == 64);
    assert!(offset_of!(KvmStealTime, version) == 8);
    assert!(offset_of!(KvmStealTime, flags) == 12);
    assert!(offset_of!(KvmStealTime, preempted) == 16);
    assert!(size_of::<StealTimePage>() == 4096);
};

/// Registers `area` as the calling vCPU's steal-time area: zeroes it (the
/// ABI asks the guest to), then writes `phys | 1` to
/// [`Msr::KVM_STEAL_TIME`]. Call on the vCPU the area belongs to, only
/// where KVM's CPUID offers `STEAL_TIME`. Refused before any write: memory
/// not 64-byte aligned ([`RegisterError::Misaligned`]), simulated memory on
/// real hardware, or an MSR whose read raises #GP where the OS recovers
/// from that ([`RegisterError::Faulted`]).
///
/// Interrupt-safe: no (writes an MSR).
pub fn kvm_register_steal_time<H: Hardware>(
    hw: &H,
    area: PhysMapped<KvmStealTime>,
) -> Result<(), RegisterError> {
    check_backing(hw, &area)?;
    if area.phys() % KVM_STEAL_TIME_ALIGN != 0 {
        return Err(RegisterError::Misaligned);
    }
    rdmsr_checked(hw, Msr::KVM_STEAL_TIME).ok_or(RegisterError::Faulted)?;
    area.get().zero();
    // SAFETY: `PhysMapped::new`'s contract: `phys` is this area's address
    // and the hypervisor may write it while registered; the low six bits
    // are clear (checked above), so only the enable bit is set among them.
    unsafe { hw.wrmsr(Msr::KVM_STEAL_TIME, area.phys() | 1) };
    Ok(())
}

/// Stops the host from updating the calling vCPU's steal-time area (writes
/// 0 to [`Msr::KVM_STEAL_TIME`]): from then on the memory is the guest's
/// again.
///
/// Interrupt-safe: no (writes an MSR).
pub fn kvm_unregister_steal_time<H: Hardware>(hw: &H) {
    // SAFETY: a zero value disables the area; no memory is handed over.
    unsafe { hw.wrmsr(Msr::KVM_STEAL_TIME, 0) }
}
