//! The read path takes the watchdog lock too (issue 26 §2, a member of
//! the class of `interrupt_reentry.rs`): the jump check reads its anchor
//! and the TSC with it held, when a stopped anchor is asked whether it
//! still counts. An interrupt there that sets the wall time leaves the
//! user page's copy to the lock's holder; before, that holder (the read)
//! let go without publishing it, and on a kernel that never ticks the
//! page kept the old wall time for good (an hour off here).
#![cfg(all(feature = "tsc", feature = "hpet", feature = "acpi-pm"))]

mod adversarial;

use adversarial::{leak, ms, SimClock};
use clockhal::tsc::SyncStatus;
use clockhal::{Duration, Platform, SelfCheck, SourceId, WatchdogEvent};
use clockhal_sim::{HpetConfig, PmTimerConfig, SimConfig, SimMachine};
use clockhal_user::abi::{ClockPage, WindowLayout, FLAG_WALL_VALID};
use clockhal_user::{ClockPageWriter, TscRead};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const UNIX: u64 = 1_700_000_000_000_000_000;

#[test]
fn a_wall_time_set_by_an_interrupt_inside_the_jump_check_reaches_the_page() {
    let m = leak(SimMachine::new(
        SimConfig::cpu(2_000_000_000)
            .with_invariant_tsc(true)
            .with_hpet(HpetConfig::qemu())
            .with_pm_timer(PmTimerConfig::default()),
    ));
    let page: &'static ClockPage = Box::leak(Box::new(ClockPage::new()));
    let writer = ClockPageWriter::new(
        page,
        WindowLayout::CLOCK_PAGE_ONLY,
        &[],
        None,
        TscRead::LfenceRdtsc,
    )
    .unwrap();
    let pm = m.config().pm_timer.clone().unwrap();
    let p = Platform::new()
        .tsc_sync(SyncStatus::SingleCpu)
        .self_check(SelfCheck::new().rate_interval(Duration::from_millis(1)))
        .hpet_region(m.hpet_region().unwrap())
        .pm_timer(pm.port, pm.bits32)
        .clock_page(writer);
    let c: &'static SimClock = leak_clock(clockhal::probe(m, p).into_clock().unwrap());
    for _ in 0..8 {
        m.advance(ms(250));
        c.watchdog_tick();
    }
    assert_eq!(c.source_id(), SourceId::Tsc, "{}", c.report().table());
    c.set_unix_time(UNIX).unwrap();
    // The HPET (the jump check's anchor) stops; no ticks for 30 s.
    m.with_hpet(|h, ctx| h.set_stopped(ctx, true));
    m.advance(30_000 * ms(1));
    let fired = Arc::new(AtomicBool::new(false));
    let f = fired.clone();
    m.set_rdtsc_hook(move |_| {
        // An interrupt: only once, and only while the lock is held.
        if !f.load(Ordering::SeqCst) && c.watchdog_tick() == WatchdogEvent::Busy {
            f.store(true, Ordering::SeqCst);
            c.set_unix_time(UNIX + 3_600_000_000_000).unwrap();
        }
    });
    let _ = c.now();
    m.clear_rdtsc_hook();
    assert!(
        fired.load(Ordering::SeqCst),
        "no interrupt landed inside the lock"
    );
    // The kernel's reads go on (no tick: a kernel whose timer is off).
    for _ in 0..10 {
        m.advance(ms(1));
        let _ = c.now();
    }
    let offset = c.unix_time_ns().unwrap() - c.now().as_nanos();
    assert_ne!(page.flags.load(Ordering::SeqCst) & FLAG_WALL_VALID, 0);
    let boot_wall = page.boot_wall_ns.load(Ordering::SeqCst);
    assert!(
        boot_wall.abs_diff(offset) < ms(1),
        "the page's wall time is {boot_wall}, the clock's {offset}: {} s apart; \
         the interrupt's set_unix_time was never published",
        boot_wall.abs_diff(offset) / 1_000_000_000
    );
}

fn leak_clock(c: SimClock) -> &'static SimClock {
    Box::leak(Box::new(c))
}
