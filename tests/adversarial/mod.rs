//! Shared by the adversarial facade tests (`tests/adversarial_*.rs`):
//! what a kernel author passes to `clockhal::probe` on a simulated
//! machine, and reader threads that check `Clock`'s documented guarantees
//! while the test's main thread plays a hostile host.
//!
//! Time is the simulator's: readers and faults move it, real time only
//! bounds how long the main thread waits for readers to make progress.
#![allow(dead_code)] // each test file uses a part

use clockhal::tsc::SyncStatus;
use clockhal::x86::paravirt::{HvReferenceTscPage, PhysMapped, PvclockVcpuTimeInfo};
use clockhal::x86::Hardware;
use clockhal::{Clock, Duration, Platform, SelfCheck, WatchdogEvent};
use clockhal_sim::SimMachine;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant as RealInstant;

/// The clock a kernel keeps in a static, on the simulated machine.
pub type SimClock = Clock<&'static SimMachine>;

/// A machine that lives as long as the test process (clocks keep `&'static`).
pub fn leak(m: SimMachine) -> &'static SimMachine {
    Box::leak(Box::new(m))
}

/// The guest memory a kernel hands to clockhal, kept so the test can play
/// the host (or leave stale bytes) in it.
#[derive(Clone, Copy)]
pub struct Memory {
    pub areas: Option<PhysMapped<[PvclockVcpuTimeInfo]>>,
    pub hv_page: Option<PhysMapped<HvReferenceTscPage>>,
}

/// Everything a kernel with `cpus` CPUs passes on `m`: the devices the
/// machine has, one pvclock area per CPU, a Hyper-V page, and a quick
/// probe-time rate check. `sync` is the OS's warp-test result.
pub fn platform(
    m: &'static SimMachine,
    cpus: usize,
    sync: SyncStatus,
) -> (Platform<'static>, Memory) {
    let mut p = Platform::new()
        .cpus(cpus)
        .tsc_sync(sync)
        .self_check(SelfCheck::new().rate_interval(Duration::from_millis(1)));
    if let Some(r) = m.hpet_region() {
        p = p.hpet_region(r);
    }
    if let Some(pm) = &m.config().pm_timer {
        p = p.pm_timer(pm.port, pm.bits32);
    }
    let mut mem = Memory {
        areas: None,
        hv_page: None,
    };
    if m.config().kvm.is_some() {
        let areas = m.alloc_pvclock_areas(cpus.max(m.cpu_count()));
        mem.areas = Some(areas);
        p = p
            .pvclock_areas(areas)
            .pvclock_wall_clock(m.alloc_wall_clock());
    }
    if m.config().hyperv.is_some() {
        let page = m.alloc_hv_page();
        mem.hv_page = Some(page);
        p = p
            .hyperv_tsc_page(page)
            .hyperv_guest_os_id(clockhal::hyperv::DEFAULT_GUEST_OS_ID);
    }
    (p, mem)
}

/// Probes a one-CPU kernel on `m` and builds its clock.
pub fn clock(m: &'static SimMachine) -> (SimClock, Memory) {
    clock_with(m, |p| p)
}

/// As [`clock`], with the platform adjusted by `f`.
pub fn clock_with(
    m: &'static SimMachine,
    f: impl FnOnce(Platform<'static>) -> Platform<'static>,
) -> (SimClock, Memory) {
    let cpus = m.cpu_count();
    let sync = if cpus == 1 {
        SyncStatus::SingleCpu
    } else {
        SyncStatus::Unknown
    };
    let (p, mem) = platform(m, cpus, sync);
    let probed = clockhal::probe(m, f(p));
    let report = *probed.report();
    let clock = probed
        .into_clock()
        .unwrap_or_else(|e| panic!("no clock: {e}\n{}", report.table()));
    (clock, mem)
}

/// The longest a test waits (real time) for reader threads to progress:
/// generous for a loaded 2-core machine, and only ever reached on a hang.
pub const REAL_WAIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Which cross-CPU guarantee the readers check right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrossCpu {
    /// None (only per-CPU monotonicity): a source ordered by a host promise
    /// that the test breaks before clockhal can see it.
    Unchecked,
    /// A reading that starts after another CPU's reading finished is not
    /// earlier than it by more than this many ns.
    Within(u64),
}

/// The readers' shared state.
pub struct Readers {
    stop: AtomicBool,
    /// Reads done, per reader.
    reads: Vec<AtomicU64>,
    /// The largest instant any reader has finished reading.
    finished_max: AtomicU64,
    /// 0: unchecked; else tolerance + 1.
    cross_cpu: AtomicU64,
    /// Largest allowed `now()` minus machine time since the clock's zero;
    /// `u64::MAX`: unchecked.
    future_slack: AtomicU64,
    /// Machine ns at the clock's instant 0.
    origin_ns: u64,
    /// The first violation seen.
    failure: Mutex<Option<String>>,
    failed: AtomicBool,
}

impl Readers {
    /// Readers for `clock` on `m`, one per entry of `cpus`.
    fn new(clock: &SimClock, m: &SimMachine, readers: usize) -> Readers {
        let origin_ns = m.now_ns().saturating_sub(clock.now().as_nanos());
        Readers {
            stop: AtomicBool::new(false),
            reads: (0..readers).map(|_| AtomicU64::new(0)).collect(),
            finished_max: AtomicU64::new(0),
            cross_cpu: AtomicU64::new(0),
            future_slack: AtomicU64::new(1_000_000_000),
            origin_ns,
            failure: Mutex::new(None),
            failed: AtomicBool::new(false),
        }
    }

    /// Sets the cross-CPU check from now on.
    pub fn cross_cpu(&self, c: CrossCpu) {
        let v = match c {
            CrossCpu::Unchecked => 0,
            CrossCpu::Within(ns) => ns.saturating_add(1),
        };
        self.cross_cpu.store(v, Ordering::SeqCst);
    }

    /// How far ahead of the machine's true elapsed time a reading may be
    /// (default 1 s: far below the years a garbage update claims);
    /// `None`: unchecked (the host legitimately moved time forward).
    pub fn future_slack(&self, ns: Option<u64>) {
        self.future_slack
            .store(ns.unwrap_or(u64::MAX), Ordering::SeqCst);
    }

    fn fail(&self, why: String) {
        let mut f = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        if f.is_none() {
            *f = Some(why);
        }
        self.failed.store(true, Ordering::SeqCst);
    }

    /// Panics with the first violation, if any.
    pub fn check(&self) {
        if let Some(why) = self
            .failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            panic!("reader saw: {why}");
        }
    }

    /// Total reads so far.
    pub fn total(&self) -> u64 {
        self.reads.iter().map(|r| r.load(Ordering::SeqCst)).sum()
    }

    /// Waits until every reader did at least `n` more reads (bounded by
    /// [`REAL_WAIT_LIMIT`]; panics on a violation or a hang).
    pub fn wait(&self, n: u64) {
        let start: Vec<u64> = self
            .reads
            .iter()
            .map(|r| r.load(Ordering::SeqCst))
            .collect();
        let t0 = RealInstant::now();
        loop {
            self.check();
            let done = self
                .reads
                .iter()
                .zip(&start)
                .all(|(r, s)| r.load(Ordering::SeqCst) >= s + n);
            if done {
                return;
            }
            assert!(
                t0.elapsed() < REAL_WAIT_LIMIT,
                "readers made no progress for {REAL_WAIT_LIMIT:?} (a read hangs?)"
            );
            std::thread::yield_now();
        }
    }

    /// The largest instant any reader finished reading.
    pub fn max_seen(&self) -> u64 {
        self.finished_max.load(Ordering::SeqCst)
    }

    fn run(&self, i: usize, clock: &SimClock, m: &SimMachine) {
        let mut last = 0u64;
        while !self.stop.load(Ordering::SeqCst) && !self.failed.load(Ordering::SeqCst) {
            let before = self.finished_max.load(Ordering::SeqCst);
            let t = clock.now().as_nanos();
            let cpu = m.cpu_index();
            if t < last {
                self.fail(format!(
                    "cpu {cpu}: now() went back {} ns ({last} -> {t})",
                    last - t
                ));
            }
            let tol = self.cross_cpu.load(Ordering::SeqCst);
            if tol != 0 && t.saturating_add(tol - 1) < before {
                self.fail(format!(
                    "cpu {cpu}: {t} is {} ns before an instant another CPU finished reading ({before})",
                    before - t
                ));
            }
            let slack = self.future_slack.load(Ordering::SeqCst);
            let truth = m.now_ns().saturating_sub(self.origin_ns);
            if slack != u64::MAX && t > truth.saturating_add(slack) {
                self.fail(format!(
                    "cpu {cpu}: {t} ns is {} ns ahead of the true elapsed {truth} ns",
                    t - truth
                ));
            }
            last = t;
            self.finished_max.fetch_max(t, Ordering::SeqCst);
            self.reads[i].fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Runs one reader thread per entry of `cpus` (each on that simulated CPU,
/// registered there first when `register`) while `body` plays the host,
/// then stops them and reports the first violation. Every reader checks
/// per-CPU monotonicity always, the cross-CPU rule and the future bound as
/// `body` sets them.
pub fn race<R>(
    clock: &SimClock,
    m: &'static SimMachine,
    cpus: &[usize],
    register: bool,
    body: impl FnOnce(&Readers) -> R,
) -> R {
    let readers = Readers::new(clock, m, cpus.len());
    let r = std::thread::scope(|s| {
        for (i, &cpu) in cpus.iter().enumerate() {
            let readers = &readers;
            s.spawn(move || {
                m.set_cpu(cpu);
                if register && cpu != 0 {
                    if let Err(e) = clock.register_this_cpu() {
                        readers.fail(format!("register_this_cpu on cpu {cpu}: {e}"));
                    }
                }
                readers.run(i, clock, m);
            });
        }
        // Stop the readers whatever `body` does, so a failing assertion
        // in it cannot leave the scope waiting for ever.
        struct StopOnDrop<'a>(&'a AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let _stop = StopOnDrop(&readers.stop);
        readers.wait(1);
        body(&readers)
    });
    readers.check();
    r
}

/// `n` watchdog periods of 250 ms, each after every reader did `reads`
/// more reads; the events.
pub fn ticks(
    c: &SimClock,
    m: &SimMachine,
    readers: &Readers,
    n: usize,
    reads: u64,
) -> Vec<WatchdogEvent> {
    (0..n)
        .map(|_| {
            readers.wait(reads);
            m.advance(ms(250));
            c.watchdog_tick()
        })
        .collect()
}

/// The bad events ([`bad`]) of `n` watchdog ticks `period_ns` apart,
/// without reader threads.
pub fn bad_ticks(c: &SimClock, m: &SimMachine, n: usize, period_ns: u64) -> Vec<WatchdogEvent> {
    (0..n)
        .filter_map(|_| {
            m.advance(period_ns);
            Some(c.watchdog_tick()).filter(bad)
        })
        .collect()
}

/// `d` of simulated time.
/// A tick that moved the clock off its source (a demotion or a switch).
pub fn bad(e: &WatchdogEvent) -> bool {
    matches!(
        e,
        WatchdogEvent::Switched { .. } | WatchdogEvent::Demoted { .. }
    )
}

pub fn ms(n: u64) -> u64 {
    n * 1_000_000
}

/// Whether `got` is within `tol` of `want` (both ns).
pub fn near(got: u64, want: u64, tol: u64) -> bool {
    got.abs_diff(want) <= tol
}
