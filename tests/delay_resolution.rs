//! A wait never ends early, whatever the clock's resolution. With the
//! opt-in clamp granule, readings are rounded down to a grid: a wait that
//! ended when the reading passed `start + d` could last `d - granule` of
//! true time (issue 26: `delay_ns(500)` lasted 20 ns on a 1,024 ns grid).
//! Measured against the simulated machine's true time.

use clockhal::{ClampGranule, Duration, Platform, SelfCheck};
use clockhal_sim::{KvmConfig, SimMachine};

/// kvmclock without the stable bit: every reading goes through the clamp.
fn coarse_clock(log2: u8) -> (&'static SimMachine, clockhal::Clock<&'static SimMachine>) {
    let mut c = SimMachine::kvm_config();
    c.kvm = Some(KvmConfig {
        stable_bit: false,
        stable_flag: false,
        ..KvmConfig::default()
    });
    let m: &'static SimMachine = Box::leak(Box::new(c.build()));
    let p = Platform::new()
        .pvclock_areas(m.alloc_pvclock_areas(1))
        .self_check(SelfCheck::new().rate_interval(Duration::from_millis(1)))
        .clamp_granule(ClampGranule::from_log2(log2).unwrap());
    (m, clockhal::probe(m, p).into_clock().unwrap())
}

/// Runs `wait` at many phases of the grid; the shortest true duration.
fn shortest(m: &SimMachine, mut wait: impl FnMut()) -> u64 {
    let mut least = u64::MAX;
    for k in 0..200u64 {
        m.advance(37 + k * 13);
        let t0 = m.now_ns();
        wait();
        least = least.min(m.now_ns() - t0);
    }
    least
}

#[test]
fn spin_for_lasts_at_least_its_duration_on_a_coarse_grid() {
    for log2 in [0u8, 10, 14] {
        let (m, clock) = coarse_clock(log2);
        for d in [1u64, 500, 1_024, 5_000] {
            let least = shortest(m, || clock.spin_for(Duration::from_nanos(d)).unwrap());
            assert!(
                least >= d,
                "granule 2^{log2}: spin_for({d} ns) lasted {least} ns"
            );
        }
    }
}

#[cfg(feature = "embedded-hal")]
#[test]
fn delay_ns_lasts_at_least_its_duration_on_a_coarse_grid() {
    use embedded_hal::delay::DelayNs;
    for log2 in [0u8, 10, 14] {
        let (m, clock) = coarse_clock(log2);
        let mut delay = clock.delay();
        for d in [1u32, 500, 1_024, 5_000] {
            let least = shortest(m, || delay.delay_ns(d));
            assert!(
                least >= u64::from(d),
                "granule 2^{log2}: delay_ns({d}) lasted {least} ns"
            );
        }
        assert_eq!(delay.stalls(), 0);
    }
}
