//! The ACPI PM timer backend on the simulated machine.

use clockhal_acpi_pm::{AcpiPm, AcpiPmError, PmMode, PM_TIMER_HZ};
use clockhal_core::{ClockSource, Policy, Quality, ReadCost, Stability};
use clockhal_sim::{PmTimerConfig, SimConfig, SimMachine};
use clockhal_x86::{CpuidResult, Hardware, MmioRegion, Msr};
use std::sync::atomic::{AtomicU64, Ordering};

fn machine(pm: PmTimerConfig) -> SimMachine {
    SimConfig::cpu(2_000_000_000).with_pm_timer(pm).build()
}

fn probe(m: &SimMachine, bits32: bool) -> Result<AcpiPm<&SimMachine>, AcpiPmError> {
    AcpiPm::probe(m, 0x608, bits32, &Policy::new())
}

fn rng(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

fn ticks_at(ns: u64) -> u64 {
    (ns as u128 * PM_TIMER_HZ as u128 / 1_000_000_000) as u64
}

/// Reads per wrap test: Miri interprets ~10^4 times slower.
const STEPS: u32 = if cfg!(miri) { 200 } else { 10_000 };

/// Ticks a fast-mode value can trail the truth by: it is the first of its
/// pair, the second read comes after it.
const PAIR_LAG: u64 = 8;

/// Irregular, rule-abiding reads; each must equal the true elapsed count
/// (within `slack` ticks behind it). Returns the hardware wraps seen.
fn track_truth(m: &SimMachine, pm: &AcpiPm<&SimMachine>, steps: u32, slack: u64, seed: u64) -> u64 {
    let v0 = pm.read();
    let bits = pm.bits();
    // The extended value is the true count minus a whole number of wraps
    // (and, for verified reads, minus the lag of the reads after the one
    // returned).
    let base = (ticks_at(m.now_ns()) - v0) >> bits << bits;
    let max_ns = (pm.max_read_interval().unwrap() as u128 * 1_000_000_000 / PM_TIMER_HZ as u128)
        as u64
        - 50_000;
    let mut seed = seed;
    let mut prev = v0;
    let mut wraps = 0;
    for _ in 0..steps {
        m.advance(rng(&mut seed) % max_ns);
        let v = pm.read();
        let expected = ticks_at(m.now_ns()) - base;
        assert!(
            v <= expected && expected - v <= slack,
            "read {v}, expected {expected}"
        );
        assert!(v >= prev, "backward: {prev} -> {v}");
        wraps += (v >> bits) - (prev >> bits);
        prev = v;
    }
    wraps
}

#[test]
fn thousands_of_24bit_wraps() {
    let m = machine(PmTimerConfig::default());
    let pm = probe(&m, false).unwrap();
    assert_eq!(pm.mode(), PmMode::Fast);
    assert_eq!(pm.bits(), 24);
    assert_eq!(pm.max_read_interval(), Some(1 << 23));
    let wraps = track_truth(&m, &pm, STEPS, PAIR_LAG, 1);
    assert!(wraps > STEPS as u64 / 5, "only {wraps} wraps");
}

#[test]
fn thousands_of_32bit_wraps() {
    let m = machine(PmTimerConfig {
        bits32: true,
        ..PmTimerConfig::default()
    });
    let pm = probe(&m, true).unwrap();
    // Read as 24 bits (its low 24 bits wrap like a 24-bit counter).
    assert_eq!(pm.bits(), 24);
    assert_eq!(pm.max_read_interval(), Some(1 << 23));
    let wraps = track_truth(&m, &pm, STEPS, PAIR_LAG, 1);
    assert!(wraps > STEPS as u64 / 5, "only {wraps} wraps");
}

#[test]
fn a_24bit_timer_the_fadt_calls_32_bit_never_freezes() {
    let m = machine(PmTimerConfig::default()); // 24 bits
    let pm = probe(&m, true).unwrap();
    let mut prev = pm.read();
    let mut stuck = 0;
    for _ in 0..200 {
        m.advance(100_000_000);
        let v = pm.read();
        if v == prev {
            stuck += 1;
        }
        prev = v;
    }
    assert_eq!(stuck, 0, "held for {stuck} of 200 reads 100 ms apart");
}

#[test]
fn fast_mode_is_a_paired_read() {
    let m = machine(PmTimerConfig::default());
    let pm = probe(&m, false).unwrap();
    assert_eq!(pm.quality(), Quality::new(150));
    assert_eq!(pm.read_cost(), ReadCost::SeveralTraps);
    for _ in 0..20 {
        m.reset_traps();
        pm.read();
        let t = m.traps();
        assert_eq!((t.port_reads, t.exits()), (2, 2), "{t:?}");
    }
}

#[test]
fn non_latching_chipset_gets_verified_reads_and_never_steps_back() {
    for bits32 in [false, true] {
        let m = machine(PmTimerConfig {
            glitchy: true,
            bits32,
            ..PmTimerConfig::default()
        });
        let pm = probe(&m, bits32).unwrap();
        assert_eq!(pm.mode(), PmMode::Verified);
        assert_eq!(pm.quality(), Quality::new(120));
        assert_eq!(pm.read_cost(), ReadCost::SeveralTraps);
        // A torn value would be ~32,768 ticks off: the slack (a few
        // retries' worth of reads) proves none was accepted.
        track_truth(&m, &pm, STEPS / 2, 40, 3);
        // Back-to-back reads too (where a torn value would show as a
        // forward jump followed by a stall).
        let mut prev = pm.read();
        for _ in 0..STEPS / 10 {
            let v = pm.read();
            assert!(v >= prev && v - prev < 100, "{prev} -> {v}");
            prev = v;
        }
    }
}

#[test]
fn the_same_glitchy_counter_read_fast_would_jump() {
    // Control for the test above: the fault injection really produces torn
    // values that a single read would return.
    let m = machine(PmTimerConfig {
        glitchy: true,
        ..PmTimerConfig::default()
    });
    let mut jumps = 0;
    let port = 0x608;
    let mut prev = clockhal_x86::Hardware::inl(&m, port);
    for _ in 0..100 {
        let v = clockhal_x86::Hardware::inl(&m, port);
        if v.wrapping_sub(prev) & 0xFF_FFFF > 1_000 {
            jumps += 1;
        }
        prev = v;
    }
    assert!(jumps >= 20, "{jumps}");
}

#[test]
fn faults_are_errors() {
    let m = machine(PmTimerConfig {
        stuck: true,
        ..PmTimerConfig::default()
    });
    assert_eq!(probe(&m, false).unwrap_err(), AcpiPmError::NotAdvancing);
    assert!(m.traps().port_reads <= 10_001);

    let m = machine(PmTimerConfig {
        all_ones: true,
        ..PmTimerConfig::default()
    });
    assert_eq!(probe(&m, false).unwrap_err(), AcpiPmError::NoDevice);

    // Nothing at that port (pc's 0xb008 on a q35-like machine).
    let m = machine(PmTimerConfig::default());
    assert_eq!(
        AcpiPm::probe(&m, 0xb008, false, &Policy::new()).unwrap_err(),
        AcpiPmError::NoDevice
    );
    assert_eq!(
        AcpiPm::probe(&m, 0, false, &Policy::new()).unwrap_err(),
        AcpiPmError::ZeroPort
    );
}

#[test]
fn descriptors() {
    let m = SimMachine::kvm();
    let pm = probe(&m, false).unwrap();
    assert_eq!(pm.name(), "acpi-pm");
    assert_eq!(pm.frequency().hz_rounded(), 3_579_545);
    let s = pm.stability();
    for f in [
        Stability::TRAPS_EVERY_READ,
        Stability::SOFTWARE_EXTENDED,
        Stability::INVARIANT_RATE,
        Stability::MONOTONIC_ACROSS_CPUS,
    ] {
        assert!(s.contains(f), "{s}");
    }
    let m = SimMachine::bare_metal();
    let pm = probe(&m, false).unwrap();
    assert!(!pm.stability().contains(Stability::TRAPS_EVERY_READ));
}

#[test]
fn from_acpi_tables_to_a_running_clock() {
    let tables = clockhal_sim::AcpiTablesBuilder::q35().build();
    let info = clockhal_x86::acpi::discover(&tables.memory(), tables.rsdp())
        .unwrap()
        .pm_timer
        .unwrap();
    let m = SimMachine::kvm();
    let pm = AcpiPm::probe(&m, info.port, info.bits32, &Policy::new()).unwrap();
    assert_eq!(pm.bits(), 24);
}

#[test]
fn a_32bit_counter_passing_all_ones_is_not_mistaken_for_no_device() {
    // Power on 1 µs (one port read) before the 32-bit counter reads
    // 0xFFFFFFFF: the probe's first read sees all ones, later ones do not.
    let t = (0xFFFF_FFFFu128 * 1_000_000_000).div_ceil(PM_TIMER_HZ as u128) as u64 - 1_000;
    let machine = || {
        let mut c = SimConfig::cpu(2_000_000_000).with_pm_timer(PmTimerConfig {
            bits32: true,
            ..PmTimerConfig::default()
        });
        c.start_ns = t;
        c.build()
    };
    assert_eq!(clockhal_x86::Hardware::inl(&machine(), 0x608), u32::MAX);
    assert!(AcpiPm::probe(&machine(), 0x608, true, &Policy::new()).is_ok());
}

/// A clean PM timer read by a vCPU that the host deschedules now and then:
/// before about one port read in six, 20 ms..1 s pass (more than the
/// 18 ms, 2^16-tick step a torn read was once assumed to need, less than
/// half a 24-bit wrap).
struct Descheduled<'a> {
    m: &'a SimMachine,
    seed: AtomicU64,
    stalls: AtomicU64,
}

impl Descheduled<'_> {
    fn maybe_stall(&self) {
        let mut seed = self.seed.load(Ordering::SeqCst);
        let r = rng(&mut seed);
        self.seed.store(seed, Ordering::SeqCst);
        if r % 6 == 0 {
            self.m.advance(20_000_000 + (r >> 8) % 980_000_000);
            self.stalls.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Hardware for Descheduled<'_> {
    fn rdtsc(&self) -> u64 {
        self.m.rdtsc()
    }
    fn rdtsc_ordered(&self) -> u64 {
        self.m.rdtsc_ordered()
    }
    fn rdtscp(&self) -> (u64, u32) {
        self.m.rdtscp()
    }
    fn cpuid(&self, leaf: u32, subleaf: u32) -> CpuidResult {
        self.m.cpuid(leaf, subleaf)
    }
    fn rdmsr(&self, msr: Msr) -> u64 {
        self.m.rdmsr(msr)
    }
    /// Declared as the trait requires; nothing unsafe happens.
    unsafe fn wrmsr(&self, msr: Msr, value: u64) {
        unreachable!("the PM timer backend writes no MSR ({msr:?} = {value:#x})")
    }
    fn inb(&self, port: u16) -> u8 {
        self.m.inb(port)
    }
    /// Declared as the trait requires; nothing unsafe happens.
    unsafe fn outb(&self, port: u16, value: u8) {
        unreachable!("the PM timer backend writes no port ({port:#x} = {value:#x})")
    }
    fn inl(&self, port: u16) -> u32 {
        self.maybe_stall();
        self.m.inl(port)
    }
    fn mmio_read32(&self, region: MmioRegion, offset: usize) -> u32 {
        self.m.mmio_read32(region, offset)
    }
    fn mmio_read64(&self, region: MmioRegion, offset: usize) -> u64 {
        self.m.mmio_read64(region, offset)
    }
    fn mmio_write32(&self, region: MmioRegion, offset: usize, value: u32) {
        self.m.mmio_write32(region, offset, value)
    }
    fn mmio_write64(&self, region: MmioRegion, offset: usize, value: u64) {
        self.m.mmio_write64(region, offset, value)
    }
}

#[test]
fn long_stalls_between_reads_are_not_latch_failures() {
    // KVM seen flipping to verified reads: the vCPU was descheduled between
    // two back-to-back reads of a perfectly latching counter.
    for (bits32, glitchy, expected) in [
        (false, false, PmMode::Fast),
        (true, false, PmMode::Fast),
        // Control: stalls do not hide a non-latching counter.
        (false, true, PmMode::Verified),
        (true, true, PmMode::Verified),
    ] {
        for seed in 1..=5 {
            let m = machine(PmTimerConfig {
                bits32,
                glitchy,
                ..PmTimerConfig::default()
            });
            let hw = Descheduled {
                m: &m,
                seed: AtomicU64::new(seed),
                stalls: AtomicU64::new(0),
            };
            let t0 = m.now_ns();
            let pm = AcpiPm::probe(&hw, 0x608, bits32, &Policy::new()).unwrap();
            assert_eq!(
                pm.mode(),
                expected,
                "bits32={bits32} glitchy={glitchy} seed={seed}"
            );
            if expected == PmMode::Fast {
                // All ~320 reads of the latch test ran, and met dozens of
                // stalls, seconds in all (24-bit: wrapping several times).
                let stalls = hw.stalls.load(Ordering::SeqCst);
                assert!(stalls >= 30, "{stalls}");
                assert!(m.traps().port_reads > 320);
                assert!(m.now_ns() - t0 > 5_000_000_000);
            }
        }
    }
}
