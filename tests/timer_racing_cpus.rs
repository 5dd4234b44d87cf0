//! Red-team round 31's races over this stop's fixes, which held (kept as
//! regression checks): two CPUs arm and cancel one global timer, a third delivers
//! the device's interrupts as they come due (machine time), a fourth runs
//! the overdue check. Checked: never Fired before now() reaches the
//! deadline (the interrupt thread reads now() after), each deadline (all
//! unique) Fired at most once, and at each quiescent point an armed deadline has a programmed expiry
//! (arm returned Ok: "an armed deadline is always programmed").
#![cfg(feature = "tsc")]

use clockhal::timer::{
    Timer, TimerDescriptor, TimerDevice, TimerError, TimerEvent, TimerMode, TimerScope,
};
use clockhal::x86::Hardware;
use clockhal::{Clock, Frequency, Instant, Platform};
use clockhal_sim::SimMachine;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Barrier, Mutex};

fn rng(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// A global 1 GHz device on machine time: Delta (expiry at now + ticks)
/// or AbsoluteCounter (on the TSC). `expiry` is machine ns / TSC value.
struct Dev {
    m: &'static SimMachine,
    absolute: bool,
    expiry: Mutex<Option<u64>>,
}

impl TimerDevice for Dev {
    fn descriptor(&self) -> TimerDescriptor {
        TimerDescriptor {
            name: "hunt",
            scope: TimerScope::Global,
            mode: if self.absolute {
                TimerMode::AbsoluteCounter
            } else {
                TimerMode::Delta
            },
            max_delta_ticks: if self.absolute {
                u64::MAX / 4
            } else {
                u32::MAX as u64
            },
            min_delta_ticks: 1,
            resolution_ns: 1,
            traps_per_arm: 0,
            needs_calibrated_rate: false,
            stops_in_deep_idle: false,
            rating: 100,
            rating_reason: "test",
        }
    }
    fn rate(&self) -> Option<Frequency> {
        if self.absolute {
            None
        } else {
            Frequency::from_hz(1_000_000_000).ok()
        }
    }
    fn program(&self, ticks: u64) -> Result<(), TimerError> {
        let now = self.m.now_ns();
        std::thread::yield_now();
        *self.expiry.lock().unwrap() = Some(now + ticks);
        Ok(())
    }
    fn program_at(&self, counter: u64) -> Result<(), TimerError> {
        std::thread::yield_now();
        *self.expiry.lock().unwrap() = Some(counter);
        Ok(())
    }
    fn cancel(&self) {
        std::thread::yield_now();
        *self.expiry.lock().unwrap() = None;
    }
}

impl Dev {
    fn counter_now(&self) -> u64 {
        if self.absolute {
            self.m.on_cpu(0, || self.m.rdtsc())
        } else {
            self.m.now_ns()
        }
    }
}

fn run(absolute: bool) {
    let m: &'static SimMachine = Box::leak(Box::new(
        SimMachine::bare_metal_config().with_cpus(4, &[]).build(),
    ));
    let c: &'static Clock<&'static SimMachine> = Box::leak(Box::new(
        clockhal::probe(
            m,
            Platform::new()
                .cpus(4)
                .tsc_sync(clockhal::tsc::SyncStatus::Synchronized),
        )
        .into_clock()
        .unwrap(),
    ));
    for cpu in 1..4 {
        m.on_cpu(cpu, || c.register_this_cpu()).unwrap();
    }
    let dev: &'static Dev = Box::leak(Box::new(Dev {
        m,
        absolute,
        expiry: Mutex::new(None),
    }));
    let t: &'static Timer<'static, &'static SimMachine> =
        Box::leak(Box::new(c.timer(dev).unwrap()));
    let rounds = 3_000u32;
    let barrier = Barrier::new(4);
    let fired: Mutex<HashSet<u64>> = Mutex::new(HashSet::new());
    let failure: Mutex<Vec<String>> = Mutex::new(vec![]);
    let busy = AtomicBool::new(true);
    let seq = AtomicU64::new(0);
    let fail = |s: String| {
        let mut f = failure.lock().unwrap();
        if f.len() < 10 {
            f.push(s);
        }
    };
    std::thread::scope(|s| {
        // Two armers/cancellers, deadlines made unique by a sequence.
        for cpu in 0..2usize {
            let (barrier, seq, fail) = (&barrier, &seq, &fail);
            s.spawn(move || {
                m.set_cpu(cpu);
                let mut r = 0x1234_5678u64 + cpu as u64;
                for _ in 0..rounds {
                    barrier.wait();
                    for _ in 0..3 {
                        let k = seq.fetch_add(1, SeqCst);
                        let d = Instant::from_nanos(
                            ((c.now().as_nanos() + rng(&mut r) % 30_000) & !0xFFFF_u64)
                                .wrapping_add(0x1_0000)
                                | (k & 0xFFFF),
                        );
                        if let Err(e) = t.arm(d) {
                            fail(format!("arm: {e:?}"));
                        }
                        if rng(&mut r) % 2 == 0 {
                            t.cancel();
                        }
                    }
                    barrier.wait(); // quiescent
                    barrier.wait();
                }
            });
        }
        // The interrupt thread.
        {
            let (barrier, fired, fail, busy) = (&barrier, &fired, &fail, &busy);
            s.spawn(move || {
                m.set_cpu(2);
                for round in 0..rounds {
                    barrier.wait();
                    busy.store(true, SeqCst);
                    for _ in 0..50 {
                        m.advance(1_000);
                        let due = {
                            let mut e = dev.expiry.lock().unwrap();
                            match *e {
                                Some(at) if at <= dev.counter_now() => {
                                    *e = None;
                                    true
                                }
                                _ => false,
                            }
                        };
                        if due {
                            if let TimerEvent::Fired { deadline, .. } = t.on_interrupt() {
                                let now = c.now();
                                if now < deadline {
                                    fail(format!("Fired {deadline:?} at {now:?}"));
                                }
                                if !fired.lock().unwrap().insert(deadline.as_nanos()) {
                                    fail(format!("{deadline:?} Fired twice"));
                                }
                            }
                        }
                        std::thread::yield_now();
                    }
                    barrier.wait(); // quiescent: armers and overdue done
                    if let Some(d) = t.deadline() {
                        let e = *dev.expiry.lock().unwrap();
                        if e.is_none() {
                            fail(format!(
                                "round {round}: {d:?} armed, nothing programmed ({:?})",
                                t.stats()
                            ));
                        }
                    }
                    barrier.wait();
                }
            });
        }
        // The overdue checker.
        {
            let barrier = &barrier;
            s.spawn(move || {
                m.set_cpu(3);
                for _ in 0..rounds {
                    barrier.wait();
                    for _ in 0..3 {
                        let _ = t.check_overdue();
                        std::thread::yield_now();
                    }
                    barrier.wait();
                    barrier.wait();
                }
            });
        }
    });
    // Finally: whatever is armed is delivered.
    if let Some(d) = t.deadline() {
        let mut got = false;
        for _ in 0..100_000 {
            m.advance(1_000);
            let due = {
                let mut e = dev.expiry.lock().unwrap();
                match *e {
                    Some(at) if at <= dev.counter_now() => {
                        *e = None;
                        true
                    }
                    _ => false,
                }
            };
            if due && matches!(t.on_interrupt(), TimerEvent::Fired { .. }) {
                got = true;
                break;
            }
        }
        if !got {
            fail(format!("final {d:?} never delivered"));
        }
    }
    let f = failure.lock().unwrap();
    assert!(f.is_empty(), "{f:#?}\nstats {:?}", t.stats());
}

#[test]
fn delta_global_timer_racing_arm_cancel_interrupt_overdue() {
    run(false);
}

#[test]
fn absolute_global_timer_racing_arm_cancel_interrupt_overdue() {
    run(true);
}
