//! The timer registers clockhal's timer devices program, behind safe
//! wrappers: the local APIC timer (xAPIC MMIO or x2APIC MSRs),
//! `IA32_TSC_DEADLINE`, and Hyper-V's synthetic timer 0.
//!
//! Why these writes are safe: each wrapper reaches only the registers of
//! one timer (never an arbitrary MSR), and programming a timer changes
//! nothing but when that timer raises its interrupt, at a vector the OS
//! chose and handed to clockhal. The OS owns the IDT, EOI and masking.
//! The x2APIC MSRs exist only in x2APIC mode: the wrappers take an
//! [`ApicAccess`] that [`ApicAccess::detect`] built from `IA32_APIC_BASE`,
//! so they never write an MSR that raises #GP.

use crate::{rdmsr_checked, Hardware, MmioRegion, Msr};

/// `IA32_APIC_BASE`: bit 11 enables the APIC, bit 10 selects x2APIC mode,
/// bits 51:12 the xAPIC MMIO base.
pub const IA32_APIC_BASE: Msr = Msr::new(0x1B);
/// `IA32_TSC_DEADLINE` (CPUID.1:ECX bit 24): the TSC value at which the
/// LAPIC timer fires in TSC-deadline mode; 0 disarms; reads back the
/// armed value (0 once fired).
pub const IA32_TSC_DEADLINE: Msr = Msr::new(0x6E0);
/// Hyper-V synthetic timer 0 configuration (TLFS 11.9).
pub const HV_STIMER0_CONFIG: Msr = Msr::new(0x4000_00B0);
/// Hyper-V synthetic timer 0 count: the absolute expiry in 100 ns units of
/// partition reference time (one-shot).
pub const HV_STIMER0_COUNT: Msr = Msr::new(0x4000_00B1);

/// The LAPIC timer's registers (xAPIC offset; x2APIC MSR = 0x800 + offset / 16).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ApicTimerReg {
    /// LVT timer: vector (7:0), mask (16), mode (18:17: 00 one-shot, 01
    /// periodic, 10 TSC-deadline).
    LvtTimer,
    /// Initial count: writing starts a one-shot; 0 stops it.
    InitialCount,
    /// Current count (read-only).
    CurrentCount,
    /// Divide configuration (bits 0, 1, 3).
    DivideConfig,
}

impl ApicTimerReg {
    /// The register's xAPIC MMIO offset.
    /// Interrupt-safe: yes.
    pub const fn xapic_offset(self) -> usize {
        match self {
            ApicTimerReg::LvtTimer => 0x320,
            ApicTimerReg::InitialCount => 0x380,
            ApicTimerReg::CurrentCount => 0x390,
            ApicTimerReg::DivideConfig => 0x3E0,
        }
    }

    /// The register's x2APIC MSR.
    /// Interrupt-safe: yes.
    pub const fn x2apic_msr(self) -> Msr {
        Msr::new(0x800 + (self.xapic_offset() as u32 >> 4))
    }
}

/// How this CPU's local APIC is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ApicAccess {
    /// x2APIC mode: MSRs 0x800..
    X2Apic,
    /// xAPIC mode: the 4 KiB register page the OS mapped (uncached).
    XApic(MmioRegion),
}

/// Why [`ApicAccess::detect`] found no usable APIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ApicAccessError {
    /// CPUID.1:EDX bit 9 (APIC) is clear.
    NoApic,
    /// `IA32_APIC_BASE` raised #GP.
    Faulted,
    /// `IA32_APIC_BASE` bit 11 is clear: the APIC is disabled.
    Disabled,
    /// xAPIC mode, and the OS gave no mapping of the register page.
    NoMapping,
    /// The mapping is smaller than the registers used (0x3E4 bytes).
    RegionTooSmall(usize),
}

impl core::fmt::Display for ApicAccessError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ApicAccessError::NoApic => f.write_str("CPUID says there is no local APIC"),
            ApicAccessError::Faulted => f.write_str("IA32_APIC_BASE raised #GP"),
            ApicAccessError::Disabled => f.write_str("the local APIC is disabled"),
            ApicAccessError::NoMapping => {
                f.write_str("xAPIC mode and no mapping of the APIC registers")
            }
            ApicAccessError::RegionTooSmall(n) => {
                write!(f, "APIC register mapping of {n} bytes is too small")
            }
        }
    }
}

impl core::error::Error for ApicAccessError {}

impl ApicAccess {
    /// The mode the calling CPU's APIC is in (`IA32_APIC_BASE` bits 11
    /// and 10). `xapic` is the OS's mapping of the xAPIC page, needed only
    /// in xAPIC mode (the OS also decides the mode: clockhal never
    /// switches it).
    /// Interrupt-safe: yes.
    pub fn detect<H: Hardware + ?Sized>(
        hw: &H,
        xapic: Option<MmioRegion>,
    ) -> Result<ApicAccess, ApicAccessError> {
        if hw.cpuid(1, 0).edx & (1 << 9) == 0 {
            return Err(ApicAccessError::NoApic);
        }
        let base = rdmsr_checked(hw, IA32_APIC_BASE).ok_or(ApicAccessError::Faulted)?;
        if base & (1 << 11) == 0 {
            return Err(ApicAccessError::Disabled);
        }
        if base & (1 << 10) != 0 {
            return Ok(ApicAccess::X2Apic);
        }
        let region = xapic.ok_or(ApicAccessError::NoMapping)?;
        let need = ApicTimerReg::DivideConfig.xapic_offset() + 4;
        if region.len() < need {
            return Err(ApicAccessError::RegionTooSmall(region.len()));
        }
        Ok(ApicAccess::XApic(region))
    }
}

/// Reads a LAPIC timer register of the calling CPU.
/// Interrupt-safe: yes.
pub fn apic_timer_read<H: Hardware + ?Sized>(hw: &H, access: ApicAccess, reg: ApicTimerReg) -> u32 {
    match access {
        ApicAccess::X2Apic => hw.rdmsr(reg.x2apic_msr()) as u32,
        ApicAccess::XApic(r) => hw.mmio_read32(r, reg.xapic_offset()),
    }
}

/// Writes a LAPIC timer register of the calling CPU (the current count is
/// read-only: a write to it is dropped here).
/// Interrupt-safe: yes.
pub fn apic_timer_write<H: Hardware + ?Sized>(
    hw: &H,
    access: ApicAccess,
    reg: ApicTimerReg,
    value: u32,
) {
    if reg == ApicTimerReg::CurrentCount {
        return;
    }
    match access {
        // SAFETY: an x2APIC timer register, which exists because
        // `ApicAccess::X2Apic` is only built in x2APIC mode; programming the
        // timer only changes when it raises the OS's vector (module docs).
        ApicAccess::X2Apic => unsafe { hw.wrmsr(reg.x2apic_msr(), value as u64) },
        ApicAccess::XApic(r) => hw.mmio_write32(r, reg.xapic_offset(), value),
    }
}

/// Writes `IA32_TSC_DEADLINE` (0 disarms). Call only where CPUID.1:ECX
/// bit 24 is set, after putting the LVT timer in TSC-deadline mode.
/// Interrupt-safe: yes.
pub fn write_tsc_deadline<H: Hardware + ?Sized>(hw: &H, tsc: u64) {
    // SAFETY: the TSC-deadline MSR arms the LAPIC timer and nothing else
    // (module docs); callers check CPUID.1:ECX bit 24 first.
    unsafe { hw.wrmsr(IA32_TSC_DEADLINE, tsc) }
}

/// Writes Hyper-V synthetic timer 0's configuration, then its count (the
/// TLFS order for a one-shot: a count write with auto-enable set, or a
/// config write with enable set, arms it). Call only where CPUID
/// 0x40000003 EAX bit 3 (synthetic timers) is set.
/// Interrupt-safe: yes.
pub fn hv_stimer0_write<H: Hardware + ?Sized>(hw: &H, config: u64, count: u64) {
    // SAFETY: synthetic timer MSRs arm a timer at the OS's vector and hand
    // over no memory (direct mode: no SynIC message page involved).
    unsafe {
        hw.wrmsr(HV_STIMER0_CONFIG, config);
        hw.wrmsr(HV_STIMER0_COUNT, count);
    }
}

/// Disables Hyper-V synthetic timer 0 (config 0).
/// Interrupt-safe: yes.
pub fn hv_stimer0_disable<H: Hardware + ?Sized>(hw: &H) {
    // SAFETY: as `hv_stimer0_write`: disabling a timer hands over nothing.
    unsafe { hw.wrmsr(HV_STIMER0_CONFIG, 0) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x2apic_msr_numbers() {
        assert_eq!(ApicTimerReg::LvtTimer.x2apic_msr().number(), 0x832);
        assert_eq!(ApicTimerReg::InitialCount.x2apic_msr().number(), 0x838);
        assert_eq!(ApicTimerReg::CurrentCount.x2apic_msr().number(), 0x839);
        assert_eq!(ApicTimerReg::DivideConfig.x2apic_msr().number(), 0x83E);
    }
}
