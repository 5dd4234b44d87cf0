//! Step 5: async tasks on clockhal's embassy-time driver.
//!
//! The timer devices this machine has (LAPIC TSC-deadline, LAPIC
//! one-shot, HPET comparator) are ranked by `Clock::select_timer`; the
//! selected one becomes a `clockhal::timer::Timer` on the clock's
//! timeline, installed in [`ClockhalDriver`] (embassy-time's driver, with
//! the executor's integrated timer queue). Its interrupt (the boot crate's
//! `irq`, EOI included) calls `DRIVER.on_interrupt()`.
//!
//! An embassy executor (the raw one: this module's pender and idle loop,
//! which lets interrupts in through `irq::wait`) runs two tasks for
//! [`RUN_FOR`] of clock time. Each sleeps with `embassy_time::Timer::at`
//! on a fixed schedule (`Ticker`'s: deadline k = start + k * period, so a
//! late wake delays no later deadline), counts its wakes and checks, at
//! each, that neither embassy's `Instant::now()` nor the clock's `now()`
//! is before the deadline it slept until. The executor stops
//! [`GRACE`] after the run's end whether or not the tasks finished: a
//! timer that loses or withholds interrupts leaves a count short of the
//! schedule's, which the +-10 % window on the count catches.

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use clockhal::embassy::ClockhalDriver;
use clockhal::hpet::comparator::{HpetComparator, HpetRoute};
use clockhal::timer::{Timer, TimerDevice, TimerEvent};
use clockhal::x86::timer_regs::ApicAccess;
use clockhal::x86::MmioRegion;
use clockhal::{Clock, Duration, Frequency};
use clockhal_boot::ioapic::{IoApic, Trigger};
use clockhal_boot::{irq, println, BootHw};
use clockhal_lapic_timer::{LapicOneShot, LapicTscDeadline};
use embassy_executor::raw::Executor;

embassy_time_driver::time_driver_impl!(static DRIVER: ClockhalDriver = ClockhalDriver::new());

/// The LAPIC timers' vector (TSC-deadline and one-shot share the LVT).
const VEC_LAPIC: u8 = 0x40;
/// The HPET comparator's vector (its GSI's I/O APIC entry).
const VEC_HPET: u8 = 0x41;
/// How long the tasks run, in clock time.
const RUN_FOR: Duration = Duration::from_millis(1_000);
/// The tasks' periods.
const PERIODS: [Duration; 2] = [Duration::from_millis(10), Duration::from_millis(25)];
/// The tasks' names in the result line.
const NAMES: [&str; 2] = ["task-a", "task-b"];
/// The wake-count window: ± this percentage of `RUN_FOR / period`.
const TOLERANCE_PCT: u64 = 10;
/// The executor stops this long after the run's end (clock time), the
/// tasks finished or not: room for a descheduled vCPU's late last wakes.
const GRACE: Duration = Duration::from_millis(100);
/// How often the idle loop ticks the clock's watchdog and runs the
/// timer's overdue check (the lifecycle table's "watchdog tick").
const WATCHDOG_EVERY: Duration = Duration::from_millis(250);
/// [`irq::halt`]'s backstop while the HPET is the timer: 2 ms of QEMU's
/// APIC timer at divide 16.
const BACKSTOP_TICKS: u32 = 125_000;
/// IA32_APIC_BASE.
const MSR_APIC_BASE: u32 = 0x1B;

/// What one task saw.
struct TaskStats {
    wakes: AtomicU32,
    early: AtomicU32,
    /// The largest (clock now - deadline) at a wake, ns.
    max_late_ns: AtomicU64,
    /// The sum of (clock now - deadline) over the wakes, ns.
    sum_late_ns: AtomicU64,
    done: AtomicBool,
}

impl TaskStats {
    const fn new() -> TaskStats {
        TaskStats {
            wakes: AtomicU32::new(0),
            early: AtomicU32::new(0),
            max_late_ns: AtomicU64::new(0),
            sum_late_ns: AtomicU64::new(0),
            done: AtomicBool::new(false),
        }
    }
}

static STATS: [TaskStats; 2] = [const { TaskStats::new() }; 2];

/// The timer devices, for the life of the system (the driver's timer
/// borrows the selected one).
struct Devices {
    tsc_deadline: Option<LapicTscDeadline<BootHw>>,
    oneshot: Option<LapicOneShot<BootHw>>,
    hpet: Option<(HpetComparator<BootHw>, IoApic, u32)>,
}

static DEVICES: spin::Once<Devices> = spin::Once::new();
static TIMER: spin::Once<Timer<'static, BootHw>> = spin::Once::new();

/// The executor: `!Sync` (one poller), so kept in a wrapper.
struct BootCpuOnly<T>(T);
// SAFETY: only the boot CPU's idle loop in `run` polls the executor (never
// reentrantly: the pender only sets a flag); what other contexts do with it
// (the timer interrupt waking a task through its waker) is what embassy's
// run queue is built for (atomics, any context).
unsafe impl<T> Sync for BootCpuOnly<T> {}
// SAFETY: as above; the APs never touch it.
unsafe impl<T> Send for BootCpuOnly<T> {}

static EXECUTOR: spin::Once<BootCpuOnly<Executor>> = spin::Once::new();
/// Set by the pender: the executor has tasks to poll.
static PENDING: AtomicBool = AtomicBool::new(false);
/// What the timer interrupts said: fired, re-armed, spurious.
static EVENTS: [AtomicU32; 3] = [const { AtomicU32::new(0) }; 3];

// SAFETY: embassy-executor's raw executor calls `__pender` (this exact
// signature) when it has work; no other symbol of the image has this name.
#[unsafe(export_name = "__pender")]
fn pender(_context: *mut ()) {
    PENDING.store(true, Ordering::Release);
}

/// The timer's interrupt handler (interrupts disabled; the boot crate
/// writes the EOI after it).
fn on_timer(_: usize) {
    let i = match DRIVER.on_interrupt() {
        TimerEvent::Fired { .. } => 0,
        TimerEvent::Rearmed { .. } => 1,
        TimerEvent::Spurious => 2,
    };
    EVENTS[i].fetch_add(1, Ordering::Relaxed);
}

/// One periodic task: sleeps until `start + k * period` for k = 1, 2, ...
/// while that is not after `end`, recording each wake.
#[embassy_executor::task(pool_size = 2)]
async fn periodic(
    clock: &'static Clock<BootHw>,
    start: embassy_time::Instant,
    period: embassy_time::Duration,
    end: embassy_time::Instant,
    stats: &'static TaskStats,
) {
    let mut deadline = start + period;
    while deadline <= end {
        embassy_time::Timer::at(deadline).await;
        let now = embassy_time::Instant::now();
        let clock_ns = clock.now().as_nanos();
        let deadline_ns = ticks_to_ns(deadline.as_ticks());
        if now < deadline || clock_ns < deadline_ns {
            stats.early.fetch_add(1, Ordering::Relaxed);
        }
        let late = clock_ns.saturating_sub(deadline_ns);
        stats.max_late_ns.fetch_max(late, Ordering::Relaxed);
        stats.sum_late_ns.fetch_add(late, Ordering::Relaxed);
        stats.wakes.fetch_add(1, Ordering::Relaxed);
        deadline += period;
    }
    stats.done.store(true, Ordering::Release);
}

/// Embassy ticks -> ns (the deadline a task slept until, on the clock).
fn ticks_to_ns(ticks: u64) -> u64 {
    (u128::from(ticks) * 1_000_000_000).div_ceil(u128::from(embassy_time_driver::TICK_HZ)) as u64
}

/// Runs the step and prints its result line; `true` iff it passed.
/// `hpet` is the HPET window clockhal mapped, `rsdp` the ACPI root (for
/// the HPET's I/O APIC route).
pub fn run(
    hw: BootHw,
    clock: &'static Clock<BootHw>,
    hpet: Option<MmioRegion>,
    rsdp: Option<u64>,
) -> bool {
    println!("\nasync: two embassy tasks (every {} ms and every {} ms) for {} ms on clockhal's embassy-time driver",
        PERIODS[0].as_millis(), PERIODS[1].as_millis(), RUN_FOR.as_millis());
    if !irq::init() {
        println!("demo: async: FAILED: no local APIC: no timer interrupt can be delivered");
        return false;
    }
    let devices = DEVICES.call_once(|| probe(hw, clock, hpet, rsdp));
    let present = clockhal_boot::present([
        devices.tsc_deadline.as_ref().map(|d| d as &dyn TimerDevice),
        devices.oneshot.as_ref().map(|d| d as &dyn TimerDevice),
        devices.hpet.as_ref().map(|d| &d.0 as &dyn TimerDevice),
    ]);
    let choice = clock.select_timer(present.as_ref().map_or(&[][..], |(p, n)| &p[..*n]));
    println!("async: timer choice: {choice:#}");
    let Some(device) = choice.selected() else {
        println!("demo: async: FAILED: no usable timer device ({choice})");
        return false;
    };
    let desc = device.descriptor();
    let timer = match clock.timer(device) {
        Ok(t) => TIMER.call_once(|| t),
        Err(e) => {
            println!("demo: async: FAILED: {}: {e}", desc.name);
            return false;
        }
    };
    // The selected device's LVT (the LAPIC timers share it) or route.
    let (vector, halt) = match desc.name {
        "lapic-tsc-deadline" => {
            devices.tsc_deadline.iter().for_each(|t| t.init_this_cpu());
            (VEC_LAPIC, false)
        }
        "lapic-oneshot" => {
            devices.oneshot.iter().for_each(|t| t.init_this_cpu());
            (VEC_LAPIC, false)
        }
        // The HPET's timers run in QEMU's device-model thread, which a
        // spinning vCPU starves on a busy host: halt instead (the LAPIC
        // timer, unused here, is the backstop).
        _ => (VEC_HPET, true),
    };
    // SAFETY: the handler uses no argument; it only touches statics.
    unsafe { irq::set_handler(vector, on_timer, 0) };
    if DRIVER.install(timer).is_err() {
        println!("demo: async: FAILED: the embassy driver already had a timer");
        return false;
    }

    let t0 = clock.now();
    let executor = &EXECUTOR
        .call_once(|| BootCpuOnly(Executor::new(core::ptr::null_mut())))
        .0;
    let spawner = executor.spawner();
    let start = embassy_time::Instant::now();
    let end = start + embassy_time::Duration::from_nanos(RUN_FOR.as_nanos());
    for i in 0..2 {
        let period = embassy_time::Duration::from_nanos(PERIODS[i].as_nanos());
        match periodic(clock, start, period, end, &STATS[i]) {
            Ok(token) => spawner.spawn(token),
            Err(e) => {
                println!("demo: async: FAILED: spawn {}: {e:?}", NAMES[i]);
                return false;
            }
        }
    }
    let mut last_tick = t0;
    let mut overdue = 0u32;
    let mut waits = 0u32;
    let stop = RUN_FOR + GRACE;
    let finished = loop {
        if PENDING.swap(false, Ordering::Acquire) {
            // SAFETY: the only poller (this loop, on the boot CPU), never
            // reentered: the pender only sets `PENDING`.
            unsafe { executor.poll() };
        }
        if STATS.iter().all(|s| s.done.load(Ordering::Acquire)) {
            break true;
        }
        // One clock read per pass: the pass (with `irq::wait`'s exit) is
        // the floor of the wake latency.
        let now = clock.now();
        if now.duration_since(t0) > stop {
            break false;
        }
        if now.duration_since(last_tick) > WATCHDOG_EVERY {
            last_tick = now;
            let _ = clock.watchdog_tick();
            if timer.check_overdue().is_some() {
                overdue += 1;
            }
        }
        if !PENDING.load(Ordering::Acquire) {
            waits += 1;
            if halt {
                irq::halt(BACKSTOP_TICKS);
            } else {
                irq::wait();
            }
        }
    };
    let took = clock.elapsed(t0);
    timer.cancel();
    shut_down(devices);
    irq::clear_handler(vector);

    let mut pass = true;
    let mut line = Line::new();
    for (i, s) in STATS.iter().enumerate() {
        let expected = RUN_FOR.as_nanos() / PERIODS[i].as_nanos();
        let wakes = u64::from(s.wakes.load(Ordering::Relaxed));
        let slack = expected * TOLERANCE_PCT / 100;
        pass &= wakes.abs_diff(expected) <= slack;
        line.push(format_args!(
            "{} {wakes} wakes (expected {expected} +-{TOLERANCE_PCT}%, late mean {} us, max {} us), ",
            NAMES[i],
            s.sum_late_ns.load(Ordering::Relaxed) / wakes.max(1) / 1_000,
            s.max_late_ns.load(Ordering::Relaxed) / 1_000
        ));
    }
    let early: u32 = STATS.iter().map(|s| s.early.load(Ordering::Relaxed)).sum();
    pass &= early == 0;
    let ev = |i: usize| EVENTS[i].load(Ordering::Relaxed);
    println!(
        "demo: async: {}: {}early wakes {early}, timer {} ({}), {} interrupts ({} fired, {} re-armed, {} spurious), {overdue} overdue, {waits} idle waits, {} ms{}",
        if pass { "ok" } else { "FAILED" },
        line.as_str(),
        desc.name,
        desc.rating_reason,
        ev(0) + ev(1) + ev(2),
        ev(0),
        ev(1),
        ev(2),
        took.as_millis(),
        if finished { "" } else { " (stopped before the tasks finished)" },
    );
    pass
}

/// Every timer device this machine has; prints why each absent one is.
fn probe(
    hw: BootHw,
    clock: &Clock<BootHw>,
    hpet: Option<MmioRegion>,
    rsdp: Option<u64>,
) -> Devices {
    let access = lapic_access(&hw);
    let tsc = clock
        .report()
        .ranked()
        .find(|c| c.name == "tsc")
        .and_then(|c| c.frequency());
    let tsc_deadline = match (access, tsc) {
        (None, _) => None,
        (Some(_), None) => absent("lapic-tsc-deadline", format_args!("no TSC rate")),
        (Some(a), Some(f)) => match LapicTscDeadline::new(hw, a, VEC_LAPIC, f) {
            Err(e) => absent("lapic-tsc-deadline", format_args!("{e}")),
            Ok(t) => match t.self_test() {
                Ok(()) => Some(t),
                Err(e) => absent("lapic-tsc-deadline", format_args!("self-test: {e}")),
            },
        },
    };
    let oneshot = access.and_then(|a| {
        let (rate, divide) = lapic_rate(clock)?;
        LapicOneShot::new(hw, a, VEC_LAPIC, rate, divide)
            .map_err(|e| absent::<()>("lapic-oneshot", format_args!("{e}")))
            .ok()
    });
    let hpet = match (hpet, rsdp) {
        (Some(region), Some(rsdp)) => hpet_comparator(hw, region, rsdp),
        _ => absent(
            "hpet-comparator",
            format_args!("no HPET mapped, or no ACPI"),
        ),
    };
    // Masked until the selected one is set up again.
    if let Some(t) = &tsc_deadline {
        t.shutdown_this_cpu();
    }
    if let Some(t) = &oneshot {
        t.shutdown_this_cpu();
    }
    Devices {
        tsc_deadline,
        oneshot,
        hpet,
    }
}

/// Prints why a device is absent; `None`.
fn absent<T>(name: &str, why: core::fmt::Arguments<'_>) -> Option<T> {
    println!("async: {name} absent: {why}");
    None
}

/// The LAPIC's register access (x2APIC, or the xAPIC page in the
/// uncached identity map).
fn lapic_access(hw: &BootHw) -> Option<ApicAccess> {
    let base = clockhal_boot::try_rdmsr(MSR_APIC_BASE).unwrap_or(0) & 0x000F_FFFF_FFFF_F000;
    // SAFETY: the xAPIC page (0xFEE00000 under QEMU) lies in clockhal-boot's
    // uncached identity map of 3..4 GiB; the LAPIC timer registers there
    // are what clockhal-lapic-timer programs.
    let region = (3 << 30..1 << 32)
        .contains(&base)
        .then(|| unsafe { MmioRegion::new(base as usize, 0x1000) })
        .flatten();
    ApicAccess::detect(hw, region)
        .map_err(|e| absent::<()>("lapic timers", format_args!("{e}")))
        .ok()
}

/// The LAPIC timer's rate: stated (divide 1), or measured against the
/// clock over 10 ms at `ApicTimer`'s divide.
fn lapic_rate(clock: &Clock<BootHw>) -> Option<(Frequency, u8)> {
    if let Some(r) = clock.lapic_rate() {
        return Some((r.frequency, 1));
    }
    let timer = clockhal_boot::ApicTimer::this_cpu()?;
    let r = clock.calibrate_lapic(
        |n| timer.start(n),
        || timer.current(),
        Duration::from_millis(10),
    );
    timer.start(0);
    match r {
        Ok(r) => Some((r.frequency, clockhal_boot::ApicTimer::DIVIDER as u8)),
        Err(e) => absent("lapic-oneshot", format_args!("calibration: {e}")),
    }
}

/// HPET timer 0, its GSI routed to [`VEC_HPET`] on the boot CPU.
fn hpet_comparator(
    hw: BootHw,
    region: MmioRegion,
    rsdp: u64,
) -> Option<(HpetComparator<BootHw>, IoApic, u32)> {
    let name = "hpet-comparator";
    let c = HpetComparator::new(hw, region, 0, HpetRoute::Auto)
        .map_err(|e| absent::<()>(name, format_args!("timer 0: {e}")))
        .ok()?;
    let gsi = u32::from(c.gsi());
    let io = IoApic::for_gsi(rsdp, gsi)
        .map_err(|e| absent::<()>(name, format_args!("GSI {gsi}: {e}")))
        .ok()?;
    let Some(dest) = irq::boot_apic_id() else {
        return absent(name, format_args!("the boot CPU's APIC ID is unknown"));
    };
    io.route(gsi, VEC_HPET, dest, Trigger::EdgeHigh)
        .map_err(|e| absent::<()>(name, format_args!("GSI {gsi}: {e}")))
        .ok()?;
    Some((c, io, gsi))
}

/// Masks every device again (the kernel then exits).
fn shut_down(d: &Devices) {
    if let Some(t) = &d.tsc_deadline {
        t.shutdown_this_cpu();
    }
    if let Some(t) = &d.oneshot {
        t.shutdown_this_cpu();
    }
    if let Some((c, io, gsi)) = &d.hpet {
        c.cancel();
        io.mask(*gsi);
    }
}

/// A fixed buffer for part of the result line (no allocator here).
struct Line {
    buf: [u8; 256],
    len: usize,
}

impl Line {
    const fn new() -> Line {
        Line {
            buf: [0; 256],
            len: 0,
        }
    }

    fn push(&mut self, args: core::fmt::Arguments<'_>) {
        let _ = core::fmt::Write::write_fmt(self, args);
    }

    fn as_str(&self) -> &str {
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl core::fmt::Write for Line {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let n = s.len().min(self.buf.len() - self.len);
        // ASCII only here, so a cut never splits a character.
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}
