//! `Timer::cancel` interrupted (or raced from another CPU) by an `arm` of
//! the same timer, after cancel's disarm and before the device's cancel
//! write (found by red-team round 25, each failing before the fix): `arm`
//! returned Ok, yet the cancel wiped what it programmed and cleared the
//! overdue check's expectation, so the deadline was never delivered (or
//! 9.9 ms late, never reported overdue). `cancel` now programs a deadline
//! armed meanwhile again: an armed deadline is always programmed.
#![cfg(feature = "tsc")]

use clockhal::timer::{
    Timer, TimerDescriptor, TimerDevice, TimerError, TimerEvent, TimerMode, TimerScope,
};
use clockhal::{Clock, Duration, Frequency, Instant, Platform};
use clockhal_sim::SimMachine;
use std::sync::Mutex;

type Hook = Box<dyn FnOnce() + Send>;

/// A 1 GHz delta device on the simulator's true time: `program(ticks)`
/// sets an expiry at machine ns `now + ticks`, `cancel` clears it. A hook
/// can run at the start of `cancel` (an interrupt arriving just before the
/// device's cancel write).
struct SimDelta {
    m: &'static SimMachine,
    expiry: Mutex<Option<u64>>,
    on_cancel: Mutex<Option<Hook>>,
}

impl TimerDevice for SimDelta {
    fn descriptor(&self) -> TimerDescriptor {
        TimerDescriptor {
            name: "sim-delta",
            scope: TimerScope::PerCpu,
            mode: TimerMode::Delta,
            max_delta_ticks: u32::MAX as u64,
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
        Frequency::from_hz(1_000_000_000).ok()
    }
    fn program(&self, ticks: u64) -> Result<(), TimerError> {
        *self.expiry.lock().unwrap() = Some(self.m.now_ns() + ticks);
        Ok(())
    }
    fn cancel(&self) {
        let hook = self.on_cancel.lock().unwrap().take();
        if let Some(h) = hook {
            h(); // the "interrupt" runs before the cancel write lands
        }
        *self.expiry.lock().unwrap() = None;
    }
}

#[test]
fn an_arm_from_an_interrupt_inside_cancel_is_delivered() {
    let m: &'static SimMachine = Box::leak(Box::new(SimMachine::bare_metal()));
    let c: &'static Clock<&'static SimMachine> = Box::leak(Box::new(
        clockhal::probe(m, Platform::new()).into_clock().unwrap(),
    ));
    let dev: &'static SimDelta = Box::leak(Box::new(SimDelta {
        m,
        expiry: Mutex::new(None),
        on_cancel: Mutex::new(None),
    }));
    let t: &'static Timer<'static, &'static SimMachine> =
        Box::leak(Box::new(c.timer(dev).unwrap()));

    // Task code had a deadline armed and now cancels it.
    t.arm(c.now() + Duration::from_millis(5)).unwrap();
    // An interrupt handler on this CPU arms the timer for a new deadline
    // while the cancel is in progress.
    let new_deadline: Instant = c.now() + Duration::from_micros(100);
    let armed: &'static Mutex<Option<Result<(), TimerError>>> =
        Box::leak(Box::new(Mutex::new(None)));
    *dev.on_cancel.lock().unwrap() = Some(Box::new(move || {
        *armed.lock().unwrap() = Some(t.arm(new_deadline));
    }));
    assert!(t.cancel(), "the old deadline was pending");
    assert_eq!(
        *armed.lock().unwrap(),
        Some(Ok(())),
        "the nested arm succeeded"
    );
    assert_eq!(
        t.deadline(),
        Some(new_deadline),
        "the new deadline is armed"
    );

    // Run the machine for 50 ms of true time, delivering the device's
    // interrupts as they come (no overdue check: see the next test).
    let mut fired_at = None;
    for _ in 0..50_000 {
        m.advance(1_000);
        let due = {
            let mut e = dev.expiry.lock().unwrap();
            match *e {
                Some(at) if at <= m.now_ns() => {
                    *e = None;
                    true
                }
                _ => false,
            }
        };
        if due {
            if let TimerEvent::Fired { .. } = t.on_interrupt() {
                fired_at = Some(c.now());
                break;
            }
        }
    }
    let at = fired_at.expect(
        "arm() returned Ok and the deadline stays armed, but the device was cancelled \
         after the arm programmed it: no interrupt ever comes",
    );
    assert!(
        at.as_nanos() - new_deadline.as_nanos() < 1_000_000,
        "delivered {} ns late",
        at.as_nanos() - new_deadline.as_nanos()
    );
}

#[test]
fn an_arm_inside_cancel_is_delivered_on_time_with_overdue_checks() {
    let m: &'static SimMachine = Box::leak(Box::new(SimMachine::bare_metal()));
    let c: &'static Clock<&'static SimMachine> = Box::leak(Box::new(
        clockhal::probe(m, Platform::new()).into_clock().unwrap(),
    ));
    let dev: &'static SimDelta = Box::leak(Box::new(SimDelta {
        m,
        expiry: Mutex::new(None),
        on_cancel: Mutex::new(None),
    }));
    let t: &'static Timer<'static, &'static SimMachine> = Box::leak(Box::new(
        c.timer(dev)
            .unwrap()
            .with_overdue_bound(Duration::from_micros(100)),
    ));
    t.arm(c.now() + Duration::from_millis(5)).unwrap();
    let new_deadline: Instant = c.now() + Duration::from_micros(100);
    *dev.on_cancel.lock().unwrap() = Some(Box::new(move || {
        t.arm(new_deadline).unwrap();
    }));
    t.cancel();
    // A watchdog tick every 10 ms checks for overdue deadlines; the
    // overdue bound is 100 µs, so a deadline the device never delivers
    // must be reported within 10 ms of deadline + 100 µs.
    let mut reported = false;
    let mut fired_at = None;
    for step in 1..=20_000u64 {
        m.advance(1_000);
        if step % 10_000 == 0 && t.check_overdue().is_some() {
            reported = true;
        }
        let due = {
            let mut e = dev.expiry.lock().unwrap();
            match *e {
                Some(at) if at <= m.now_ns() => {
                    *e = None;
                    true
                }
                _ => false,
            }
        };
        if due {
            if let TimerEvent::Fired { .. } = t.on_interrupt() {
                fired_at = Some(c.now());
                break;
            }
        }
    }
    let late = fired_at.map(|a| a.as_nanos() - new_deadline.as_nanos());
    assert!(
        reported || late.is_some_and(|l| l < 1_000_000),
        "deadline delivered {late:?} ns late (not within 1 ms) and check_overdue never reported it \
         (stats {:?})",
        t.stats()
    );
}

/// The same on the simulated HPET comparator (a global device: the arm
/// may as well come from another CPU's code between cancel's two steps):
/// the wrapper only runs the "interrupt" just before the comparator's
/// disabling write.
#[cfg(feature = "hpet")]
#[test]
fn an_arm_inside_cancel_leaves_the_hpet_comparator_enabled() {
    use clockhal_hpet::comparator::{HpetComparator, HpetRoute};

    struct Hooked {
        inner: HpetComparator<&'static SimMachine>,
        on_cancel: Mutex<Option<Hook>>,
    }
    impl TimerDevice for Hooked {
        fn descriptor(&self) -> TimerDescriptor {
            self.inner.descriptor()
        }
        fn rate(&self) -> Option<Frequency> {
            self.inner.rate()
        }
        fn program(&self, ticks: u64) -> Result<(), TimerError> {
            self.inner.program(ticks)
        }
        fn cancel(&self) {
            let hook = self.on_cancel.lock().unwrap().take();
            if let Some(h) = hook {
                h();
            }
            self.inner.cancel()
        }
    }

    let m: &'static SimMachine = Box::leak(Box::new(SimMachine::bare_metal()));
    let c: &'static Clock<&'static SimMachine> = Box::leak(Box::new(
        clockhal::probe(m, Platform::new().hpet_region(m.hpet_region().unwrap()))
            .into_clock()
            .unwrap(),
    ));
    let dev: &'static Hooked = Box::leak(Box::new(Hooked {
        inner: HpetComparator::new(m, m.hpet_region().unwrap(), 0, HpetRoute::Auto).unwrap(),
        on_cancel: Mutex::new(None),
    }));
    let t: &'static Timer<'static, &'static SimMachine> =
        Box::leak(Box::new(c.timer(dev).unwrap()));
    t.arm(c.now() + Duration::from_millis(5)).unwrap();
    assert!(
        m.hpet_next_fire_ns(0).is_some(),
        "control: an arm enables the comparator"
    );
    let new_deadline = c.now() + Duration::from_millis(1);
    *dev.on_cancel.lock().unwrap() = Some(Box::new(move || {
        t.arm(new_deadline).unwrap();
    }));
    assert!(t.cancel());
    assert_eq!(t.deadline(), Some(new_deadline));
    assert!(
        m.hpet_next_fire_ns(0).is_some(),
        "arm() returned Ok with the deadline armed, but the comparator is disabled: \
         the deadline will never be delivered"
    );
}

/// A device whose cancel write takes a while (a trapped register write
/// under a hypervisor takes microseconds).
struct SlowCancel(SimDelta);
impl TimerDevice for SlowCancel {
    fn descriptor(&self) -> TimerDescriptor {
        let mut d = self.0.descriptor();
        d.scope = TimerScope::Global;
        d
    }
    fn rate(&self) -> Option<Frequency> {
        self.0.rate()
    }
    fn program(&self, ticks: u64) -> Result<(), TimerError> {
        self.0.program(ticks)
    }
    fn cancel(&self) {
        let t0 = std::time::Instant::now();
        while t0.elapsed() < std::time::Duration::from_micros(20) {
            std::hint::spin_loop();
        }
        self.0.cancel()
    }
}

/// Two CPUs, no nesting: one arms, the other cancels, on a global device
/// (what `PROGRAM_ATTEMPTS` is documented for: "a global device armed from
/// two CPUs"). After each round both have returned; whenever a deadline is
/// left armed, the device must have an expiry for it.
#[test]
fn two_cpus_arm_and_cancel_never_leave_an_armed_deadline_unprogrammed() {
    use std::sync::Barrier;
    let m: &'static SimMachine = Box::leak(Box::new(SimMachine::bare_metal()));
    let c: &'static Clock<&'static SimMachine> = Box::leak(Box::new(
        clockhal::probe(m, Platform::new()).into_clock().unwrap(),
    ));
    let dev: &'static SlowCancel = Box::leak(Box::new(SlowCancel(SimDelta {
        m,
        expiry: Mutex::new(None),
        on_cancel: Mutex::new(None),
    })));
    let t = c.timer(dev).unwrap();
    let rounds = 5_000;
    let barrier = Barrier::new(2);
    let mut lost = 0u32;
    std::thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..rounds {
                barrier.wait();
                t.cancel();
                barrier.wait();
                barrier.wait();
            }
        });
        for _ in 0..rounds {
            t.cancel();
            barrier.wait();
            // Lands inside the other CPU's cancel (after its state swap,
            // during its slow device write) in many rounds.
            std::thread::sleep(std::time::Duration::from_micros(5));
            t.arm(c.now() + Duration::from_millis(1)).unwrap();
            barrier.wait();
            // Both returned: check the invariant.
            if t.deadline().is_some() && dev.0.expiry.lock().unwrap().is_none() {
                lost += 1;
            }
            barrier.wait();
        }
    });
    assert_eq!(
        lost, 0,
        "{lost} of {rounds} rounds left a deadline armed (arm returned Ok) with nothing \
         programmed on the device"
    );
}
