//! A coarse `Platform::clamp_granule` coarsens clamped readings only: the
//! probe's self-check still sees kvmclock advance (found by red-team round 6:
//! from 2^16 ns up, 2,000 back-to-back reads stayed inside one granule and
//! kvmclock was demoted as "did not advance", leaving a supervised TSC).

use clockhal::{ClampGranule, ClockSource, Platform, SourceId, Verdict};
use clockhal_sim::{KvmConfig, SimMachine};

#[test]
fn a_coarse_clamp_granule_does_not_demote_kvmclock_and_still_applies() {
    for log2 in [0u8, 10, 14, 16, 18, 20] {
        let mut c = SimMachine::kvm_config();
        c.kvm = Some(KvmConfig {
            stable_bit: false,
            stable_flag: false,
            ..KvmConfig::default()
        });
        let m = c.build();
        let granule = ClampGranule::from_log2(log2).unwrap();
        let p = Platform::new()
            .pvclock_areas(m.alloc_pvclock_areas(1))
            .clamp_granule(granule);
        let probed = clockhal::probe(&m, p);
        let kvm = *probed.report().get(SourceId::Kvmclock).unwrap();
        assert!(
            matches!(kvm.verdict, Verdict::Usable(_)),
            "granule 2^{log2}: {}",
            probed.report()
        );
        let clock = probed.into_clock().unwrap();
        assert_eq!(clock.source_id(), SourceId::Kvmclock, "granule 2^{log2}");
        // The granule applies after the probe: kvmclock's own (clamped)
        // readings and the clock's are on its grid, and advance.
        let k = clock.kvmclock().unwrap();
        let first = clock.now().as_nanos();
        let a = k.read();
        m.advance(3 * granule.units() + 1_000);
        let b = k.read();
        assert_eq!(a % granule.units(), 0, "granule 2^{log2}: {a}");
        assert_eq!(b % granule.units(), 0, "granule 2^{log2}: {b}");
        assert!(b > a, "granule 2^{log2}: {a} then {b}");
        assert!(clock.now().as_nanos() > first);
    }
}
