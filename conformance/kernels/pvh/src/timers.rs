//! The timer devices under test: LAPIC TSC-deadline, LAPIC one-shot and
//! the HPET comparator, each driven through a clockhal `Timer` on the
//! kernel's `Clock`, its interrupt taken on the boot CPU
//! (`clockhal_boot::irq`; the HPET's GSI routed through the I/O APIC the
//! MADT names), for the suite's timer checks
//! (`clockhal_conformance::TimerUnderTest`).
//!
//! The interrupt handler calls `Timer::on_interrupt` and records what it
//! said; the EOI is the boot crate's. Interrupts are enabled only inside
//! `irq::wait`, so the handler preempts nothing but that loop.

// Why a device is absent travels as a fixed-size `Text` (no allocator
// here): large, but built once per device at boot.
#![allow(clippy::result_large_err)]

use core::fmt::Write;
use core::sync::atomic::{AtomicU64, Ordering};

use clockhal::hpet::comparator::{HpetComparator, HpetRoute};
use clockhal::timer::{
    Timer, TimerChoice, TimerDescriptor, TimerDevice, TimerError, TimerEvent, TimerMode,
};
use clockhal::x86::timer_regs::ApicAccess;
use clockhal::x86::MmioRegion;
use clockhal::{Clock, Duration, Frequency, Instant};
use clockhal_boot::ioapic::{IoApic, Trigger};
use clockhal_boot::{irq, println, ApicTimer, BootHw};
use clockhal_conformance::line::Text;
use clockhal_conformance::{Deliveries, TimerSlot, TimerUnderTest, Timers, TIMER_DEVICES};
use clockhal_lapic_timer::{LapicOneShot, LapicTscDeadline};

/// The LAPIC timer's vector (one-shot and TSC-deadline share the LVT
/// entry: each sets it up again before its own arms).
pub const VEC_LAPIC: u8 = 0x40;
/// The HPET comparator's vector (its GSI's I/O APIC entry).
pub const VEC_HPET: u8 = 0x41;
/// The long-deadline check's cap on a device's reach (its test setting).
const LONG_CAP: Duration = clockhal_conformance::config::TIMER_LONG_CAP;
/// How often [`TimerUnderTest::wait`] ticks the clock's watchdog.
const WATCHDOG_EVERY: Duration = Duration::from_millis(250);
/// [`irq::halt`]'s backstop: 2 ms of QEMU's APIC timer at divide 16.
const BACKSTOP_TICKS: u32 = 125_000;
/// IA32_APIC_BASE.
const MSR_APIC_BASE: u32 = 0x1B;

/// The three devices, or why each is absent.
pub struct Devices {
    pub tsc_deadline: Result<LapicTscDeadline<BootHw>, Text>,
    pub oneshot: Result<LapicOneShot<BootHw>, Text>,
    pub hpet: Result<HpetComparator<BootHw>, Text>,
    /// The HPET's GSI, routed to [`VEC_HPET`] (masked again on drop).
    route: Option<(IoApic, u32)>,
}

impl Devices {
    /// Sets up interrupts and every device this machine has. `tsc` is the
    /// TSC's rate (for TSC-deadline's descriptor), `hpet` the HPET's
    /// register window clockhal mapped.
    // Not inlined: its locals stay out of kmain's frame, which holds the
    // clock during the probe (the boot stack is 64 KiB).
    #[inline(never)]
    pub fn probe(
        hw: BootHw,
        clock: &Clock<BootHw>,
        rsdp: Option<u64>,
        tsc: Option<Frequency>,
        hpet: Option<MmioRegion>,
    ) -> Devices {
        // x2APIC where the CPU offers it (KVM's -cpu host; not QEMU 7.2's
        // TCG): the LAPIC timers are then programmed through MSRs, and
        // xAPIC MMIO elsewhere, so both access paths run in the matrix.
        match irq::enable_x2apic() {
            Ok(switched) => {
                println!("kernel: timers: LAPIC in x2APIC mode (switched now: {switched})")
            }
            Err(why) => println!("kernel: timers: LAPIC stays in xAPIC mode: {why}"),
        }
        if !irq::init() {
            return Devices {
                tsc_deadline: Err(Text::from(format_args!("no local APIC"))),
                oneshot: Err(Text::from(format_args!("no local APIC"))),
                hpet: Err(Text::from(format_args!(
                    "no local APIC to deliver its interrupt"
                ))),
                route: None,
            };
        }
        let access = lapic_access(&hw);
        let tsc_deadline = match (&access, tsc) {
            (Err(e), _) => Err(Text::from(format_args!("{e}"))),
            (Ok(_), None) => Err(Text::from(format_args!("no TSC rate"))),
            (Ok(a), Some(f)) => match LapicTscDeadline::new(hw, *a, VEC_LAPIC, f) {
                Err(e) => Err(Text::from(format_args!(
                    "{e} (CPUID.1:ECX[24] = {})",
                    clockhal_lapic_timer::LapicFeatures::read(&hw).tsc_deadline as u8
                ))),
                Ok(t) => match t.self_test() {
                    Ok(()) => Ok(t),
                    Err(e) => Err(Text::from(format_args!("self-test: {e}"))),
                },
            },
        };
        let oneshot = match access {
            Err(e) => Err(Text::from(format_args!("{e}"))),
            Ok(a) => oneshot(hw, a, clock),
        };
        let (hpet, route) = match hpet {
            None => (
                Err(Text::from(format_args!(
                    "no HPET mapped (ACPI has no HPET table)"
                ))),
                None,
            ),
            Some(region) => match hpet_comparator(hw, clock, region, rsdp) {
                Ok((c, r)) => (Ok(c), Some(r)),
                Err(t) => (Err(t), None),
            },
        };
        // Until a device's first arm its vector has no handler; the LAPIC
        // one-shot set itself up last: mask it until then.
        if let Ok(t) = &oneshot {
            t.shutdown_this_cpu();
        }
        Devices {
            tsc_deadline,
            oneshot,
            hpet,
            route,
        }
    }

    /// Every present device, best first as listed
    /// ([`clockhal_boot::present`]).
    pub fn present(&self) -> Option<([&dyn TimerDevice; 3], usize)> {
        clockhal_boot::present([
            self.tsc_deadline
                .as_ref()
                .ok()
                .map(|d| d as &dyn TimerDevice),
            self.oneshot.as_ref().ok().map(|d| d as &dyn TimerDevice),
            self.hpet.as_ref().ok().map(|d| d as &dyn TimerDevice),
        ])
    }

    /// Masks everything again (after the checks: the kernel then runs with
    /// no interrupt source armed).
    pub fn shut_down(&self) {
        if let Ok(t) = &self.oneshot {
            t.shutdown_this_cpu();
        }
        if let Ok(t) = &self.tsc_deadline {
            t.shutdown_this_cpu();
        }
        if let Ok(t) = &self.hpet {
            t.cancel();
        }
        if let Some((io, gsi)) = &self.route {
            io.mask(*gsi);
        }
        irq::clear_handler(VEC_LAPIC);
        irq::clear_handler(VEC_HPET);
    }
}

fn lapic_access(hw: &BootHw) -> Result<ApicAccess, Text> {
    let base = clockhal_boot::try_rdmsr(MSR_APIC_BASE).unwrap_or(0) & 0x000F_FFFF_FFFF_F000;
    // SAFETY: the xAPIC page (0xFEE00000 under QEMU) lies in clockhal-boot's
    // uncached identity map of 3..4 GiB; the LAPIC timer registers there
    // are what clockhal-lapic-timer programs.
    let region = (3 << 30..1 << 32)
        .contains(&base)
        .then(|| unsafe { MmioRegion::new(base as usize, 0x1000) })
        .flatten();
    ApicAccess::detect(hw, region).map_err(|e| Text::from(format_args!("{e}")))
}

/// The LAPIC one-shot timer, at its stated rate (divide 1) or one measured
/// against the clock over 10 ms (divide 16, as `ApicTimer` counts).
fn oneshot(
    hw: BootHw,
    access: ApicAccess,
    clock: &Clock<BootHw>,
) -> Result<LapicOneShot<BootHw>, Text> {
    let (rate, divide, origin) = match clock.lapic_rate() {
        Some(r) => (r.frequency, 1u8, r),
        None => {
            let timer =
                ApicTimer::this_cpu().ok_or_else(|| Text::from(format_args!("no local APIC")))?;
            let r = clock
                .calibrate_lapic(
                    |n| timer.start(n),
                    || timer.current(),
                    Duration::from_millis(10),
                )
                .map_err(|e| Text::from(format_args!("APIC timer calibration: {e}")))?;
            timer.start(0);
            (r.frequency, ApicTimer::DIVIDER as u8, r)
        }
    };
    println!("kernel: timers: LAPIC timer rate {origin} at divide {divide}");
    LapicOneShot::new(hw, access, VEC_LAPIC, rate, divide)
        .map_err(|e| Text::from(format_args!("{e}")))
}

/// HPET timer 0, legacy replacement off, routed to the highest GSI its
/// Tn_INT_ROUTE_CAP allows (QEMU q35: 23 of 2, 8, 16..23, an input
/// nothing else drives; pc: only 2), that GSI routed to [`VEC_HPET`] on the
/// boot CPU, and proved by one interrupt: a 1 ms comparator must raise
/// the vector within 200 ms (QEMU's KVM irqchip routes I/O APIC input 2
/// to the PIT's IRQ 0, not to GSI 2, so there an HPET on GSI 2 is silent).
fn hpet_comparator(
    hw: BootHw,
    clock: &Clock<BootHw>,
    region: MmioRegion,
    rsdp: Option<u64>,
) -> Result<(HpetComparator<BootHw>, (IoApic, u32)), Text> {
    use clockhal::x86::Hardware;
    // Timer 0's configuration, high half: Tn_INT_ROUTE_CAP.
    let cap = hw.mmio_read32(region, 0x104);
    let route = match 31u32.checked_sub(cap.leading_zeros()) {
        Some(g) => HpetRoute::Gsi(g as u8),
        None => HpetRoute::Auto,
    };
    let c = HpetComparator::new(hw, region, 0, route)
        .map_err(|e| Text::from(format_args!("timer 0: {e}")))?;
    let gsi = u32::from(c.gsi());
    let rsdp =
        rsdp.ok_or_else(|| Text::from(format_args!("no ACPI: no I/O APIC for GSI {gsi}")))?;
    let io = IoApic::for_gsi(rsdp, gsi).map_err(|e| Text::from(format_args!("GSI {gsi}: {e}")))?;
    let dest = irq::boot_apic_id()
        .ok_or_else(|| Text::from(format_args!("boot CPU's APIC ID unknown")))?;
    io.route(gsi, VEC_HPET, dest, Trigger::EdgeHigh)
        .map_err(|e| Text::from(format_args!("GSI {gsi}: {e}")))?;
    println!(
        "kernel: timers: HPET timer 0 -> GSI {gsi} (Tn_INT_ROUTE_CAP {cap:#x}; I/O APIC {} at {:#x}, {} inputs) -> vector {VEC_HPET:#x}, {}-bit comparator",
        io.entry().id,
        io.entry().address,
        io.inputs(),
        if c.comparator_64bit() { 64 } else { 32 }
    );
    // Whatever the input latched while masked arrives first.
    let now_ms = || clock.now().as_nanos() / 1_000_000;
    let settle = now_ms() + 5;
    while now_ms() < settle {
        irq::wait();
    }
    let before = irq::count(VEC_HPET);
    let rate = c.rate().map_or(100_000_000, |f| f.hz_rounded());
    let _ = c.program(rate / 1_000);
    let start = now_ms();
    while irq::count(VEC_HPET) == before && now_ms() < start + 200 {
        irq::halt(BACKSTOP_TICKS);
    }
    c.cancel();
    let arrived = irq::count(VEC_HPET) - before;
    println!(
        "kernel: timers: HPET route test: {arrived} interrupt(s) within {} ms",
        now_ms() - start
    );
    if arrived == 0 {
        io.mask(gsi);
        return Err(Text::from(format_args!(
            "no interrupt on GSI {gsi} (the only one Tn_INT_ROUTE_CAP {cap:#x} offers) within 200 ms of a 1 ms comparator{}",
            if gsi == 2 { ": QEMU's KVM irqchip wires I/O APIC input 2 to the PIT's IRQ 0, not GSI 2" } else { "" }
        )));
    }
    Ok((c, (io, gsi)))
}

/// The suite's earlier checks ran for seconds without a watchdog tick; a
/// supervised TSC is not trusted meanwhile (the clock reads the HPET
/// then, and TSC-deadline has no map to convert through). Tick every
/// 250 ms, as an OS's timer would, until the clock's source held for four
/// ticks and no candidate is out only for want of verification — clockhal
/// re-admits such a candidate after [`clockhal::READMIT_ROUNDS`] agreeing
/// rounds — so the selection below sees the clock as it runs. Waiting for
/// a re-admission that does not come (its budget,
/// [`clockhal::MAX_READMISSIONS`], spent) is given up after one try, and
/// the reason shows in the line printed.
fn settle(clock: &Clock<BootHw>) {
    use core::sync::atomic::AtomicBool;
    // Set once a wait for re-admission ran out: later calls do not wait.
    static READMIT_IN_VAIN: AtomicBool = AtomicBool::new(false);
    let wait_readmit = !READMIT_IN_VAIN.load(Ordering::Relaxed);
    // One round starts the comparison, READMIT_ROUNDS agree, one selects;
    // twice that in case a round was a pause.
    let max_ticks = 4 + 2 * (clockhal::READMIT_ROUNDS + 2);
    let mut last = clock.source_name();
    let mut held = 0;
    let mut waiting = false;
    for _ in 0..max_ticks {
        waiting = wait_readmit && unsupervised(clock).is_some();
        if held >= 4 && !waiting {
            break;
        }
        let _ = clock.spin_for(WATCHDOG_EVERY);
        let _ = clock.watchdog_tick();
        let now = clock.source_name();
        held = if now == last { held + 1 } else { 0 };
        last = now;
    }
    match unsupervised(clock) {
        Some(name) => {
            if waiting {
                READMIT_IN_VAIN.store(true, Ordering::Relaxed);
            }
            println!(
                "kernel: timers: clock on {last} (held {held} watchdog ticks); \
                 {name} still out, unverified, after {max_ticks} ticks"
            );
        }
        None => println!("kernel: timers: clock on {last} (held {held} watchdog ticks)"),
    }
}

/// The name of a candidate demoted only because no watchdog round
/// verified it in time (no ticks, or none judged).
fn unsupervised(clock: &Clock<BootHw>) -> Option<&'static str> {
    let report = clock.report();
    let found = report.candidates().find(|c| {
        matches!(
            c.verdict,
            clockhal::Verdict::Demoted {
                reason: clockhal::Demotion::Unsupervised,
                ..
            }
        )
    });
    found.map(|c| c.name)
}

/// A device whose reach is capped (the long-deadline check's setting), so
/// a longer deadline is split into pieces by clockhal's `Timer`.
pub struct Capped<'d> {
    inner: &'d dyn TimerDevice,
    max_ticks: u64,
}

impl<'d> Capped<'d> {
    /// `inner` capped at [`LONG_CAP`]; `Err` (why) for a 64-bit reach,
    /// which no deadline exceeds.
    pub fn new(inner: &'d dyn TimerDevice) -> Result<Capped<'d>, Text> {
        let d = inner.descriptor();
        if d.mode == TimerMode::AbsoluteCounter || d.max_delta_ticks >= i64::MAX as u64 {
            return Err(Text::from(format_args!(
                "not applicable: {} counts 64 bits ({} ticks), no deadline is longer",
                d.name, d.max_delta_ticks
            )));
        }
        let rate = inner
            .rate()
            .ok_or_else(|| Text::from(format_args!("no rate")))?;
        let cap = clockhal::core_api::timer::ns_to_ticks_ceil(rate, LONG_CAP.as_nanos());
        Ok(Capped {
            inner,
            max_ticks: cap.min(d.max_delta_ticks).max(d.min_delta_ticks),
        })
    }
}

impl TimerDevice for Capped<'_> {
    fn descriptor(&self) -> TimerDescriptor {
        TimerDescriptor {
            max_delta_ticks: self.max_ticks,
            ..self.inner.descriptor()
        }
    }
    fn rate(&self) -> Option<Frequency> {
        self.inner.rate()
    }
    fn program(&self, ticks: u64) -> Result<(), TimerError> {
        self.inner.program(ticks)
    }
    fn program_at(&self, counter: u64) -> Result<(), TimerError> {
        self.inner.program_at(counter)
    }
    fn cancel(&self) {
        self.inner.cancel()
    }
    fn counter(&self) -> Option<u64> {
        self.inner.counter()
    }
}

/// One device under test: a clockhal `Timer`, the vector its interrupt
/// comes at, and what the handler recorded.
pub struct Rig<'a> {
    name: &'static str,
    timer: Timer<'a, BootHw>,
    vector: u8,
    /// Puts the LAPIC's LVT back in this device's mode (one-shot and
    /// TSC-deadline share it).
    init_lvt: Option<&'a (dyn Fn() + Sync)>,
    reach_ns: Option<u64>,
    capped: Option<&'a Rig<'a>>,
    capped_why: &'a str,
    /// Wait halted ([`irq::halt`], the LAPIC timer as backstop) rather
    /// than spinning: for the HPET, whose QEMU timers run in the device
    /// model's thread, which a spinning vCPU starves on a busy host.
    halt: bool,
    /// Clock ns of the last watchdog tick [`TimerUnderTest::wait`] made.
    last_tick: AtomicU64,
    fired: AtomicU64,
    last_deadline: AtomicU64,
    last_seen: AtomicU64,
    last_late: AtomicU64,
    interrupts: AtomicU64,
    rearmed: AtomicU64,
    spurious: AtomicU64,
}

/// Which rig set the LAPIC's LVT up last (its address; 0 = none).
static LVT_OWNER: AtomicU64 = AtomicU64::new(0);

impl<'a> Rig<'a> {
    /// A rig over `timer`; `capped` is its long-deadline view (or why
    /// there is none).
    pub fn new(
        timer: Timer<'a, BootHw>,
        vector: u8,
        init_lvt: Option<&'a (dyn Fn() + Sync)>,
        capped: Result<&'a Rig<'a>, &'a str>,
    ) -> Rig<'a> {
        let d = timer.descriptor();
        let reach_ns = match (d.mode, timer.device().rate()) {
            (TimerMode::Delta, Some(rate)) if d.max_delta_ticks < i64::MAX as u64 => Some(
                clockhal::core_api::timer::ticks_to_ns_floor(rate, d.max_delta_ticks),
            ),
            _ => None,
        };
        let (capped, capped_why) = match capped {
            Ok(r) => (Some(r), ""),
            Err(why) => (None, why),
        };
        Rig {
            name: d.name,
            timer,
            vector,
            init_lvt,
            reach_ns,
            capped,
            capped_why,
            halt: vector == VEC_HPET,
            last_tick: AtomicU64::new(0),
            fired: AtomicU64::new(0),
            last_deadline: AtomicU64::new(0),
            last_seen: AtomicU64::new(0),
            last_late: AtomicU64::new(0),
            interrupts: AtomicU64::new(0),
            rearmed: AtomicU64::new(0),
            spurious: AtomicU64::new(0),
        }
    }

    /// The interrupt handler's work (also run at once for an arm the device
    /// refused as already in the past: clockhal's contract says the
    /// deadline is then due).
    fn on_interrupt(&self) {
        match self.timer.on_interrupt() {
            TimerEvent::Fired { deadline, late_by } => {
                let seen = self.timer.clock().now().as_nanos();
                self.last_deadline
                    .store(deadline.as_nanos(), Ordering::Relaxed);
                self.last_late.store(late_by.as_nanos(), Ordering::Relaxed);
                self.last_seen.store(seen, Ordering::Relaxed);
                self.fired.fetch_add(1, Ordering::Release);
            }
            TimerEvent::Rearmed { .. } => {
                self.rearmed.fetch_add(1, Ordering::Relaxed);
            }
            TimerEvent::Spurious => {
                self.spurious.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl Rig<'_> {
    /// The watchdog ticks as an OS's timer tick would, every
    /// [`WATCHDOG_EVERY`] (a supervised TSC's map, which TSC-deadline
    /// converts through, is only trusted while it does).
    fn tick_watchdog(&self) {
        let clock = self.timer.clock();
        let now = clock.now().as_nanos();
        if now.saturating_sub(self.last_tick.load(Ordering::Relaxed)) > WATCHDOG_EVERY.as_nanos() {
            self.last_tick.store(now, Ordering::Relaxed);
            // Nothing printed: this runs with the suite's timed loops.
            let _ = clock.watchdog_tick();
        }
    }
}

fn rig_interrupt(arg: usize) {
    // SAFETY: `arg` is the address of a live `Rig` registered by `Rig::arm`;
    // a `Rig` clears its vector's handler when dropped (see `Drop`), so it
    // outlives every call.
    let rig = unsafe { &*(arg as *const Rig<'_>) };
    rig.interrupts.fetch_add(1, Ordering::Relaxed);
    rig.on_interrupt();
}

impl Drop for Rig<'_> {
    fn drop(&mut self) {
        self.timer.cancel();
        irq::clear_handler(self.vector);
    }
}

impl TimerUnderTest for Rig<'_> {
    fn name(&self) -> &str {
        self.name
    }

    fn now_ns(&self) -> u64 {
        self.timer.clock().now().as_nanos()
    }

    fn arm(&self, deadline_ns: u64, why: &mut dyn Write) -> bool {
        self.tick_watchdog();
        let me = self as *const Rig<'_> as usize;
        if let Some(init) = self.init_lvt {
            if LVT_OWNER.swap(me as u64, Ordering::Relaxed) != me as u64 {
                init();
            }
        }
        // SAFETY: `self` stays alive until its `Drop` clears the handler.
        unsafe { irq::set_handler(self.vector, rig_interrupt, me) };
        match self.timer.arm(Instant::from_nanos(deadline_ns)) {
            Ok(()) => true,
            Err(TimerError::InPast) => {
                // Due already (clockhal's contract): deliver it here.
                self.on_interrupt();
                true
            }
            Err(e) => {
                let clock = self.timer.clock();
                let _ = write!(
                    why,
                    "{e} (clock on {}, stamp converter {})",
                    clock.source_name(),
                    if clock.stamp_converter().is_some() {
                        "present"
                    } else {
                        "none"
                    }
                );
                false
            }
        }
    }

    fn cancel(&self) -> bool {
        self.timer.cancel()
    }

    fn deliveries(&self) -> Deliveries {
        let fired = self.fired.load(Ordering::Acquire);
        Deliveries {
            fired,
            last_deadline_ns: self.last_deadline.load(Ordering::Relaxed),
            last_seen_ns: self.last_seen.load(Ordering::Relaxed),
            last_late_ns: self.last_late.load(Ordering::Relaxed),
            interrupts: self.interrupts.load(Ordering::Relaxed),
            rearmed: self.rearmed.load(Ordering::Relaxed),
            spurious: self.spurious.load(Ordering::Relaxed),
        }
    }

    fn wait(&self) {
        self.tick_watchdog();
        if self.halt {
            irq::halt(BACKSTOP_TICKS);
            // The backstop used the LAPIC's LVT: its rigs set it up again.
            LVT_OWNER.store(0, Ordering::Relaxed);
        } else {
            irq::wait();
        }
    }

    fn reach_ns(&self) -> Option<u64> {
        self.reach_ns
    }

    fn unavailable(&self, why: &mut dyn Write) -> bool {
        let clock = self.timer.clock();
        if self.timer.descriptor().mode == TimerMode::AbsoluteCounter
            && clock.stamp_converter().is_none()
        {
            let _ = write!(
                why,
                "the clock reads {} when the timer checks start: no TSC map to convert deadlines through",
                clock.source_name()
            );
            return true;
        }
        false
    }

    fn capped(&self, why: &mut dyn Write) -> Option<&dyn TimerUnderTest> {
        if self.capped.is_none() {
            let _ = why.write_str(self.capped_why);
        }
        self.capped.map(|r| r as &dyn TimerUnderTest)
    }
}

/// Builds a `Timer` (and its capped twin for the long-deadline check)
/// over every present device, selects among them as an OS would
/// (`Clock::select_timer`), and calls `f` with the suite's view. Handlers
/// are cleared and the devices masked before it returns.
// Not inlined, as `Devices::probe`: the rigs live in this frame only.
#[inline(never)]
pub fn with_timers<R>(
    clock: &Clock<BootHw>,
    devices: &Devices,
    f: impl FnOnce(Timers<'_>) -> R,
) -> R {
    settle(clock);
    let prepare = || settle(clock);
    let lvt_tsc = || {
        if let Ok(t) = &devices.tsc_deadline {
            t.init_this_cpu()
        }
    };
    let lvt_oneshot = || {
        if let Ok(t) = &devices.oneshot {
            t.init_this_cpu()
        }
    };
    let inits: [Option<&(dyn Fn() + Sync)>; 3] = [Some(&lvt_tsc), Some(&lvt_oneshot), None];
    let vectors = [VEC_LAPIC, VEC_LAPIC, VEC_HPET];
    let devs: [Result<&dyn TimerDevice, &Text>; 3] = [
        devices.tsc_deadline.as_ref().map(|d| d as &dyn TimerDevice),
        devices.oneshot.as_ref().map(|d| d as &dyn TimerDevice),
        devices.hpet.as_ref().map(|d| d as &dyn TimerDevice),
    ];
    let caps: [Result<Capped<'_>, Text>; 3] =
        core::array::from_fn(|i| devs[i].map_err(|_| Text::new()).and_then(Capped::new));
    let capped_rigs: [Option<Rig<'_>>; 3] = core::array::from_fn(|i| {
        let cap = caps[i].as_ref().ok()?;
        let timer = clock.timer(cap).ok()?;
        Some(Rig::new(timer, vectors[i], inits[i], Err("")))
    });
    let rigs: [Result<Rig<'_>, Text>; 3] = core::array::from_fn(|i| {
        let dev = devs[i].map_err(|t| Text::from(format_args!("{}", t.as_str())))?;
        let timer = clock
            .timer(dev)
            .map_err(|e| Text::from(format_args!("{e}")))?;
        let capped = match (&capped_rigs[i], &caps[i]) {
            (Some(r), _) => Ok(r),
            (None, Err(why)) => Err(why.as_str()),
            (None, Ok(_)) => Err("the capped device was refused a timer"),
        };
        Ok(Rig::new(timer, vectors[i], inits[i], capped))
    });
    let slots: [TimerSlot<'_>; 3] = core::array::from_fn(|i| match &rigs[i] {
        Ok(r) => TimerSlot::Present(r),
        Err(why) => TimerSlot::Absent {
            name: TIMER_DEVICES[i],
            reason: why.as_str(),
        },
    });
    let present = devices.present();
    let choice = clock.select_timer(present.as_ref().map_or(&[][..], |(p, n)| &p[..*n]));
    println!("kernel: timers: choice: {choice:#}");
    let reason = choice_text(&choice, devices);
    let selected = choice.selected().map(|d| d.descriptor().name);
    let r = f(Timers {
        slots: &slots,
        selected,
        reason: reason.as_str(),
        prepare: Some(&prepare),
    });
    devices.shut_down();
    r
}

/// `choice` in one line, plus the absent devices and why.
pub fn choice_text(choice: &TimerChoice<'_>, devices: &Devices) -> Text {
    let mode = if irq::x2apic_enabled() {
        "x2APIC (MSRs)"
    } else {
        "xAPIC (MMIO)"
    };
    let mut t = Text::from(format_args!("{choice}; LAPIC via {mode}"));
    for (name, r) in [
        ("lapic-tsc-deadline", devices.tsc_deadline.as_ref().err()),
        ("lapic-oneshot", devices.oneshot.as_ref().err()),
        ("hpet-comparator", devices.hpet.as_ref().err()),
    ] {
        if let Some(r) = r {
            let _ = write!(t, "; {name} absent: {}", r.as_str());
        }
    }
    t
}
