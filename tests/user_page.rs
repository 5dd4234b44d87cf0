//! The clock republishes the user clock page at every source change: a
//! user program reading the page (here: the reader on the simulated TSC)
//! follows the kernel clock, never reads below what the kernel returned,
//! and is told to ask the kernel while the source is a trapping device.
#![cfg(all(feature = "kvmclock", feature = "tsc", feature = "hpet"))]

use clockhal::tsc::SyncStatus;
use clockhal::x86::Hardware;
use clockhal::{probe, Duration, Platform, SelfCheck, SourceId};
use clockhal_sim::SimMachine;
use clockhal_user::abi::{ClockPage, WindowLayout};
use clockhal_user::{AskKernel, AskReason, ClockPageWriter, Source, TscRead, UserClock};

fn setup(m: &SimMachine) -> (clockhal::Clock<&SimMachine>, UserClock<'static>) {
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
    let platform = Platform::new()
        .tsc_sync(SyncStatus::SingleCpu)
        .self_check(SelfCheck::new().rate_interval(Duration::from_millis(1)))
        .hpet_region(m.hpet_region().unwrap())
        .pvclock_areas(areas)
        .clock_page(writer);
    let clock = probe(m, platform).into_clock().unwrap();
    (clock, view)
}

/// A user reading (on the simulated TSC) between two kernel readings.
fn user_between(
    m: &SimMachine,
    clock: &clockhal::Clock<&SimMachine>,
    view: &UserClock<'_>,
) -> Result<(u64, Source, u64, u64), AskKernel> {
    let before = clock.now().as_nanos();
    let r = view.read_with(|| Hardware::rdtsc_ordered(&m))?;
    let after = clock.now().as_nanos();
    Ok((r.clock_ns, r.source, before, after))
}

#[test]
fn the_page_follows_the_clock_through_every_switch() {
    let m = SimMachine::kvm();
    let (clock, view) = setup(&m);
    assert_eq!(clock.source_id(), SourceId::Kvmclock);

    // kvmclock, stable bit trusted: the page maps area 0.
    m.advance(1_000_000);
    let (ns, src, before, after) = user_between(&m, &clock, &view).unwrap();
    assert_eq!(src, Source::Pvclock);
    assert!(
        ns >= before && ns <= after + 1_000,
        "{before} <= {ns} <= {after}"
    );

    // A trapping device: user programs must ask the kernel.
    clock.force(SourceId::Hpet).unwrap();
    assert_eq!(
        view.read_with(|| Hardware::rdtsc_ordered(&&m)).unwrap_err(),
        AskKernel::Page(AskReason::NotUserReadable)
    );

    // The TSC (rate from pvclock, one CPU): the page maps it.
    clock.force(SourceId::Tsc).unwrap();
    m.advance(3_000_000);
    let (ns, src, before, after) = user_between(&m, &clock, &view).unwrap();
    assert_eq!(src, Source::Tsc);
    assert!(
        ns + 1_000 >= before && ns <= after + 1_000,
        "{before} <= {ns} <= {after}"
    );

    // Back to kvmclock: never below anything the kernel returned.
    let high = clock.now().as_nanos();
    clock.unforce();
    assert_eq!(clock.source_id(), SourceId::Kvmclock);
    let (ns, src, _, after) = user_between(&m, &clock, &view).unwrap();
    assert_eq!(src, Source::Pvclock);
    assert!(
        ns >= high && ns <= after + 1_000,
        "{high} <= {ns} <= {after}"
    );
}

#[test]
fn the_page_carries_the_wall_time() {
    let m = SimMachine::kvm();
    let (clock, view) = setup(&m);
    clock.set_unix_time(1_700_000_000_000_000_000);
    let unix = view
        .read_with(|| Hardware::rdtsc_ordered(&&m))
        .unwrap()
        .unix_ns;
    let kernel = clock.unix_time_ns().unwrap();
    let diff = unix.unwrap().abs_diff(kernel);
    assert!(diff < 10_000, "user {unix:?} vs kernel {kernel}");
}

/// A restore whose host clock ran on while the guest slept (kvmclock an
/// hour ahead): the kernel rebases, and so must the page. Reading the
/// replaced state at the resume's publication put the page's floor an hour
/// ahead: user time stood still, an hour ahead of the kernel's.
#[test]
fn after_a_resume_with_host_time_far_ahead_the_page_follows_the_kernel() {
    let m = SimMachine::kvm();
    let (clock, view) = setup(&m);
    assert_eq!(clock.source_id(), SourceId::Kvmclock);
    for _ in 0..4 {
        m.advance(250_000_000);
        clock.watchdog_tick();
    }
    m.with_kvm(|k, ctx| {
        k.set_system_time_skew(None, 3_600_000_000_000);
        k.update_all(ctx);
    });
    clock.resume().unwrap();
    let read = || {
        view.read_with(|| Hardware::rdtsc_ordered(&&m))
            .unwrap()
            .clock_ns
    };
    let (u0, k0) = (read(), clock.now().as_nanos());
    assert!(
        u0 <= k0 + 1_000,
        "the page leads the kernel by {} ns",
        u0 - k0
    );
    m.advance(100_000_000);
    let (u1, k1) = (read(), clock.now().as_nanos());
    assert!(u1 - u0 >= 99_000_000, "user time stood still: {u0} -> {u1}");
    assert!(
        u1 <= k1 + 1_000 && k1 - u1 < 1_000_000,
        "user {u1}, kernel {k1}"
    );
}
