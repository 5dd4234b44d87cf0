//! Why kvmclock is unusable on this machine.

use crate::PvclockError;
use core::fmt;

/// Why [`Kvmclock::probe`](crate::Kvmclock::probe) or
/// [`Kvmclock::register_this_cpu`](crate::Kvmclock::register_this_cpu)
/// failed. Nothing stays registered after an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum KvmclockError {
    /// CPUID.1:ECX bit 31 is clear: not running under a hypervisor.
    NoHypervisor,
    /// No "KVMKVMKVM" signature at any hypervisor CPUID base.
    NoKvmSignature,
    /// KVM offers neither CLOCKSOURCE2 (new MSRs) nor CLOCKSOURCE (old).
    NoClocksource,
    /// The OS passed no pvclock areas.
    NoMemory,
    /// The calling CPU's index has no area (fewer areas than CPUs).
    CpuIndexOutOfRange {
        /// `Hardware::cpu_index()` of the calling CPU.
        cpu: usize,
        /// Number of areas the OS passed.
        areas: usize,
    },
    /// Another CPU (APIC ID `holder_apic`) already registered the area of
    /// this CPU index: the OS's `cpu_index()` is not distinct per CPU (an
    /// SMP kernel with the default index 0 everywhere).
    IndexTaken {
        /// The index both CPUs report.
        cpu: usize,
        /// APIC ID of the CPU that holds it.
        holder_apic: u32,
        /// APIC ID of the CPU that asked.
        this_apic: u32,
    },
    /// The registration was refused before any MSR was written (an area
    /// not 32-byte aligned — the ABI needs 4, 32 keeps every area inside one
    /// page — or simulated memory on real hardware).
    Register(clockhal_x86::paravirt::RegisterError),
    /// The wall-clock structure's guest-physical address is not 4-byte aligned.
    WallClockMisaligned,
    /// After registration the area's multiplier is still 0.
    NotWritten,
    /// The area's `tsc_shift` is outside -32..=32.
    ShiftOutOfRange(i8),
    /// The area implies a TSC rate outside 1 Hz ..= 2^40 Hz.
    FrequencyOutOfRange,
    /// The area's version stayed odd or kept changing.
    AreaBusy,
}

impl From<PvclockError> for KvmclockError {
    fn from(e: PvclockError) -> Self {
        match e {
            PvclockError::NotWritten => KvmclockError::NotWritten,
            PvclockError::ShiftOutOfRange(s) => KvmclockError::ShiftOutOfRange(s),
            PvclockError::FrequencyOutOfRange => KvmclockError::FrequencyOutOfRange,
            PvclockError::Busy => KvmclockError::AreaBusy,
        }
    }
}

impl fmt::Display for KvmclockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KvmclockError::NoHypervisor => f.write_str("no hypervisor (CPUID.1:ECX[31] clear)"),
            KvmclockError::NoKvmSignature => {
                f.write_str("no KVM signature at any hypervisor CPUID base")
            }
            KvmclockError::NoClocksource => {
                f.write_str("KVM offers neither CLOCKSOURCE2 nor CLOCKSOURCE")
            }
            KvmclockError::NoMemory => f.write_str("no pvclock areas given"),
            KvmclockError::CpuIndexOutOfRange { cpu, areas } => {
                write!(f, "CPU index {cpu} has no pvclock area ({areas} given)")
            }
            KvmclockError::IndexTaken {
                cpu,
                holder_apic,
                this_apic,
            } => write!(
                f,
                "CPU index {cpu} already registered by APIC {holder_apic} (this is APIC {this_apic}): cpu_index() must differ per CPU"
            ),
            KvmclockError::Register(e) => write!(f, "pvclock area refused: {e}"),
            KvmclockError::WallClockMisaligned => {
                f.write_str("pvclock wall clock not 4-byte aligned")
            }
            KvmclockError::NotWritten => PvclockError::NotWritten.fmt(f),
            KvmclockError::ShiftOutOfRange(s) => PvclockError::ShiftOutOfRange(*s).fmt(f),
            KvmclockError::FrequencyOutOfRange => PvclockError::FrequencyOutOfRange.fmt(f),
            KvmclockError::AreaBusy => PvclockError::Busy.fmt(f),
        }
    }
}

impl core::error::Error for KvmclockError {}
