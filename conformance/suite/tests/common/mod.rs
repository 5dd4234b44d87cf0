//! Hand-written clock sources over the simulated machine, broken fakes, and
//! the glue (sink, waiter, threads as CPUs) the suite needs on the host.
#![allow(dead_code)] // each test binary uses a different subset

use clockhal_conformance::{Check, CheckResult, Config, Cpus, Status, Suite, Summary, Value};
use clockhal_core::{ClockSource, Frequency, Quality, ReadCost, Stability, WrapExtender};
use clockhal_sim::SimMachine;
use clockhal_x86::{Hardware, MmioRegion};
use std::sync::atomic::{AtomicU64, Ordering};

/// The simulated HPET's main counter (enabled at construction).
pub struct SimHpet<'m> {
    m: &'m SimMachine,
    region: MmioRegion,
    freq: Frequency,
}

impl<'m> SimHpet<'m> {
    pub fn new(m: &'m SimMachine) -> Self {
        let region = m.hpet_region().expect("machine has an HPET");
        let period_fs = m.mmio_read64(region, 0) >> 32;
        m.mmio_write64(region, 0x10, 1);
        SimHpet {
            m,
            region,
            freq: Frequency::from_period_fs(period_fs).unwrap(),
        }
    }
}

impl ClockSource for SimHpet<'_> {
    fn name(&self) -> &'static str {
        "hpet"
    }
    fn read(&self) -> u64 {
        self.m.mmio_read64(self.region, 0xF0)
    }
    fn frequency(&self) -> Frequency {
        self.freq
    }
    fn quality(&self) -> Quality {
        Quality::new(250)
    }
    fn stability(&self) -> Stability {
        Stability::MONOTONIC_PER_CPU
            | Stability::MONOTONIC_ACROSS_CPUS
            | Stability::INVARIANT_RATE
            | Stability::TRAPS_EVERY_READ
    }
    fn read_cost(&self) -> ReadCost {
        ReadCost::OneTrap
    }
}

/// The simulated 24-bit ACPI PM timer at 0x608, extended in software
/// (or, with `extend: false`, a broken one that claims to be).
pub struct SimPm<'m> {
    m: &'m SimMachine,
    ext: WrapExtender,
    extend: bool,
}

impl<'m> SimPm<'m> {
    pub fn new(m: &'m SimMachine) -> Self {
        let raw = m.inl(0x608) as u64;
        SimPm {
            m,
            ext: WrapExtender::new(24, raw),
            extend: true,
        }
    }
    /// Returns the raw 24-bit value but claims to extend it.
    pub fn forgetful(m: &'m SimMachine) -> Self {
        SimPm {
            extend: false,
            ..Self::new(m)
        }
    }
}

impl ClockSource for SimPm<'_> {
    fn name(&self) -> &'static str {
        if self.extend {
            "acpi-pm"
        } else {
            "forgetful-pm"
        }
    }
    fn read(&self) -> u64 {
        let raw = self.m.inl(0x608) as u64 & 0xFF_FFFF;
        if self.extend {
            self.ext.extend(raw)
        } else {
            raw
        }
    }
    fn frequency(&self) -> Frequency {
        Frequency::from_hz(3_579_545).unwrap()
    }
    fn quality(&self) -> Quality {
        Quality::new(150)
    }
    fn stability(&self) -> Stability {
        Stability::MONOTONIC_PER_CPU
            | Stability::MONOTONIC_ACROSS_CPUS
            | Stability::TRAPS_EVERY_READ
            | Stability::SOFTWARE_EXTENDED
    }
    fn read_cost(&self) -> ReadCost {
        ReadCost::OneTrap
    }
    fn max_read_interval(&self) -> Option<u64> {
        Some(self.ext.max_read_interval())
    }
}

/// The simulated TSC, claiming the machine's true rate times `claim_ratio`
/// (per mille), and optionally cross-CPU monotonicity.
pub struct SimTsc<'m> {
    pub m: &'m SimMachine,
    pub name: &'static str,
    pub claimed_hz: u64,
    pub smp: bool,
    pub quality: i32,
}

impl<'m> SimTsc<'m> {
    pub fn new(m: &'m SimMachine) -> Self {
        SimTsc {
            m,
            name: "tsc",
            claimed_hz: m.config().tsc_hz,
            smp: true,
            quality: 300,
        }
    }
}

impl ClockSource for SimTsc<'_> {
    fn name(&self) -> &'static str {
        self.name
    }
    fn read(&self) -> u64 {
        self.m.rdtsc_ordered()
    }
    fn frequency(&self) -> Frequency {
        Frequency::from_hz(self.claimed_hz).unwrap()
    }
    fn quality(&self) -> Quality {
        Quality::new(self.quality)
    }
    fn stability(&self) -> Stability {
        let mut s = Stability::MONOTONIC_PER_CPU | Stability::INVARIANT_RATE;
        if self.smp {
            s |= Stability::MONOTONIC_ACROSS_CPUS;
        }
        s
    }
    fn read_cost(&self) -> ReadCost {
        ReadCost::NoTrap
    }
}

/// Every `every`-th read steps back by `by` ticks.
pub struct StepsBack<S> {
    pub inner: S,
    pub every: u64,
    pub by: u64,
    pub reads: AtomicU64,
}

impl<S: ClockSource> ClockSource for StepsBack<S> {
    fn name(&self) -> &'static str {
        "steps-back"
    }
    fn read(&self) -> u64 {
        let n = self.reads.fetch_add(1, Ordering::Relaxed);
        let v = self.inner.read();
        if n % self.every == self.every - 1 {
            v.saturating_sub(self.by)
        } else {
            v
        }
    }
    fn frequency(&self) -> Frequency {
        self.inner.frequency()
    }
    fn quality(&self) -> Quality {
        self.inner.quality()
    }
    fn stability(&self) -> Stability {
        self.inner.stability()
    }
    fn read_cost(&self) -> ReadCost {
        self.inner.read_cost()
    }
}

/// A source that always reads the same value.
pub struct Stuck;

impl ClockSource for Stuck {
    fn name(&self) -> &'static str {
        "stuck"
    }
    fn read(&self) -> u64 {
        42
    }
    fn frequency(&self) -> Frequency {
        Frequency::from_hz(1_000_000).unwrap()
    }
    fn quality(&self) -> Quality {
        Quality::new(100)
    }
    fn stability(&self) -> Stability {
        Stability::MONOTONIC_PER_CPU
    }
    fn read_cost(&self) -> ReadCost {
        ReadCost::NoTrap
    }
}

/// Threads as CPUs: the remote half runs on a scoped thread pinned to the
/// simulated CPU.
pub struct SimCpus<'m>(pub &'m SimMachine);

impl Cpus for SimCpus<'_> {
    fn count(&self) -> usize {
        self.0.cpu_count()
    }
    fn run_concurrently(
        &self,
        cpu: usize,
        remote: &(dyn Fn() + Sync),
        local: &mut dyn FnMut(),
    ) -> Result<(), &'static str> {
        std::thread::scope(|s| {
            s.spawn(|| {
                self.0.set_cpu(cpu);
                remote()
            });
            local();
        });
        Ok(())
    }
}

/// One recorded result.
#[derive(Clone, Debug, PartialEq)]
pub struct Rec {
    pub source: String,
    pub check: Check,
    pub status: Status,
    pub value: Value,
    pub detail: String,
}

/// All results of a run.
pub struct Results {
    pub recs: Vec<Rec>,
    pub summary: Summary,
}

impl Results {
    pub fn get(&self, source: &str, check: Check) -> &Rec {
        self.recs
            .iter()
            .find(|r| r.source == source && r.check == check)
            .unwrap_or_else(|| panic!("no {check} result for {source}: {:#?}", self.recs))
    }
    pub fn status(&self, source: &str, check: Check) -> Status {
        self.get(source, check).status
    }
    /// `(source, check)` of every failure, sorted.
    pub fn failures(&self) -> Vec<(String, Check)> {
        let mut v: Vec<_> = self
            .recs
            .iter()
            .filter(|r| r.status == Status::Fail)
            .map(|r| (r.source.clone(), r.check))
            .collect();
        v.sort_by_key(|(s, c)| (s.clone(), c.name()));
        v
    }
    pub fn has(&self, source: &str, check: Check) -> bool {
        self.recs
            .iter()
            .any(|r| r.source == source && r.check == check)
    }
}

/// Runs the suite over `sources` against `reference` on machine `m`, waiting
/// by advancing simulated time.
pub fn run(
    m: &SimMachine,
    sources: &[&dyn ClockSource],
    reference: &dyn ClockSource,
    config: Config,
    cpus: Option<&dyn Cpus>,
    selected: Option<Option<&str>>,
) -> Results {
    let cycles = || m.rdtsc();
    let wait = |ns: u64| m.advance(ns);
    let mut suite = Suite::new(sources, reference, &cycles)
        .config(config)
        .wait_with(&wait);
    if let Some(c) = cpus {
        suite = suite.cpus(c);
    }
    if let Some(s) = selected {
        suite = suite.selected(s);
    }
    let results = collect(suite);
    for r in &results.recs {
        eprintln!(
            "{} {} {} {} ({})",
            r.source, r.check, r.status, r.value, r.detail
        );
    }
    results
}

/// Runs `suite`, keeping every result it reports.
pub fn collect(suite: Suite<'_>) -> Results {
    let mut recs = Vec::new();
    let summary = suite.run(&mut |r: &CheckResult<'_>| {
        recs.push(Rec {
            source: r.source.to_string(),
            check: r.check,
            status: r.status,
            value: r.value,
            detail: r.detail.to_string(),
        })
    });
    Results { recs, summary }
}
