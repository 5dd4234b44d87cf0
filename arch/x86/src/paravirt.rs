//! Hypervisor-shared memory and the MSR writes that share it.
//!
//! The layouts are ABI (Linux `pvclock-abi.h`, the Hyper-V TLFS) and are
//! declared with atomics: the hypervisor writes them behind the compiler's
//! back, so every field access is an atomic load, and backends stay safe.
//! The pvclock and Hyper-V page layouts and the guest-side arithmetic are
//! re-exported from `clockhal_user::paravirt` (dependency-free, so that user
//! programs reading the OS's clock page share the same copy).
//! Handing memory to the hypervisor is the one unsafe act; it happens through
//! [`PhysMapped`], which the OS creates.
//!
//! Also here, shared by the paravirtual backends: the ABIs' arithmetic
//! ([`pvclock_scale_delta`], [`pvclock_tsc_hz_ratio`], [`hv_scale_tsc`], ...).
//! The never-backwards clamp they share is `clockhal_core::MonotonicClamp`.

use crate::{rdmsr_checked, Hardware, Msr};

mod scale;
mod steal;

use crate::sync::{array, const_fn, AtomicU32};
// Layouts and guest-side arithmetic: one copy, shared with user programs.
pub use clockhal_user::paravirt::{
    hv_scale_tsc, hv_scale_valid, hv_sequence_valid, hv_tsc_hz_from_scale, pvclock_params_valid,
    pvclock_scale_delta, pvclock_tsc_hz_ratio, HvAttempt, HvReferenceTscPage, HvSample,
    PvclockSample, PvclockVcpuTimeInfo, HV_NS_PER_UNIT, HV_REFERENCE_HZ, PVCLOCK_GUEST_STOPPED,
    PVCLOCK_TSC_STABLE_BIT,
};
pub use scale::{hv_next_sequence, hv_reference_scale, pvclock_time_scale};
pub use steal::{
    kvm_register_steal_time, kvm_unregister_steal_time, KvmStealTime, StealSample, StealTimePage,
    KVM_STEAL_TIME_ALIGN, KVM_VCPU_PREEMPTED,
};

/// One 4 KiB page of pvclock areas, one per vCPU (128): page-aligned, so a
/// single physical frame holds them all and area `i` is at the page's
/// physical address plus `32·i` — which a slice of a higher-half static
/// array cannot promise when it straddles two frames. Hand it to clockhal
/// as `PhysMapped<PvclockPage>` and take [`PhysMapped::areas`].
#[repr(C, align(4096))]
#[derive(Debug)]
pub struct PvclockPage {
    /// The areas, indexed by CPU.
    pub areas: [PvclockVcpuTimeInfo; PvclockPage::AREAS],
}

impl PvclockPage {
    /// Areas per page.
    pub const AREAS: usize = 128;

    const_fn! {
        /// A zeroed page.
        /// Interrupt-safe: yes.
        pub fn new() -> PvclockPage {
            PvclockPage {
                areas: array![PvclockVcpuTimeInfo::new(); PvclockPage::AREAS],
            }
        }
    }
}

// The ABI layouts (loom's atomics, for the models only, are larger).
#[cfg(not(loom))]
mod layout {
    use super::{PvclockPage, PvclockWallClock};
    use core::mem::{align_of, offset_of};
    use static_assertions::{assert_eq_size, const_assert_eq};

    assert_eq_size!(PvclockPage, [u8; 4096]);
    const_assert_eq!(align_of::<PvclockPage>(), 4096);
    assert_eq_size!(PvclockWallClock, [u8; 12]);
    const_assert_eq!(offset_of!(PvclockWallClock, sec), 4);
    const_assert_eq!(offset_of!(PvclockWallClock, nsec), 8);
}

impl Default for PvclockPage {
    fn default() -> Self {
        PvclockPage::new()
    }
}

impl PhysMapped<PvclockPage> {
    /// The page's areas, each at its exact physical address (the page is
    /// one frame).
    /// Interrupt-safe: yes.
    pub fn areas(&self) -> PhysMapped<[PvclockVcpuTimeInfo]> {
        PhysMapped {
            virt: &self.virt.areas[..],
            phys: self.phys,
            simulated: self.simulated,
        }
    }
}

/// `pvclock_wall_clock`, 12 bytes: the boot time in wall-clock seconds,
/// written when the wall-clock MSR is written.
#[repr(C, align(4))]
#[derive(Debug, Default)]
pub struct PvclockWallClock {
    /// Odd while the host updates it.
    pub version: AtomicU32,
    /// Seconds since the Unix epoch at guest system_time 0.
    pub sec: AtomicU32,
    /// Nanoseconds part.
    pub nsec: AtomicU32,
}

impl PvclockWallClock {
    const_fn! {
        /// A zeroed structure.
        /// Interrupt-safe: yes.
        pub fn new() -> Self {
            PvclockWallClock {
                version: AtomicU32::new(0),
                sec: AtomicU32::new(0),
                nsec: AtomicU32::new(0),
            }
        }
    }
}

/// Memory that the hypervisor may write, with its guest-physical address.
///
/// `T` may be a slice (e.g. one pvclock area per vCPU, contiguous):
/// element `i` is then at `phys + i * size_of::<element>()`.
#[derive(Debug)]
pub struct PhysMapped<T: ?Sized + 'static> {
    virt: &'static T,
    phys: u64,
    simulated: bool,
}

impl<T: ?Sized> Clone for PhysMapped<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: ?Sized> Copy for PhysMapped<T> {}

impl<T: ?Sized> PhysMapped<T> {
    /// Pairs memory with its guest-physical address.
    /// Interrupt-safe: yes.
    ///
    /// # Safety
    /// `phys` is the guest-physical address of `*virt` (physically
    /// contiguous for its whole size), and the OS lets the hypervisor write
    /// that memory for as long as it stays registered (clockhal unregisters
    /// on drop/shutdown; the OS must not reuse the memory before).
    pub const unsafe fn new(virt: &'static T, phys: u64) -> Self {
        PhysMapped {
            virt,
            phys,
            simulated: false,
        }
    }

    /// Memory that a *simulated* hypervisor writes, at a fake physical
    /// address. Safe: the registration helpers in this module refuse it on
    /// hardware that is not a simulator ([`Hardware::is_simulated`]), so a
    /// fake address never reaches a real hypervisor.
    /// Interrupt-safe: yes.
    pub const fn simulated(virt: &'static T, phys: u64) -> Self {
        PhysMapped {
            virt,
            phys,
            simulated: true,
        }
    }

    /// Whether it was made by [`PhysMapped::simulated`].
    /// Interrupt-safe: yes.
    pub const fn is_simulated(&self) -> bool {
        self.simulated
    }

    /// The memory.
    /// Interrupt-safe: yes.
    pub const fn get(&self) -> &'static T {
        self.virt
    }

    /// Its guest-physical address.
    /// Interrupt-safe: yes.
    pub const fn phys(&self) -> u64 {
        self.phys
    }
}

impl<T> PhysMapped<[T]> {
    /// Element `i` with its own physical address, or `None` out of range.
    /// Interrupt-safe: yes.
    pub fn element(&self, i: usize) -> Option<PhysMapped<T>> {
        let virt = self.virt.get(i)?;
        let offset = (i as u64).checked_mul(core::mem::size_of::<T>() as u64)?;
        Some(PhysMapped {
            virt,
            phys: self.phys.checked_add(offset)?,
            simulated: self.simulated,
        })
    }

    /// Number of elements.
    /// Interrupt-safe: yes.
    pub fn len(&self) -> usize {
        self.virt.len()
    }

    /// Whether there are none.
    /// Interrupt-safe: yes.
    pub fn is_empty(&self) -> bool {
        self.virt.is_empty()
    }
}

/// Why a registration was refused (before any MSR was written).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum RegisterError {
    /// The physical address is not aligned as the ABI requires.
    Misaligned,
    /// The MSR is not one that takes this kind of memory.
    WrongMsr,
    /// Simulated memory ([`PhysMapped::simulated`]) offered to hardware
    /// that is not a simulator.
    Simulated,
    /// Reading the MSR raised #GP (where the OS recovers from that,
    /// [`Hardware::recovers_msr_faults`]): the hypervisor does not offer
    /// it (any more).
    Faulted,
}

impl core::fmt::Display for RegisterError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            RegisterError::Misaligned => "memory not aligned as the ABI requires",
            RegisterError::WrongMsr => "MSR does not take this kind of memory",
            RegisterError::Simulated => "simulated memory offered to real hardware",
            RegisterError::Faulted => "the MSR raised #GP",
        })
    }
}

impl core::error::Error for RegisterError {}

/// Refuses simulated memory on real hardware.
fn check_backing<H: Hardware, T: ?Sized>(hw: &H, mem: &PhysMapped<T>) -> Result<(), RegisterError> {
    if mem.is_simulated() && !hw.is_simulated() {
        return Err(RegisterError::Simulated);
    }
    Ok(())
}

/// Registers a pvclock area for the calling vCPU with `msr`
/// ([`Msr::KVM_SYSTEM_TIME_NEW`] or [`Msr::KVM_SYSTEM_TIME`]): writes
/// `phys | 1`. Call on the vCPU that will read the area.
/// Interrupt-safe: yes.
pub fn kvm_register_system_time<H: Hardware>(
    hw: &H,
    msr: Msr,
    area: PhysMapped<PvclockVcpuTimeInfo>,
) -> Result<(), RegisterError> {
    if msr != Msr::KVM_SYSTEM_TIME_NEW && msr != Msr::KVM_SYSTEM_TIME {
        return Err(RegisterError::WrongMsr);
    }
    check_backing(hw, &area)?;
    if area.phys() % 32 != 0 {
        return Err(RegisterError::Misaligned);
    }
    // SAFETY: `PhysMapped::new`'s contract: `phys` is this area's address and
    // the hypervisor may write it while registered.
    unsafe { hw.wrmsr(msr, area.phys() | 1) };
    Ok(())
}

/// Stops the host from updating the calling vCPU's pvclock area (writes 0).
/// Interrupt-safe: yes.
pub fn kvm_unregister_system_time<H: Hardware>(hw: &H, msr: Msr) -> Result<(), RegisterError> {
    if msr != Msr::KVM_SYSTEM_TIME_NEW && msr != Msr::KVM_SYSTEM_TIME {
        return Err(RegisterError::WrongMsr);
    }
    // SAFETY: a zero value disables the area; no memory is handed over.
    unsafe { hw.wrmsr(msr, 0) };
    Ok(())
}

/// Asks KVM to (re)write the wall clock into `wall` ([`Msr::KVM_WALL_CLOCK_NEW`]
/// or [`Msr::KVM_WALL_CLOCK`]). The structure is written once per call.
/// Interrupt-safe: yes.
pub fn kvm_request_wall_clock<H: Hardware>(
    hw: &H,
    msr: Msr,
    wall: PhysMapped<PvclockWallClock>,
) -> Result<(), RegisterError> {
    if msr != Msr::KVM_WALL_CLOCK_NEW && msr != Msr::KVM_WALL_CLOCK {
        return Err(RegisterError::WrongMsr);
    }
    check_backing(hw, &wall)?;
    if wall.phys() % 4 != 0 {
        return Err(RegisterError::Misaligned);
    }
    // SAFETY: `PhysMapped::new`'s contract covers the host's write.
    unsafe { hw.wrmsr(msr, wall.phys()) };
    Ok(())
}

/// Sets the Hyper-V guest OS identity (must be non-zero before the reference
/// TSC MSR may be used).
/// Interrupt-safe: yes.
pub fn hv_set_guest_os_id<H: Hardware>(hw: &H, id: u64) {
    // SAFETY: the guest OS ID is an identification value; writing it hands
    // over no memory and changes no guest state.
    unsafe { hw.wrmsr(Msr::HV_GUEST_OS_ID, id) }
}

/// Enables the Hyper-V reference TSC page at `page`, preserving the MSR's
/// reserved bits 11:1 as the TLFS requires.
/// Interrupt-safe: yes.
pub fn hv_enable_reference_tsc<H: Hardware>(
    hw: &H,
    page: PhysMapped<HvReferenceTscPage>,
) -> Result<(), RegisterError> {
    check_backing(hw, &page)?;
    if page.phys() % 4096 != 0 {
        return Err(RegisterError::Misaligned);
    }
    let reserved = rdmsr_checked(hw, Msr::HV_REFERENCE_TSC).ok_or(RegisterError::Faulted)? & 0xFFE;
    // SAFETY: `PhysMapped::new`'s contract: the page is ours to hand over.
    unsafe { hw.wrmsr(Msr::HV_REFERENCE_TSC, page.phys() | reserved | 1) };
    Ok(())
}

/// Disables the reference TSC page (keeps reserved bits). Does nothing
/// where reading the MSR raised #GP (a partition that withdrew it has no
/// page to disable).
/// Interrupt-safe: yes.
pub fn hv_disable_reference_tsc<H: Hardware>(hw: &H) {
    let Some(current) = rdmsr_checked(hw, Msr::HV_REFERENCE_TSC) else {
        return;
    };
    // SAFETY: clearing the enable bit hands over no memory.
    unsafe { hw.wrmsr(Msr::HV_REFERENCE_TSC, current & 0xFFE) }
}
