//! A user program never reads the clock page ahead of the kernel clock
//! while the kernel switches source (red-team round 8, rt8a #4).
//!
//! While a switch (or a resume's rebase) is set up, every kernel read on
//! every CPU holds at the clock's high-water mark. The page used to keep
//! its old, still advancing state until the switch's publication at the
//! very end, so a user program that read the page and then made a system
//! call got a kernel time up to the whole switch's duration *before* its
//! own reading (5 ms here, where the switching vCPU is descheduled for
//! 5 ms at each of its `rdtsc`s). The clock now opens the page's seqlock
//! before its readers start holding (user reads answer
//! `AskKernel::Busy` and go to the kernel) and closes it with the
//! publication; the kernel's hold covers what the page returned up to
//! the opening.
//!
//! The "host deschedules the switching vCPU" is an rdtsc hook of the
//! simulated machine: it advances the machine's time and runs the "user
//! program" (and its "system call", `c.now()`) on CPU 1.
#![cfg(all(feature = "kvmclock", feature = "tsc", feature = "hpet"))]

use clockhal::tsc::SyncStatus;
use clockhal::x86::Hardware;
use clockhal::{Clock, Duration, Platform, SelfCheck, SourceId};
use clockhal_sim::SimMachine;
use clockhal_user::abi::{ClockPage, WindowLayout};
use clockhal_user::{AskKernel, ClockPageWriter, TscRead, UserClock};
use std::sync::{Arc, Mutex};

type SimClock = Clock<&'static SimMachine>;
const MS: u64 = 1_000_000;
/// How far a user reading may lead a later kernel reading: the time two
/// reads take, with room.
const LEAD_NS: u64 = 1_000;

fn leak<T>(t: T) -> &'static T {
    Box::leak(Box::new(t))
}

/// kvm with 2 vCPUs, a clock page in Pvclock mode, 100 ms in.
fn setup() -> (&'static SimMachine, &'static SimClock, UserClock<'static>) {
    let m = leak(SimMachine::kvm_config().with_cpus(2, &[]).build());
    let areas = m.alloc_pvclock_areas(2);
    let page: &'static ClockPage = leak(ClockPage::new());
    let layout = WindowLayout {
        pvclock_page: 1,
        pvclock_areas: 2,
        hyperv_page: 0,
    };
    let writer =
        ClockPageWriter::new(page, layout, areas.get(), None, TscRead::LfenceRdtsc).unwrap();
    let view = writer.view();
    let p = Platform::new()
        .cpus(2)
        .tsc_sync(SyncStatus::Synchronized)
        .self_check(SelfCheck::new().rate_interval(Duration::from_millis(1)))
        .hpet_region(m.hpet_region().unwrap())
        .pvclock_areas(areas)
        .clock_page(writer);
    let c: &'static SimClock = leak(clockhal::probe(m, p).into_clock().unwrap());
    m.on_cpu(1, || c.register_this_cpu()).unwrap();
    assert_eq!(c.source_id(), SourceId::Kvmclock);
    m.advance(100 * MS);
    let _ = c.now();
    assert!(view.read_with(|| Hardware::rdtsc_ordered(&m)).is_ok());
    (m, c, view)
}

/// The user program on CPU 1: one page reading (`None`: it must ask the
/// kernel).
fn user(m: &SimMachine, view: &UserClock<'_>) -> Option<u64> {
    m.on_cpu(1, || match view.read_with(|| Hardware::rdtsc_ordered(&m)) {
        Ok(r) => Some(r.clock_ns),
        Err(AskKernel::Busy) => None,
        Err(e) => panic!("the page should say busy or answer, not {e:?}"),
    })
}

/// The red team's case: at every `rdtsc` of the switch the vCPU is
/// descheduled 5 ms, and a user program on CPU 1 reads the page and then
/// asks the kernel.
#[test]
fn a_user_reading_then_the_kernels_during_a_switch_is_not_5ms_back() {
    let (m, c, view) = setup();
    let log: Arc<Mutex<Vec<(u32, u64, u64)>>> = Arc::default();
    let (log2, mut calls) = (log.clone(), 0u32);
    m.set_rdtsc_hook(move |m| {
        calls += 1;
        m.advance(5 * MS); // the switching vCPU is descheduled
        let u = user(m, &view);
        let k = m.on_cpu(1, || c.now().as_nanos());
        if let Some(u) = u {
            log2.lock().unwrap().push((calls, u, k));
        }
    });
    c.force(SourceId::Tsc).unwrap();
    m.clear_rdtsc_hook();
    assert_eq!(c.source_id(), SourceId::Tsc);
    for &(call, u, k) in log.lock().unwrap().iter() {
        assert!(
            u <= k + LEAD_NS,
            "rdtsc #{call} of the switch: user read {u}, then the kernel {k}: {} ns back",
            u - k
        );
    }
    // After the switch, the page answers again, in step with the kernel.
    let u = user(m, &view).expect("published");
    let k = m.on_cpu(1, || c.now().as_nanos());
    assert!(u <= k + LEAD_NS, "after the switch: user {u}, kernel {k}");
}

/// The vCPU is descheduled 5 ms right after the switch's first reading
/// (the old source's, to continue from), a user program reads the page,
/// and no kernel read follows until the switch has begun (from the third
/// `rdtsc` of the switch on: the first two are that reading and the
/// reading of the page's replaced state): every kernel reading from then
/// on is still at or above what the user program read.
#[test]
fn the_kernels_hold_during_a_switch_covers_what_the_page_returned() {
    let (m, c, view) = setup();
    let user_max: Arc<Mutex<u64>> = Arc::default();
    let bad: Arc<Mutex<Vec<(u32, u64, u64)>>> = Arc::default();
    let (user_max2, bad2, mut calls) = (user_max.clone(), bad.clone(), 0u32);
    m.set_rdtsc_hook(move |m| {
        calls += 1;
        if calls == 1 {
            m.advance(5 * MS);
            if let Some(u) = user(m, &view) {
                let mut x = user_max2.lock().unwrap();
                *x = (*x).max(u);
            }
        } else if calls >= 3 {
            let u = *user_max2.lock().unwrap();
            let k = m.on_cpu(1, || c.now().as_nanos());
            if u > k + LEAD_NS {
                bad2.lock().unwrap().push((calls, u, k));
            }
        }
    });
    c.force(SourceId::Tsc).unwrap();
    m.clear_rdtsc_hook();
    assert!(*user_max.lock().unwrap() > 100 * MS, "the user read");
    let bad = bad.lock().unwrap();
    assert!(
        bad.is_empty(),
        "(rdtsc #, user read, later kernel read): {bad:?}"
    );
    let u = user(m, &view).expect("published");
    let k = m.on_cpu(1, || c.now().as_nanos());
    assert!(u <= k + LEAD_NS, "after the switch: user {u}, kernel {k}");
}

/// A switch leaves the page closed (even, answering) whatever happens to
/// it, including a resume's rebase and switches back and forth.
#[test]
fn no_switch_leaves_the_page_busy() {
    let (m, c, view) = setup();
    for id in [
        SourceId::Tsc,
        SourceId::Hpet,
        SourceId::Kvmclock,
        SourceId::Tsc,
    ] {
        c.force(id).unwrap();
        m.advance(MS);
        let r = m.on_cpu(1, || view.read_with(|| Hardware::rdtsc_ordered(&m)));
        assert_ne!(r.err(), Some(AskKernel::Busy), "after force({id:?})");
    }
    c.resume().unwrap();
    m.advance(MS);
    let r = m.on_cpu(1, || view.read_with(|| Hardware::rdtsc_ordered(&m)));
    assert_ne!(r.err(), Some(AskKernel::Busy), "after resume");
    let u = r.unwrap().clock_ns;
    let k = m.on_cpu(1, || c.now().as_nanos());
    assert!(u <= k + LEAD_NS, "after resume: user {u}, kernel {k}");
}
