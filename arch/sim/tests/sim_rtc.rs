//! The simulated CMOS RTC against the MC146818 data sheet and QEMU.

use clockhal_sim::{RtcConfig, SimConfig, SimCosts, SimMachine, UIP_LEAD_NS, UPDATE_CYCLE_NS};
use clockhal_x86::Hardware;

/// Machine time at power-on (`SimConfig::cpu`'s `start_ns`).
const START: u64 = 1_000_000_000;

/// A machine whose accesses take no time, so tests place every read.
fn still(rtc: RtcConfig) -> SimMachine {
    let mut c = SimConfig::cpu(2_000_000_000).with_rtc(rtc);
    c.costs = SimCosts {
        rdtsc_ns: 0,
        cpuid_ns: 0,
        trap_ns: 0,
    };
    c.build()
}

fn cmos(m: &SimMachine, index: u8) -> u8 {
    m.write_port8(0x70, index);
    m.inb(0x71)
}

/// (sec, min, hour, weekday, day, month, year, century) as stored.
fn clock(m: &SimMachine) -> [u8; 8] {
    [0x00, 0x02, 0x04, 0x06, 0x07, 0x08, 0x09, 0x32].map(|i| cmos(m, i))
}

/// Moves the machine to wall time `unix_ns`.
fn goto(m: &SimMachine, unix_ns: u64) {
    let now = m.with_rtc(|r, ctx| r.unix_ns(ctx.now_ns)).unwrap();
    assert!(unix_ns >= now);
    m.advance(unix_ns - now);
}

const S: u64 = 1_000_000_000;

#[test]
fn registers_follow_wall_time_in_bcd_24h() {
    // 2026-12-01 12:34:56.25 UTC at power-on (a Tuesday: weekday 3).
    let m = still(RtcConfig::qemu());
    assert_eq!(clock(&m), [0x56, 0x34, 0x12, 0x03, 0x01, 0x12, 0x26, 0x20]);
    // New Year 2099 -> 2100 (not a leap year), and 2100-02-28 -> 03-01.
    goto(&m, 4_102_444_799 * S);
    assert_eq!(clock(&m), [0x59, 0x59, 0x23, 0x05, 0x31, 0x12, 0x99, 0x20]);
    m.advance(S);
    assert_eq!(clock(&m), [0, 0, 0, 0x06, 0x01, 0x01, 0x00, 0x21]);
    goto(&m, 4_107_542_399 * S);
    assert_eq!(&clock(&m)[4..], [0x28, 0x02, 0x00, 0x21]);
    m.advance(S);
    assert_eq!(&clock(&m)[4..], [0x01, 0x03, 0x00, 0x21]);
}

#[test]
fn binary_and_12_hour_encodings() {
    let base = RtcConfig::qemu().at_unix_ns(1_709_211_600 * S); // 2024-02-29 13:00 (Thu)
    let m = still(base.clone().with_format(true, true));
    assert_eq!(clock(&m), [0, 0, 13, 5, 29, 2, 24, 20]);
    assert_eq!(cmos(&m, 0x0B), 0b0000_0110);
    let m = still(base.clone().with_format(false, false));
    assert_eq!(cmos(&m, 0x04), 0x80 | 0x01, "1 PM in BCD with the PM flag");
    assert_eq!(cmos(&m, 0x0B), 0);
    let m = still(base.clone().with_format(true, false));
    assert_eq!(cmos(&m, 0x04), 0x80 | 1);
    // Midnight and noon in 12-hour mode are both "12".
    let m = still(base.at_unix_ns(1_709_164_800 * S).with_format(false, false));
    assert_eq!(cmos(&m, 0x04), 0x12, "12 AM");
    m.advance(12 * 3600 * S);
    assert_eq!(cmos(&m, 0x04), 0x92, "12 PM");
}

#[test]
fn uip_window_as_qemu() {
    // Power-on at .25 s: the next edge is 0.75 s later.
    let m = still(RtcConfig::qemu());
    let edge = m.with_rtc(|r, ctx| r.next_edge_ns(ctx.now_ns)).unwrap();
    assert_eq!(edge, START + 750_000_000);
    let at = |t: u64| {
        let now = m.now_ns();
        m.advance(t - now);
        (cmos(&m, 0x0A), cmos(&m, 0x00))
    };
    assert_eq!(at(edge - UIP_LEAD_NS - 1), (0x26, 0x56));
    assert_eq!(at(edge - UIP_LEAD_NS), (0xA6, 0x56));
    assert_eq!(at(edge - 1), (0xA6, 0x56));
    assert_eq!(at(edge), (0x26, 0x57), "QEMU updates at the edge");
}

#[test]
fn uip_window_and_update_cycle_as_the_data_sheet() {
    let m = still(RtcConfig::hardware());
    let edge = START + 750_000_000;
    let at = |t: u64| {
        let now = m.now_ns();
        m.advance(t - now);
        (cmos(&m, 0x0A) & 0x80 != 0, cmos(&m, 0x00), cmos(&m, 0x09))
    };
    assert_eq!(at(edge - UIP_LEAD_NS - 1), (false, 0x56, 0x26));
    assert_eq!(at(edge - 1), (true, 0x56, 0x26));
    // During the update cycle the clock registers are not readable.
    assert_eq!(at(edge), (true, 0xFF, 0xFF));
    assert_eq!(at(edge + UPDATE_CYCLE_NS - 1), (true, 0xFF, 0xFF));
    assert_eq!(at(edge + UPDATE_CYCLE_NS), (false, 0x57, 0x26));
}

#[test]
fn status_registers_ram_and_side_effects() {
    let m = still(RtcConfig::qemu());
    assert_eq!(cmos(&m, 0x0A), 0x26);
    assert_eq!(cmos(&m, 0x0B), 0x02, "BCD, 24 h");
    assert_eq!(cmos(&m, 0x0D), 0x80, "VRT");
    assert_eq!(m.with_rtc(|r, _| r.status_c_reads()).unwrap(), 0);
    cmos(&m, 0x0C);
    assert_eq!(m.with_rtc(|r, _| r.status_c_reads()).unwrap(), 1);
    // RAM is writable; the clock registers are not.
    m.write_port8(0x70, 0x40);
    m.write_port8(0x71, 0xAB);
    assert_eq!(cmos(&m, 0x40), 0xAB);
    m.write_port8(0x70, 0x00);
    m.write_port8(0x71, 0x11);
    assert_eq!(cmos(&m, 0x00), 0x56);
    assert_eq!(m.with_rtc(|r, _| r.data_writes()).unwrap(), 2);
    // The index port is write only; bit 7 is the NMI mask.
    assert_eq!(m.inb(0x70), 0xFF);
    m.write_port8(0x70, 0x80 | 0x02);
    assert!(m.with_rtc(|r, _| r.nmi_disabled()).unwrap());
    assert_eq!(m.inb(0x71), 0x34, "bit 7 is not part of the index");
    m.write_port8(0x70, 0x02);
    assert!(!m.with_rtc(|r, _| r.nmi_disabled()).unwrap());
}

#[test]
fn century_register_only_where_configured() {
    let m = still(RtcConfig {
        century_index: None,
        ..RtcConfig::qemu()
    });
    assert_eq!(cmos(&m, 0x32), 0, "plain CMOS RAM");
    let m = still(RtcConfig {
        century_index: Some(0x48),
        ..RtcConfig::qemu()
    });
    assert_eq!(cmos(&m, 0x48), 0x20);
}

#[test]
fn faults() {
    let m = still(
        RtcConfig::qemu()
            .with_forced(0x08, 0x13)
            .with_forced(0x00, 0xFF),
    );
    assert_eq!(cmos(&m, 0x08), 0x13);
    assert_eq!(cmos(&m, 0x00), 0xFF);
    assert_eq!(cmos(&m, 0x02), 0x34);

    let m = still(RtcConfig {
        uip_stuck: true,
        ..RtcConfig::qemu()
    });
    assert_eq!(cmos(&m, 0x0A) & 0x80, 0x80);
    m.advance(3 * S);
    assert_eq!(cmos(&m, 0x0A) & 0x80, 0x80);

    let m = still(RtcConfig {
        halted: true,
        ..RtcConfig::qemu()
    });
    assert_eq!(cmos(&m, 0x0B) & 0x80, 0x80, "SET");
    m.advance(5 * S);
    assert_eq!(cmos(&m, 0x00), 0x56, "stands still");
    assert_eq!(cmos(&m, 0x0A), 0x26, "no updates, no UIP");

    let m = still(RtcConfig {
        battery_ok: false,
        ..RtcConfig::qemu()
    });
    assert_eq!(cmos(&m, 0x0D), 0);

    // No RTC: everything floats high.
    let m = SimConfig::cpu(2_000_000_000).build();
    assert_eq!(cmos(&m, 0x0A), 0xFF);
    assert_eq!(cmos(&m, 0x0B), 0xFF);
}

#[test]
fn the_clock_can_be_set_at_run_time() {
    let m = still(RtcConfig::qemu());
    m.advance(123);
    m.with_rtc(|r, ctx| r.set_unix_ns(ctx, 951_782_400 * S)); // 2000-02-29
    assert_eq!(&clock(&m)[..], [0, 0, 0, 0x03, 0x29, 0x02, 0x00, 0x20]);
    assert_eq!(
        m.with_rtc(|r, ctx| r.unix_ns(ctx.now_ns)).unwrap(),
        951_782_400 * S
    );
}

#[test]
fn profiles() {
    assert_eq!(
        SimMachine::qemu_tcg().config().rtc.clone().unwrap(),
        RtcConfig::qemu()
    );
    assert_eq!(
        SimMachine::kvm().config().rtc.clone().unwrap(),
        RtcConfig::qemu()
    );
    assert_eq!(
        SimMachine::bare_metal().config().rtc.clone().unwrap(),
        RtcConfig::hardware()
    );
}
