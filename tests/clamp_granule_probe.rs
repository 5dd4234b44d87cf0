//! A coarse `Platform::clamp_granule` coarsens what `Clock::now()` returns
//! through its clamp, nothing else: the probe's self-check and the watchdog
//! measure kvmclock through its own exact reads. Found by red-team rounds
//! 6 and 7: from 2^16 ns up, 2,000 back-to-back reads stayed inside one
//! granule and the probe demoted kvmclock as "did not advance"; at 2^20 ns
//! the watchdog saw up to ~1 ms of rounding in each 250 ms round and
//! demoted an honest kvmclock for "drift" (-1,803 ppm vs the HPET).

use clockhal::{ClampGranule, ClockSource, Platform, SelfCheck, SourceId, Verdict};
use clockhal_sim::{KvmConfig, SimMachine};

/// A KVM guest without the stable bit (every reading through the clamp),
/// with an HPET, on clamp granule 2^`log2`.
fn unstable_kvm(log2: u8) -> (&'static SimMachine, clockhal::Probed<&'static SimMachine>) {
    let mut c = SimMachine::kvm_config();
    c.kvm = Some(KvmConfig {
        stable_bit: false,
        stable_flag: false,
        ..KvmConfig::default()
    });
    let m: &'static SimMachine = Box::leak(Box::new(c.build()));
    let mut p = Platform::new()
        .pvclock_areas(m.alloc_pvclock_areas(1))
        .self_check(SelfCheck::new().rate_interval(clockhal::Duration::from_millis(1)))
        .clamp_granule(ClampGranule::from_log2(log2).unwrap());
    if let Some(r) = m.hpet_region() {
        p = p.hpet_region(r);
    }
    (m, clockhal::probe(m, p))
}

#[test]
fn a_coarse_clamp_granule_does_not_demote_kvmclock_at_the_probe() {
    for log2 in [0u8, 10, 14, 16, 18, 20] {
        let (m, probed) = unstable_kvm(log2);
        let kvm = *probed.report().get(SourceId::Kvmclock).unwrap();
        assert!(
            matches!(kvm.verdict, Verdict::Usable(_)),
            "granule 2^{log2}: {}",
            probed.report()
        );
        let clock = probed.into_clock().unwrap();
        assert_eq!(clock.source_id(), SourceId::Kvmclock, "granule 2^{log2}");
        // `now()` is on the granule's grid and advances; kvmclock's own
        // read stays exact.
        let units = 1u64 << log2;
        let a = clock.now().as_nanos();
        let k0 = clock.kvmclock().unwrap().read();
        m.advance(3 * units + 1_001);
        let b = clock.now().as_nanos();
        let k1 = clock.kvmclock().unwrap().read();
        assert_eq!((a % units, b % units), (0, 0), "granule 2^{log2}: {a}, {b}");
        assert!(b > a, "granule 2^{log2}: {a} then {b}");
        // (The simulated machine's own reads take a few ns each; a clamped
        // difference would be a multiple of the granule.)
        let d = 3 * units + 1_001;
        assert!(
            (d..d + 10_000).contains(&(k1 - k0)),
            "granule 2^{log2}: {} for {d}",
            k1 - k0
        );
    }
}

#[test]
fn a_coarse_clamp_granule_does_not_make_the_watchdog_demote_an_honest_kvmclock() {
    for log2 in [16u8, 20] {
        let (m, probed) = unstable_kvm(log2);
        let clock = probed.into_clock().unwrap();
        assert_eq!(clock.source_id(), SourceId::Kvmclock, "{}", clock.report());
        let mut events = Vec::new();
        for _ in 0..40 {
            m.advance(250_000_000); // the default watchdog period, honest
            events.push(clock.watchdog_tick());
        }
        let v = clock.report().get(SourceId::Kvmclock).unwrap().verdict;
        assert!(
            matches!(v, Verdict::Usable(_)) && clock.source_id() == SourceId::Kvmclock,
            "granule 2^{log2}: honest kvmclock demoted: {}\n{events:?}",
            clock.report()
        );
    }
}
