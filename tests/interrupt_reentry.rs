//! The interrupt-safe calls from an "interrupt" inside every call that
//! takes the watchdog lock (issue 26 §2): `set_unix_time` from an
//! interrupt that arrived inside `watchdog_tick` spun for ever on the lock
//! the interrupted tick held.
//!
//! The simulator's rdtsc hook plays the interrupt: it runs on the calling
//! thread right after every `rdtsc`, so inside whatever clockhal was doing
//! (with the lock held too: the tick reads its sources, a switch reads
//! the old and the new one). Each interrupt calls every interrupt-safe
//! call that touches the lock — `now`, `set_unix_time`, `unix_time_ns`,
//! `watchdog_tick`, `stamp_converter` — and the test asserts that the outer
//! call returns (a worker thread with a time limit: a regression fails
//! instead of hanging), that some interrupt did land while the lock was
//! held (its tick answered `Busy`), and that the interrupts' effects are in
//! force afterwards: the last wall time set is the clock's and the user
//! page's.
#![cfg(all(feature = "kvmclock", feature = "tsc", feature = "hpet"))]

mod adversarial;

use adversarial::{leak, ms, SimClock};
use clockhal::tsc::SyncStatus;
use clockhal::{SourceId, WatchdogEvent};
use clockhal_sim::SimMachine;
use clockhal_user::abi::{ClockPage, WindowLayout, FLAG_WALL_VALID};
use clockhal_user::{ClockPageWriter, TscRead};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration as RealDuration;

/// Far longer than any of these calls takes on a loaded machine; reached
/// only on a deadlock.
const HANG_LIMIT: RealDuration = RealDuration::from_secs(60);

/// Unix time the first interrupt sets (2023-11-14); each next one a
/// second later.
const UNIX_BASE: u64 = 1_700_000_000_000_000_000;

/// A clock on `m` that publishes a user page (so `set_unix_time` has a
/// publication to make), and the page.
fn clock_with_page(m: &'static SimMachine) -> (&'static SimClock, &'static ClockPage) {
    let sync = if m.cpu_count() == 1 {
        SyncStatus::SingleCpu
    } else {
        SyncStatus::Synchronized
    };
    let (p, mem) = adversarial::platform(m, m.cpu_count(), sync);
    let page: &'static ClockPage = Box::leak(Box::new(ClockPage::new()));
    let (areas, n) = match mem.areas {
        Some(a) => (a.get(), a.get().len() as u32),
        None => (&[][..], 0),
    };
    let layout = WindowLayout {
        pvclock_page: 1,
        pvclock_areas: n,
        hyperv_page: 0,
    };
    let writer = ClockPageWriter::new(page, layout, areas, None, TscRead::LfenceRdtsc).unwrap();
    let clock = clockhal::probe(m, p.clock_page(writer))
        .into_clock()
        .unwrap();
    (Box::leak(Box::new(clock)), page)
}

/// What the interrupts did.
#[derive(Default)]
struct Interrupts {
    /// Interrupts taken.
    taken: AtomicU64,
    /// Some interrupt's tick found the lock held.
    saw_busy: AtomicBool,
    /// The wall time the last interrupt set.
    last_unix: AtomicU64,
}

/// Runs `outer` on a worker thread with an interrupt after every `rdtsc`
/// on the machine; panics naming `what` if it does not return in time.
fn with_interrupts(
    what: &str,
    m: &'static SimMachine,
    c: &'static SimClock,
    outer: impl FnOnce(&'static SimClock) + Send + 'static,
) -> Arc<Interrupts> {
    let irq = Arc::new(Interrupts::default());
    let seen = irq.clone();
    m.set_rdtsc_hook(move |_| {
        let k = seen.taken.fetch_add(1, Ordering::SeqCst);
        let _ = c.now();
        let unix = UNIX_BASE + k * 1_000_000_000;
        c.set_unix_time(unix).unwrap();
        seen.last_unix.store(unix, Ordering::SeqCst);
        let u = c.unix_time_ns().expect("wall time set");
        assert!(u >= unix && u - unix < ms(1), "set {unix}, read {u}");
        let _ = c.stamp_converter();
        if c.watchdog_tick() == WatchdogEvent::Busy {
            seen.saw_busy.store(true, Ordering::SeqCst);
        }
    });
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        outer(c);
        let _ = done.send(());
    });
    let returned = finished.recv_timeout(HANG_LIMIT);
    m.clear_rdtsc_hook();
    match returned {
        Ok(()) => {}
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what} did not return in {HANG_LIMIT:?} with interrupts inside it: deadlock")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: the worker panicked"),
    }
    irq
}

/// The interrupts landed inside the lock, and the last wall time they set
/// is the clock's and the user page's.
fn assert_applied(what: &str, c: &SimClock, page: &ClockPage, irq: &Interrupts) {
    assert!(irq.taken.load(Ordering::SeqCst) > 0, "{what}: no interrupt");
    assert!(
        irq.saw_busy.load(Ordering::SeqCst),
        "{what}: no interrupt landed while the watchdog lock was held"
    );
    let unix = irq.last_unix.load(Ordering::SeqCst);
    let u = c.unix_time_ns().unwrap();
    assert!(
        u >= unix && u - unix < ms(100),
        "{what}: wall time {u}, the interrupt set {unix}"
    );
    // The page's wall time: the clock's offset (unix - now).
    assert_ne!(page.flags.load(Ordering::SeqCst) & FLAG_WALL_VALID, 0);
    assert_eq!(
        page.seq.load(Ordering::SeqCst) % 2,
        0,
        "{what}: page left open"
    );
    let boot_wall = page.boot_wall_ns.load(Ordering::SeqCst);
    let offset = c.unix_time_ns().unwrap() - c.now().as_nanos();
    assert!(
        boot_wall.abs_diff(offset) < ms(1),
        "{what}: the page's wall time is {boot_wall}, the clock's {offset}: the interrupt's \
         set_unix_time was not published"
    );
}

fn machines() -> [(&'static str, &'static SimMachine); 2] {
    [
        ("kvm", leak(SimMachine::kvm())),
        ("bare metal", leak(SimMachine::bare_metal())),
    ]
}

/// The other source a test forces (HPET on both machines).
const OTHER: SourceId = SourceId::Hpet;

#[test]
fn interrupts_inside_watchdog_tick() {
    for (name, m) in machines() {
        let (c, page) = clock_with_page(m);
        let what = format!("{name}: watchdog_tick");
        let irq = with_interrupts(&what, m, c, move |c| {
            m.advance(ms(250));
            let _ = c.watchdog_tick();
        });
        assert_applied(&what, c, page, &irq);
        // The clock still ticks and judges afterwards.
        m.advance(ms(250));
        assert_ne!(c.watchdog_tick(), WatchdogEvent::Busy, "{what}");
    }
}

#[test]
fn interrupts_inside_force_and_unforce() {
    for (name, m) in machines() {
        let (c, page) = clock_with_page(m);
        let start = c.source_id();
        let what = format!("{name}: force");
        let irq = with_interrupts(&what, m, c, move |c| {
            m.advance(ms(1));
            c.force(OTHER).unwrap();
        });
        assert_eq!(c.source_id(), OTHER, "{what}");
        assert_applied(&what, c, page, &irq);
        let what = format!("{name}: unforce");
        let irq = with_interrupts(&what, m, c, move |c| {
            m.advance(ms(1));
            c.unforce();
        });
        assert_eq!(c.source_id(), start, "{what}");
        assert_applied(&what, c, page, &irq);
    }
}

#[test]
fn interrupts_inside_resume() {
    for (name, m) in machines() {
        let (c, page) = clock_with_page(m);
        let what = format!("{name}: resume");
        let before = c.now();
        let irq = with_interrupts(&what, m, c, move |c| {
            m.advance(ms(1));
            let _ = c.resume();
        });
        assert!(c.now() >= before, "{what}");
        assert_applied(&what, c, page, &irq);
    }
}

#[test]
fn interrupts_inside_set_unix_time() {
    for (name, m) in machines() {
        let (c, page) = clock_with_page(m);
        let what = format!("{name}: set_unix_time");
        // The outer call's own wall time is overtaken by its interrupts'
        // (they run after it stored its offset, at its page publication).
        let irq = with_interrupts(&what, m, c, move |c| {
            m.advance(ms(1));
            c.set_unix_time(UNIX_BASE - 1_000_000_000).unwrap();
        });
        assert_applied(&what, c, page, &irq);
    }
}

#[test]
fn interrupts_inside_set_tsc_sync_and_register_this_cpu() {
    for (name, m) in machines() {
        let (c, page) = clock_with_page(m);
        let what = format!("{name}: set_tsc_sync");
        // The TSC out of step: selection runs again (a switch away from it
        // where it was current), the page is republished.
        let irq = with_interrupts(&what, m, c, move |c| {
            m.advance(ms(1));
            c.set_tsc_sync(SyncStatus::Unsynchronized {
                worst_backward_ticks: 1_000,
            });
        });
        assert_applied(&what, c, page, &irq);
        let what = format!("{name}: register_this_cpu");
        let irq = with_interrupts(&what, m, c, move |c| {
            m.advance(ms(1));
            let _ = c.register_this_cpu();
        });
        // Registering again changes nothing: no lock need be taken, nor a
        // TSC read (bare metal); what interrupts there were must hold.
        if irq.taken.load(Ordering::SeqCst) > 0 {
            irq.saw_busy.store(true, Ordering::SeqCst);
            assert_applied(&what, c, page, &irq);
        }
    }
}

/// Across CPUs: one CPU ticks without pause while another sets the wall
/// time again and again. A `set_unix_time` that finds the lock taken
/// leaves its publication to the ticking CPU; when both stop, the page
/// carries the last wall time set, with no further tick (a request lost
/// between the ticker's letting go and its look at the requests would
/// leave the page behind).
#[test]
fn a_wall_time_set_while_another_cpu_ticks_reaches_the_page() {
    let m = leak(SimMachine::kvm_config().with_cpus(2, &[]).build());
    let (c, page) = clock_with_page(m);
    for k in 0..4u64 {
        m.on_cpu(1, || c.register_this_cpu()).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let busy = Arc::new(AtomicU64::new(0));
        let ticker = {
            let (stop, busy) = (stop.clone(), busy.clone());
            std::thread::spawn(move || {
                m.set_cpu(0);
                while !stop.load(Ordering::SeqCst) {
                    m.advance(ms(1));
                    if c.watchdog_tick() == WatchdogEvent::Busy {
                        busy.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        };
        let (done, finished) = mpsc::channel();
        std::thread::spawn(move || {
            m.set_cpu(1);
            for i in 0..2_000u64 {
                c.set_unix_time(UNIX_BASE + (k * 10_000 + i) * 1_000_000_000)
                    .unwrap();
            }
            let _ = done.send(());
        });
        let returned = finished.recv_timeout(HANG_LIMIT);
        stop.store(true, Ordering::SeqCst);
        ticker.join().unwrap();
        returned.expect("set_unix_time while another CPU ticks: no return");
        let offset = c.unix_time_ns().unwrap() - c.now().as_nanos();
        let boot_wall = page.boot_wall_ns.load(Ordering::SeqCst);
        assert!(
            boot_wall.abs_diff(offset) < ms(1),
            "round {k}: the page's wall time is {boot_wall}, the clock's {offset}"
        );
    }
}
