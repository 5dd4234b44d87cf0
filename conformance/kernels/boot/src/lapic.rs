//! The local APIC, only as far as SMP bring-up needs it: ID and IPIs (and
//! register access for the timer in `apic_timer`).
//!
//! Uses xAPIC MMIO at the IA32_APIC_BASE address (0xFEE00000 under QEMU,
//! mapped uncached), or the x2APIC MSRs if firmware already switched to
//! x2APIC mode. Interrupt delivery (SVR, TPR, EOI, the timer backstop) is
//! [`crate::irq`]'s.

use core::ptr::{read_volatile, write_volatile};

use crate::{cpu, msr, phys, timeout::Deadline};

const MSR_APIC_BASE: u32 = 0x1B;
const APIC_BASE_ENABLE: u64 = 1 << 11;
const APIC_BASE_X2APIC: u64 = 1 << 10;

// xAPIC register offsets.
const XAPIC_ID: u64 = 0x20;
const XAPIC_SVR: u64 = 0xF0;
const XAPIC_ICR_LOW: u64 = 0x300;
const XAPIC_ICR_HIGH: u64 = 0x310;
const SVR_ENABLE: u32 = 1 << 8;
const ICR_DELIVERY_PENDING: u32 = 1 << 12;

// x2APIC MSRs.
const X2APIC_ID: u32 = 0x802;
const X2APIC_SVR: u32 = 0x80F;
const X2APIC_ICR: u32 = 0x830;

/// ICR: INIT, level assert.
pub(crate) const ICR_INIT_ASSERT: u32 = 0x0000_4500;
/// ICR: start-up IPI (OR in the vector = trampoline page number).
pub(crate) const ICR_STARTUP: u32 = 0x0000_4600;

/// How the executing CPU's local APIC is reached.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Lapic {
    /// Memory-mapped registers at this physical (= virtual) address.
    XApic(u64),
    /// MSR interface.
    X2Apic,
}

impl Lapic {
    /// The executing CPU's local APIC, globally enabled.
    pub(crate) fn this_cpu() -> Option<Self> {
        // SAFETY: IA32_APIC_BASE exists on every CPU with an APIC (CPUID
        // 1:EDX[9]), which is checked first.
        let base = (cpu::cpuid(1, 0).edx & (1 << 9) != 0).then(|| unsafe { msr::rdmsr(MSR_APIC_BASE) })?;
        if base & APIC_BASE_ENABLE == 0 {
            // SAFETY: only sets the global enable bit of this CPU's APIC; the
            // MMIO base stays where it was (identity mapped below 4 GiB).
            unsafe { msr::wrmsr(MSR_APIC_BASE, base | APIC_BASE_ENABLE) };
        }
        let lapic = if base & APIC_BASE_X2APIC != 0 {
            Lapic::X2Apic
        } else {
            let mmio = base & 0x000F_FFFF_FFFF_F000;
            if !phys::is_mapped(mmio, 0x1000) {
                return None;
            }
            Lapic::XApic(mmio)
        };
        // Software-enable it too, keeping the spurious vector as it is
        // (interrupts stay off, so it is never delivered).
        let svr = lapic.read(XAPIC_SVR, X2APIC_SVR);
        if svr & SVR_ENABLE == 0 {
            lapic.write(XAPIC_SVR, X2APIC_SVR, svr | SVR_ENABLE | 0xFF);
        }
        Some(lapic)
    }

    pub(crate) fn read(self, mmio_offset: u64, msr_index: u32) -> u32 {
        match self {
            // SAFETY: a local APIC register in the uncached identity map;
            // reads of ID/SVR/ICR and the timer's current count have no side
            // effects.
            Lapic::XApic(base) => unsafe { read_volatile((base + mmio_offset) as *const u32) },
            // SAFETY: x2APIC mode is on, so the register MSR exists.
            Lapic::X2Apic => unsafe { msr::rdmsr(msr_index) as u32 },
        }
    }

    pub(crate) fn write(self, mmio_offset: u64, msr_index: u32, value: u32) {
        match self {
            // SAFETY: a local APIC register in the uncached identity map; the
            // registers written here (SVR, TPR; the timer's LVT entry,
            // divide configuration and initial count) do not affect memory;
            // an interrupt they cause goes to a vector of the IDT, taken
            // only where `irq` enables interrupts.
            Lapic::XApic(base) => unsafe { write_volatile((base + mmio_offset) as *mut u32, value) },
            // SAFETY: x2APIC mode is on, so the register MSR exists.
            Lapic::X2Apic => unsafe { msr::wrmsr(msr_index, u64::from(value)) },
        }
    }

    /// This CPU's APIC ID.
    pub(crate) fn id(self) -> u32 {
        match self {
            Lapic::XApic(_) => self.read(XAPIC_ID, X2APIC_ID) >> 24,
            Lapic::X2Apic => self.read(XAPIC_ID, X2APIC_ID),
        }
    }

    /// Sends an IPI (`icr_low`: delivery mode, level, vector) to `apic_id`
    /// and waits (bounded) until the APIC reports it delivered. Returns
    /// `false` if it stayed pending (or the ID is not addressable).
    ///
    /// # Safety
    /// INIT and start-up IPIs reset and start other CPUs: the caller must own
    /// the target CPU's life cycle (no other code relies on it running).
    pub(crate) unsafe fn send_ipi(self, apic_id: u32, icr_low: u32) -> bool {
        match self {
            Lapic::XApic(base) => {
                if apic_id > 0xFF {
                    return false;
                }
                // SAFETY: ICR writes to this CPU's APIC; the caller owns the
                // target CPU. High half first: writing the low half sends.
                unsafe {
                    write_volatile((base + XAPIC_ICR_HIGH) as *mut u32, apic_id << 24);
                    write_volatile((base + XAPIC_ICR_LOW) as *mut u32, icr_low);
                }
                let deadline = Deadline::after_ms(100);
                while self.read(XAPIC_ICR_LOW, X2APIC_ICR) & ICR_DELIVERY_PENDING != 0 {
                    if deadline.expired() {
                        return false;
                    }
                    core::hint::spin_loop();
                }
                true
            }
            Lapic::X2Apic => {
                // SAFETY: x2APIC mode is on; the caller owns the target CPU.
                // x2APIC has no delivery-status bit: sent means delivered.
                unsafe { msr::wrmsr(X2APIC_ICR, (u64::from(apic_id) << 32) | u64::from(icr_low)) };
                true
            }
        }
    }
}
