//! Red-team round 31's races over this stop's fixes, which held (kept as
//! regression checks): several CPUs read a software-extended current device (the
//! 24-bit PM timer, a 32-bit HPET) through `Clock::now()` while reads are
//! preempted at random (the port/MMIO hook blocks, or machine time jumps
//! by up to a fifth of a wrap inside the read), the rdtsc hook moves time,
//! and another CPU ticks the watchdog. Checked per reading: never behind
//! the same CPU's last reading, never ahead of the machine's true time
//! (plus a tick), never a whole wrap behind the truth at its start, and
//! every read returns.
#![cfg(all(feature = "acpi-pm", feature = "hpet"))]

use clockhal::x86::{CpuidResult, Hardware, MmioRegion, Msr};
use clockhal::{Clock, Duration, Platform, SelfCheck, SourceId};
use clockhal_core::SlotPool;
use clockhal_sim::{HpetConfig, PmTimerConfig, SimConfig, SimMachine};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Mutex;

const READERS: usize = 4;
const PM_WRAP_NS: u64 = (1u64 << 24) * 1_000_000_000 / 3_579_545;
const HPET_WRAP_NS: u64 = (1u64 << 32) * 10; // 100 MHz

fn rng(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// The machine, with a preemption point after every read of the current
/// device's counter.
struct Hostile {
    m: &'static SimMachine,
    pm_port: u16,
    hpet: Option<MmioRegion>,
    wrap_ns: AtomicU64,
    enabled: AtomicBool,
    /// Machine ns at the start of the latest completed `now()` (any CPU):
    /// the extension's last value is at least the count then.
    done_start: AtomicU64,
    seed: Mutex<u64>,
    /// Serializes the budgeted jumps.
    jump_lock: Mutex<()>,
    jumps: AtomicU64,
    blocks: AtomicU64,
}

impl Hostile {
    fn device_read(&self) {
        if !self.enabled.load(SeqCst) {
            return;
        }
        let r = {
            let mut s = self.seed.lock().unwrap();
            rng(&mut s)
        };
        let wrap = self.wrap_ns.load(SeqCst);
        match r % 64 {
            0 => {
                // A jump of up to a fifth of a wrap, keeping every gap
                // since the last completed read under 0.4 of a wrap.
                let adv = (r >> 8) % (wrap / 5);
                if self.jump(adv) {
                    self.jumps.fetch_add(1, SeqCst);
                }
            }
            1 | 2 => {
                // Preempted (real time) right after the read.
                self.blocks.fetch_add(1, SeqCst);
                std::thread::sleep(std::time::Duration::from_micros(50 + (r >> 8) % 300));
            }
            3..=6 => std::thread::yield_now(),
            _ => {}
        }
    }
}

impl Hostile {
    /// Moves machine time by `adv` if every gap since the start of the
    /// latest fresh reading stays under 0.4 of a wrap.
    fn jump(&self, adv: u64) -> bool {
        let wrap = self.wrap_ns.load(SeqCst);
        let _g = self.jump_lock.lock().unwrap();
        let since = self.m.now_ns() + adv - self.done_start.load(SeqCst);
        if since < wrap * 2 / 5 {
            self.m.advance(adv);
            true
        } else {
            false
        }
    }
}

impl Hardware for Hostile {
    fn rdtsc(&self) -> u64 {
        self.m.rdtsc()
    }
    fn rdtsc_ordered(&self) -> u64 {
        self.m.rdtsc_ordered()
    }
    fn rdtscp(&self) -> (u64, u32) {
        self.m.rdtscp()
    }
    fn cpuid(&self, leaf: u32, subleaf: u32) -> CpuidResult {
        self.m.cpuid(leaf, subleaf)
    }
    fn rdmsr(&self, msr: Msr) -> u64 {
        self.m.rdmsr(msr)
    }
    fn try_rdmsr(&self, msr: Msr) -> Option<u64> {
        self.m.try_rdmsr(msr)
    }
    fn recovers_msr_faults(&self) -> bool {
        self.m.recovers_msr_faults()
    }
    unsafe fn wrmsr(&self, msr: Msr, value: u64) {
        self.m.write_msr(msr, value)
    }
    fn inb(&self, port: u16) -> u8 {
        self.m.inb(port)
    }
    unsafe fn outb(&self, port: u16, value: u8) {
        self.m.write_port8(port, value)
    }
    fn inl(&self, port: u16) -> u32 {
        let v = self.m.inl(port);
        if port == self.pm_port {
            self.device_read();
        }
        v
    }
    fn mmio_read32(&self, region: MmioRegion, offset: usize) -> u32 {
        let v = self.m.mmio_read32(region, offset);
        if Some(region) == self.hpet && offset == 0xF0 {
            self.device_read();
        }
        v
    }
    fn mmio_read64(&self, region: MmioRegion, offset: usize) -> u64 {
        let v = self.m.mmio_read64(region, offset);
        if Some(region) == self.hpet && offset == 0xF0 {
            self.device_read();
        }
        v
    }
    fn mmio_write32(&self, region: MmioRegion, offset: usize, value: u32) {
        self.m.mmio_write32(region, offset, value)
    }
    fn mmio_write64(&self, region: MmioRegion, offset: usize, value: u64) {
        self.m.mmio_write64(region, offset, value)
    }
    fn cpu_index(&self) -> usize {
        self.m.cpu_index()
    }
    fn cpu_index_is_fixed(&self) -> bool {
        self.m.cpu_index_is_fixed()
    }
    fn fetch_max_local(&self, cell: &AtomicU64, value: u64) -> u64 {
        self.m.fetch_max_local(cell, value)
    }
    fn is_simulated(&self) -> bool {
        true
    }
    fn clock_lease(&self) -> &AtomicBool {
        self.m.clock_lease()
    }
    fn slot_pool(&self) -> &SlotPool {
        self.m.slot_pool()
    }
}

fn machine(pm: bool, hpet: bool, tsc: bool) -> &'static Hostile {
    let mut cfg = SimConfig::cpu(2_000_000_000).with_cpus(READERS + 1, &[0; READERS + 1]);
    if !tsc {
        cfg = cfg.with_cpuid(1, 0, clockhal_sim::regs(0x000906EA, 0, 0, 0));
    }
    if pm {
        cfg = cfg.with_pm_timer(PmTimerConfig::default());
    }
    if hpet {
        cfg = cfg.with_hpet(HpetConfig::qemu().narrow());
    }
    let m: &'static SimMachine = Box::leak(Box::new(cfg.build()));
    let pm_port = m.config().pm_timer.as_ref().map_or(0, |p| p.port);
    Box::leak(Box::new(Hostile {
        m,
        pm_port,
        hpet: m.hpet_region(),
        wrap_ns: AtomicU64::new(if hpet { HPET_WRAP_NS } else { PM_WRAP_NS }),
        enabled: AtomicBool::new(false),
        done_start: AtomicU64::new(0),
        seed: Mutex::new(0x2545_f491_4f6c_dd1d),
        jump_lock: Mutex::new(()),
        jumps: AtomicU64::new(0),
        blocks: AtomicU64::new(0),
    }))
}

fn clock(w: &'static Hostile, want: SourceId) -> &'static Clock<&'static Hostile> {
    let m = w.m;
    let mut p = Platform::new()
        .cpus(READERS + 1)
        .self_check(SelfCheck::new().rate_interval(Duration::from_millis(1)));
    if let Some(r) = m.hpet_region() {
        p = p.hpet_region(r);
    }
    if let Some(pm) = &m.config().pm_timer {
        p = p.pm_timer(pm.port, pm.bits32);
    }
    let probed = clockhal::probe(w, p);
    let report = *probed.report();
    let c: &'static Clock<&'static Hostile> = Box::leak(Box::new(
        probed
            .into_clock()
            .unwrap_or_else(|e| panic!("no clock: {e}\n{}", report.table())),
    ));
    if c.source_id() != want {
        for _ in 0..8 {
            m.advance(250_000_000);
            c.watchdog_tick();
        }
        c.force(want)
            .unwrap_or_else(|e| panic!("force {want:?}: {e:?}\n{}", c.report().table()));
    }
    assert_eq!(c.source_id(), want, "{}", c.report().table());
    c
}

/// `READERS` CPUs read for `real_ms` of real time; CPU `READERS` ticks
/// the watchdog; `tsc_hook` also moves time at some rdtscs.
fn race(w: &'static Hostile, want: SourceId, real_ms: u64, tsc_hook: bool) {
    let m = w.m;
    let c = clock(w, want);
    let wrap = w.wrap_ns.load(SeqCst);
    let tol = 2_000u64; // a tick, rounding, and one read's cost
    m.set_cpu(0);
    let origin = m.now_ns() - c.now().as_nanos();
    w.done_start.store(m.now_ns(), SeqCst);
    if tsc_hook {
        let mut s = 0x9e37_79b9u64;
        m.set_rdtsc_hook(move |_| {
            if rng(&mut s) % 97 == 0 && w.enabled.load(SeqCst) {
                // A small jump (a vCPU preempted at its rdtsc): well
                // inside the read-interval rule.
                w.jump(rng(&mut s) % 2_000_000);
            }
        });
    }
    w.enabled.store(true, SeqCst);
    let stop = AtomicBool::new(false);
    let failure: Mutex<Option<String>> = Mutex::new(None);
    let reads = AtomicU64::new(0);
    let events: Mutex<Vec<String>> = Mutex::new(vec![]);
    let t0 = std::time::Instant::now();
    std::thread::scope(|s| {
        for cpu in 0..READERS {
            let (stop, failure, reads) = (&stop, &failure, &reads);
            s.spawn(move || {
                m.set_cpu(cpu);
                if cpu != 0 {
                    c.register_this_cpu().unwrap();
                }
                let mut last = 0u64;
                while !stop.load(SeqCst) {
                    let start = m.now_ns();
                    let t = c.now().as_nanos();
                    let end = m.now_ns();
                    if t + tol >= start - origin {
                        // Fresh: the extension holds at least the count then.
                        w.done_start.fetch_max(start, SeqCst);
                    }
                    reads.fetch_add(1, SeqCst);
                    let (ts, te) = (start - origin, end - origin);
                    let bad = if t < last {
                        Some(format!("cpu {cpu}: back {} ns ({last} -> {t})", last - t))
                    } else if t > te + tol {
                        Some(format!(
                            "cpu {cpu}: {t} ns is {} ns ahead of the true {te} ns",
                            t - te
                        ))
                    } else if ts > t + wrap * 3 / 4 {
                        Some(format!(
                            "cpu {cpu}: {t} ns is {} ns behind the true {ts} ns at the read's start (lost wrap?)",
                            ts - t
                        ))
                    } else {
                        None
                    };
                    if let Some(b) = bad {
                        failure.lock().unwrap().get_or_insert(b);
                        stop.store(true, SeqCst);
                    }
                    last = t;
                }
            });
        }
        {
            let (stop, events) = (&stop, &events);
            s.spawn(move || {
                m.set_cpu(READERS);
                c.register_this_cpu().unwrap();
                while !stop.load(SeqCst) {
                    let e = c.watchdog_tick();
                    if !matches!(
                        e,
                        clockhal::WatchdogEvent::Judged { .. }
                            | clockhal::WatchdogEvent::Inactive
                            | clockhal::WatchdogEvent::Busy
                    ) {
                        let mut ev = events.lock().unwrap();
                        if ev.len() < 20 {
                            ev.push(format!("{e:?}"));
                        }
                    }
                    std::thread::sleep(std::time::Duration::from_micros(500));
                }
            });
        }
        let mut last_reads = 0;
        let mut last_progress = std::time::Instant::now();
        while !stop.load(SeqCst) && t0.elapsed().as_millis() < real_ms as u128 {
            std::thread::sleep(std::time::Duration::from_millis(20));
            let r = reads.load(SeqCst);
            if r != last_reads {
                last_reads = r;
                last_progress = std::time::Instant::now();
            } else if last_progress.elapsed().as_secs() > 5 {
                failure
                    .lock()
                    .unwrap()
                    .get_or_insert("no read returned for 5 s (livelock?)".into());
                stop.store(true, SeqCst);
            }
        }
        stop.store(true, SeqCst);
    });
    w.enabled.store(false, SeqCst);
    m.clear_rdtsc_hook();
    let t = c.now().as_nanos();
    let truth = m.now_ns() - origin;
    let f = failure.lock().unwrap().clone();
    let summary = format!(
        "{want:?}: {} reads, {} jumps, {} blocks, truth {truth} ns, now {t} ns, unmeasured gaps {}, events {:?}\n{}",
        reads.load(SeqCst),
        w.jumps.load(SeqCst),
        w.blocks.load(SeqCst),
        c.unmeasured_gaps(),
        events.lock().unwrap(),
        c.report().table()
    );
    eprintln!("{summary}");
    assert!(f.is_none(), "{}\n{summary}", f.unwrap());
    assert!(
        truth.saturating_sub(t) < wrap / 2,
        "lost time: now {t} ns, truth {truth} ns\n{summary}"
    );
}

#[test]
fn pm_timer_no_tsc_racing_preempted_readers() {
    race(machine(true, false, false), SourceId::AcpiPm, 4_000, false);
}

#[test]
fn pm_timer_with_tsc_racing_preempted_readers() {
    race(machine(true, false, true), SourceId::AcpiPm, 4_000, true);
}

#[test]
fn narrow_hpet_with_tsc_racing_preempted_readers() {
    race(machine(false, true, true), SourceId::Hpet, 4_000, true);
}

#[test]
fn narrow_hpet_no_tsc_racing_preempted_readers() {
    race(machine(false, true, false), SourceId::Hpet, 4_000, false);
}
