//! The HPET backend on the simulated machine.

use clockhal_core::{ClockSource, Frequency, Policy, Quality, ReadCost, Stability};
use clockhal_hpet::{Hpet, HpetError};
use clockhal_sim::{HpetConfig, SimConfig, SimMachine};
use clockhal_x86::{Hardware, MmioRegion};

fn machine(hpet: HpetConfig) -> SimMachine {
    SimConfig::cpu(2_000_000_000).with_hpet(hpet).build()
}

fn probe(m: &SimMachine) -> Result<Hpet<&SimMachine>, HpetError> {
    Hpet::probe(m, m.hpet_region().unwrap(), &Policy::new())
}

/// Deterministic xorshift.
fn rng(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// Reads per wrap test: Miri interprets ~10^4 times slower.
const STEPS: u32 = if cfg!(miri) { 200 } else { 10_000 };

/// Reads at irregular but rule-abiding intervals and checks every reading
/// against the machine's true elapsed time; returns the number of wraps of
/// the 32-bit hardware counter seen.
fn track_truth(
    m: &SimMachine,
    hpet: &Hpet<&SimMachine>,
    period_fs: u64,
    steps: u32,
    seed: u64,
) -> u64 {
    let v0 = hpet.read();
    let n0 = m.now_ns();
    // The rule is in ticks; leave room for the read's own trap cost.
    let max_ns = hpet.max_read_interval().map_or(30_000_000_000, |t| {
        (t as u128 * period_fs as u128 / 1_000_000) as u64 - 10_000
    });
    let mut seed = seed;
    let mut prev = v0;
    let mut wraps = 0;
    for _ in 0..steps {
        m.advance(rng(&mut seed) % max_ns);
        let v = hpet.read();
        let expected = v0 + ((m.now_ns() - n0) as u128 * 1_000_000 / period_fs as u128) as u64;
        assert!(v.abs_diff(expected) <= 1, "read {v}, expected {expected}");
        assert!(v >= prev);
        wraps += (v >> 32) - (prev >> 32);
        prev = v;
    }
    wraps
}

#[test]
fn qemu_64bit_100mhz() {
    let m = machine(HpetConfig::qemu());
    let h = probe(&m).unwrap();
    assert_eq!(h.frequency(), Frequency::from_hz(100_000_000).unwrap());
    assert_eq!(h.period_fs(), 10_000_000);
    assert!(h.counter_64bit());
    assert_eq!(h.max_read_interval(), None);
    assert!(!h.stability().contains(Stability::SOFTWARE_EXTENDED));
    track_truth(&m, &h, 10_000_000, 2_000, 1);
}

#[test]
fn classic_14mhz_is_exact() {
    let m = machine(HpetConfig::classic());
    let h = probe(&m).unwrap();
    let f = h.frequency();
    // 10^15 / 69,841,279 Hz exactly.
    assert_eq!(
        f,
        Frequency::from_ratio(1_000_000_000_000_000, 69_841_279).unwrap()
    );
    assert_eq!(f.hz_rounded(), 14_318_180);
    track_truth(&m, &h, 69_841_279, 2_000, 2);
}

#[test]
fn thousands_of_32bit_wraps_at_100mhz() {
    let m = machine(HpetConfig::qemu().narrow());
    let h = probe(&m).unwrap();
    assert!(!h.counter_64bit());
    assert_eq!(h.max_read_interval(), Some(1 << 31));
    assert!(h.stability().contains(Stability::SOFTWARE_EXTENDED));
    let wraps = track_truth(&m, &h, 10_000_000, STEPS, 3);
    assert!(wraps > STEPS as u64 / 5, "only {wraps} wraps");
}

#[test]
fn thousands_of_32bit_wraps_at_14mhz() {
    let m = machine(HpetConfig::classic().narrow());
    let h = probe(&m).unwrap();
    let wraps = track_truth(&m, &h, 69_841_279, STEPS, 4);
    assert!(wraps > STEPS as u64 / 5, "only {wraps} wraps");
}

#[test]
fn exactly_one_mmio_access_per_read() {
    for cfg in [HpetConfig::qemu(), HpetConfig::qemu().narrow()] {
        let m = machine(cfg);
        let h = probe(&m).unwrap();
        for _ in 0..10 {
            m.reset_traps();
            h.read();
            let t = m.traps();
            assert_eq!((t.mmio_reads, t.exits()), (1, 1), "{t:?}");
        }
    }
}

#[test]
fn counter_that_never_starts_is_refused_and_left_halted() {
    let m = machine(HpetConfig {
        stuck: true,
        ..HpetConfig::qemu()
    });
    assert_eq!(probe(&m).unwrap_err(), HpetError::NotAdvancing);
    // Bounded: the probe gave up after its read budget.
    assert!(m.traps().mmio_reads <= 10_010);
    assert_eq!(m.with_hpet(|h, _| h.config_register()), Some(0));
}

#[test]
fn absent_device_reads_all_ones() {
    let m = machine(HpetConfig {
        absent: true,
        ..HpetConfig::qemu()
    });
    assert_eq!(probe(&m).unwrap_err(), HpetError::NoDevice);
    // Nothing mapped at the region at all (wrong base from the tables).
    let m = SimConfig::cpu(2_000_000_000).build();
    let r = MmioRegion::simulated(0xFED0_0000, 1024);
    assert_eq!(
        Hpet::probe(&m, r, &Policy::new()).unwrap_err(),
        HpetError::NoDevice
    );
}

#[test]
fn implausible_periods_are_refused() {
    for p in [0u32, 1, 99_999, 100_000_001, u32::MAX - 1] {
        let m = machine(HpetConfig {
            period_fs: p,
            ..HpetConfig::qemu()
        });
        assert_eq!(probe(&m).unwrap_err(), HpetError::BadPeriod(p));
    }
    for p in [100_000u32, 100_000_000] {
        let m = machine(HpetConfig {
            period_fs: p,
            ..HpetConfig::qemu()
        });
        assert_eq!(probe(&m).unwrap().period_fs(), p);
    }
}

#[test]
fn small_region_is_refused() {
    let m = machine(HpetConfig::qemu());
    let r = MmioRegion::simulated(0xFED0_0000, 0xF0);
    assert_eq!(
        Hpet::probe(&m, r, &Policy::new()).unwrap_err(),
        HpetError::RegionTooSmall(0xF0)
    );
}

#[test]
fn legacy_route_bit_is_kept_and_running_counter_left_alone() {
    let m = machine(HpetConfig {
        initial_config: 2, // LEG_RT_CNF set by firmware, counter halted
        ..HpetConfig::qemu()
    });
    probe(&m).unwrap();
    assert_eq!(m.with_hpet(|h, _| h.config_register()), Some(3));

    let m = machine(HpetConfig {
        initial_config: 1,
        initial_counter: 1 << 40,
        ..HpetConfig::qemu()
    });
    let h = probe(&m).unwrap();
    assert_eq!(m.traps().mmio_writes, 0, "already enabled: no write");
    assert!(h.read() > 1 << 40);
}

#[test]
fn descriptors() {
    let m = SimMachine::kvm();
    let h = probe(&m).unwrap();
    assert_eq!(h.name(), "hpet");
    assert_eq!(h.quality(), Quality::new(250));
    assert_eq!(h.read_cost(), ReadCost::OneTrap);
    let s = h.stability();
    for f in [
        Stability::TRAPS_EVERY_READ,
        Stability::INVARIANT_RATE,
        Stability::MONOTONIC_PER_CPU,
        Stability::MONOTONIC_ACROSS_CPUS,
    ] {
        assert!(s.contains(f), "{s}");
    }
    // Bare metal: no hypervisor, no trap.
    let m = SimMachine::bare_metal();
    let h = probe(&m).unwrap();
    assert!(!h.stability().contains(Stability::TRAPS_EVERY_READ));
}

#[test]
fn counter_reset_behind_our_back_never_steps_back() {
    let m = machine(HpetConfig::qemu());
    let h = probe(&m).unwrap();
    m.advance(1_000_000_000);
    let before = h.read();
    // Someone halts the HPET, zeroes the counter and restarts it.
    let r = m.hpet_region().unwrap();
    m.mmio_write32(r, 0x10, 0);
    m.mmio_write64(r, 0xF0, 0);
    m.mmio_write32(r, 0x10, 1);
    for _ in 0..100 {
        assert!(h.read() >= before);
    }
}

#[test]
fn from_acpi_tables_to_a_running_clock() {
    let tables = clockhal_sim::AcpiTablesBuilder::q35().build();
    let info = clockhal_x86::acpi::discover(&tables.memory(), tables.rsdp())
        .unwrap()
        .hpet
        .unwrap();
    let m = SimMachine::kvm();
    let region = MmioRegion::simulated(info.base as usize, 1024);
    let h = Hpet::probe(&m, region, &Policy::new()).unwrap();
    assert_eq!(h.counter_64bit(), info.counter_64bit);
}
