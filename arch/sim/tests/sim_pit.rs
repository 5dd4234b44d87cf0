//! The simulated 8254 PIT against the data sheet and QEMU's model.

use clockhal_sim::{PitConfig, PitModel, SimConfig, SimCosts, SimMachine, PIT_HARDWARE_RATE};
use clockhal_x86::Hardware;

fn machine(pit: PitConfig) -> SimMachine {
    SimConfig::cpu(2_000_000_000).with_pit(pit).build()
}

/// A machine whose accesses cost no time, so tests place every access.
fn still(pit: PitConfig) -> SimMachine {
    let mut c = SimConfig::cpu(2_000_000_000).with_pit(pit);
    c.costs = SimCosts {
        rdtsc_ns: 0,
        cpuid_ns: 0,
        trap_ns: 0,
    };
    c.build()
}

fn ticks(m: &SimMachine) -> u64 {
    m.with_pit(|p, ctx| p.tick_at(ctx.now_ns)).unwrap()
}

/// Channel 2 as clockhal programs it: gate high, mode 0, count 65536.
fn start2(m: &SimMachine) {
    let b = m.inb(0x61);
    m.write_port8(0x61, (b & !2) | 1);
    m.write_port8(0x43, 0xB0);
    m.write_port8(0x42, 0);
    m.write_port8(0x42, 0);
}

fn latch_read(m: &SimMachine, ch: u16) -> u16 {
    m.write_port8(0x43, (ch as u8) << 6);
    let lo = m.inb(0x40 + ch);
    let hi = m.inb(0x40 + ch);
    u16::from_le_bytes([lo, hi])
}

#[test]
fn mode0_counts_down_at_the_exact_rate_and_wraps() {
    let m = still(PitConfig::hardware());
    start2(&m);
    let t0 = ticks(&m);
    assert_eq!(latch_read(&m, 2), 0); // 65536 reads as 0
    let (num, den) = PIT_HARDWARE_RATE;
    for step_ns in [1u64, 837, 838, 1_000, 54_925_493, 1_000_000_000, 7_777_777] {
        m.advance(step_ns);
        let elapsed = ticks(&m) - t0;
        // Tick n of the input clock falls at n / rate of machine time.
        let expected_ticks =
            (m.now_ns() as u128 * num as u128 / (den as u128 * 1_000_000_000)) as u64 - t0;
        assert_eq!(elapsed, expected_ticks);
        assert_eq!(
            latch_read(&m, 2),
            ((0x1_0000 - elapsed % 0x1_0000) & 0xFFFF) as u16,
            "after {elapsed} ticks"
        );
    }
    // One second of machine time is 1,193,181 or 1,193,182 ticks at
    // 105/88 MHz (1,193,181.8...).
    let before = ticks(&m);
    m.advance(1_000_000_000);
    assert!((1_193_181..=1_193_182).contains(&(ticks(&m) - before)));
}

#[test]
fn emulator_rates_are_theirs() {
    for (pit, hz) in [
        (PitConfig::qemu(), 1_193_182),
        (PitConfig::kvm(), 1_193_181),
    ] {
        let m = still(pit);
        let t0 = ticks(&m);
        m.advance(10_000_000_000);
        assert_eq!(ticks(&m) - t0, hz * 10);
    }
}

#[test]
fn a_latched_count_holds_until_read_and_a_second_latch_is_ignored() {
    let m = still(PitConfig::hardware());
    start2(&m);
    m.advance(10_000);
    m.write_port8(0x43, 0x80);
    let held = m.with_pit(|p, ctx| p.count(ctx, 2)).unwrap();
    m.advance(50_000);
    m.write_port8(0x43, 0x80); // ignored: the first latch is unread
    assert_eq!(u16::from_le_bytes([m.inb(0x42), m.inb(0x42)]), held);
    // Unlatched reads follow the counter (LSB, then MSB, flip-flop).
    m.advance(1_000);
    let live = m.with_pit(|p, ctx| p.count(ctx, 2)).unwrap();
    assert_eq!(u16::from_le_bytes([m.inb(0x42), m.inb(0x42)]), live);
    assert!(live < held);
}

#[test]
fn read_back_latches_status_then_count() {
    let m = still(PitConfig::hardware());
    start2(&m);
    m.advance(5_000);
    // 11 (read-back), COUNT=0 and STATUS=0 (latch both), channel 2.
    m.write_port8(0x43, 0b1100_1000);
    let count = m.with_pit(|p, ctx| p.count(ctx, 2)).unwrap();
    // OUT low (mode 0 before terminal count), count loaded, LSB+MSB, mode 0.
    assert_eq!(m.inb(0x42), 0b0011_0000);
    assert_eq!(u16::from_le_bytes([m.inb(0x42), m.inb(0x42)]), count);
    // Mode 0's OUT goes high at terminal count (Linux's calibration waits
    // for it in port 0x61 bit 5).
    assert_eq!(m.inb(0x61) & 0x20, 0);
    m.advance(55_000_000);
    assert_eq!(m.inb(0x61) & 0x20, 0x20);
    m.write_port8(0x43, 0b1110_1000); // status only
    assert_eq!(m.inb(0x42), 0b1011_0000);
}

#[test]
fn a_low_gate_pauses_an_8254_but_not_qemu() {
    for (pit, pauses) in [(PitConfig::hardware(), true), (PitConfig::qemu(), false)] {
        let m = still(pit);
        start2(&m);
        m.advance(1_000_000);
        m.write_port8(0x61, 0); // gate low
        let a = latch_read(&m, 2);
        m.advance(1_000_000);
        let b = latch_read(&m, 2);
        assert_eq!(a == b, pauses, "{:?}", m.config().pit);
        m.write_port8(0x61, 1); // gate high again: counting resumes
        m.advance(1_000_000);
        assert_ne!(latch_read(&m, 2), b);
    }
}

#[test]
fn an_8254_waits_for_its_count_after_a_control_word() {
    let m = still(PitConfig::hardware());
    start2(&m);
    m.advance(1_000_000);
    m.write_port8(0x43, 0xB0);
    let a = latch_read(&m, 2);
    m.advance(1_000_000);
    assert_eq!(latch_read(&m, 2), a, "stopped until the count is written");
    // Status: null count until the count is written.
    m.write_port8(0x43, 0b1110_1000);
    assert_eq!(m.inb(0x42) & 0x40, 0x40);
    m.write_port8(0x42, 0x34);
    m.write_port8(0x42, 0x12);
    assert_eq!(latch_read(&m, 2), 0x1234);
    m.advance(1_000);
    assert!(latch_read(&m, 2) < 0x1234);
}

#[test]
fn lsb_only_and_msb_only_access() {
    let m = still(PitConfig::hardware());
    m.write_port8(0x61, 1);
    m.write_port8(0x43, 0b1001_0000); // channel 2, LSB only, mode 0
    m.write_port8(0x42, 200);
    let t0 = ticks(&m);
    m.advance(50_000);
    m.write_port8(0x43, 0x80);
    let e = ticks(&m) - t0;
    assert_eq!(m.inb(0x42) as u64, 200 - e);
    m.write_port8(0x43, 0b1010_0000); // MSB only
    m.write_port8(0x42, 0x12);
    m.write_port8(0x43, 0x80);
    assert_eq!(m.inb(0x42), 0x12);
}

#[test]
fn rate_generator_and_square_wave_periods() {
    let m = still(PitConfig::qemu());
    // Channel 0, mode 2, count 1000: values 1000..=1 then reload.
    m.write_port8(0x43, 0b0011_0100);
    m.write_port8(0x40, 0xE8);
    m.write_port8(0x40, 0x03);
    let t0 = ticks(&m);
    for ns in [100_000u64, 838_000, 5_000_000] {
        m.advance(ns);
        let e = ticks(&m) - t0;
        assert_eq!(latch_read(&m, 0) as u64, 1000 - e % 1000);
    }
    // Mode 3 counts down by two.
    m.write_port8(0x43, 0b0011_0110);
    m.write_port8(0x40, 0xE8);
    m.write_port8(0x40, 0x03);
    let t0 = ticks(&m);
    m.advance(100_000);
    let e = ticks(&m) - t0;
    assert_eq!(latch_read(&m, 0) as u64, 1000 - (2 * e) % 1000);
}

#[test]
fn port_61_gate_speaker_and_nmi_bits() {
    let m = still(PitConfig::qemu());
    assert_eq!(m.inb(0x61) & 3, 0, "gate low, speaker off at reset");
    m.write_port8(0x61, 0x0F);
    let v = m.inb(0x61);
    assert_eq!(v & 0x0F, 0x0F);
    assert!(m.with_pit(|p, _| p.speaker_on() && p.gate(2)).unwrap());
    m.write_port8(0x61, 0x0D);
    assert!(!m.with_pit(|p, _| p.speaker_on()).unwrap());
    // Bit 4 toggles on every read (QEMU's refresh-clock stand-in).
    assert_ne!(m.inb(0x61) & 0x10, m.inb(0x61) & 0x10);
}

#[test]
fn microvm_has_no_port_61_yet_channel_2_counts() {
    let m = still(PitConfig::microvm());
    assert_eq!(m.inb(0x61), 0xFF);
    start2(&m); // the gate write is dropped
    assert!(!m.with_pit(|p, _| p.gate(2)).unwrap());
    assert_eq!(m.with_pit(|p, _| p.port_61_writes()).unwrap(), 0);
    m.advance(1_000_000);
    assert_ne!(latch_read(&m, 2), 0, "QEMU counts with the gate low");
}

#[test]
fn faults_and_absence() {
    let m = machine(PitConfig {
        stuck: Some(0x1234),
        ..PitConfig::hardware()
    });
    start2(&m);
    m.advance(10_000_000);
    assert_eq!(latch_read(&m, 2), 0x1234);
    m.with_pit(|p, _| p.set_stuck(None));
    m.advance(1);
    assert_ne!(latch_read(&m, 2), 0x1234);

    // Without a latch, the two bytes come from different instants.
    let m = still(PitConfig {
        ignores_latch: true,
        ..PitConfig::hardware()
    });
    start2(&m);
    m.advance(100_000);
    m.write_port8(0x43, 0x80);
    let lo = m.inb(0x42);
    m.advance(300_000); // the MSB moves on meanwhile
    let hi = m.inb(0x42);
    let now = m.with_pit(|p, ctx| p.count(ctx, 2)).unwrap();
    assert_eq!(hi, (now >> 8) as u8);
    assert_ne!(u16::from_le_bytes([lo, hi]), now);

    // No PIT: every port floats high, writes vanish.
    let m = SimConfig::cpu(2_000_000_000).build();
    start2(&m);
    assert_eq!(latch_read(&m, 2), 0xFFFF);
    assert_eq!(m.inb(0x61), 0xFF);
    assert!(m.with_pit(|_, _| ()).is_none());
}

#[test]
fn profiles_match_qemu() {
    let pit = |m: SimMachine| m.config().pit.clone().unwrap();
    assert_eq!(pit(SimMachine::qemu_tcg()), PitConfig::qemu());
    assert_eq!(pit(SimMachine::kvm()), PitConfig::kvm());
    assert_eq!(pit(SimMachine::qemu_tcg_microvm()), PitConfig::microvm());
    assert_eq!(pit(SimMachine::bare_metal()).model, PitModel::Hardware);
    let microvm = SimMachine::qemu_tcg_microvm();
    assert!(microvm.config().hpet.is_none() && microvm.config().pm_timer.is_none());
    assert!(microvm.config().rtc.is_some());
}

#[test]
fn control_writes_are_counted_per_channel() {
    let m = still(PitConfig::qemu());
    start2(&m);
    latch_read(&m, 2);
    assert_eq!(m.with_pit(|p, _| p.control_writes(2)).unwrap(), 2);
    assert_eq!(m.with_pit(|p, _| p.control_writes(0)).unwrap(), 0);
    assert_eq!(m.with_pit(|p, _| p.mode(2)).unwrap(), 0);
    assert_eq!(m.with_pit(|p, _| p.mode(0)).unwrap(), 3, "reset mode");
}
