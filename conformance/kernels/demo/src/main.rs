//! Example unikernel: how an OS uses clockhal.
//!
//! Booted by `qemu-system-x86_64 -kernel` (PVH, via clockhal-boot), it
//!
//! 1. gives clockhal what only the OS has: the RSDP, a view of physical
//!    memory, the HPET mapping, memory for kvmclock and the Hyper-V page;
//! 2. probes with the default policy and prints every candidate's verdict
//!    and the selection;
//! 3. busy-waits 100 ms on the selected clock while every other candidate
//!    measures the same interval, and prints the differences in ppm;
//! 4. runs a clock-heavy workload (two timestamps per small operation) with
//!    each usable source forced in turn, and compares throughput;
//! 5. runs two embassy tasks (every 10 ms and every 25 ms, for 1 s) on
//!    clockhal's embassy-time driver over the clock and the timer device
//!    `Clock::select_timer` picks (its interrupt delivered through the
//!    boot crate's `irq`), and checks each task's wake count within
//!    +-10 % and that no wake came before its deadline
//!    (`demo: async: ok: ...`);
//! 6. exits QEMU with success (status 33) if every usable source could be
//!    forced and the async step passed, else with failure.
//!
//! Along the way it uses the adapters: the clock is installed as the
//! global clock (`clockhal::global`, the timestamps of the last line), the
//! wall time comes from the CMOS RTC, the APIC timer's rate is stated or
//! calibrated, the busy-wait is an embedded-hal `DelayNs`, and the RTC
//! read is timed with fugit types.
//!
//! Run it with `./scripts/demo.sh` from the repository root.
#![no_std]
#![no_main]

mod tasks;
mod workload;

use clockhal::x86::paravirt::{HvReferenceTscPage, PhysMapped, PvclockVcpuTimeInfo};
use clockhal::x86::{Hardware, MmioRegion, OffsetMapping};
use clockhal::{Clock, Duration, FugitDuration, Platform, Policy, Scale, Verdict};
use clockhal_boot::{println, smp::MAX_CPUS, ApicTimer, BootHw, BootInfo};
use embedded_hal::delay::DelayNs;

clockhal_boot::entry!(kmain);

/// kvmclock memory: one 32-byte area per vCPU (the type is 32-byte aligned,
/// so no area crosses a page). KVM writes it; the atomics let us share it.
static PVCLOCK: [PvclockVcpuTimeInfo; MAX_CPUS] = [const { PvclockVcpuTimeInfo::new() }; MAX_CPUS];
/// The Hyper-V reference TSC page (page aligned by its type).
static HV_PAGE: HvReferenceTscPage = HvReferenceTscPage::new();
/// The clock, for the life of the system (also the global clock).
static CLOCK: spin::Once<Clock<BootHw>> = spin::Once::new();

/// clockhal-boot identity-maps the low 4 GiB; 3..4 GiB is uncached (MMIO).
const IDENTITY_MAPPED: u64 = 1 << 32;
const UNCACHED_FROM: u64 = 3 << 30;

/// Length of the comparison busy-wait.
const COMPARE_FOR: Duration = Duration::from_millis(100);
/// Operations per workload batch (`-append ops=N` overrides).
const DEFAULT_OPS: u32 = 5_000;

fn kmain(info: &BootInfo) -> ! {
    println!(
        "unikernel: booted; RSDP {:x?}, command line {:?}",
        info.rsdp_paddr, info.cmdline
    );
    // clockhal reaches the hardware only through a `Hardware`: the boot
    // crate's wraps the real instructions and adds what only the OS knows
    // (#GP recovery for MSR probes, the CPU index).
    // SAFETY: this is the kernel: it runs at CPL0 on clockhal-boot, and it
    // lets clockhal read the TSC, CPUID, the clock MSRs CPUID promises and
    // the I/O ports its ACPI tables name (the PM timer).
    let hw = unsafe { BootHw::new() };

    // --- 1. What only the OS knows --------------------------------------
    // SAFETY: clockhal-boot identity-maps 0..4 GiB, and clockhal only reads
    // the ACPI tables the RSDP leads to (plain RAM/ROM, no side effects).
    let memory = unsafe { OffsetMapping::new(0, IDENTITY_MAPPED) };
    // The identity map already covers the HPET (uncached from 3 GiB up).
    // The window is kept for the async step's HPET comparator.
    let hpet_region = core::cell::Cell::new(None);
    let mut map_hpet = |phys: u64, len: usize| {
        let end = phys.checked_add(len as u64)?;
        if phys < UNCACHED_FROM || end > IDENTITY_MAPPED {
            return None;
        }
        // SAFETY: `phys..end` is identity-mapped uncached, and it is the
        // register block ACPI's HPET table names.
        let region = unsafe { MmioRegion::new(phys as usize, len) };
        hpet_region.set(region);
        region
    };
    // SAFETY: identity map, so the physical address is the virtual one;
    // the statics are contiguous, reserved for the hypervisor's writes, and
    // live forever (this kernel never reuses them).
    let pvclock = unsafe { PhysMapped::new(&PVCLOCK[..], PVCLOCK.as_ptr() as u64) };
    // SAFETY: as above.
    let hv_page = unsafe { PhysMapped::new(&HV_PAGE, &HV_PAGE as *const _ as u64) };

    let mut platform = Platform::new()
        .hpet_mapper(&mut map_hpet)
        .pvclock_areas(pvclock)
        .hyperv_tsc_page(hv_page)
        .hyperv_guest_os_id(clockhal::hyperv::DEFAULT_GUEST_OS_ID)
        .policy(Policy::new());
    if let Some(rsdp) = info.rsdp_paddr {
        platform = platform.acpi(rsdp, &memory);
    }

    // --- 2. Probe, print the verdicts -------------------------------------
    let probed = clockhal::probe(hw, platform);
    println!("\ncandidates:\n{}", probed.report().table());
    println!("choice: {}", probed.report());
    // The clock lives for the life of the system, in a static; installed
    // as the global clock, code without a handle reads it too.
    let clock = match probed.into_clock() {
        Ok(clock) => CLOCK.call_once(|| clock),
        Err(e) => {
            println!("unikernel: {e}");
            clockhal_boot::exit_qemu(clockhal_boot::EXIT_FAILURE)
        }
    };
    let _ = clockhal::global::install(clock);
    println!("selected: {} at {}", clock.source_name(), Freq(clock));
    wall_time(clock);
    apic_timer(clock);

    // --- 3. 100 ms on the selected clock vs every other candidate --------
    compare(clock, &mut clock.delay());

    // --- 4. Clock-heavy workload with each usable source forced -----------
    let ops = ops_from(info.cmdline);
    let all_forced = run_workload(clock, ops);

    // --- 5. Two async tasks on the embassy-time driver -------------------
    let async_ok = tasks::run(hw, clock, hpet_region.get(), info.rsdp_paddr);

    println!("\n[{}] unikernel: done", Stamp);
    if !all_forced {
        println!("unikernel: FAILED: a usable source could not be forced");
        clockhal_boot::exit_qemu(clockhal_boot::EXIT_FAILURE)
    }
    if !async_ok {
        println!("unikernel: FAILED: the async step (see `demo: async:`)");
        clockhal_boot::exit_qemu(clockhal_boot::EXIT_FAILURE)
    }
    clockhal_boot::exit_qemu(clockhal_boot::EXIT_SUCCESS)
}

/// The global clock's reading as `seconds.micros` (`-` before it is
/// installed): what a logger without a clock handle prints.
struct Stamp;

impl core::fmt::Display for Stamp {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match clockhal::global::now() {
            Some(t) => write!(
                f,
                "{:5}.{:06}",
                t.as_nanos() / 1_000_000_000,
                t.as_nanos() / 1_000 % 1_000_000
            ),
            None => f.write_str("-"),
        }
    }
}

/// Sets the wall time from the CMOS RTC (at its next second edge) and
/// prints it, with how long the read took (timed in fugit's types) and how
/// far kvmclock's wall clock, if it gave one at boot, was from it.
fn wall_time(clock: &Clock<BootHw>) {
    // Unix ns at clock 0, as known so far.
    let epoch = |c: &Clock<BootHw>| c.unix_time_ns().map(|u| u.wrapping_sub(c.now().as_nanos()));
    let kvmclock = epoch(clock);
    let t0 = clock.now_fugit();
    let result = clock.set_wall_clock_from_rtc(Duration::from_millis(1_100));
    let took: FugitDuration = clock.now_fugit() - t0;
    match result {
        Ok(edge) => {
            let off = kvmclock
                .zip(epoch(clock))
                .map(|(k, r)| k.wrapping_sub(r) as i64 / 1_000_000);
            println!(
                "wall time: {} from the RTC's second edge (+/- {} us, read in {} ms){}",
                edge.time,
                edge.uncertainty_ns.div_ceil(1_000),
                took.as_millis(),
                KvmclockOff(off),
            );
        }
        Err(e) => println!("wall time: RTC: {e}"),
    }
}

/// "; kvmclock's wall clock: N ms from it", when kvmclock gave one.
struct KvmclockOff(Option<i64>);

impl core::fmt::Display for KvmclockOff {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            Some(ms) => write!(f, "; kvmclock's wall clock: {ms:+} ms from it"),
            None => Ok(()),
        }
    }
}

/// The APIC timer's rate: as the platform states it, and as measured
/// against the clock over 10 ms (at the divide configuration the boot
/// crate sets), in one line.
fn apic_timer(clock: &Clock<BootHw>) {
    let stated = Stated(clock.lapic_rate());
    let Some(timer) = ApicTimer::this_cpu() else {
        return println!("apic timer: {stated}; no local APIC to measure");
    };
    match clock.calibrate_lapic(
        |n| timer.start(n),
        || timer.current(),
        Duration::from_millis(10),
    ) {
        Ok(r) => println!(
            "apic timer: {stated}; measured {r} at divide {}",
            ApicTimer::DIVIDER
        ),
        Err(e) => println!("apic timer: {stated}; {e}"),
    }
}

/// A stated APIC timer rate, or that there is none.
struct Stated(Option<clockhal::lapic::LapicRate>);

impl core::fmt::Display for Stated {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match &self.0 {
            Some(r) => write!(f, "stated {r}"),
            None => f.write_str("rate not stated"),
        }
    }
}

/// `ops=N` on the command line, else [`DEFAULT_OPS`].
fn ops_from(cmdline: &str) -> u32 {
    cmdline
        .split_ascii_whitespace()
        .find_map(|arg| arg.strip_prefix("ops=")?.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(DEFAULT_OPS)
}

/// The clock's rate, or `-`.
struct Freq<'a>(&'a Clock<BootHw>);

impl core::fmt::Display for Freq<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0.frequency() {
            Some(hz) => write!(f, "{hz}"),
            None => f.write_str("-"),
        }
    }
}

/// A constructed candidate to compare: its backend and exact scale.
struct Probe<'a> {
    name: &'static str,
    demoted: bool,
    source: &'a dyn clockhal::ClockSource,
    scale: Scale,
}

/// One candidate reading bracketed by two readings of the selected source.
#[derive(Clone, Copy, Default)]
struct Bracket {
    before: u64,
    value: u64,
    after: u64,
}

impl Bracket {
    fn take(selected: &dyn clockhal::ClockSource, other: &dyn clockhal::ClockSource) -> Bracket {
        Bracket {
            before: selected.read(),
            value: other.read(),
            after: selected.read(),
        }
    }
    /// The selected source's ticks at the middle of the bracket.
    fn mid(&self) -> u64 {
        self.before + self.after.saturating_sub(self.before) / 2
    }
    /// Half the bracket's width: how far off `mid` the reading may be.
    fn slack(&self) -> u64 {
        self.after.saturating_sub(self.before).div_ceil(2)
    }
}

/// Busy-waits [`COMPARE_FOR`] on `clock` (with `delay`, an embedded-hal
/// delay as a driver would take it) and prints what every other
/// constructed candidate measured over the same interval.
///
/// Each candidate is read between two reads of the selected source, at the
/// start and at the end; its interval is compared with the selected
/// source's interval between the bracket midpoints, so slow (trapping)
/// reads do not bias the result, and the bracket widths bound the error.
fn compare(clock: &Clock<BootHw>, delay: &mut impl DelayNs) {
    let selected = clock.source_id();
    let (Some(sel), Some(sel_hz)) = (clock.source(), clock.frequency()) else {
        return;
    };
    let sel_scale = Scale::new(sel_hz);
    let mut list: [Option<Probe<'_>>; clockhal::MAX_CANDIDATES] =
        [const { None }; clockhal::MAX_CANDIDATES];
    let report = clock.report();
    for (slot, c) in list.iter_mut().zip(report.ranked()) {
        let (Some(source), Some(hz)) = (clock.source_of(c.id), c.frequency()) else {
            continue;
        };
        if c.id != selected {
            *slot = Some(Probe {
                name: c.name,
                demoted: c.demotion().is_some(),
                source,
                scale: Scale::new(hz),
            });
        }
    }

    let mut start = [Bracket::default(); clockhal::MAX_CANDIDATES];
    let mut end = [Bracket::default(); clockhal::MAX_CANDIDATES];
    let _ = clock.watchdog_tick(); // baseline for the run-time cross-check
    let t0 = clock.now();
    for (p, b) in list.iter().zip(&mut start) {
        if let Some(p) = p {
            *b = Bracket::take(sel, p.source);
        }
    }
    delay.delay_ms(COMPARE_FOR.as_millis() as u32);
    for (p, b) in list.iter().zip(&mut end) {
        if let Some(p) = p {
            *b = Bracket::take(sel, p.source);
        }
    }
    let waited = clock.elapsed(t0);
    let event = clock.watchdog_tick();

    println!(
        "\n{} ms busy-wait on {} ({} ns), measured by each candidate:",
        COMPARE_FOR.as_millis(),
        clock.source_name(),
        waited.as_nanos()
    );
    println!(
        "{:<12} {:>12} {:>14} {:>10} {:>10}",
        "source", "elapsed ns", "selected ns", "ppm", "+/- ppm"
    );
    for (i, p) in list.iter().enumerate() {
        let Some(p) = p else { continue };
        let (s, e) = (start[i], end[i]);
        let ns = p.scale.ticks_to_ns(e.value.saturating_sub(s.value));
        let sel_ns = sel_scale.ticks_to_ns(e.mid().saturating_sub(s.mid()));
        let slack = sel_scale.ticks_to_ns(s.slack() + e.slack());
        let note = if p.demoted { "  (demoted)" } else { "" };
        println!(
            "{:<12} {:>12} {:>14} {:>+10} {:>10}{note}",
            p.name,
            ns,
            sel_ns,
            ppm(ns, sel_ns),
            ppm(sel_ns + slack, sel_ns)
        );
    }
    println!("watchdog after the wait: {event:?}");
}

/// `(value - reference) / reference` in ppm (0 if the reference is 0).
fn ppm(value: u64, reference: u64) -> i64 {
    let diff = i128::from(value) - i128::from(reference);
    (diff * 1_000_000)
        .checked_div(i128::from(reference))
        .unwrap_or(0) as i64
}

/// Runs the workload once per usable candidate, forcing the clock onto
/// each in turn ([`Clock::force`]) and timing each batch with that source.
/// Returns whether every usable candidate could be forced.
fn run_workload(clock: &Clock<BootHw>, ops: u32) -> bool {
    let selected_id = clock.source_id();
    println!(
        "\nworkload: {ops} ops of {{ t0 = now(); checksum({} bytes); t1 = now() }} per source, timed by the same clock",
        workload::PACKET,
    );
    // (name, switch time, outcome), in rank order.
    let mut rows: [Option<(&'static str, Duration, workload::Outcome)>; clockhal::MAX_CANDIDATES] =
        [const { None }; clockhal::MAX_CANDIDATES];
    let mut all_forced = true;
    let report = clock.report();
    for (slot, c) in rows.iter_mut().zip(report.ranked()) {
        if !matches!(c.verdict, Verdict::Usable(_)) {
            continue;
        }
        let p0 = clock.now();
        if clock.force(c.id).is_err() || clock.source_id() != c.id {
            println!("  {}: could not be forced", c.name);
            all_forced = false;
            continue;
        }
        let switch_time = clock.elapsed(p0);
        let o = workload::run(ops, || clock.now().as_nanos(), || clock.now().as_nanos());
        *slot = Some((c.name, switch_time, o));
    }
    // Back to the selection.
    clock.unforce();

    let selected = report.get(selected_id).map_or("none", |c| c.name);
    let base = rows
        .iter()
        .flatten()
        .find(|(name, ..)| *name == selected)
        .map_or(0, |(_, _, o)| o.ops_per_sec());
    println!(
        "{:<12} {:>10} {:>10} {:>10} {:>12} {:>10}",
        "source", "ops/s", "ns/op", "t1-t0 ns", "vs selected", "switch us"
    );
    for (name, probe_time, o) in rows.iter().flatten() {
        let ops_s = o.ops_per_sec();
        // Ratio in hundredths, printed as x.yy.
        let ratio = (ops_s * 100).checked_div(base).unwrap_or(0);
        let mark = if *name == selected { " (selected)" } else { "" };
        println!(
            "{:<12} {:>10} {:>10} {:>10} {:>9}.{:02}x {:>10}{mark}",
            name,
            ops_s,
            o.elapsed_ns / u64::from(o.ops),
            o.timed_ns / u64::from(o.ops),
            ratio / 100,
            ratio % 100,
            probe_time.as_micros(),
        );
    }
    explain_ranking(clock, selected, base, &rows);
    all_forced
}

/// One line on why the selected clock can measure slower than another
/// usable source: the ranking is by correctness, and on a hypervisor that
/// emulates guest instructions every read costs what its instructions cost
/// there (measured here as an rdtsc, in TSC cycles).
fn explain_ranking(
    clock: &Clock<BootHw>,
    selected: &str,
    base: u64,
    rows: &[Option<(&'static str, Duration, workload::Outcome)>],
) {
    let Some((fastest, _, o)) = rows
        .iter()
        .flatten()
        .max_by_key(|(_, _, o)| o.ops_per_sec())
    else {
        return;
    };
    if *fastest == selected || o.ops_per_sec() <= base {
        return println!("why: {selected} is ranked first and measured fastest too");
    }
    let slower = (o.ops_per_sec() - base) * 100 / o.ops_per_sec();
    let note = clock
        .report()
        .ranked()
        .find(|c| c.name == *fastest)
        .map(|c| c.note);
    let hw = clock.hardware();
    let mut cost = [0u64; 21];
    for c in cost.iter_mut() {
        let t0 = hw.rdtsc();
        *c = hw.rdtsc().wrapping_sub(t0);
    }
    cost.sort_unstable();
    println!(
        "why: {selected} measured {slower}% slower than {fastest}: the ranking puts correctness first \
         ({fastest}: {}), and here one rdtsc costs {} TSC cycles (tens on hardware), so every read \
         is dominated by emulated instructions, a pvclock read's page loads and checks included",
        NoteText(note),
        cost[cost.len() / 2],
    );
}

/// A report note, or "no note".
struct NoteText(Option<clockhal::Note>);

impl core::fmt::Display for NoteText {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            Some(n) if n != clockhal::Note::None => write!(f, "{n}"),
            _ => f.write_str("no note"),
        }
    }
}
