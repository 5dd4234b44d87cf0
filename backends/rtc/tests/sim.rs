//! The RTC reader on the simulated machine: formats, the update rule
//! around second edges, the century, hostile registers, the ports it
//! touches, and second-edge alignment.

use clockhal_rtc::{Century, Field, Rtc, RtcError, RtcOptions, UIP_LEAD_NS};
use clockhal_sim::{AcpiTablesBuilder, PortAccess, PortTap, RtcConfig, SimConfig, SimMachine};
use clockhal_x86::cmos::NmiBit;

const S: u64 = 1_000_000_000;

fn machine(rtc: RtcConfig) -> SimMachine {
    SimConfig::cpu(2_000_000_000).with_rtc(rtc).build()
}

fn qemu_options() -> RtcOptions {
    RtcOptions {
        century_index: Some(0x32),
        ..RtcOptions::default()
    }
}

fn wall_ns(m: &SimMachine) -> u64 {
    m.with_rtc(|r, ctx| r.unix_ns(ctx.now_ns)).unwrap()
}

/// Advances the machine to wall time `unix_ns`.
fn goto(m: &SimMachine, unix_ns: u64) {
    m.advance(unix_ns - wall_ns(m));
}

fn rng(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// Reads and checks that the result is a second the RTC showed while the
/// read ran.
fn read_checked(m: &SimMachine, rtc: &Rtc<&SimMachine>) -> u64 {
    let before = wall_ns(m) / S;
    let t = rtc
        .read()
        .unwrap_or_else(|e| panic!("at {}: {e}", wall_ns(m)));
    let after = wall_ns(m) / S;
    let got = t.unix_seconds();
    assert!(
        (before..=after).contains(&got),
        "{t} ({got}) outside {before}..={after}"
    );
    got
}

#[test]
fn every_format_at_random_instants() {
    for (binary, hour24) in [(false, true), (true, true), (false, false), (true, false)] {
        for config in [RtcConfig::qemu(), RtcConfig::hardware()] {
            let m = machine(config.with_format(binary, hour24));
            let rtc = Rtc::new(&m, &qemu_options()).unwrap();
            let mut seed = 5;
            for _ in 0..500 {
                // Up to ~3 hours per step: every hour of the day in both
                // 12-hour halves.
                m.advance(rng(&mut seed) % (3 * 3600 * S));
                read_checked(&m, &rtc);
            }
            let t = rtc.read().unwrap();
            assert_eq!((t.format.binary, t.format.hour24), (binary, hour24));
            assert_eq!(t.century, Century::Register(0x32));
        }
    }
}

#[test]
fn reads_around_every_point_of_an_update_are_consistent() {
    // Start the read at every 1 µs step from 300 µs before an edge to 2.5
    // ms after it, on QEMU's model and the data sheet's (whose clock
    // registers read 0xFF for 1984 µs after the edge). New Year 2000, so a
    // torn read would show 1999-01-01 or 2000-12-31.
    for config in [RtcConfig::qemu(), RtcConfig::hardware()] {
        let update = config.update_ns;
        let m = machine(config.at_unix_ns(946_684_790 * S));
        let rtc = Rtc::new(&m, &qemu_options()).unwrap();
        let edge = 946_684_800 * S;
        for offset_us in 0..2_800u64 {
            goto(&m, edge - 300_000 + offset_us * 1_000);
            let start = wall_ns(&m);
            let got = read_checked(&m, &rtc);
            assert!(got == 946_684_799 || got == 946_684_800, "{got}");
            // A read started inside the UIP window finishes after it.
            if start >= edge - UIP_LEAD_NS && start < edge + update {
                assert_eq!(got, 946_684_800, "started at {start}");
            }
            m.with_rtc(|r, ctx| r.set_unix_ns(ctx, 946_684_790 * S));
        }
    }
}

#[test]
fn the_century_comes_from_the_fadt_register_or_the_pivot() {
    // From the simulator's q35 tables: CENTURY = 0x32.
    let tables = AcpiTablesBuilder::q35().build();
    let info = clockhal_x86::acpi::discover(&tables.memory(), tables.rsdp())
        .unwrap()
        .rtc
        .unwrap();
    let m = machine(RtcConfig::qemu().at_unix_ns(4_107_542_400 * S)); // 2100-03-01
    let opts = RtcOptions {
        century_index: info.century_index,
        ..RtcOptions::default()
    };
    let t = Rtc::new(&m, &opts).unwrap().read().unwrap();
    assert_eq!(t.to_string(), "2100-03-01T00:00:00Z");
    assert_eq!(t.unix_seconds(), 4_107_542_400);

    // microvm's FADT names no century register: years 00-69 are 20xx.
    let tables = AcpiTablesBuilder::microvm().build();
    let info = clockhal_x86::acpi::discover(&tables.memory(), tables.rsdp())
        .unwrap()
        .rtc
        .unwrap();
    assert_eq!(info.century_index, None);
    let m = SimMachine::qemu_tcg_microvm();
    let rtc = Rtc::new(&m, &RtcOptions::default()).unwrap();
    let t = rtc.read().unwrap();
    assert_eq!((t.year, t.century), (2026, Century::Pivot));
    // ... which gets 2100 wrong, as any pivot must: 00 is 2000.
    let m = machine(RtcConfig::qemu().at_unix_ns(4_107_542_400 * S));
    let t = Rtc::new(&m, &RtcOptions::default())
        .unwrap()
        .read()
        .unwrap();
    assert_eq!(t.year, 2000);
    // 70-99 are 19xx.
    let m = machine(RtcConfig::qemu().at_unix_ns(500_000_000 * S)); // 1985
    let t = Rtc::new(&m, &RtcOptions::default())
        .unwrap()
        .read()
        .unwrap();
    assert_eq!((t.year, t.unix_seconds()), (1985, 500_000_000));

    // A century register holding garbage: the pivot, with the reason.
    let m = machine(RtcConfig::qemu().with_forced(0x32, 0xA5));
    let t = Rtc::new(&m, &qemu_options()).unwrap().read().unwrap();
    assert_eq!(
        t.century,
        Century::PivotRegisterInvalid {
            index: 0x32,
            raw: 0xA5
        }
    );
    assert_eq!(t.year, 2026);
}

#[test]
fn hostile_century_indices_are_refused_before_any_access() {
    let m = SimMachine::qemu_tcg();
    for i in [0x00u8, 0x09, 0x0A, 0x0C, 0x0D, 0x80, 0xFF] {
        let opts = RtcOptions {
            century_index: Some(i),
            ..RtcOptions::default()
        };
        assert_eq!(
            Rtc::new(&m, &opts).unwrap_err(),
            RtcError::BadCenturyIndex(i)
        );
    }
    assert_eq!(m.traps().port_writes + m.traps().port_reads, 0);
    assert!(Rtc::new(
        &m,
        &RtcOptions {
            century_index: Some(0x0E),
            ..RtcOptions::default()
        }
    )
    .is_ok());
}

#[test]
fn hostile_registers_are_errors_naming_the_field() {
    for (index, byte, field) in [
        (0x00, 0x60, Field::Second),
        (0x00, 0x5A, Field::Second),
        (0x02, 0xFF, Field::Minute),
        (0x04, 0x24, Field::Hour),
        (0x04, 0x92, Field::Hour), // a PM flag in 24-hour mode
        (0x07, 0x00, Field::Day),
        (0x07, 0x31, Field::Day), // December has 31, so force a month too
        (0x08, 0x13, Field::Month),
        (0x09, 0xA0, Field::Year),
    ] {
        let mut config = RtcConfig::qemu().with_forced(index, byte);
        if index == 0x07 && byte == 0x31 {
            config = config.with_forced(0x08, 0x11); // November 31st
        }
        let m = machine(config);
        let e = Rtc::new(&m, &qemu_options()).unwrap().read().unwrap_err();
        assert_eq!(
            e,
            RtcError::BadField {
                field,
                raw: byte,
                bcd: true
            },
            "{index:#x}={byte:#x}"
        );
    }
    assert_eq!(
        RtcError::BadField {
            field: Field::Month,
            raw: 0x13,
            bcd: true
        }
        .to_string(),
        "RTC month register holds 0x13, not a valid BCD month"
    );
}

#[test]
fn random_garbage_never_panics_and_never_yields_a_bad_date() {
    let m = SimMachine::qemu_tcg();
    let tap = PortTap::new(&m);
    let seed = std::sync::Mutex::new(1u64);
    tap.set_hook(move |_, a| match a {
        PortAccess::Read { port: 0x71, .. } => Some(rng(&mut seed.lock().unwrap()) as u8),
        _ => None,
    });
    let rtc = Rtc::new(&tap, &qemu_options()).unwrap();
    let (mut ok, mut err) = (0, 0);
    for _ in 0..2_000 {
        match rtc.read() {
            Ok(t) => {
                ok += 1;
                assert!((1970..=9999).contains(&t.year) && t.second < 60);
            }
            Err(_) => err += 1,
        }
    }
    assert!(err > 1_900, "garbage is mostly refused ({ok} accepted)");
}

#[test]
fn registers_that_keep_changing_are_unstable() {
    let m = SimMachine::qemu_tcg();
    let tap = PortTap::new(&m);
    let n = std::sync::atomic::AtomicU8::new(0);
    // The seconds register advances on every read, faster than any RTC.
    let mut index = 0u8;
    tap.set_hook(move |_, a| match *a {
        PortAccess::Write { port: 0x70, value } => {
            index = value;
            None
        }
        PortAccess::Read { port: 0x71, .. } if index == 0 => {
            let s = n.fetch_add(1, std::sync::atomic::Ordering::SeqCst) % 60;
            Some(((s / 10) << 4) | (s % 10))
        }
        _ => None,
    });
    let rtc = Rtc::new(&tap, &qemu_options()).unwrap();
    let t0 = m.now_ns();
    assert_eq!(rtc.read(), Err(RtcError::Unstable));
    assert!(m.now_ns() - t0 < 1_000_000, "bounded: 8 reads");
}

#[test]
fn absent_dead_halted_and_stuck_rtcs() {
    let m = SimConfig::cpu(2_000_000_000).build();
    let rtc = Rtc::new(&m, &RtcOptions::default()).unwrap();
    assert_eq!(rtc.read(), Err(RtcError::NoDevice));
    for (config, e) in [
        (
            RtcConfig {
                battery_ok: false,
                ..RtcConfig::qemu()
            },
            RtcError::InvalidTime,
        ),
        (
            RtcConfig {
                halted: true,
                ..RtcConfig::qemu()
            },
            RtcError::Halted,
        ),
        (
            RtcConfig {
                uip_stuck: true,
                ..RtcConfig::qemu()
            },
            RtcError::UpdateStuck,
        ),
    ] {
        let m = machine(config);
        let t0 = m.now_ns();
        assert_eq!(Rtc::new(&m, &qemu_options()).unwrap().read(), Err(e));
        // 50,000 polls of two 1 µs accesses at most.
        assert!(m.now_ns() - t0 < 101_000_000);
    }
}

#[test]
fn only_the_index_and_data_ports_with_the_chosen_nmi_bit() {
    for nmi in [NmiBit::Clear, NmiBit::Set] {
        let m = SimMachine::qemu_tcg();
        let tap = PortTap::new(&m);
        let opts = RtcOptions {
            century_index: Some(0x32),
            nmi,
        };
        let rtc = Rtc::new(&tap, &opts).unwrap();
        rtc.read().unwrap();
        rtc.read_at_second_edge(|| m.now_ns(), 2 * S).unwrap();
        let log = tap.log();
        assert!(log.len() > 20);
        for a in &log {
            match *a {
                PortAccess::Write { port: 0x70, value } => {
                    assert_eq!(value & 0x80 != 0, nmi == NmiBit::Set, "{value:#x}");
                    assert_ne!(value & 0x7F, 0x0C, "never status C");
                }
                PortAccess::Read { port: 0x71, .. } => {}
                other => panic!("{other:?}"),
            }
        }
        m.with_rtc(|r, _| {
            assert_eq!(r.status_c_reads(), 0);
            assert_eq!(r.data_writes(), 0);
            assert_eq!(r.nmi_disabled(), nmi == NmiBit::Set);
        });
    }
}

#[test]
fn second_edge_alignment_is_as_precise_as_the_polls() {
    for config in [RtcConfig::qemu(), RtcConfig::hardware()] {
        let m = machine(config);
        let rtc = Rtc::new(&m, &qemu_options()).unwrap();
        let mut seed = 11;
        for _ in 0..10 {
            m.advance(rng(&mut seed) % (5 * S));
            let edge = rtc.read_at_second_edge(|| m.now_ns(), 2 * S).unwrap();
            // Where the simulator put that second's edge (machine time).
            let true_edge = m.now_ns() - (wall_ns(&m) - edge.time.unix_seconds() * S);
            assert!(
                edge.at_ns.abs_diff(true_edge) <= edge.uncertainty_ns + 1,
                "edge at {} ±{}, truth {true_edge}",
                edge.at_ns,
                edge.uncertainty_ns
            );
            // Two polls of two 1 µs port accesses.
            assert!(edge.uncertainty_ns <= 2_000, "{}", edge.uncertainty_ns);
            // The mapping onto the caller's timeline.
            let now = m.now_ns();
            assert!(edge.unix_ns_at(now).abs_diff(wall_ns(&m)) <= edge.uncertainty_ns + 1);
        }
    }
}

#[test]
fn edge_alignment_gives_up_cleanly() {
    // UIP never rises (QEMU once status C's flags are set: its update
    // timer stops; issue 26): after a second without a rise the seconds
    // register is watched, and one more second waited for. Its change is
    // the edge, to the polls.
    let m = machine(RtcConfig::qemu().with_forced(0x0A, 0x26));
    let rtc = Rtc::new(&m, &qemu_options()).unwrap();
    let t0 = m.now_ns();
    let edge = rtc.read_at_second_edge(|| m.now_ns(), S + S / 10).unwrap();
    let true_edge = m.now_ns() - (wall_ns(&m) - edge.time.unix_seconds() * S);
    assert!(edge.at_ns.abs_diff(true_edge) <= edge.uncertainty_ns + 1);
    // Two polls of four 1 µs accesses (status A, seconds).
    assert!(edge.uncertainty_ns <= 4_000, "{}", edge.uncertainty_ns);
    assert!(m.now_ns() - t0 <= 2 * S + S / 10);
    // A wait too short for that: bounded by the wait plus the second.
    let t0 = m.now_ns();
    let r = rtc.read_at_second_edge(|| m.now_ns(), S / 10);
    let waited = m.now_ns() - t0;
    assert!(r.is_ok() || r == Err(RtcError::NoUpdateEdge), "{r:?}");
    assert!(waited <= S + S / 10 + S / 100, "{waited}");
    // A clock that stands still: bounded by the poll count, 100,000 polls
    // of two 1 µs accesses.
    let t0 = m.now_ns();
    assert_eq!(
        rtc.read_at_second_edge(|| 0, S),
        Err(RtcError::NoUpdateEdge)
    );
    let waited = m.now_ns() - t0;
    assert!((200_000_000..200_100_000).contains(&waited), "{waited}");

    // UIP stuck high: never low, so no rise to see.
    let m = machine(RtcConfig {
        uip_stuck: true,
        ..RtcConfig::qemu()
    });
    let rtc = Rtc::new(&m, &qemu_options()).unwrap();
    assert_eq!(
        rtc.read_at_second_edge(|| m.now_ns(), S / 2),
        Err(RtcError::NoUpdateEdge)
    );

    // The vCPU is descheduled for 2 s right after the rise: the time read
    // afterwards is of a later second, and the edge is reported lost.
    let m = SimMachine::qemu_tcg();
    let rtc = Rtc::new(&m, &qemu_options()).unwrap();
    let mut uip_seen = false;
    let r = rtc.read_at_second_edge(
        || {
            if !uip_seen
                && m.with_rtc(|r, ctx| r.next_edge_ns(ctx.now_ns)).unwrap() - m.now_ns()
                    < UIP_LEAD_NS
            {
                uip_seen = true;
                m.advance(2 * S);
            }
            m.now_ns()
        },
        3 * S,
    );
    assert_eq!(r, Err(RtcError::EdgeLost));
}

#[test]
fn a_read_torn_by_a_descheduled_vcpu_is_caught_by_the_agreement_rule() {
    // UIP is low 400 µs before a minute edge, the seconds register says
    // 59; then the vCPU loses 500 µs, so the minutes register is read after
    // the edge. Alone, that read is 12:35:59, a minute ahead.
    for config in [RtcConfig::qemu(), RtcConfig::hardware()] {
        let m = machine(config.at_unix_ns(1_796_128_440 * S)); // 12:34:00
        goto(&m, 1_796_128_500 * S - 400_000); // 12:34:59.9996
        let tap = PortTap::new(&m);
        let mut stalled = false;
        let mut index = 0xFF;
        tap.set_hook(move |m, a| {
            match *a {
                PortAccess::Write { port: 0x70, value } => index = value,
                PortAccess::Read { port: 0x71, .. } if index == 0x00 && !stalled => {
                    stalled = true;
                    m.advance(500_000);
                }
                _ => {}
            }
            None
        });
        let t = Rtc::new(&tap, &qemu_options()).unwrap().read().unwrap();
        assert_eq!(t.to_string(), "2026-12-01T12:35:00Z");
    }
}

#[test]
fn a_hostile_caller_clock_cannot_make_the_edge_wait_panic() {
    let m = SimMachine::qemu_tcg();
    let rtc = Rtc::new(&m, &qemu_options()).unwrap();
    // Near the end of the range, and running backwards.
    let mut t = u64::MAX - 10;
    let r = rtc.read_at_second_edge(
        || {
            t = t.wrapping_sub(1_000);
            t
        },
        u64::MAX,
    );
    assert!(r.is_ok() || r == Err(RtcError::EdgeLost), "{r:?}");
    let r = rtc.read_at_second_edge(|| u64::MAX, u64::MAX);
    assert!(
        matches!(r, Ok(_) | Err(RtcError::NoUpdateEdge | RtcError::EdgeLost)),
        "{r:?}"
    );
}
