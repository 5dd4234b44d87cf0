//! A counter that restarts below the clock's start, read through the
//! user clock page before the kernel republishes (issue 26 §3: a user
//! program trusts the page, not the host): a TSC restarted from 0 (an S3
//! the OS did not announce, or the window between the firmware's resume
//! and the OS's `Clock::resume`), a kvmclock whose host restarted its
//! count. The kernel's reads hold there (`STUCK_READS`); the page's
//! arithmetic wrapped past zero instead, and user programs read ~584
//! years of uptime, ahead of every later kernel reading (a `ClockReader`
//! stayed there for good). "A user reading is not ahead of a kernel
//! reading taken after it" (src/clock/user_page.rs).
#![cfg(all(feature = "tsc", feature = "hpet"))]

use clockhal::tsc::SyncStatus;
use clockhal::x86::Hardware;
use clockhal::{Clock, Duration, Platform, SelfCheck, SourceId};
use clockhal_sim::SimMachine;
use clockhal_user::abi::{ClockPage, WindowLayout};
use clockhal_user::{ClockPageWriter, ClockReader, TscRead, UserClock};

fn setup(m: &'static SimMachine) -> (Clock<&'static SimMachine>, UserClock<'static>) {
    let page: &'static ClockPage = Box::leak(Box::new(ClockPage::new()));
    let writer = ClockPageWriter::new(
        page,
        WindowLayout::CLOCK_PAGE_ONLY,
        &[],
        None,
        TscRead::LfenceRdtsc,
    )
    .unwrap();
    let view = writer.view();
    let p = Platform::new()
        .tsc_sync(SyncStatus::SingleCpu)
        .self_check(SelfCheck::new().rate_interval(Duration::from_millis(1)))
        .hpet_region(m.hpet_region().unwrap())
        .clock_page(writer);
    (clockhal::probe(m, p).into_clock().unwrap(), view)
}

#[test]
fn a_tsc_restarted_below_the_clocks_start_puts_no_user_reading_ahead_of_the_kernel() {
    let m: &'static SimMachine = Box::leak(Box::new(SimMachine::bare_metal()));
    // The machine ran 10 s before the kernel built its clock.
    m.advance(10_000_000_000);
    let (c, view) = setup(m);
    assert_eq!(c.source_id(), SourceId::Tsc);
    m.advance(1_000_000);
    let u = view
        .read_with(|| Hardware::rdtsc_ordered(&m))
        .unwrap()
        .clock_ns;
    assert!(u <= c.now().as_nanos());
    // The TSC restarts from 0 (S3 on bare metal resets it).
    let tsc = m.tsc_of(0);
    m.step_tsc(None, -(tsc as i64));
    m.advance(1_000_000);
    let u = view.read_with(|| Hardware::rdtsc_ordered(&m));
    let k = c.now().as_nanos();
    if let Ok(r) = u {
        assert!(
            r.clock_ns <= k,
            "user reading {} ns ({} years of uptime) is {} ns ahead of the kernel's later {k} ns",
            r.clock_ns,
            r.clock_ns / 31_557_600_000_000_000,
            r.clock_ns - k
        );
    }
}

#[test]
fn a_clock_reader_that_read_in_the_window_before_resume_follows_the_kernel_after_it() {
    let m: &'static SimMachine = Box::leak(Box::new(SimMachine::bare_metal()));
    m.advance(10_000_000_000);
    let (c, view) = setup(m);
    // `ClockReader::now` reads the real TSC: its fold of the page's
    // readings on the simulated one is `observe`.
    let mut reader = ClockReader::new(view);
    let read = |reader: &mut ClockReader<'_>| {
        let r = view.read_with(|| Hardware::rdtsc_ordered(&m)).unwrap();
        reader.observe(r.clock_ns)
    };
    m.advance(1_000_000);
    read(&mut reader);
    let tsc = m.tsc_of(0);
    m.step_tsc(None, -(tsc as i64));
    m.advance(1_000_000);
    // A user program reads between the restart and the OS's resume.
    read(&mut reader);
    c.resume().unwrap();
    m.advance(1_000_000);
    let k = c.now().as_nanos();
    let ns = read(&mut reader);
    assert!(
        ns <= k + 1_000_000,
        "ClockReader at {ns} ns after resume, the kernel at {k} ns: it never returns"
    );
}

/// The same on kvmclock: a restored host whose kvmclock restarted below
/// the clock's start (a new host process: `system_time` counts from its
/// start), read by user programs before the OS's `resume`.
#[cfg(feature = "kvmclock")]
#[test]
fn a_kvmclock_restarted_below_the_clocks_start_puts_no_user_reading_ahead_of_the_kernel() {
    let m: &'static SimMachine = Box::leak(Box::new(SimMachine::kvm()));
    m.advance(10_000_000_000);
    let areas = m.alloc_pvclock_areas(1);
    let page: &'static ClockPage = Box::leak(Box::new(ClockPage::new()));
    let layout = WindowLayout {
        pvclock_page: 1,
        pvclock_areas: 1,
        hyperv_page: 0,
    };
    let writer =
        ClockPageWriter::new(page, layout, areas.get(), None, TscRead::LfenceRdtsc).unwrap();
    let view = writer.view();
    let p = Platform::new()
        .tsc_sync(SyncStatus::SingleCpu)
        .self_check(SelfCheck::new().rate_interval(Duration::from_millis(1)))
        .hpet_region(m.hpet_region().unwrap())
        .pvclock_areas(areas)
        .clock_page(writer);
    let c = clockhal::probe(m, p).into_clock().unwrap();
    assert_eq!(c.source_id(), SourceId::Kvmclock);
    m.advance(1_000_000);
    let u = view
        .read_with(|| Hardware::rdtsc_ordered(&m))
        .unwrap()
        .clock_ns;
    assert!(u <= c.now().as_nanos());
    // The restored host's kvmclock counts from its own start: 9 s lower.
    m.with_kvm(|k, ctx| {
        k.set_system_time_skew(None, -9_000_000_000);
        k.update_all(ctx);
    });
    m.advance(1_000_000);
    // The kernel reads first (and holds, or switches away), many times.
    for _ in 0..20_000 {
        let _ = c.now();
    }
    let u = view.read_with(|| Hardware::rdtsc_ordered(&m));
    let k = c.now().as_nanos();
    if let Ok(r) = u {
        assert!(
            r.clock_ns <= k,
            "kernel on {:?} after 20,000 reads: user reading {} ns is {} ns ahead of the kernel's later {k} ns",
            c.source_id(),
            r.clock_ns,
            r.clock_ns - k
        );
    }
}

#[test]
fn publications_across_a_tsc_restart_and_resume_leave_the_page_right() {
    // The kernel republishes while the TSC is below the line's start
    // (its ticks, the switch away from the TSC), each publication raising
    // the floor to the replaced state's reading now; then the OS resumes
    // and the TSC is on the page again. No wrapped reading may have
    // reached the floor, or every user reading from then on is in 2554.
    let m: &'static SimMachine = Box::leak(Box::new(SimMachine::bare_metal()));
    m.advance(10_000_000_000);
    let (c, view) = setup(m);
    m.advance(1_000_000);
    let tsc = m.tsc_of(0);
    m.step_tsc(None, -(tsc as i64));
    for _ in 0..12 {
        m.advance(250_000_000);
        let _ = c.watchdog_tick();
        let _ = c.now();
    }
    c.resume().unwrap();
    // (The TSC held over the restart, was demoted as stopped and is not
    // re-admitted by itself: the OS, knowing why, forces it back.)
    c.force(SourceId::Tsc).unwrap();
    m.advance(1_000_000);
    let r = view
        .read_with(|| Hardware::rdtsc_ordered(&m))
        .expect("the TSC is on the page again");
    let k = c.now().as_nanos();
    assert!(
        r.clock_ns <= k,
        "user reading {} ns is {} ns ahead of the kernel's later {k} ns",
        r.clock_ns,
        r.clock_ns - k
    );
}
