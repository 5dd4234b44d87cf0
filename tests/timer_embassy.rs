//! The embassy-time driver on the simulated machine: two async tasks with
//! different periods on `embassy_time::Timer`, driven by the LAPIC
//! one-shot through `clockhal::timer`; each wakes exactly as often as
//! its period says, never before its deadline, and each timer await
//! costs one wake (no early wake to re-poll).
#![cfg(all(feature = "embassy", feature = "tsc"))]

use clockhal::embassy::ClockhalDriver;
use clockhal::timer::Timer;
use clockhal::{Clock, Frequency, Platform};
use clockhal_lapic_timer::LapicOneShot;
use clockhal_sim::{LapicConfig, SimMachine};
use clockhal_x86::timer_regs::ApicAccess;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake};

embassy_time_driver::time_driver_impl!(static DRIVER: ClockhalDriver = ClockhalDriver::new());

fn leak<T>(t: T) -> &'static T {
    Box::leak(Box::new(t))
}

struct Flag(AtomicBool);
impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, SeqCst);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, SeqCst);
    }
}

/// One periodic task: `n` awaits of `Timer::at(start + k * period)`,
/// recording (deadline ns, clock ns at wake) for each.
async fn periodic(
    clock: &'static Clock<&'static SimMachine>,
    period_us: u64,
    n: u32,
    log: &'static Mutex<Vec<(u64, u64)>>,
) {
    let start = embassy_time::Instant::now();
    for k in 1..=n as u64 {
        let at = start + embassy_time::Duration::from_micros(k * period_us);
        embassy_time::Timer::at(at).await;
        // The deadline in clock ns (1 MHz ticks: exact).
        let deadline_ns = at.as_ticks() * 1_000_000_000 / embassy_time_driver::TICK_HZ;
        log.lock()
            .unwrap()
            .push((deadline_ns, clock.now().as_nanos()));
    }
}

#[test]
fn two_tasks_with_different_periods() {
    let m = leak(
        SimMachine::bare_metal_config()
            .with_lapic(LapicConfig::tcg())
            .build(),
    );
    let clock: &'static Clock<&'static SimMachine> =
        leak(clockhal::probe(m, Platform::new()).into_clock().unwrap());
    let access = ApicAccess::detect(m, m.lapic_region()).unwrap();
    // A rate 1 % low (a bad calibration): early fires happen and
    // must be re-armed by the timer, not passed to the tasks.
    let dev = leak(
        LapicOneShot::new(m, access, 0xEF, Frequency::from_hz(990_000_000).unwrap(), 1).unwrap(),
    );
    let timer: &'static Timer<'static, &'static SimMachine> = leak(clock.timer(dev).unwrap());
    DRIVER.install(timer).unwrap();
    assert!(DRIVER.install(timer).is_err(), "installed once");

    let logs: [&'static Mutex<Vec<(u64, u64)>>; 2] =
        [leak(Mutex::default()), leak(Mutex::default())];
    let (periods, counts) = ([700u64, 1_900], [40u32, 15]);
    let mut tasks: Vec<Pin<Box<dyn Future<Output = ()>>>> = (0..2)
        .map(|i| Box::pin(periodic(clock, periods[i], counts[i], logs[i])) as _)
        .collect();
    let flags: Vec<Arc<Flag>> = (0..2)
        .map(|_| Arc::new(Flag(AtomicBool::new(true))))
        .collect();
    let polls: Vec<AtomicU32> = (0..2).map(|_| AtomicU32::new(0)).collect();
    let mut done = [false; 2];
    let mut interrupts = 0u32;
    while !done.iter().all(|d| *d) {
        for i in 0..2 {
            if !done[i] && flags[i].0.swap(false, SeqCst) {
                polls[i].fetch_add(1, SeqCst);
                let w = flags[i].clone().into();
                if tasks[i].as_mut().poll(&mut Context::from_waker(&w)) == Poll::Ready(()) {
                    done[i] = true;
                }
            }
        }
        if done.iter().all(|d| *d) || flags.iter().any(|f| f.0.load(SeqCst)) {
            continue;
        }
        // Both asleep: the "hardware" runs to the timer's next fire.
        let at = m
            .lapic_next_fire_ns(0)
            .expect("a task waits but no timer is armed");
        m.advance(at.saturating_sub(m.now_ns()));
        assert_eq!(m.lapic_take_interrupt(0), Some(0xEF));
        DRIVER.on_interrupt();
        interrupts += 1;
        assert!(interrupts < 1_000, "runaway");
    }
    for i in 0..2 {
        let log = logs[i].lock().unwrap();
        assert_eq!(log.len(), counts[i] as usize, "task {i}: wake count");
        for &(deadline, woke) in log.iter() {
            assert!(
                woke >= deadline,
                "task {i}: woke {} ns early",
                deadline - woke
            );
            assert!(
                woke - deadline < 20_000,
                "task {i}: {} ns late",
                woke - deadline
            );
        }
        // One poll to start, one per await: never woken before its time.
        assert_eq!(
            polls[i].load(SeqCst),
            counts[i] + 1,
            "task {i}: extra polls"
        );
    }
    let s = timer.stats();
    assert!(s.rearmed > 0, "the low rate's early fires were re-armed");
    assert_eq!(s.fired + s.rearmed + s.spurious, interrupts);
}
