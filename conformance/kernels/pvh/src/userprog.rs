//! The ring-3 program: what a user process of an OS using clockhal-user
//! does. It reads the clock window the kernel mapped (read-only) in a loop,
//! falls back to its system call when the page says so, asks the kernel to
//! switch sources every few reads, and compares the page with the kernel's
//! clock. Touches only user memory: the window, its stack, and the shared
//! page (arguments in, results out).

use clockhal_boot::ring3::syscall;
use clockhal_user::{AskKernel, Source, UserClock};

/// `now`: the kernel clock's nanoseconds.
pub const SYS_NOW: u64 = 1;
/// `tick`: the kernel's next clock event (source switch or rate change).
pub const SYS_TICK: u64 = 2;
/// `done`: the results are in the shared page; do not resume.
pub const SYS_DONE: u64 = 3;

/// What the kernel tells the program (start of the shared page).
#[repr(C)]
pub struct Args {
    /// User address of the clock window.
    pub window: u64,
    /// Most reads.
    pub max_reads: u64,
    /// Stop once the page's time has advanced this much (ns).
    pub budget_ns: u64,
    /// A `tick` every this many reads.
    pub tick_every: u64,
    /// A page / kernel / page comparison every this many reads.
    pub compare_every: u64,
}

/// Per path (TSC, kvmclock, Hyper-V page) counts.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PathStats {
    /// Page readings from this path.
    pub reads: u64,
    /// Comparisons with the kernel clock.
    pub compares: u64,
    /// Worst page reading above the kernel clock read after it (ns).
    pub worst_ahead_ns: u64,
    /// Worst kernel clock reading above the page reading after it (ns).
    pub worst_behind_ns: u64,
}

/// What the program reports (after [`Args`] in the shared page).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Results {
    /// 1 if the reader refused the window (0 otherwise).
    pub window_error: u64,
    /// Loop iterations.
    pub reads: u64,
    /// TSC, kvmclock, Hyper-V page.
    pub paths: [PathStats; 3],
    /// "Ask the kernel" answers (the page's state, or a failed check).
    pub asks: u64,
    /// Of those, the page (or a hypervisor page) mid-update too long.
    pub busy: u64,
    /// Page readings below an earlier page reading.
    pub backward: u64,
    /// The largest such step (ns).
    pub worst_backward_ns: u64,
    /// `tick`s made.
    pub ticks: u64,
}

/// The shared page's layout.
#[repr(C)]
pub struct Shared {
    /// In.
    pub args: Args,
    /// Out.
    pub results: Results,
}

fn sys(nr: u64, a0: u64) -> u64 {
    // SAFETY: only called from `main`, which runs at CPL3 under
    // `ring3::enter`.
    unsafe { syscall(nr, [a0, 0, 0]) }
}

fn index(s: Source) -> usize {
    match s {
        Source::Tsc => 0,
        Source::Pvclock => 1,
        Source::HypervPage => 2,
    }
}

/// The ring-3 entry: `shared` is the user address of the shared page.
pub extern "C" fn main(shared: u64) -> ! {
    // SAFETY: the kernel maps the shared page writable for ring 3 at this
    // address, laid out as `Shared`, and does not touch it while ring 3 runs.
    let shared = unsafe { &mut *(shared as *mut Shared) };
    let args = &shared.args;
    let r = &mut shared.results;
    *r = Results::default();
    // SAFETY: the kernel mapped the clock window (and the pages its header
    // names) readable at `args.window` for the whole run.
    let clock = match unsafe { UserClock::from_window(args.window as usize) } {
        Ok(c) => c,
        Err(_) => {
            r.window_error = 1;
            done()
        }
    };
    let (mut prev, mut first) = (0u64, None);
    while r.reads < args.max_reads {
        r.reads += 1;
        match clock.read() {
            Ok(reading) => {
                let v = reading.clock_ns;
                let path = index(reading.source);
                r.paths[path].reads += 1;
                if v < prev {
                    r.backward += 1;
                    r.worst_backward_ns = r.worst_backward_ns.max(prev - v);
                }
                prev = prev.max(v);
                let start = *first.get_or_insert(v);
                if v.saturating_sub(start) > args.budget_ns {
                    break;
                }
                if r.reads % args.compare_every == 0 {
                    // page, then kernel, then page: each no later than the next.
                    let k = sys(SYS_NOW, 0);
                    let p = &mut r.paths[path];
                    p.compares += 1;
                    p.worst_ahead_ns = p.worst_ahead_ns.max(v.saturating_sub(k));
                    if let Ok(after) = clock.read() {
                        p.worst_behind_ns = p.worst_behind_ns.max(k.saturating_sub(after.clock_ns));
                    }
                }
            }
            Err(why) => {
                r.asks += 1;
                if why == AskKernel::Busy {
                    r.busy += 1;
                }
                let _ = sys(SYS_NOW, 0);
            }
        }
        if r.reads % args.tick_every == 0 {
            r.ticks += 1;
            sys(SYS_TICK, 0);
        }
    }
    done()
}

/// `done`, which the kernel never resumes.
fn done() -> ! {
    sys(SYS_DONE, 0);
    loop {
        core::hint::spin_loop();
    }
}

/// A ring-3 write to the (read-only) clock window: must fault (#PF).
pub extern "C" fn write_window(window: u64) -> ! {
    // SAFETY: deliberately wrong: the kernel maps the window read-only, so
    // the CPU refuses the write (a page fault the kernel recovers from).
    unsafe { core::ptr::write_volatile(window as *mut u32, 0) };
    done()
}

/// A privileged instruction at CPL3: must fault (#GP).
pub extern "C" fn privileged(_: u64) -> ! {
    // SAFETY: deliberately wrong: CLI at CPL3 with IOPL 0 raises #GP, which
    // the kernel recovers from.
    unsafe { core::arch::asm!("cli", options(nomem, nostack)) };
    done()
}
