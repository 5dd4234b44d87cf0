//! The simulated CPUID instruction: a table, the rule for leaves it lacks,
//! and QEMU's real answers (dumps recorded by the conformance kernel).

use clockhal_x86::CpuidResult;
use std::collections::BTreeMap;

/// The table: `(leaf, subleaf)` to registers.
pub type CpuidTable = BTreeMap<(u32, u32), CpuidResult>;

/// What a leaf missing from the table answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuidMissing {
    /// Zero, in range or not.
    Zero,
    /// Intel's rule, which QEMU TCG (any vendor) and KVM (Intel-vendor
    /// guests) implement, and which the recorded dumps show: a leaf above
    /// its range's maximum answers the highest basic leaf (with the same
    /// subleaf); a leaf within range that the table lacks answers zero.
    /// The ranges are the basic one (maximum: leaf 0 EAX), each hypervisor
    /// range `0x4000_xx00` (its base leaf's EAX; without a base leaf every
    /// leaf of it is out of range), `0x8000_0000` and `0xC000_0000`.
    HighestBasic,
    /// Deterministic garbage for every leaf missing from the table: a
    /// hostile or broken CPUID.
    Garbage,
}

/// Leaves whose answer depends on the subleaf (ECX): a missing subleaf
/// answers zero. Every other leaf ignores ECX (stored as subleaf 0).
fn has_subleaves(leaf: u32) -> bool {
    matches!(
        leaf,
        0x4 | 0x7
            | 0xB
            | 0xD
            | 0xF
            | 0x10
            | 0x12
            | 0x14
            | 0x17
            | 0x18
            | 0x1D
            | 0x1F
            | 0x20
            | 0x23
            | 0x24
            | 0x8000_001D
            | 0x8000_0020
            | 0x8000_0026
    )
}

fn entry(table: &CpuidTable, leaf: u32, subleaf: u32) -> Option<CpuidResult> {
    let sub = if has_subleaves(leaf) { subleaf } else { 0 };
    table.get(&(leaf, sub)).copied()
}

/// The maximum leaf of `leaf`'s range per the table, `None` if the range
/// has no base leaf.
fn range_max(table: &CpuidTable, leaf: u32) -> Option<u32> {
    let base = match leaf {
        0x4000_0000..=0x4FFF_FFFF => leaf & 0xFFFF_FF00,
        0xC000_0000.. => 0xC000_0000,
        _ => leaf & 0x8000_0000,
    };
    table.get(&(base, 0)).map(|r| r.eax)
}

/// Whether `leaf` lies within its range per the table.
pub(crate) fn in_range(table: &CpuidTable, leaf: u32) -> bool {
    range_max(table, leaf).is_some_and(|max| leaf <= max)
}

/// What `cpuid(leaf, subleaf)` answers on `cpu` with `table` and `missing`.
/// Leaf 1 EBX[31:24] (initial APIC ID) and leaves 0xB/0x1F EDX (x2APIC
/// ID) carry the CPU's index, as each CPU answers its own.
pub(crate) fn answer(
    table: &CpuidTable,
    missing: CpuidMissing,
    cpu: usize,
    leaf: u32,
    subleaf: u32,
) -> CpuidResult {
    let found = match missing {
        CpuidMissing::Zero => entry(table, leaf, subleaf),
        CpuidMissing::Garbage => {
            Some(entry(table, leaf, subleaf).unwrap_or(garbage(leaf, subleaf)))
        }
        CpuidMissing::HighestBasic if in_range(table, leaf) => entry(table, leaf, subleaf),
        CpuidMissing::HighestBasic => {
            let basic = table.get(&(0, 0)).map_or(0, |r| r.eax);
            return answer(table, CpuidMissing::Zero, cpu, basic, subleaf);
        }
    };
    let Some(mut r) = found else {
        return CpuidResult::default();
    };
    let id = cpu as u32;
    match leaf {
        0x1 => r.ebx = (r.ebx & 0x00FF_FFFF) | (id & 0xFF) << 24,
        0xB | 0x1F => r.edx = id,
        _ => {}
    }
    r
}

fn garbage(leaf: u32, sub: u32) -> CpuidResult {
    let mut x = (leaf as u64) << 32 | sub as u64 | 0x9E37_79B9_0000_0000;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x as u32
    };
    CpuidResult {
        eax: next(),
        ebx: next(),
        ecx: next(),
        edx: next(),
    }
}

/// CPUID as a real machine answered it: the conformance kernel's `CPUID
/// leaf=.. sub=.. eax=.. ebx=.. ecx=.. edx=..` lines, as `clockhal-matrix`
/// stores them (`target/conformance/cpuid/<config>.txt`). The recorded
/// ones are in `arch/sim/testdata/cpuid` ([`QEMU_CPUID_DUMPS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuidDump {
    /// The matrix configuration it was recorded in (`tcg-q35`, ...).
    pub config: &'static str,
    /// The dump's text.
    pub text: &'static str,
}

impl CpuidDump {
    /// Every `(leaf, subleaf, registers)` line, in order. Other lines are
    /// ignored.
    ///
    /// # Panics
    /// On a `CPUID` line that does not parse (the dumps are test data).
    pub fn entries(&self) -> impl Iterator<Item = (u32, u32, CpuidResult)> + '_ {
        self.text
            .lines()
            .filter(|l| l.starts_with("CPUID "))
            .map(|l| parse_line(l).unwrap_or_else(|| panic!("{}: bad line {l:?}", self.config)))
    }

    /// The entries that lie within their range's maximum (by the dump's
    /// own maximum leaves): what a CPUID table holds. The others are the
    /// out-of-range rule's answers ([`CpuidMissing::HighestBasic`]).
    pub fn table(&self) -> CpuidTable {
        let all: CpuidTable = self.entries().map(|(l, s, r)| ((l, s), r)).collect();
        all.iter()
            .filter(|((leaf, _), _)| in_range(&all, *leaf))
            .map(|(k, r)| (*k, *r))
            .collect()
    }
}

fn parse_line(line: &str) -> Option<(u32, u32, CpuidResult)> {
    let mut v = [0u32; 6];
    let names = ["leaf=", "sub=", "eax=", "ebx=", "ecx=", "edx="];
    let mut words = line.split_whitespace().skip(1);
    for (slot, name) in v.iter_mut().zip(names) {
        let hex = words.next()?.strip_prefix(name)?.strip_prefix("0x")?;
        *slot = u32::from_str_radix(hex, 16).ok()?;
    }
    let [leaf, sub, eax, ebx, ecx, edx] = v;
    Some((leaf, sub, CpuidResult { eax, ebx, ecx, edx }))
}

macro_rules! dump {
    ($config:literal) => {
        CpuidDump {
            config: $config,
            text: include_str!(concat!("../testdata/cpuid/", $config, ".txt")),
        }
    };
}

/// `-accel tcg -M q35 -cpu max` (QEMU 7.2): AuthenticAMD, max basic leaf
/// 0xD, hypervisor range "TCGTCGTCGTCG" up to 0x40000001, no invariant TSC.
pub const QEMU_TCG_Q35: CpuidDump = dump!("tcg-q35");
/// `-accel tcg -M pc -cpu qemu64`.
pub const QEMU_TCG_PC: CpuidDump = dump!("tcg-pc");
/// `-accel tcg -M microvm -cpu max` (the same CPU as `tcg-q35`).
pub const QEMU_TCG_MICROVM: CpuidDump = dump!("tcg-microvm");
/// `-accel kvm -M q35 -cpu host` on the project's machine kind (kvm_pvm):
/// GenuineIntel, max basic leaf 0x24, KVM range up to 0x40000001, no
/// invariant TSC, no RDTSCP.
pub const QEMU_KVM_Q35: CpuidDump = dump!("kvm-q35");
/// `-accel kvm -M q35 -cpu host,+invtsc`: adds the invariant TSC and the
/// KVM leaf 0x40000010 (TSC 2,600,000 kHz).
pub const QEMU_KVM_INVTSC: CpuidDump = dump!("kvm-invtsc");
/// `-accel kvm -M microvm -cpu host`.
pub const QEMU_KVM_MICROVM: CpuidDump = dump!("kvm-microvm");

/// Every recorded dump.
pub const QEMU_CPUID_DUMPS: [CpuidDump; 6] = [
    QEMU_TCG_Q35,
    QEMU_TCG_PC,
    QEMU_TCG_MICROVM,
    QEMU_KVM_Q35,
    QEMU_KVM_INVTSC,
    QEMU_KVM_MICROVM,
];
