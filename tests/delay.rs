//! `Clock::delay()` as an embedded-hal `DelayNs`: at least as long as
//! asked in machine time, no truncation of long delays, a source that
//! holds is replaced and the delay goes on, a clock that stops ends the
//! delay (and `spin_for`) instead of hanging.
#![cfg(all(feature = "embedded-hal", feature = "kvmclock", feature = "tsc"))]

mod stopping;

use clockhal::{ClockNow, Delay, Demotion, Instant, Platform, SourceId, Verdict, STALL_READS};
use clockhal_sim::SimMachine;
use embedded_hal::delay::DelayNs;
use std::sync::atomic::{AtomicU64, Ordering};

#[test]
fn delays_last_at_least_as_long_as_asked_in_machine_time() {
    let m = SimMachine::bare_metal(); // TSC at an exactly stated rate
    let clock = clockhal::probe(&m, Platform::new()).into_clock().unwrap();
    assert_eq!(clock.source_id(), SourceId::Tsc);
    let mut delay = clock.delay();
    for ns in [0u32, 1, 50, 999, 20_000, 1_000_000] {
        let t0 = m.now_ns();
        delay.delay_ns(ns);
        let took = m.now_ns() - t0;
        // One read past the end at most (a read costs 10 ns here).
        assert!(took >= u64::from(ns), "delay_ns({ns}) took {took} ns");
        assert!(took <= u64::from(ns) + 100, "delay_ns({ns}) took {took} ns");
    }
    for us in [1u32, 250, 3_000] {
        let t0 = m.now_ns();
        delay.delay_us(us);
        let took = m.now_ns() - t0;
        assert!((u64::from(us) * 1_000..u64::from(us) * 1_000 + 100).contains(&took));
    }
    let t0 = m.now_ns();
    delay.delay_ms(7);
    assert!((7_000_000..7_000_100).contains(&(m.now_ns() - t0)));
    assert_eq!(delay.stalls(), 0);
}

/// A clock that advances one second per read.
struct Coarse(AtomicU64);

impl ClockNow for Coarse {
    fn now(&self) -> Instant {
        Instant::from_nanos(self.0.fetch_add(1_000_000_000, Ordering::Relaxed) + 1_000_000_000)
    }
}

#[test]
fn long_delays_are_not_truncated_to_32_bits_of_nanoseconds() {
    let c = Coarse(AtomicU64::new(0));
    let mut delay = Delay::new(&c);
    delay.delay_ms(u32::MAX); // 49.7 days
    let s = c.0.load(Ordering::Relaxed) / 1_000_000_000;
    assert!(s >= u64::from(u32::MAX) / 1_000, "{s} s");
    assert!(s <= u64::from(u32::MAX) / 1_000 + 3, "{s} s");
    let before = c.0.load(Ordering::Relaxed);
    delay.delay_us(u32::MAX); // 71.6 minutes
    assert!(c.0.load(Ordering::Relaxed) - before >= u64::from(u32::MAX) * 1_000);
}

#[test]
fn a_source_that_holds_is_replaced_and_the_delay_goes_on() {
    // CPU 1's kvmclock area is mid-update from its registration on: it has
    // no validated parameters, so its reads hold; after STUCK_READS the
    // clock switches source by itself and the delay ends on the new one.
    let m = SimMachine::kvm_config().with_cpus(2, &[]).build();
    let platform = Platform::new()
        .pvclock_areas(m.alloc_pvclock_areas(2))
        .cpus(2)
        .tsc_sync(clockhal::tsc::SyncStatus::Synchronized);
    let clock = clockhal::probe(&m, platform).into_clock().unwrap();
    assert_eq!(clock.source_id(), SourceId::Kvmclock);
    m.on_cpu(1, || clock.register_this_cpu()).unwrap();
    m.with_kvm(|k, ctx| k.stall_update(ctx, 1));
    let t0 = m.now_ns();
    let mut delay = clock.delay();
    m.on_cpu(1, || delay.delay_ms(5));
    assert_ne!(clock.source_id(), SourceId::Kvmclock, "{}", clock.report());
    assert!(matches!(
        clock.report().get(SourceId::Kvmclock).unwrap().verdict,
        Verdict::Demoted {
            reason: Demotion::Stuck { .. },
            ..
        }
    ));
    assert!(m.now_ns() - t0 >= 5_000_000);
    assert_eq!(delay.stalls(), 0);
}

#[test]
fn a_clock_that_stops_ends_the_delay_after_stall_reads_instead_of_hanging() {
    let (m, source, clock) = stopping::forced_stoppable();
    source.stop();
    let stuck_at = clock.now();

    let mut delay = clock.delay();
    let t0 = m.now_ns();
    delay.delay_ms(50);
    assert_eq!(delay.stalls(), 1);
    assert_eq!(clock.now(), stuck_at);
    // STALL_READS reads of 10 ns (each read's rdtsc): it gave up after them.
    let took = m.now_ns() - t0;
    assert!(took >= u64::from(STALL_READS) * 10, "{took}");
    assert!(took <= u64::from(STALL_READS) * 10 + 1_000_000, "{took}");

    let e = clock
        .spin_for(clockhal::Duration::from_millis(1))
        .unwrap_err();
    assert_eq!(e.at, stuck_at);
    assert_eq!(e.remaining, clockhal::Duration::from_millis(1));
}
