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
    clock.set_unix_time(1_700_000_000_000_000_000).unwrap();
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

/// A Hyper-V guest on two CPUs whose warp test finds the TSCs out of step:
/// the kernel stops trusting the page's cross-CPU order (its reads go
/// through the clamp), so user programs, which read the raw page, must be
/// told to ask the kernel (they stayed on the page: 1 ms back across CPUs).
#[test]
fn an_out_of_step_warp_test_withdraws_the_hyperv_page_from_user_programs() {
    let m: &'static SimMachine = Box::leak(Box::new(
        SimMachine::hyperv_config().with_cpus(2, &[]).build(),
    ));
    let hv = m.alloc_hv_page();
    let page: &'static ClockPage = Box::leak(Box::new(ClockPage::new()));
    let layout = WindowLayout {
        pvclock_page: 0,
        pvclock_areas: 0,
        hyperv_page: 1,
    };
    let writer =
        ClockPageWriter::new(page, layout, &[], Some(hv.get()), TscRead::LfenceRdtsc).unwrap();
    let view = writer.view();
    let platform = Platform::new()
        .cpus(2)
        .tsc_sync(SyncStatus::Synchronized)
        .self_check(SelfCheck::new().rate_interval(Duration::from_millis(1)))
        .hyperv_tsc_page(hv)
        .hyperv_guest_os_id(clockhal::hyperv::DEFAULT_GUEST_OS_ID)
        .clock_page(writer);
    let clock = probe(m, platform).into_clock().unwrap();
    assert_eq!(clock.source_id(), SourceId::HypervPage);
    let read = || view.read_with(|| Hardware::rdtsc_ordered(&m));
    assert_eq!(read().unwrap().source, Source::HypervPage);
    let behind = m.config().tsc_hz / 1_000;
    m.set_tsc_offset(1, -(behind as i64));
    clock.set_tsc_sync(SyncStatus::Unsynchronized {
        worst_backward_ticks: behind,
    });
    assert_eq!(
        clock.source_id(),
        SourceId::HypervPage,
        "{}",
        clock.report()
    );
    assert_eq!(
        read().map(|r| r.source),
        Err(AskKernel::Page(AskReason::PerCpuOnly))
    );
}
