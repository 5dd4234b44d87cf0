//! The user clock page, proven in ring 3 (issue 19), and the one place this
//! kernel publishes it.
//!
//! Until the facade's `Clock` publishes the page itself, this module does,
//! from the probe result: the TSC (its probed rate), kvmclock (the area
//! this kernel registered for CPU 0, when its stable bit is trusted) and
//! "ask the kernel" (what the HPET and the PM timer would publish). On
//! every `tick` of the ring-3 program ([`crate::userprog`]) it moves to the
//! next of those sources, and each TSC publication changes the rate by
//! ±100 ppm. Ring 3 compares what it reads with the kernel's `Clock`
//! (`now` system call). One `CHECK ... name=user-page` line per
//! user-readable path: `tsc`, `kvmclock`.

use crate::userprog::{self, Args, Results, Shared, SYS_DONE, SYS_NOW, SYS_TICK};
use clockhal::x86::paravirt::PvclockVcpuTimeInfo;
use clockhal::x86::Hardware;
use clockhal::{Clock, ClockSource, Report, SourceId, Stamp};
use clockhal_boot::ring3::{self, Exit};
use clockhal_boot::BootHw;
use clockhal_conformance::{line, Status, Value};
use clockhal_user::{
    AskReason, ClockPage, ClockPageWriter, PageSource, Publication, TscRead, TscScale, WindowLayout,
};
use core::cell::UnsafeCell;
use core::fmt::Write;

/// The check's name in result lines.
pub const CHECK: &str = "user-page";

/// Most readings ring 3 takes, and how much page time it reads for (a
/// slow, loaded KVM host gives ~1,000 reads per second: enough for every
/// path's minimum with room).
const MAX_READS: u64 = 20_000;
const BUDGET_NS: u64 = 1_000_000_000;
/// A source switch or rate change every this many reads; a comparison with
/// the kernel clock every this many.
const TICK_EVERY: u64 = 64;
const COMPARE_EVERY: u64 = 16;
/// Fewest readings of a path for its check to mean something.
const MIN_PATH_READS: u64 = 100;
/// How far the page may be from the kernel clock, besides the anchoring
/// error of its publications (measured: half the bracket of a
/// midpoint-anchored one, 0 for one anchored through the clock's own map):
/// the TSC-rate error over one tick and the comparison's own reads.
const TOLERANCE_NS: u64 = 50_000;

/// User pages: the clock window (clock page, pvclock areas), the shared
/// page, the stack.
const WINDOW_PAGE: usize = 0;
const SHARED_PAGE: usize = 8;
const STACK_PAGES: core::ops::Range<usize> = 16..24;

static CLOCK_PAGE: ClockPage = ClockPage::new();

#[repr(C, align(4096))]
struct SharedPage(UnsafeCell<Shared>);
// SAFETY: the kernel touches it only while ring 3 is stopped (before
// `enter`, after `done`); ring 3 only while it runs.
unsafe impl Sync for SharedPage {}
static SHARED: SharedPage = SharedPage(UnsafeCell::new(Shared {
    args: Args {
        window: 0,
        max_reads: 0,
        budget_ns: 0,
        tick_every: 1,
        compare_every: 1,
    },
    results: Results {
        window_error: 0,
        reads: 0,
        paths: [userprog::PathStats {
            reads: 0,
            compares: 0,
            worst_ahead_ns: 0,
            worst_behind_ns: 0,
        }; 3],
        asks: 0,
        busy: 0,
        backward: 0,
        worst_backward_ns: 0,
        ticks: 0,
    },
}));

#[repr(C, align(4096))]
struct Stack(UnsafeCell<[u8; 8 * 4096]>);
// SAFETY: used only as ring 3's stack, while it runs.
unsafe impl Sync for Stack {}
static STACK: Stack = Stack(UnsafeCell::new([0; 8 * 4096]));

/// What the kernel publishes next.
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Tsc,
    Pvclock,
    AskKernel,
}

/// The kernel side: the writer and what it maps the page onto.
struct Publisher<'a> {
    hw: BootHw,
    clock: &'a Clock<BootHw>,
    writer: ClockPageWriter<'static>,
    tsc_scale: Option<TscScale>,
    kvmclock: Option<&'a dyn ClockSource>,
    states: [Option<State>; 3],
    next: usize,
    tsc_publications: u64,
    publish_errors: u64,
    anchors: Anchors,
}

/// How TSC publications were anchored on the kernel clock.
#[derive(Clone, Copy, Default)]
struct Anchors {
    /// Through the clock's own map at the TSC value (exact).
    exact: u64,
    /// By the bracket midpoint (the current source is not TSC-based).
    bracketed: u64,
    /// Largest |bracket midpoint - exact| seen, ns: what the midpoint
    /// would have been off by (the clock's read path costs more after its
    /// TSC read than before it; under `-icount` that is time).
    worst_midpoint_bias_ns: u64,
    /// Largest half-width of the bracket of a midpoint-anchored
    /// publication, per path (TSC, kvmclock), ns: how far its anchor may
    /// be off.
    worst_half_bracket_ns: [u64; 2],
}

impl Publisher<'_> {
    fn now(&self) -> u64 {
        self.clock.now().as_nanos()
    }

    /// A reading of `source` and the kernel clock at the same moment: the
    /// tightest of a few `clock, source, clock` triples (the midpoint of
    /// the clock readings), the latest clock reading, and the tightest
    /// bracket's width (the midpoint is off by at most half of it).
    fn anchor(&self, source: impl Fn() -> u64) -> (u64, u64, u64, u64) {
        let mut best = (0, 0, u64::MAX);
        let mut latest = 0;
        for _ in 0..5 {
            let before = self.now();
            let s = source();
            latest = self.now();
            if latest - before < best.2 {
                best = (s, before + (latest - before) / 2, latest - before);
            }
        }
        (best.0, best.1, latest, best.2)
    }

    /// Publishes the next available state, anchored on the kernel clock.
    fn tick(&mut self) {
        let state = loop {
            let s = self.states[self.next % 3];
            self.next += 1;
            if let Some(s) = s {
                break s;
            }
        };
        let (source, floor_ns) = match (state, self.tsc_scale, self.kvmclock) {
            (State::Tsc, Some(scale), _) => {
                let (tsc, mid, latest, width) = self.anchor(|| self.hw.rdtsc_ordered());
                // Where the clock's own map puts this TSC value, when the
                // clock reads the TSC (or a TSC-based source): exact. The
                // bracket midpoint assumes `now()` costs as much before its
                // TSC read as after it; it does not, and under `-icount`
                // (time = instructions) the difference put the page ~922
                // instructions behind the clock.
                let exact = self
                    .clock
                    .stamp_converter()
                    .and_then(|c| c.instant(Stamp::from_tsc(tsc)))
                    .map(|i| i.as_nanos());
                let now = match exact {
                    Some(e) => {
                        self.anchors.exact += 1;
                        self.anchors.worst_midpoint_bias_ns =
                            self.anchors.worst_midpoint_bias_ns.max(mid.abs_diff(e));
                        e
                    }
                    None => {
                        self.anchors.bracketed += 1;
                        let w = &mut self.anchors.worst_half_bracket_ns[0];
                        *w = (*w).max(width / 2);
                        mid
                    }
                };
                self.tsc_publications += 1;
                let scale = rate_change(scale, self.tsc_publications % 2 == 0);
                (PageSource::tsc_scaled(scale, tsc, now), latest)
            }
            (State::Pvclock, _, Some(kv)) => {
                let (pv, now, latest, width) = self.anchor(|| kv.read());
                let w = &mut self.anchors.worst_half_bracket_ns[1];
                *w = (*w).max(width / 2);
                let offset_ns = now.wrapping_sub(pv);
                (PageSource::Pvclock { area: 0, offset_ns }, latest)
            }
            _ => (
                PageSource::AskKernel(AskReason::NotUserReadable),
                self.now(),
            ),
        };
        let p = Publication {
            source,
            floor_ns,
            boot_wall_ns: None,
        };
        if self.writer.publish(&p).is_err() {
            self.publish_errors += 1;
        }
    }
}

/// `scale` 100 ppm slower (`faster: false`) or faster in ns per tick: the
/// rate change of alternate TSC publications. Near 1 GHz at shift 0 the
/// multiplier is within 100 ppm of 2^64 (`-icount`'s TSC runs at
/// 1,000,000,007.5 Hz): adding to it would wrap to ~0.01% of the rate, a
/// page that stands still at its floor (the lag that failed `user-page`
/// under `-icount`: the time since the publication, a fixed number of guest
/// instructions). Then one more bit of shift carries it.
fn rate_change(scale: TscScale, faster: bool) -> TscScale {
    let delta = scale.mul / 10_000;
    if !faster {
        return TscScale {
            mul: scale.mul - delta,
            ..scale
        };
    }
    match scale.mul.checked_add(delta) {
        Some(mul) => TscScale { mul, ..scale },
        None if scale.shift < 63 => TscScale {
            mul: scale.mul / 2 + delta / 2,
            shift: scale.shift + 1,
        },
        None => scale,
    }
}

/// How the ring-3 runs went.
struct Run {
    results: Results,
    /// Why the main run did not complete, if it did not.
    failure: Option<&'static str>,
    fault: Option<Exit>,
    /// The write to the window faulted as a user write to a present,
    /// read-only page, at the window's address.
    write_refused: bool,
    /// CLI at CPL3 raised #GP.
    privileged_refused: bool,
    publish_errors: u64,
    /// Per path: how far a publication's anchor may be off (half its
    /// bracket; 0 for anchors through the clock's own map).
    anchor_error_ns: [u64; 2],
}

/// Runs the ring-3 check and prints its lines; returns their statuses (to
/// add to the summary).
pub fn run(
    hw: BootHw,
    clock: Option<&Clock<BootHw>>,
    probe_report: &Report,
    pvclock: &'static [PvclockVcpuTimeInfo],
    pvclock_phys: u64,
) -> [Option<Status>; 2] {
    let tsc = clock.and_then(|c| c.source_of(SourceId::Tsc));
    // kvmclock as a page state: only when its stable bit is trusted.
    let kvmclock = clock
        .and_then(|c| c.kvmclock())
        .filter(|k| k.stable())
        .and(clock.and_then(|c| c.source_of(SourceId::Kvmclock)));
    let mut statuses = [None, None];
    let mut out = clockhal_boot::serial::lock();
    let Some(clock) = clock else {
        for (slot, (present, name)) in statuses.iter_mut().zip([
            (
                probe_report
                    .get(SourceId::Tsc)
                    .and_then(|c| c.descriptor())
                    .is_some(),
                "tsc",
            ),
            (
                probe_report
                    .get(SourceId::Kvmclock)
                    .and_then(|c| c.descriptor())
                    .is_some(),
                "kvmclock",
            ),
        ]) {
            if present {
                *slot = Some(Status::Skip);
                let _ = line::write_check_line(
                    &mut out,
                    name,
                    CHECK,
                    Status::Skip,
                    Value::None,
                    "ns",
                    format_args!("no kernel clock to compare ring 3 with"),
                );
            }
        }
        return statuses;
    };
    drop(out);
    let tsc_scale = tsc.and_then(|t| {
        let f = t.frequency();
        TscScale::from_hz(f.numerator(), f.denominator())
    });
    keep_ticking(clock);
    let run = ring3_run(hw, clock, tsc_scale, kvmclock, pvclock, pvclock_phys);
    let mut out = clockhal_boot::serial::lock();
    if let Some(t) = tsc {
        let status = match tsc_scale {
            Some(_) => report(&mut out, "tsc", 0, &run),
            None => {
                let _ = line::write_check_line(
                    &mut out,
                    "tsc",
                    CHECK,
                    Status::Skip,
                    Value::None,
                    "ns",
                    format_args!(
                        "TSC at {} Hz: no page TSC scale for this rate",
                        t.frequency().hz_rounded()
                    ),
                );
                Status::Skip
            }
        };
        statuses[0] = Some(status);
    }
    if clock.source_of(SourceId::Kvmclock).is_some() {
        let status = if kvmclock.is_some() {
            report(&mut out, "kvmclock", 1, &run)
        } else {
            let _ = line::write_check_line(
                &mut out,
                "kvmclock",
                CHECK,
                Status::Skip,
                Value::None,
                "ns",
                format_args!("stable bit not trusted: kvmclock is per-CPU, not a page state"),
            );
            Status::Skip
        };
        statuses[1] = Some(status);
    }
    statuses
}

/// Watchdog ticks until the clock's source held for `STILL` ticks, when it
/// is a supervised TSC. An OS ticks the watchdog from a timer; this kernel
/// has none, and the suite ran for seconds without a tick, so a supervised
/// TSC is past its deadline and the ring-3 run's first read would demote
/// it to the HPET (it did in every TCG boot): the page then published a
/// TSC anchored on the HPET through bracket midpoints. The run itself
/// (1 s of page time) stays within the 2 s supervision timeout.
fn keep_ticking(clock: &Clock<BootHw>) {
    const STILL: u32 = 6;
    const MAX_TICKS: u32 = 40;
    if !clock.supervised() {
        return;
    }
    let (mut last, mut still, mut ticks) = (clock.source_id(), 0, 0);
    while still < STILL && ticks < MAX_TICKS {
        let _ = clock.spin_for(clockhal::Duration::from_millis(250));
        clock.watchdog_tick();
        ticks += 1;
        let now = clock.source_id();
        still = if now == last { still + 1 } else { 0 };
        last = now;
    }
    clockhal_boot::println!(
        "kernel: user page: {ticks} watchdog ticks before the ring-3 run; clock on {}",
        clock.source_name()
    );
}

/// Sets up the window, runs the program and the two fault probes.
fn ring3_run(
    hw: BootHw,
    clock: &Clock<BootHw>,
    tsc_scale: Option<TscScale>,
    kvmclock: Option<&dyn ClockSource>,
    pvclock: &'static [PvclockVcpuTimeInfo],
    pvclock_phys: u64,
) -> Run {
    let mut run = Run {
        results: Results::default(),
        failure: None,
        fault: None,
        write_refused: false,
        privileged_refused: false,
        publish_errors: 0,
        anchor_error_ns: [0; 2],
    };
    if ring3::init().is_err() {
        run.failure = Some("ring 3 could not be set up");
        return run;
    }
    let (layout, areas) = if kvmclock.is_some() {
        let layout = WindowLayout {
            pvclock_page: 1,
            pvclock_areas: pvclock.len() as u32,
            hyperv_page: 0,
        };
        (layout, pvclock)
    } else {
        (WindowLayout::CLOCK_PAGE_ONLY, &[][..])
    };
    let Ok(writer) = ClockPageWriter::new(&CLOCK_PAGE, layout, areas, None, TscRead::detect())
    else {
        run.failure = Some("clock page writer refused the window");
        return run;
    };
    let mapped = (|| {
        // SAFETY: the clock page, the pvclock page (its own page-aligned
        // static), the shared page and the stack are statics reserved for
        // ring 3 (identity mapped: physical = virtual); the window is
        // read-only; nothing else maps these user pages.
        unsafe {
            ring3::map_user_page(WINDOW_PAGE, &CLOCK_PAGE as *const ClockPage as u64, false)?;
            if layout.pvclock_page != 0 {
                ring3::map_user_page(WINDOW_PAGE + 1, pvclock_phys, false)?;
            }
            ring3::map_user_page(SHARED_PAGE, SHARED.0.get() as u64, true)?;
            for (i, page) in STACK_PAGES.enumerate() {
                ring3::map_user_page(page, STACK.0.get() as u64 + i as u64 * 4096, true)?;
            }
        }
        Ok::<(), ring3::Ring3Error>(())
    })();
    if mapped.is_err() {
        run.failure = Some("user pages could not be mapped");
        return run;
    }
    let mut publisher = Publisher {
        hw,
        clock,
        writer,
        tsc_scale,
        kvmclock,
        states: [
            tsc_scale.map(|_| State::Tsc),
            kvmclock.map(|_| State::Pvclock),
            Some(State::AskKernel),
        ],
        next: 0,
        tsc_publications: 0,
        publish_errors: 0,
        anchors: Anchors::default(),
    };
    let (source_before, switches_before) = (clock.source_name(), clock.switches());
    publisher.tick();
    let window = ring3::user_addr(WINDOW_PAGE);
    // SAFETY: ring 3 is not running: the kernel is the only user.
    unsafe {
        (*SHARED.0.get()).args = Args {
            window,
            max_reads: MAX_READS,
            budget_ns: BUDGET_NS,
            tick_every: TICK_EVERY,
            compare_every: COMPARE_EVERY,
        };
    }
    let stack_top = ring3::user_addr(STACK_PAGES.end);
    let mut exit = ring3::enter(userprog::main, ring3::user_addr(SHARED_PAGE), stack_top);
    loop {
        exit = match exit {
            Ok(Exit::Syscall { nr: SYS_NOW, .. }) => ring3::resume(publisher.now()),
            Ok(Exit::Syscall { nr: SYS_TICK, .. }) => {
                publisher.tick();
                ring3::resume(0)
            }
            Ok(Exit::Syscall { nr: SYS_DONE, .. }) => {
                ring3::abandon();
                break;
            }
            Ok(Exit::Syscall { .. }) => {
                ring3::abandon();
                run.failure = Some("unknown system call");
                break;
            }
            Ok(fault @ Exit::Fault { .. }) => {
                run.failure = Some("ring 3 faulted");
                run.fault = Some(fault);
                break;
            }
            Err(_) => {
                run.failure = Some("ring 3 could not be entered");
                break;
            }
        };
    }
    run.publish_errors = publisher.publish_errors;
    let a = publisher.anchors;
    run.anchor_error_ns = a.worst_half_bracket_ns;
    clockhal_boot::println!(
        "kernel: user page: {} TSC publications anchored by the clock's map, {} by a bracket midpoint; the midpoint was off by up to {} ns; clock on {source_before} before the run, on {} after, {} switches in it",
        a.exact,
        a.bracketed,
        a.worst_midpoint_bias_ns,
        clock.source_name(),
        clock.switches().wrapping_sub(switches_before)
    );
    // SAFETY: ring 3 has stopped for good.
    run.results = unsafe { (*SHARED.0.get()).results };

    // A user write to the window must fault: present (bit 0), write
    // (bit 1), user (bit 2), at the window's address.
    if let Ok(Exit::Fault {
        vector: 14,
        error,
        cr2,
        ..
    }) = ring3::enter(userprog::write_window, window, stack_top)
    {
        run.write_refused = error & 7 == 7 && cr2 == window;
    }
    if let Ok(Exit::Fault { vector: 13, .. }) = ring3::enter(userprog::privileged, 0, stack_top) {
        run.privileged_refused = true;
    }
    run
}

/// Prints the CHECK line for path `path` (0 TSC, 1 kvmclock) under
/// `source`, and returns its status.
fn report(out: &mut dyn Write, source: &str, path: usize, run: &Run) -> Status {
    let r = &run.results;
    let p = &r.paths[path];
    let worst = p.worst_ahead_ns.max(p.worst_behind_ns);
    // The fixed allowance plus how far this path's anchors may be off.
    let tolerance = TOLERANCE_NS + run.anchor_error_ns[path];
    let problem = if let Some(f) = run.failure {
        Some(f)
    } else if r.window_error != 0 {
        Some("the ring-3 reader refused the window")
    } else if run.publish_errors != 0 {
        Some("a publication was refused")
    } else if r.backward != 0 {
        Some("a page reading went backwards")
    } else if p.reads < MIN_PATH_READS || p.compares == 0 {
        Some("too few readings on this path")
    } else if worst > tolerance {
        Some("the page disagrees with the kernel clock")
    } else if !run.write_refused {
        Some("a ring-3 write to the clock window did not fault as read-only")
    } else if !run.privileged_refused {
        Some("CLI in ring 3 did not raise #GP")
    } else {
        None
    };
    let status = if problem.is_some() {
        Status::Fail
    } else {
        Status::Pass
    };
    let _ = line::write_check_line(
        out,
        source,
        CHECK,
        status,
        Value::U64(worst),
        "ns",
        format_args!(
            "{}ring 3: {} reads ({} tsc, {} kvmclock, {} ask-kernel, {} busy) over {} switches/rate changes; {} backward (worst {} ns); this path: {} reads, page vs kernel clock +{}/-{} ns over {} comparisons (tolerance {} ns); window write {}, CLI {}{}",
            Prefix(problem),
            r.reads,
            r.paths[0].reads,
            r.paths[1].reads,
            r.asks,
            r.busy,
            r.ticks,
            r.backward,
            r.worst_backward_ns,
            p.reads,
            p.worst_ahead_ns,
            p.worst_behind_ns,
            p.compares,
            tolerance,
            if run.write_refused { "#PF (read-only)" } else { "NOT refused" },
            if run.privileged_refused { "#GP" } else { "NOT refused" },
            FaultNote(run.fault),
        ),
    );
    status
}

/// `"{problem}: "`, or nothing.
struct Prefix(Option<&'static str>);

impl core::fmt::Display for Prefix {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            Some(p) => write!(f, "{p}: "),
            None => Ok(()),
        }
    }
}

/// The unexpected ring-3 fault, if there was one.
struct FaultNote(Option<Exit>);

impl core::fmt::Display for FaultNote {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            Some(Exit::Fault {
                vector,
                error,
                rip,
                cr2,
            }) => write!(
                f,
                "; ring-3 fault: vector {vector} error {error:#x} rip {rip:#x} cr2 {cr2:#x}"
            ),
            _ => Ok(()),
        }
    }
}
