//! Each `SimMachine::qemu_*` profile answers every CPUID leaf exactly as
//! QEMU did in its matrix row (the dumps in `testdata/cpuid`), including
//! the leaves past a range's maximum, which the dumps' tables leave out
//! and the out-of-range rule must reproduce.

use clockhal_sim::{
    regs, CpuidDump, CpuidMissing, SimConfig, SimMachine, QEMU_CPUID_DUMPS, QEMU_KVM_INVTSC,
    QEMU_KVM_MICROVM, QEMU_KVM_Q35, QEMU_TCG_MICROVM, QEMU_TCG_PC, QEMU_TCG_Q35,
};
use clockhal_x86::Hardware;

fn profiles() -> Vec<(CpuidDump, SimMachine)> {
    vec![
        (QEMU_TCG_Q35, SimMachine::qemu_tcg()),
        (QEMU_TCG_PC, SimMachine::qemu_tcg_pc()),
        (QEMU_TCG_MICROVM, SimMachine::qemu_tcg_microvm()),
        (QEMU_KVM_Q35, SimMachine::qemu_kvm()),
        (QEMU_KVM_INVTSC, SimMachine::qemu_kvm_invtsc()),
        (QEMU_KVM_MICROVM, SimMachine::qemu_kvm_microvm()),
    ]
}

#[test]
fn every_profile_answers_its_dump() {
    assert_eq!(profiles().len(), QEMU_CPUID_DUMPS.len());
    for (dump, m) in profiles() {
        let mut lines = 0;
        for (leaf, sub, want) in dump.entries() {
            let got = m.cpuid(leaf, sub);
            assert_eq!(got, want, "{}: leaf {leaf:#x}.{sub}", dump.config);
            lines += 1;
        }
        // Every leaf the kernel dumps: 10 fixed, 9 + 17 + 2 in ranges, 3 edges.
        assert_eq!(lines, 41, "{}", dump.config);
        // Past-maximum leaves are not in the table: the rule answers them.
        let table = dump.table();
        assert!(table.len() < lines, "{}", dump.config);
    }
}

#[test]
fn the_invariant_tsc_bit_is_set_only_where_qemu_set_it() {
    // The example: TCG's in-range leaf 0x80000007 once answered
    // garbage with the invariant bit; real TCG answers zero.
    for (dump, m) in profiles() {
        let invariant = m.cpuid(0x8000_0007, 0).edx & (1 << 8) != 0;
        assert_eq!(invariant, dump.config == "kvm-invtsc", "{}", dump.config);
    }
}

#[test]
fn profiles_agree_with_their_devices() {
    // The KVM leaf states the TSC rate the simulated TSC runs at.
    let m = SimMachine::qemu_kvm_invtsc();
    assert_eq!(
        m.cpuid(0x4000_0010, 0).eax as u64 * 1_000,
        m.config().tsc_hz
    );
    for m in [
        SimMachine::qemu_kvm(),
        SimMachine::qemu_kvm_invtsc(),
        SimMachine::qemu_kvm_microvm(),
    ] {
        let kvm = m.config().kvm.clone().unwrap();
        let eax = m.cpuid(kvm.cpuid_base + 1, 0).eax;
        assert_eq!(eax & kvm.feature_eax(), kvm.feature_eax());
    }
    // TCG has no KVM host; microvm has neither HPET nor PM timer.
    assert!(SimMachine::qemu_tcg().config().kvm.is_none());
    let micro = SimMachine::qemu_kvm_microvm();
    assert!(micro.config().hpet.is_none() && micro.config().pm_timer.is_none());
    assert_eq!(
        SimMachine::qemu_tcg_pc()
            .config()
            .pm_timer
            .as_ref()
            .unwrap()
            .port,
        0xb008
    );
}

#[test]
fn out_of_range_rule() {
    // Intel's rule: past a range's maximum, the highest basic leaf (same
    // subleaf); within range but absent, zero; a hypervisor range without
    // a base leaf is out of range as a whole.
    let m = SimConfig::cpu(1_000_000_000)
        .with_cpuid(0, 0, regs(0xD, 1, 2, 3))
        .with_cpuid(0xD, 0, regs(0xAA, 0, 0, 0))
        .with_cpuid(0xD, 1, regs(0xBB, 0, 0, 0))
        .build();
    assert_eq!(m.cpuid(0x15, 0).eax, 0xAA);
    assert_eq!(m.cpuid(0x15, 1).eax, 0xBB);
    assert_eq!(m.cpuid(0x4000_0000, 0).eax, 0xAA);
    assert_eq!(m.cpuid(0x8000_0009, 0).eax, 0xAA);
    assert_eq!(m.cpuid(0x8000_0007, 0), regs(0, 0, 0, 0)); // in range
    assert_eq!(m.cpuid(0xD, 2), regs(0, 0, 0, 0)); // missing subleaf
                                                   // Leaf 1 ignores ECX; leaf 0xD does not.
    assert_eq!(m.cpuid(1, 5), m.cpuid(1, 0));
    m.set_cpuid_missing(CpuidMissing::Zero);
    assert_eq!(m.cpuid(0x15, 0), regs(0, 0, 0, 0));
    m.set_cpuid_missing(CpuidMissing::Garbage);
    assert_ne!(m.cpuid(0x15, 0), regs(0, 0, 0, 0));
    assert_eq!(m.cpuid(0x15, 0), m.cpuid(0x15, 0), "deterministic");
}

#[test]
fn each_cpu_answers_its_own_apic_id() {
    let m = SimMachine::qemu_kvm_config().with_cpus(3, &[]).build();
    for cpu in 0..3 {
        let (l1, xb) = m.on_cpu(cpu, || (m.cpuid(1, 0), m.cpuid(0xB, 0)));
        assert_eq!(l1.ebx >> 24, cpu as u32);
        assert_eq!(l1.ebx & 0xFF_FFFF, 0x800, "CLFLUSH size kept");
        assert_eq!(xb.edx, cpu as u32);
    }
}
