//! CPUID decoders for everything clock-related.
//!
//! Standard leaves go through raw-cpuid (its max-leaf checks matter: under
//! QEMU TCG a leaf above the maximum returns garbage). Hypervisor leaves are
//! decoded here, never reading above the range's own maximum leaf.

use crate::{CpuidResult, Hardware};
use raw_cpuid::{CpuId, CpuIdReader, CpuIdResult};

/// Adapter that lets raw-cpuid issue CPUID through any [`Hardware`].
struct Reader<'a, H: Hardware>(&'a H);

impl<H: Hardware> Clone for Reader<'_, H> {
    fn clone(&self) -> Self {
        Reader(self.0)
    }
}

impl<H: Hardware> CpuIdReader for Reader<'_, H> {
    fn cpuid2(&self, eax: u32, ecx: u32) -> CpuIdResult {
        let r = self.0.cpuid(eax, ecx);
        CpuIdResult {
            eax: r.eax,
            ebx: r.ebx,
            ecx: r.ecx,
            edx: r.edx,
        }
    }
}

fn cpuid_of<H: Hardware>(hw: &H) -> CpuId<Reader<'_, H>> {
    CpuId::with_cpuid_reader(Reader(hw))
}

/// CPU vendor, for the TSC ordering fence and quirks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Vendor {
    /// GenuineIntel.
    Intel,
    /// AuthenticAMD.
    Amd,
    /// HygonGenuine.
    Hygon,
    /// Anything else (including QEMU TCG's default).
    Other,
}

/// The CPU vendor from leaf 0.
/// Interrupt-safe: yes.
pub fn vendor<H: Hardware>(hw: &H) -> Vendor {
    match cpuid_of(hw).get_vendor_info().as_ref().map(|v| v.as_str()) {
        Some("GenuineIntel") => Vendor::Intel,
        Some("AuthenticAMD") => Vendor::Amd,
        Some("HygonGenuine") => Vendor::Hygon,
        _ => Vendor::Other,
    }
}

/// CPUID.1:ECX bit 31: running under a hypervisor.
/// Interrupt-safe: yes.
pub fn hypervisor_present<H: Hardware>(hw: &H) -> bool {
    hw.cpuid(1, 0).ecx & (1 << 31) != 0
}

/// The calling CPU's APIC ID: the x2APIC ID from leaf 0xB when the basic
/// range reaches it and the leaf is implemented (non-zero EBX), else the
/// initial APIC ID, CPUID.1:EBX bits 31:24. It tells CPUs apart where the OS's
/// CPU index cannot be trusted (two CPUs reporting the same index).
/// Interrupt-safe: yes.
pub fn apic_id<H: Hardware>(hw: &H) -> u32 {
    let max = hw.cpuid(0, 0).eax;
    if max >= 0xB {
        let x2 = hw.cpuid(0xB, 0);
        if x2.ebx & 0xFFFF != 0 {
            return x2.edx;
        }
    }
    hw.cpuid(1, 0).ebx >> 24
}

/// Whether the `IA32_TSC_ADJUST` MSR exists (CPUID.(EAX=7,ECX=0):EBX bit
/// 1), checking the maximum basic leaf first.
/// Interrupt-safe: yes.
pub fn has_tsc_adjust<H: Hardware>(hw: &H) -> bool {
    hw.cpuid(0, 0).eax >= 7 && hw.cpuid(7, 0).ebx & (1 << 1) != 0
}

/// Whether `rdtscp` exists (CPUID 0x80000001 EDX bit 27).
/// Interrupt-safe: yes.
pub fn has_rdtscp<H: Hardware>(hw: &H) -> bool {
    cpuid_of(hw)
        .get_extended_processor_and_feature_identifiers()
        .is_some_and(|f| f.has_rdtscp())
}

/// Invariant TSC (CPUID 0x80000007 EDX bit 8), checking the maximum extended
/// leaf first. Inside a VM this is the hypervisor's claim: it means the
/// rate will not change on this host, not that it survives migration.
/// Interrupt-safe: yes.
pub fn invariant_tsc<H: Hardware>(hw: &H) -> bool {
    cpuid_of(hw)
        .get_advanced_power_mgmt_info()
        .is_some_and(|a| a.has_invariant_tsc())
}

/// Leaf 0x15: TSC = crystal * numerator / denominator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct TscLeaf {
    /// EAX.
    pub denominator: u32,
    /// EBX.
    pub numerator: u32,
    /// ECX: crystal clock in Hz (0 = not enumerated).
    pub crystal_hz: u32,
}

/// Crystal rates believed in leaf 0x15 ECX. Real parts use 19.2, 24, 25
/// or 38.4 MHz; a value outside 1..=100 MHz is garbage (QEMU TCG returns
/// random words for leaves it does not implement).
pub const PLAUSIBLE_CRYSTAL_HZ: core::ops::RangeInclusive<u32> = 1_000_000..=100_000_000;

impl TscLeaf {
    /// ECX, the core crystal clock in Hz, when enumerated and within
    /// [`PLAUSIBLE_CRYSTAL_HZ`]. (On Intel parts that enumerate the ratio,
    /// the local APIC timer runs at this rate too.)
    /// Interrupt-safe: yes.
    ///
    /// ```
    /// use clockhal_x86::cpuid::tsc_leaf;
    /// let m = clockhal_sim::SimMachine::bare_metal(); // 24 MHz crystal
    /// assert_eq!(tsc_leaf(&m).unwrap().crystal(), Some(24_000_000));
    /// ```
    pub fn crystal(&self) -> Option<u32> {
        Some(self.crystal_hz).filter(|hz| PLAUSIBLE_CRYSTAL_HZ.contains(hz))
    }

    /// The exact TSC rate as `(numerator, denominator)` in Hz, only when all
    /// three values are non-zero.
    /// Interrupt-safe: yes.
    pub fn tsc_hz_ratio(&self) -> Option<(u128, u128)> {
        if self.denominator == 0 || self.numerator == 0 || self.crystal_hz == 0 {
            return None;
        }
        Some((
            self.crystal_hz as u128 * self.numerator as u128,
            self.denominator as u128,
        ))
    }
}

/// Leaf 0x15 when the CPU enumerates it (values may be zero: see
/// [`TscLeaf::tsc_hz_ratio`]).
/// Interrupt-safe: yes.
pub fn tsc_leaf<H: Hardware>(hw: &H) -> Option<TscLeaf> {
    let max = hw.cpuid(0, 0).eax;
    if max < 0x15 {
        return None;
    }
    let r = hw.cpuid(0x15, 0);
    Some(TscLeaf {
        denominator: r.eax,
        numerator: r.ebx,
        crystal_hz: r.ecx,
    })
}

/// Leaf 0x16 base frequency in MHz: a hint, never the TSC rate.
/// Interrupt-safe: yes.
pub fn base_mhz<H: Hardware>(hw: &H) -> Option<u16> {
    cpuid_of(hw)
        .get_processor_frequency_info()
        .map(|f| f.processor_base_frequency())
        .filter(|&m| m != 0)
}

/// A hypervisor CPUID range found by signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct HypervisorRange {
    /// Base leaf (0x40000000, 0x40000100, ...).
    pub base: u32,
    /// Highest valid leaf in this range.
    pub max_leaf: u32,
}

impl HypervisorRange {
    /// `cpuid(base + offset)` if that leaf is within the range, else `None`.
    /// Interrupt-safe: yes.
    pub fn leaf<H: Hardware>(&self, hw: &H, offset: u32) -> Option<CpuidResult> {
        let leaf = self.base.checked_add(offset)?;
        (leaf <= self.max_leaf).then(|| hw.cpuid(leaf, 0))
    }
}

/// KVM's signature.
pub const KVM_SIGNATURE: &[u8; 12] = b"KVMKVMKVM\0\0\0";
/// Hyper-V's signature.
pub const HYPERV_SIGNATURE: &[u8; 12] = b"Microsoft Hv";

/// Scans bases 0x40000000..=0x4000FF00 (step 0x100) for `signature`.
/// Only when CPUID.1 reports a hypervisor. A range whose reported maximum is
/// below its base is taken to hold only `base + 1` (old KVM reported 0).
/// Interrupt-safe: yes.
pub fn find_hypervisor<H: Hardware>(hw: &H, signature: &[u8; 12]) -> Option<HypervisorRange> {
    if !hypervisor_present(hw) {
        return None;
    }
    let mut base = 0x4000_0000u32;
    while base <= 0x4000_FF00 {
        let r = hw.cpuid(base, 0);
        let mut sig = [0u8; 12];
        sig[0..4].copy_from_slice(&r.ebx.to_le_bytes());
        sig[4..8].copy_from_slice(&r.ecx.to_le_bytes());
        sig[8..12].copy_from_slice(&r.edx.to_le_bytes());
        if &sig == signature {
            let max_leaf = if r.eax < base {
                base + 1
            } else {
                r.eax.min(base + 0xFF)
            };
            return Some(HypervisorRange { base, max_leaf });
        }
        base += 0x100;
    }
    None
}

bitflags::bitflags! {
    /// KVM features (leaf base+1, EAX).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct KvmFeatures: u32 {
        /// Old MSRs 0x11/0x12.
        const CLOCKSOURCE = 1 << 0;
        /// New MSRs 0x4b564d00/01.
        const CLOCKSOURCE2 = 1 << 3;
        /// Steal time (`MSR_KVM_STEAL_TIME`, 0x4b564d03).
        const STEAL_TIME = 1 << 5;
        /// The pvclock TSC_STABLE flag may be trusted.
        const CLOCKSOURCE_STABLE_BIT = 1 << 24;
        // Keep unknown bits: they are reported, not interpreted.
        const _ = !0;
    }
}

/// KVM's range and feature bits, if KVM is present.
/// Interrupt-safe: yes.
pub fn kvm<H: Hardware>(hw: &H) -> Option<(HypervisorRange, KvmFeatures)> {
    let range = find_hypervisor(hw, KVM_SIGNATURE)?;
    let eax = range.leaf(hw, 1).map_or(0, |r| r.eax);
    Some((range, KvmFeatures::from_bits_retain(eax)))
}

/// Hyper-V feature words (leaf 0x40000003), decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct HypervFeatures {
    /// Raw EAX (partition privileges).
    pub eax: u32,
    /// Raw EDX.
    pub edx: u32,
}

impl HypervFeatures {
    /// EAX bit 1: TIME_REF_COUNT MSR.
    /// Interrupt-safe: yes.
    pub fn time_ref_count(&self) -> bool {
        self.eax & (1 << 1) != 0
    }
    /// EAX bit 9: reference TSC page.
    /// Interrupt-safe: yes.
    pub fn reference_tsc(&self) -> bool {
        self.eax & (1 << 9) != 0
    }
    /// EAX bit 11 and EDX bit 8 (Linux requires both): frequency MSRs.
    /// Interrupt-safe: yes.
    pub fn frequency_msrs(&self) -> bool {
        self.eax & (1 << 11) != 0 && self.edx & (1 << 8) != 0
    }
    /// EAX bit 15: TSC-invariance controls.
    /// Interrupt-safe: yes.
    pub fn tsc_invariant_controls(&self) -> bool {
        self.eax & (1 << 15) != 0
    }
}

/// Hyper-V: signature at a scanned base, interface "Hv#1" at base+1, and the
/// feature words at base+3. `None` if any is missing.
/// Interrupt-safe: yes.
pub fn hyperv<H: Hardware>(hw: &H) -> Option<(HypervisorRange, HypervFeatures)> {
    let range = find_hypervisor(hw, HYPERV_SIGNATURE)?;
    let iface = range.leaf(hw, 1)?;
    if iface.eax != 0x3123_7648 {
        return None;
    }
    let f = range.leaf(hw, 3)?;
    Some((
        range,
        HypervFeatures {
            eax: f.eax,
            edx: f.edx,
        },
    ))
}

/// The hypervisor timing leaf (base + 0x10, VMware convention, QEMU with
/// invtsc): TSC and APIC bus rates in kHz.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct TimingLeaf {
    /// TSC rate in kHz (non-zero).
    pub tsc_khz: u32,
    /// APIC bus rate in kHz.
    pub apic_khz: u32,
}

/// The timing leaf of `range`, only if the range reaches base+0x10 and the
/// TSC kHz is non-zero.
/// Interrupt-safe: yes.
pub fn timing_leaf<H: Hardware>(hw: &H, range: &HypervisorRange) -> Option<TimingLeaf> {
    let r = range.leaf(hw, 0x10)?;
    (r.eax != 0).then_some(TimingLeaf {
        tsc_khz: r.eax,
        apic_khz: r.ebx,
    })
}

/// The timing leaves a guest may believe, in order: the first hypervisor
/// range's, then KVM's when another hypervisor (Hyper-V) owns the first;
/// never reading above a range's maximum.
/// Interrupt-safe: yes.
///
/// ```
/// use clockhal_sim::SimMachine;
/// use clockhal_x86::cpuid::timing_leaves;
/// let leaf = timing_leaves(&SimMachine::qemu_kvm_invtsc()).next().unwrap();
/// assert_eq!((leaf.tsc_khz, leaf.apic_khz), (2_600_000, 1_000_000));
/// // QEMU TCG's range ends at 0x40000001: nothing is read above it.
/// assert!(timing_leaves(&SimMachine::qemu_tcg()).next().is_none());
/// ```
pub fn timing_leaves<H: Hardware>(hw: &H) -> impl Iterator<Item = TimingLeaf> + '_ {
    let first = first_hypervisor_range(hw);
    let kvm = kvm(hw).map(|(r, _)| r).filter(|r| Some(*r) != first);
    [first, kvm]
        .into_iter()
        .flatten()
        .filter_map(move |range| timing_leaf(hw, &range))
}

/// The first hypervisor range found at 0x40000000 regardless of signature
/// (for the timing leaf, which is not KVM-specific).
/// Interrupt-safe: yes.
pub fn first_hypervisor_range<H: Hardware>(hw: &H) -> Option<HypervisorRange> {
    if !hypervisor_present(hw) {
        return None;
    }
    let r = hw.cpuid(0x4000_0000, 0);
    (r.eax >= 0x4000_0000 && r.eax <= 0x4000_00FF).then_some(HypervisorRange {
        base: 0x4000_0000,
        max_leaf: r.eax,
    })
}
