#![allow(dead_code)]
//! Fake sources on deterministic simulated time, for the suite's own
//! verdicts: every read or wait advances one shared nanosecond clock, and
//! each fake maps that time to ticks (correctly, or as a test breaks it).
use clockhal_conformance::Cpus;
use clockhal_core::{ClockSource, Frequency, Quality, ReadCost, Stability};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::Duration;

pub struct Sim {
    pub now: AtomicU64,
}
impl Sim {
    pub fn new() -> Sim {
        Sim {
            now: AtomicU64::new(1_000_000_000),
        }
    }
    pub fn advance(&self, ns: u64) -> u64 {
        self.now.fetch_add(ns, SeqCst) + ns
    }
    pub fn get(&self) -> u64 {
        self.now.load(SeqCst)
    }
}

pub type Model = Box<dyn Fn(u64) -> u64 + Send + Sync>;

pub struct Fake<'s> {
    pub sim: &'s Sim,
    pub name: &'static str,
    pub freq: Frequency,
    pub cost_ns: u64,
    pub model: Model,
    pub stability: Stability,
    pub quality: i32,
    pub read_cost: ReadCost,
    pub max_read: Option<u64>,
    pub reads: AtomicU64,
}

/// Ticks of a counter at `hz` (true rate) after `t_ns`.
pub fn ticks(t_ns: u64, hz: u64) -> u64 {
    (t_ns as u128 * hz as u128 / 1_000_000_000) as u64
}

impl<'s> Fake<'s> {
    /// A correct counter at `hz`, each read costing `cost_ns` of sim time.
    pub fn counter(sim: &'s Sim, name: &'static str, hz: u64, cost_ns: u64) -> Fake<'s> {
        Fake {
            sim,
            name,
            freq: Frequency::from_hz(hz).unwrap(),
            cost_ns,
            model: Box::new(move |t| ticks(t, hz)),
            stability: Stability::MONOTONIC_PER_CPU
                | Stability::MONOTONIC_ACROSS_CPUS
                | Stability::INVARIANT_RATE,
            quality: 300,
            read_cost: ReadCost::NoTrap,
            max_read: None,
            reads: AtomicU64::new(0),
        }
    }
    pub fn with_model(mut self, m: Model) -> Self {
        self.model = m;
        self
    }
    pub fn claiming(mut self, f: Frequency) -> Self {
        self.freq = f;
        self
    }
}

impl ClockSource for Fake<'_> {
    fn name(&self) -> &'static str {
        self.name
    }
    fn read(&self) -> u64 {
        self.reads.fetch_add(1, SeqCst);
        let t = self.sim.advance(self.cost_ns);
        (self.model)(t)
    }
    fn frequency(&self) -> Frequency {
        self.freq
    }
    fn quality(&self) -> Quality {
        Quality::new(self.quality)
    }
    fn stability(&self) -> Stability {
        self.stability
    }
    fn read_cost(&self) -> ReadCost {
        self.read_cost
    }
    fn max_read_interval(&self) -> Option<u64> {
        self.max_read
    }
}

/// Runs `f` on a thread; panics if it takes longer than `limit`.
pub fn with_timeout<T: Send + 'static>(
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => v,
        Err(_) => panic!("did not finish within {limit:?} (hang)"),
    }
}

// Host threads as CPUs; a thread-local says which "CPU" a read runs on.
thread_local! {
    pub static CPU: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}
pub fn cpu() -> usize {
    CPU.with(|c| c.get())
}

pub struct Threads(pub usize);
impl Cpus for Threads {
    fn count(&self) -> usize {
        self.0
    }
    fn run_concurrently(
        &self,
        cpu: usize,
        remote: &(dyn Fn() + Sync),
        local: &mut dyn FnMut(),
    ) -> Result<(), &'static str> {
        std::thread::scope(|s| {
            s.spawn(|| {
                CPU.with(|c| c.set(cpu));
                remote()
            });
            local();
        });
        Ok(())
    }
}

pub fn sim_wait(sim: &Sim) -> impl Fn(u64) + '_ {
    move |ns| {
        sim.advance(ns);
    }
}
