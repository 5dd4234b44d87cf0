//! Wall time from the CMOS RTC on the clock's timeline: aligned to a
//! second edge within the stated uncertainty, the century from the probe's
//! FADT, a retry when a read ends too late, and errors that leave the wall
//! time alone.
#![cfg(all(
    feature = "rtc",
    feature = "tsc",
    feature = "kvmclock",
    feature = "pit"
))]

use clockhal::rtc::{Century, RtcError};
use clockhal::{Clock, Duration, Platform};
use clockhal_sim::{AcpiTablesBuilder, RtcConfig, SimConfig, SimMachine};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const S: u64 = 1_000_000_000;
const WAIT: Duration = Duration::from_millis(1_100);

/// The simulated RTC's own wall time now (the truth).
fn true_unix_ns(m: &SimMachine) -> u64 {
    m.with_rtc(|r, ctx| r.unix_ns(ctx.now_ns)).unwrap()
}

/// |clock's wall time - the RTC's true time| now.
fn wall_error(m: &SimMachine, clock: &Clock<&SimMachine>) -> u64 {
    clock.unix_time_ns().unwrap().abs_diff(true_unix_ns(m))
}

#[test]
fn the_wall_time_is_the_rtc_second_edge_on_the_clocks_timeline() {
    // Bare metal: an exactly rated TSC, the data sheet's RTC (1984 µs
    // update cycle); both the simulator's and clockhal's UIP lead round
    // 244.140625 µs, so they agree to 1 ns.
    for start in [0, 1, 250_000_000, 999_000_000, 999_800_000] {
        let m = SimMachine::bare_metal();
        m.with_rtc(|r, ctx| r.set_unix_ns(ctx, 1_796_128_496 * S + start));
        let clock = clockhal::probe(&m, Platform::new()).into_clock().unwrap();
        assert_eq!(clock.unix_time_ns(), None);
        let edge = clock.set_wall_clock_from_rtc(WAIT).unwrap();
        let bound = edge.uncertainty_ns + 2;
        assert!(edge.uncertainty_ns < 10_000, "{}", edge.uncertainty_ns);
        assert!(
            wall_error(&m, &clock) <= bound,
            "start .{start}: {}",
            wall_error(&m, &clock)
        );
        // The edge's second is the one the RTC began at the clock's at_ns.
        let at = clock.now().as_nanos();
        let second_then = (true_unix_ns(&m) - (at - edge.at_ns) + S / 2) / S;
        assert_eq!(edge.time.unix_seconds(), second_then);
        // The wall time follows the clock.
        m.advance(10 * S);
        assert!(wall_error(&m, &clock) <= bound);
    }
}

#[test]
fn the_century_register_comes_from_the_probes_fadt() {
    // Half a second before 2100-03-01: the edge starts that day.
    let rtc = RtcConfig::qemu().at_unix_ns(4_107_542_400 * S - S / 2);
    let config = SimMachine::qemu_tcg_config().with_rtc(rtc);
    let m = config.clone().build();
    let tables = AcpiTablesBuilder::q35().build(); // FADT CENTURY = 0x32
    let memory = tables.memory();
    let clock = clockhal::probe(&m, Platform::new().acpi(tables.rsdp(), &memory))
        .into_clock()
        .unwrap();
    assert_eq!(clock.rtc_options().century_index, Some(0x32));
    let edge = clock.set_wall_clock_from_rtc(WAIT).unwrap();
    assert_eq!(edge.time.century, Century::Register(0x32));
    assert_eq!(edge.time.to_string(), "2100-03-01T00:00:00Z");
    drop(clock);

    // Without ACPI tables the probe knows no century register: years
    // 00-69 are 20xx, so the same RTC reads as 2000.
    let m = config.build();
    let clock = clockhal::probe(&m, Platform::new()).into_clock().unwrap();
    assert_eq!(clock.rtc_options().century_index, None);
    let edge = clock.set_wall_clock_from_rtc(WAIT).unwrap();
    assert_eq!(edge.time.century, Century::Pivot);
    assert_eq!(edge.time.to_string(), "2000-03-01T00:00:00Z");
}

#[test]
fn a_fadt_naming_an_impossible_century_register_costs_the_century_not_the_time() {
    let m = SimMachine::qemu_tcg();
    let mut tables = AcpiTablesBuilder::q35().build();
    tables.patch(b"FACP", 108, &[0x05]); // a clock register, not CMOS RAM
    let memory = tables.memory();
    let clock = clockhal::probe(&m, Platform::new().acpi(tables.rsdp(), &memory))
        .into_clock()
        .unwrap();
    assert_eq!(clock.rtc_options().century_index, None);
    let edge = clock.set_wall_clock_from_rtc(WAIT).unwrap();
    assert_eq!(edge.time.century, Century::Pivot);
    assert_eq!(edge.time.unix_seconds(), 1_796_128_497);
}

#[test]
fn a_read_that_ends_a_second_late_is_retried_at_the_next_edge() {
    let m: &'static SimMachine = Box::leak(Box::new(SimMachine::bare_metal()));
    let clock = clockhal::probe(m, Platform::new()).into_clock().unwrap();
    // The vCPU is descheduled for exactly a second once, at the first
    // clock read inside an update-in-progress window: the edge's time is
    // read a second late (or the rise is seen a second late), which the
    // reader must notice (EdgeLost) and retry.
    let fired = Arc::new(AtomicBool::new(false));
    let flag = fired.clone();
    m.set_rdtsc_hook(move |m| {
        let into_second = true_unix_ns(m) % S;
        if into_second >= S - clockhal_sim::UIP_LEAD_NS && !flag.swap(true, Ordering::SeqCst) {
            m.advance(S);
        }
    });
    let edge = clock
        .set_wall_clock_from_rtc(Duration::from_secs(3))
        .unwrap();
    m.clear_rdtsc_hook();
    assert!(fired.load(Ordering::SeqCst), "the deschedule happened");
    assert!(wall_error(m, &clock) <= edge.uncertainty_ns + 2);
    // Without retries the first edge's read is lost: one edge only.
    let m2: &'static SimMachine = Box::leak(Box::new(SimMachine::bare_metal()));
    let clock2 = clockhal::probe(m2, Platform::new()).into_clock().unwrap();
    let fired = Arc::new(AtomicBool::new(false));
    let flag = fired.clone();
    m2.set_rdtsc_hook(move |m| {
        let into_second = true_unix_ns(m) % S;
        if into_second >= S - clockhal_sim::UIP_LEAD_NS && !flag.swap(true, Ordering::SeqCst) {
            m.advance(S);
        }
    });
    let r = clock2.set_wall_clock_from_rtc(Duration::from_millis(1_500));
    m2.clear_rdtsc_hook();
    assert!(r.is_err(), "{r:?}: 1.5 s leave no time for a second edge");
    assert_eq!(clock2.unix_time_ns(), None);
}

/// A KVM guest (kvmclock's wall clock set at build) whose RTC is `rtc`.
fn kvm_with(rtc: Option<RtcConfig>) -> SimMachine {
    let mut c = SimMachine::kvm_config();
    c.rtc = rtc;
    c.build()
}

#[test]
fn errors_leave_the_wall_time_as_it_was() {
    let cases: [(Option<RtcConfig>, Duration, RtcError); 4] = [
        (None, WAIT, RtcError::NoDevice),
        (
            Some(RtcConfig {
                battery_ok: false,
                ..RtcConfig::qemu()
            }),
            WAIT,
            RtcError::InvalidTime,
        ),
        (
            Some(RtcConfig {
                halted: true,
                ..RtcConfig::qemu()
            }),
            WAIT,
            RtcError::Halted,
        ),
        // Too short a wait to see an edge (the RTC is .25 s into a second).
        (
            Some(RtcConfig::qemu()),
            Duration::from_millis(1),
            RtcError::NoUpdateEdge,
        ),
    ];
    for (rtc, wait, want) in cases {
        let m = kvm_with(rtc);
        let platform = Platform::new()
            .pvclock_areas(m.alloc_pvclock_areas(1))
            .pvclock_wall_clock(m.alloc_wall_clock());
        let clock = clockhal::probe(&m, platform).into_clock().unwrap();
        let offset = |c: &Clock<&SimMachine>| c.unix_time_ns().unwrap() - c.now().as_nanos();
        let before = offset(&clock);
        let t0 = m.now_ns();
        assert_eq!(clock.set_wall_clock_from_rtc(wait), Err(want));
        assert!(
            m.now_ns() - t0 <= wait.as_nanos() + 3_000_000,
            "bounded by the wait"
        );
        assert!(
            offset(&clock).abs_diff(before) <= 1,
            "{want:?}: wall time changed"
        );
    }
}

#[test]
fn a_stuck_update_flag_is_an_error_within_the_wait() {
    let m = SimConfig::cpu(2_000_000_000)
        .with_rtc(RtcConfig {
            uip_stuck: true,
            ..RtcConfig::qemu()
        })
        .build();
    let clock = clockhal::probe(
        &m,
        Platform::new().tsc_rate(clockhal::Frequency::from_hz(2_000_000_000).unwrap()),
    )
    .into_clock()
    .unwrap();
    let t0 = m.now_ns();
    assert_eq!(
        clock.set_wall_clock_from_rtc(WAIT),
        Err(RtcError::NoUpdateEdge)
    );
    assert!(m.now_ns() - t0 <= WAIT.as_nanos() + 3_000_000);
}

#[test]
fn an_rtc_year_the_clock_cannot_be_in_is_refused() {
    // Issue 26: a corrupt century register (year 9999) or 2600 made
    // unix_time_ns() u64::MAX, standing still; 1980 is an RTC after a
    // reset. Each is refused and the wall time stays as it was.
    let tables = AcpiTablesBuilder::q35().build(); // FADT CENTURY = 0x32
    let memory = tables.memory();
    for (century, yy, year) in [(0x99, 0x99, 9999), (0x26, 0x00, 2600), (0x19, 0x80, 1980)] {
        let rtc = RtcConfig::qemu()
            .with_forced(0x32, century)
            .with_forced(0x09, yy);
        let m = SimMachine::qemu_tcg_config().with_rtc(rtc).build();
        let clock = clockhal::probe(&m, Platform::new().acpi(tables.rsdp(), &memory))
            .into_clock()
            .unwrap();
        assert_eq!(
            clock.set_wall_clock_from_rtc(WAIT),
            Err(RtcError::ImplausibleTime { year }),
            "year {year}"
        );
        assert_eq!(clock.unix_time_ns(), None, "year {year} was taken");
    }
}

#[test]
fn after_s3_the_os_sets_the_wall_time_from_the_rtc_again() {
    // An RTC-based OS: resume() cannot know the time spent in S3; the
    // RTC kept counting, and set_wall_clock_from_rtc after resume (as the
    // resume docs ask) puts the wall time right again.
    let m: &'static SimMachine = Box::leak(Box::new(SimMachine::bare_metal()));
    let clock = clockhal::probe(m, Platform::new()).into_clock().unwrap();
    let edge = clock.set_wall_clock_from_rtc(WAIT).unwrap();
    assert!(wall_error(m, &clock) <= edge.uncertainty_ns + 2);
    m.advance(3_600 * S); // an hour in S3
    clock.resume().unwrap();
    assert!(
        wall_error(m, &clock) >= 3_599 * S,
        "resume cannot know S3's length from an OS-set wall time"
    );
    let edge = clock.set_wall_clock_from_rtc(WAIT).unwrap();
    assert!(wall_error(m, &clock) <= edge.uncertainty_ns + 2);
}

/// A machine whose vCPU is descheduled for `gap_ns` whenever it would
/// poll inside the RTC's update-in-progress window (the first `times`
/// windows): the whole rise of UIP falls between two polls.
fn preempted_across_uip(times: u32, gap_ns: u64) -> &'static SimMachine {
    let m: &'static SimMachine = Box::leak(Box::new(SimMachine::qemu_tcg()));
    let left = Arc::new(std::sync::atomic::AtomicU32::new(times));
    m.set_rdtsc_hook(move |m| {
        let into_second = true_unix_ns(m) % S;
        if into_second >= S - clockhal_sim::UIP_LEAD_NS - 2_000
            && left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        {
            m.advance(gap_ns);
        }
    });
    m
}

#[test]
fn an_update_window_hidden_by_a_preemption_is_bad_luck_not_an_error() {
    // Issue 26: NoUpdateEdge in 3 of 24 calls under QEMU TCG on a loaded
    // host: UIP is up for only 244 µs before the edge, and a vCPU
    // descheduled across it never sees it rise. With 1.1 s to wait, the
    // next edge was too late. Now a poll gap longer than the window waits
    // for the next edge too (once or twice).
    for hidden in [1, 2] {
        let m = preempted_across_uip(hidden, 300_000);
        let clock = clockhal::probe(m, Platform::new()).into_clock().unwrap();
        let t0 = m.now_ns();
        let edge = clock.set_wall_clock_from_rtc(WAIT);
        m.clear_rdtsc_hook();
        let edge = edge.unwrap_or_else(|e| panic!("{hidden} hidden: {e}"));
        assert!(wall_error(m, &clock) <= edge.uncertainty_ns + 2);
        assert!(m.now_ns() - t0 <= WAIT.as_nanos() + hidden as u64 * S);
    }
    // A preemption across every update window: after a second without a
    // rise the seconds register is watched, and its change (seen after the
    // preemption) gives the edge, with the preemption in its uncertainty.
    // Bounded by the wait plus two seconds.
    let m = preempted_across_uip(u32::MAX, 300_000);
    let clock = clockhal::probe(m, Platform::new()).into_clock().unwrap();
    let t0 = m.now_ns();
    let r = clock.set_wall_clock_from_rtc(WAIT);
    m.clear_rdtsc_hook();
    assert!(m.now_ns() - t0 <= WAIT.as_nanos() + 2 * S + 3_000_000);
    let edge = r.unwrap();
    assert!(edge.uncertainty_ns <= 300_000, "{}", edge.uncertainty_ns);
    assert!(wall_error(m, &clock) <= edge.uncertainty_ns + 2);
}

#[test]
fn an_rtc_whose_update_flag_never_rises_still_gives_its_edge() {
    // QEMU stops emulating UIP once status C's update and alarm flags are
    // set and nobody clears them (clockhal never reads status C): seen in
    // `-M microvm` after two edges. The seconds register's change is then
    // the edge (QEMU computes the registers from its clock on each read).
    let rtc = RtcConfig::qemu().with_forced(0x0A, 0x26);
    let m = SimMachine::qemu_tcg_config().with_rtc(rtc).build();
    let clock = clockhal::probe(&m, Platform::new()).into_clock().unwrap();
    let t0 = m.now_ns();
    let edge = clock.set_wall_clock_from_rtc(WAIT).unwrap();
    assert!(m.now_ns() - t0 <= WAIT.as_nanos() + S);
    assert!(edge.uncertainty_ns < 50_000, "{}", edge.uncertainty_ns);
    assert!(wall_error(&m, &clock) <= edge.uncertainty_ns + 2);
}

#[test]
fn a_preemption_anywhere_after_the_edge_costs_the_wall_time_nothing() {
    // A vCPU preempted for 50 ms right after the k-th rdtsc of the call,
    // for each of its last 40 (after the edge is found): the wall time
    // is still right within the edge's stated uncertainty and the lead's
    // error. Before, the time between the edge's reading and the
    // offset's was taken from the wall time.
    const PREEMPT: u64 = 50_000_000;
    let rdtscs = |m: &'static SimMachine, at: Option<u64>| {
        let n = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let seen = n.clone();
        m.set_rdtsc_hook(move |m| {
            if Some(seen.fetch_add(1, Ordering::SeqCst)) == at {
                m.advance(PREEMPT);
            }
        });
        n
    };
    let total = {
        let m: &'static SimMachine = Box::leak(Box::new(SimMachine::bare_metal()));
        let clock = clockhal::probe(m, Platform::new()).into_clock().unwrap();
        let n = rdtscs(m, None);
        clock.set_wall_clock_from_rtc(WAIT).unwrap();
        m.clear_rdtsc_hook();
        n.load(Ordering::SeqCst)
    };
    let mut failures = Vec::new();
    for k in total.saturating_sub(40)..total {
        let m: &'static SimMachine = Box::leak(Box::new(SimMachine::bare_metal()));
        let clock = clockhal::probe(m, Platform::new()).into_clock().unwrap();
        rdtscs(m, Some(k));
        let r = clock.set_wall_clock_from_rtc(WAIT);
        m.clear_rdtsc_hook();
        let Ok(edge) = r else { continue };
        let err = wall_error(m, &clock);
        if err > edge.uncertainty_ns + 250_000 {
            failures.push(format!(
                "preempted after rdtsc {k} of {total}: off by {err} ns, stated {} ns",
                edge.uncertainty_ns
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
