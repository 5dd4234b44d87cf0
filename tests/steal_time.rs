//! KVM steal time through the facade: the clock's lifecycle registers and
//! unregisters it, reads are judged against `Clock::now`, hostile hosts
//! never reach the caller.
#![cfg(feature = "kvmclock")]

use clockhal::kvmclock::{StealError, StealState};
use clockhal::{Clock, Duration, Platform};
use clockhal_sim::{KvmConfig, SimMachine};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn state() -> &'static StealState {
    Box::leak(Box::new(StealState::new()))
}

fn machine(cpus: usize) -> &'static SimMachine {
    Box::leak(Box::new(
        SimMachine::kvm_config().with_cpus(cpus, &[]).build(),
    ))
}

fn clock(m: &'static SimMachine, cpus: usize) -> Clock<&'static SimMachine> {
    let platform = Platform::new()
        .pvclock_areas(m.alloc_pvclock_areas(cpus))
        .steal_time_areas(m.alloc_steal_areas(cpus), state())
        .cpus(cpus);
    clockhal::probe(m, platform).into_clock().unwrap()
}

fn registered(m: &SimMachine, cpu: usize) -> bool {
    m.with_kvm(|k, _| k.steal_registered(cpu))
        .unwrap()
        .is_some()
}

#[test]
fn lifecycle_follows_the_clock() {
    let m = machine(2);
    let c = clock(m, 2);
    assert!(registered(m, 0), "boot CPU registered at build");
    assert!(!registered(m, 1));
    assert_eq!(m.on_cpu(1, || c.steal_ns()), Err(StealError::Unregistered));
    m.on_cpu(1, || c.register_this_cpu()).unwrap();
    // The boot CPU may register again: no error, nothing changes.
    c.register_this_cpu().unwrap();
    assert!(registered(m, 1));
    m.with_kvm(|k, _| k.set_steal_permille(200));
    m.advance(100_000_000);
    let v = m.on_cpu(1, || c.steal_ns()).unwrap();
    assert!(
        v >= Duration::from_millis(19) && v <= Duration::from_millis(21),
        "{v:?}"
    );
    m.on_cpu(1, || c.unregister_this_cpu());
    assert!(!registered(m, 1), "turned off on unregister");
    c.resume().unwrap();
    m.on_cpu(1, || c.resume_this_cpu()).unwrap();
    assert!(registered(m, 1), "back on at resume_this_cpu");
    assert!(m.on_cpu(1, || c.steal_ns()).unwrap() >= v, "carried across");
    m.on_cpu(1, || c.unregister_this_cpu());
    drop(c);
    assert!(!registered(m, 0), "turned off on drop");
}

#[test]
fn unavailable_steal_time_says_why() {
    let m = SimMachine::kvm_config()
        .with_kvm(KvmConfig {
            steal_time: false,
            ..KvmConfig::default()
        })
        .build();
    let platform = Platform::new()
        .pvclock_areas(m.alloc_pvclock_areas(1))
        .steal_time_areas(m.alloc_steal_areas(1), state());
    let c = clockhal::probe(&m, platform).into_clock().unwrap();
    assert_eq!(c.steal_ns(), Err(StealError::NotOffered));
    assert_eq!(c.preempted(0), None);
    c.register_this_cpu().unwrap();
    drop(c);

    let m = SimMachine::kvm();
    let c = clockhal::probe(&m, Platform::new().pvclock_areas(m.alloc_pvclock_areas(1)))
        .into_clock()
        .unwrap();
    assert_eq!(c.steal_ns(), Err(StealError::NoMemory));
}

#[test]
fn a_hostile_host_never_reaches_the_caller() {
    const CPUS: usize = 3;
    let m = machine(CPUS);
    let c: &'static Clock<&'static SimMachine> = Box::leak(Box::new(clock(m, CPUS)));
    for cpu in 1..CPUS {
        m.on_cpu(cpu, || c.register_this_cpu()).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let go = Arc::new(std::sync::Barrier::new(CPUS + 1));
    let host = {
        let stop = stop.clone();
        let go = go.clone();
        std::thread::spawn(move || {
            go.wait();
            let base: Vec<u64> = (0..CPUS)
                .map(|c| m.with_kvm(|k, _| k.steal_counter(c)).unwrap())
                .collect();
            let mut honest = 0u64;
            for i in 0..1_200u64 {
                let cpu = (i % CPUS as u64) as usize;
                m.advance(200_000);
                honest += 50_000; // a quarter of the time stolen
                let h = base[cpu] + honest;
                // Phases of 40 writes each: honest, ahead of time, back,
                // stuck odd, honest at the end.
                m.with_kvm(|k, ctx| {
                    k.update_all(ctx);
                    match (i / 40) % 4 {
                        1 if i < 1_160 => k.publish_steal(ctx, cpu, h * 5),
                        2 if i < 1_160 => k.publish_steal(ctx, cpu, h / 3),
                        3 if i < 1_160 => k.stall_steal(ctx, cpu),
                        _ => k.publish_steal(ctx, cpu, h),
                    }
                });
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
            stop.store(true, Ordering::Relaxed);
        })
    };
    let readers: Vec<_> = (0..CPUS)
        .map(|cpu| {
            let stop = stop.clone();
            let go = go.clone();
            std::thread::spawn(move || {
                m.set_cpu(cpu);
                let start = c.now();
                let first = c.steal_ns().unwrap();
                go.wait();
                let mut last = first;
                let mut reads = 0u64;
                while !stop.load(Ordering::Relaxed) || reads < 1_000 {
                    reads += 1;
                    let v = c.steal_ns().unwrap();
                    let elapsed = c.now().duration_since(start);
                    assert!(v >= last, "cpu {cpu}: {v:?} < {last:?}");
                    assert!(
                        v - first <= elapsed,
                        "cpu {cpu}: {v:?} stolen in {elapsed:?}"
                    );
                    last = v;
                }
                last - first
            })
        })
        .collect();
    let stolen: Vec<Duration> = readers.into_iter().map(|r| r.join().unwrap()).collect();
    host.join().unwrap();
    assert!(
        stolen.iter().any(|d| d.as_nanos() > 0),
        "honest steal accepted: {stolen:?} {:?} now {:?} counters {:?}",
        c.steal_time().unwrap().stats(),
        c.now(),
        (0..CPUS)
            .map(|i| m.with_kvm(|k, _| k.steal_counter(i)).unwrap())
            .collect::<Vec<_>>()
    );
    let s = c.steal_time().unwrap().stats();
    assert!(s.refused() > 0, "{s:?}");
}

#[test]
fn steal_memory_overlapping_the_pvclock_areas_is_refused() {
    let m = SimMachine::kvm();
    let pv = m.alloc_pvclock_areas(4);
    let st = m.alloc_steal_areas(1);
    // The same physical memory announced for both protocols.
    let aliased = clockhal::x86::paravirt::PhysMapped::simulated(st.get(), pv.phys());
    let c = clockhal::probe(
        &m,
        Platform::new()
            .pvclock_areas(pv)
            .steal_time_areas(aliased, state()),
    )
    .into_clock()
    .unwrap();
    assert_eq!(c.steal_ns(), Err(StealError::MemoryShared));
}
