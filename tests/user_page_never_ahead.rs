//! Principle (issue 26 §3): user time never runs ahead of what the
//! kernel's `Clock` returns, whatever the page frame held before the writer
//! took it and whatever the kernel rejected. Tested from outside: the
//! public API on the simulated machine, with a garbage frame, forced
//! switches through every source (including ones the page cannot map),
//! and several threads reading the page and then the kernel clock.
#![cfg(all(feature = "kvmclock", feature = "tsc", feature = "hpet"))]

use clockhal::tsc::SyncStatus;
use clockhal::x86::Hardware;
use clockhal::{Clock, Duration, Platform, SelfCheck, SourceId};
use clockhal_sim::SimMachine;
use clockhal_user::abi::{ClockPage, WindowLayout, MODE_PVCLOCK, MODE_TSC};
use clockhal_user::{ClockPageWriter, TscRead, UserClock};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};

type SimClock = Clock<&'static SimMachine>;

fn leak<T>(t: T) -> &'static T {
    Box::leak(Box::new(t))
}

/// What a reused frame may hold: a previous boot's page far ahead (a
/// floor, a TSC line, a pvclock offset), an odd or even sequence, and a
/// wall clock.
fn garbage(p: &ClockPage, seq: u32, mode: u32, fill: u64) {
    p.seq.store(seq, Relaxed);
    p.mode.store(mode, Relaxed);
    p.arg.store(0, Relaxed);
    p.floor_ns.store(fill, Relaxed);
    p.tsc_mul.store(fill, Relaxed);
    p.tsc_add_lo.store(fill, Relaxed);
    p.tsc_add_hi.store(fill >> 2, Relaxed);
    p.pv_offset_ns.store(fill, Relaxed);
    p.boot_wall_ns.store(fill, Relaxed);
    p.flags.store(1, Relaxed);
}

fn setup(
    seq: u32,
    mode: u32,
    fill: u64,
) -> (&'static SimMachine, &'static SimClock, UserClock<'static>) {
    let m = leak(SimMachine::kvm());
    let areas = m.alloc_pvclock_areas(1);
    let page: &'static ClockPage = leak(ClockPage::new());
    garbage(page, seq, mode, fill);
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
    let c: &'static SimClock = leak(clockhal::probe(m, p).into_clock().unwrap());
    (m, c, view)
}

/// A user reading and then a kernel reading: the user's is not above it.
/// Returns whether the page answered.
fn check_once(m: &SimMachine, c: &SimClock, view: &UserClock<'_>, worst: &AtomicU64) -> bool {
    let Ok(r) = view.read_with(|| Hardware::rdtsc_ordered(&m)) else {
        return false; // asks the kernel: nothing to be ahead of
    };
    let k = c.now().as_nanos();
    assert!(
        r.clock_ns <= k,
        "user {} ahead of the kernel's later {k} by {} ns ({:?}, kernel on {:?})",
        r.clock_ns,
        r.clock_ns - k,
        r.source,
        c.source_id()
    );
    worst.fetch_max(k - r.clock_ns, Relaxed);
    if let Some(unix) = r.unix_ns {
        // Wall time comes from the kernel's offset, never the frame's.
        assert!(unix < 1 << 62, "a garbage wall clock survived: {unix}");
    }
    true
}

#[test]
fn a_garbage_frame_never_puts_user_time_ahead_of_the_kernel() {
    for (seq, mode, fill) in [
        (0, MODE_TSC, u64::MAX / 3),
        (7, MODE_TSC, 1 << 62),
        (2, MODE_PVCLOCK, 1 << 61),
        (u32::MAX, MODE_PVCLOCK, 5_000_000_000_000),
    ] {
        let (m, c, view) = setup(seq, mode, fill);
        let worst = AtomicU64::new(0);
        for _ in 0..50 {
            m.advance(100_000);
            check_once(m, c, &view, &worst);
        }
        // Through every source, the ones the page cannot map included.
        for id in [
            SourceId::Hpet,
            SourceId::Tsc,
            SourceId::Kvmclock,
            SourceId::Tsc,
        ] {
            if c.force(id).is_ok() {
                for _ in 0..20 {
                    m.advance(250_000);
                    check_once(m, c, &view, &worst);
                }
            }
        }
        assert!(
            view.read_with(|| Hardware::rdtsc_ordered(&m)).is_ok(),
            "seq {seq:#x}: the page never came back to a user-readable state"
        );
    }
}

#[test]
fn several_threads_never_read_ahead_across_forced_switches() {
    let (m, c, view) = setup(0x33, MODE_TSC, u64::MAX / 5);
    let stop = AtomicBool::new(false);
    let worst = AtomicU64::new(0);
    let answered = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                while !stop.load(Relaxed) {
                    if check_once(m, c, &view, &worst) {
                        answered.fetch_add(1, Relaxed);
                    }
                }
            });
        }
        s.spawn(|| {
            while !stop.load(Relaxed) {
                m.advance(10_000);
                std::thread::yield_now();
            }
        });
        let ids = [SourceId::Tsc, SourceId::Hpet, SourceId::Kvmclock];
        for i in 0..60 {
            let _ = c.force(ids[i % 3]);
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        stop.store(true, Relaxed);
    });
    // The frame's odd sequence did not keep user programs in the kernel.
    assert!(
        answered.load(Relaxed) > 0,
        "the page never answered a user read"
    );
}

/// A host update the kernel rejects (kvmclock's `system_time` 10 s ahead,
/// stable flag kept) must not reach user programs ahead of the kernel
/// either: the page maps the raw area, which the kernel's read path checks
/// and user code cannot.
#[test]
fn a_host_update_the_kernel_rejects_never_puts_user_time_ahead() {
    let (m, c, view) = setup(0, 0, 0);
    assert_eq!(c.source_id(), SourceId::Kvmclock);
    let worst = AtomicU64::new(0);
    m.advance(1_000_000);
    assert!(check_once(m, c, &view, &worst), "the page maps kvmclock");
    m.with_kvm(|k, ctx| {
        let t = k.next_update(ctx, 0);
        k.publish(
            ctx,
            0,
            clockhal_sim::PvclockUpdate {
                system_time: t.system_time + 10_000_000_000,
                ..t
            },
        );
    });
    for _ in 0..20 {
        m.advance(1_000_000);
        // The kernel's read first: it sees (and rejects) the jump.
        let _ = c.now();
        check_once(m, c, &view, &worst);
    }
}
