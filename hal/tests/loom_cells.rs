//! loom models of the lock-free cell and what is built on it, over the real
//! code (`--cfg loom` swaps core's atomics for loom's, `src/sync.rs`):
//! `./scripts/deep-checks.sh loom`. Empty without `cfg(loom)`.
#![cfg(loom)]

use clockhal_core::{AtomicCell, Cell64, MonotonicClamp, WrapExtender};
use loom::sync::atomic::{AtomicU64, Ordering::SeqCst};
use loom::sync::Arc;
use loom::thread;

#[test]
fn cell_updates_are_not_lost() {
    loom::model(|| {
        let cell = Arc::new(AtomicCell::new(0));
        let t = {
            let cell = cell.clone();
            thread::spawn(move || cell.update(|v| Some(v + 1)))
        };
        let mine = cell.update(|v| Some(v + 10));
        let theirs = t.join().unwrap();
        assert_eq!(cell.get(), 11);
        // Each update returns the value it stored.
        assert!(
            matches!((mine, theirs), (10, 11) | (11, 1)),
            "{mine} {theirs}"
        );
    });
}

#[test]
fn wrap_extender_two_readers_across_a_wrap() {
    // A 4-bit counter at 14 moves to 17 (wrapping to 1) while two CPUs read
    // and extend it: every result lies between the truth read and the
    // truth after, and each CPU's results never go back.
    loom::model(|| {
        let counter = Arc::new(AtomicU64::new(14));
        let ext: Arc<WrapExtender<AtomicCell>> = Arc::new(WrapExtender::new(4, 14));
        let reader = |counter: Arc<AtomicU64>, ext: Arc<WrapExtender<AtomicCell>>| {
            move || {
                let mut prev = 0;
                for _ in 0..2 {
                    let truth = counter.load(SeqCst);
                    let v = ext.extend(truth & 0xF);
                    assert!(v >= truth && v <= counter.load(SeqCst), "{v} vs {truth}");
                    assert!(v >= prev);
                    prev = v;
                }
            }
        };
        let a = thread::spawn(reader(counter.clone(), ext.clone()));
        let b = thread::spawn(reader(counter.clone(), ext.clone()));
        counter.store(17, SeqCst);
        a.join().unwrap();
        b.join().unwrap();
        assert!(ext.last() == 14 || ext.last() == 17);
    });
}

#[test]
fn clamp_is_a_running_maximum_across_cpus() {
    loom::model(|| {
        let clamp: Arc<MonotonicClamp<AtomicCell>> = Arc::new(MonotonicClamp::new());
        let t = {
            let clamp = clamp.clone();
            thread::spawn(move || [clamp.clamp(5), clamp.clamp(7)])
        };
        let mine = [clamp.clamp(6), clamp.clamp(3)];
        let theirs = t.join().unwrap();
        assert!(theirs[0] >= 5 && theirs[1] >= theirs[0].max(7));
        assert!(mine[0] >= 6 && mine[1] >= mine[0]);
        assert_eq!(clamp.last(), 7);
        // Every result is a value some CPU passed in.
        for v in mine.into_iter().chain(theirs) {
            assert!([3, 5, 6, 7].contains(&v), "{v}");
        }
    });
}
