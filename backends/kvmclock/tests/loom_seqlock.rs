//! loom model of the pvclock seqlock: the real reader (`read_area`, i.e.
//! `Sample::try_take`) against the real host writer
//! (`PvclockVcpuTimeInfo::publish`), `--cfg loom`. A reading must come from
//! one published state, never a mix. With `--cfg clockhal_loom_mutant` the
//! reader's acquire fence is gone and the model must find a torn read.
//! `./scripts/deep-checks.sh loom`. Empty without `cfg(loom)`.
#![cfg(loom)]

use clockhal_kvmclock::{read_area, PvclockError};
use clockhal_x86::paravirt::PvclockVcpuTimeInfo;
use loom::sync::Arc;
use loom::thread;

/// (tsc_timestamp, system_time, mul, shift, flags) of the two states.
const OLD: (u64, u64, u32, i8, u8) = (1_000, 5_000, 1 << 31, 0, 0);
const NEW: (u64, u64, u32, i8, u8) = (2_000, 9_000, 1 << 30, 1, 1);

fn model() {
    loom::model(|| {
        let area = Arc::new(PvclockVcpuTimeInfo::new());
        let (t, s, m, sh, f) = OLD;
        area.publish(t, s, m, sh, f); // version 2
        let host = {
            let area = area.clone();
            thread::spawn(move || {
                let (t, s, m, sh, f) = NEW;
                area.publish(t, s, m, sh, f); // version 4
            })
        };
        // TSC 3000: OLD gives 5000 + 2000/2 = 6000 ns, NEW 9000 + 1000/2 = 9500.
        match read_area(&area, || 3_000) {
            Ok(r) => {
                let want = match r.version {
                    2 => (6_000, 0),
                    4 => (9_500, 1),
                    v => panic!("torn: version {v}"),
                };
                assert_eq!((r.ns, r.flags), want, "torn: {r:?}");
            }
            Err(e) => assert_eq!(e, PvclockError::Busy),
        }
        host.join().unwrap();
    });
}

#[test]
#[cfg(not(clockhal_loom_mutant))]
fn reader_sees_one_published_state() {
    model();
}

#[test]
#[cfg(clockhal_loom_mutant)]
#[should_panic(expected = "torn")]
fn mutant_reader_without_fence_tears() {
    model();
}
