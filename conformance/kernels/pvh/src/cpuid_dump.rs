//! The CPUID leaves clock code looks at, printed as the machine answers
//! them (`CPUID leaf=.. sub=.. eax=.. ebx=.. ecx=.. edx=..`): the matrix
//! runner stores them per configuration, and the simulator's QEMU
//! profiles are checked against them (`arch/sim/testdata/cpuid`).
//!
//! Only `cpuid` is executed (no `xgetbv`: XSAVE stays off, see the
//! QEMU test machine notes). Leaves above a range's maximum are dumped
//! too: what they return is part of the machine's behaviour.

use clockhal::x86::Hardware;
use clockhal_boot::println;

/// `(leaf, subleaf)` pairs: vendor and maximum, features, power
/// management, structured features, topology, XSAVE sizes, TSC/crystal
/// and processor frequency, the extended range, and both hypervisor
/// ranges (0x40000000 and, behind Hyper-V enlightenments, 0x40000100).
const LEAVES: &[(u32, u32)] = &[
    (0x0, 0),
    (0x1, 0),
    (0x6, 0),
    (0x7, 0),
    (0xB, 0),
    (0xB, 1),
    (0xD, 0),
    (0xD, 1),
    (0x15, 0),
    (0x16, 0),
];

/// Inclusive ranges dumped leaf by leaf (subleaf 0).
const RANGES: &[(u32, u32)] = &[
    (0x8000_0000, 0x8000_0008),
    (0x4000_0000, 0x4000_0010),
    (0x4000_0100, 0x4000_0101),
];

/// Prints every leaf of [`LEAVES`] and [`RANGES`] on this CPU, then the
/// highest basic leaf and the first leaf past the basic and the extended
/// maximum (what a leaf out of range answers).
pub fn print(hw: &impl Hardware) {
    let ranges = RANGES
        .iter()
        .flat_map(|&(first, last)| (first..=last).map(|l| (l, 0)));
    let basic_max = hw.cpuid(0, 0).eax;
    let extended_max = hw.cpuid(0x8000_0000, 0).eax;
    let edges = [
        (basic_max, 0),
        (basic_max.wrapping_add(1), 0),
        (extended_max.wrapping_add(1), 0),
    ];
    for (leaf, sub) in LEAVES.iter().copied().chain(ranges).chain(edges) {
        let r = hw.cpuid(leaf, sub);
        println!(
            "CPUID leaf={leaf:#010x} sub={sub:#x} eax={:#010x} ebx={:#010x} ecx={:#010x} edx={:#010x}",
            r.eax, r.ebx, r.ecx, r.edx
        );
    }
}
