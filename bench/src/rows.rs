//! The measured operations.

use clockhal_bench::host;
use clockhal_bench::hw::{Persona, UserHw};
use clockhal_bench::measure::Row;
use clockhal_core::{ClockSource, Frequency, Policy, Scale};
use clockhal_hyperv::{Hyperv, HypervConfig};
use clockhal_kvmclock::{read_area, Kvmclock, KvmclockConfig};
use clockhal_linux::LivePvclock;
use clockhal_sim::SharedMemory;
use clockhal_tsc::{RateProvenance, SyncStatus, Tsc, TscOptions};
use clockhal_x86::paravirt::{
    hv_next_sequence, hv_reference_scale, pvclock_time_scale, PVCLOCK_TSC_STABLE_BIT,
};
use clockhal_x86::{Hardware, Native};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Name of the baseline row every ratio is relative to.
pub const ORDERED_RDTSC: &str = "ordered rdtsc (Native::rdtsc_ordered)";

/// The rows, and the rows that could not be built here (with why).
pub struct Built {
    /// Rows to measure.
    pub rows: Vec<Row>,
    /// `"<name>: <reason>"` for each row left out.
    pub skipped: Vec<String>,
}

/// Builds every row for a TSC of `tsc_hz` Hz on a machine with `cpus` CPUs.
pub fn build(hw: Native, tsc_hz: u64, live: Option<LivePvclock>, cpus: usize) -> Built {
    let mut rows = vec![
        Row::new("rdtsc", move || hw.rdtsc()),
        Row::new(ORDERED_RDTSC, move || hw.rdtsc_ordered()),
        Row::new("rdtscp", move || hw.rdtscp().0),
    ];
    let mut skipped = Vec::new();
    let mut push = |name: &str, row: Result<Row, String>| match row {
        Ok(r) => rows.push(r),
        Err(why) => skipped.push(format!("{name}: {why}")),
    };

    const TSC: &str = "clockhal TSC -> ns (Tsc::read + Scale)";
    push(TSC, tsc_row(TSC, hw, tsc_hz));
    const FACADE: &str = "clockhal::Clock::now() (hosted, tsc)";
    push(FACADE, facade_row(FACADE, tsc_hz));
    const KVM_STABLE: &str = "clockhal kvmclock -> ns (stable page)";
    push(
        KVM_STABLE,
        kvmclock_row(KVM_STABLE, UserHw::new(Persona::Kvm), tsc_hz, Path::Stable),
    );
    const KVM_CLAMP: &str = "clockhal kvmclock -> ns (clamp, 1 thread)";
    push(
        KVM_CLAMP,
        kvmclock_row(KVM_CLAMP, UserHw::new(Persona::Kvm), tsc_hz, Path::Clamp),
    );
    const KVM_CLAMP2: &str = "clockhal kvmclock -> ns (clamp, 2 threads)";
    push(
        KVM_CLAMP2,
        if cpus >= 2 {
            kvmclock_row(
                KVM_CLAMP2,
                UserHw::new(Persona::Kvm),
                tsc_hz,
                Path::ClampContended,
            )
        } else {
            Err("needs 2 CPUs".into())
        },
    );
    const HV: &str = "clockhal Hyper-V page -> ns";
    push(
        HV,
        hyperv_row(HV, UserHw::new(Persona::Hyperv), tsc_hz, HvOut::Scale),
    );
    const LIVE: &str = "clockhal kvmclock (live page, read_area)";
    push(
        LIVE,
        live.map(|l| {
            let area = l.area();
            Row::new(LIVE, move || {
                read_area(area, || hw.rdtsc_ordered()).map_or(0, |t| t.ns)
            })
        })
        .ok_or_else(|| "no live pvclock page on this machine".to_string()),
    );

    rows.push(Row::new(
        "std::time::Instant::now()",
        std::time::Instant::now,
    ));
    rows.push(Row::new(
        "clock_gettime(CLOCK_MONOTONIC) (vDSO)",
        host::mono_ns,
    ));
    let _ = quanta::Instant::now(); // calibrates once, outside the timing
    rows.push(Row::new("quanta::Instant::now()", quanta::Instant::now));
    let _ = minstant::Instant::now();
    rows.push(Row::new("minstant::Instant::now()", minstant::Instant::now));

    // Diagnostics: where the time goes, and what ordering the TSC read with
    // rdtscp (as Linux and its vDSO do) instead of lfence would save.
    let mut diag = |name: &str, row: Result<Row, String>| match row {
        Ok(r) => rows.push(r),
        Err(why) => skipped.push(format!("{name}: {why}")),
    };
    const D_TSC: &str = "diag: clockhal TSC -> ns, rdtscp-ordered";
    const D_KVM: &str = "diag: clockhal kvmclock (stable), rdtscp-ordered";
    const D_HV: &str = "diag: clockhal Hyper-V page -> ns, rdtscp-ordered";
    let rdtscp = |p| UserHw::with_rdtscp_ordering(p).ok_or_else(|| "no RDTSCP".to_string());
    diag(
        D_TSC,
        rdtscp(Persona::Kvm).and_then(|h| tsc_row(D_TSC, h, tsc_hz)),
    );
    diag(
        D_KVM,
        rdtscp(Persona::Kvm).and_then(|h| kvmclock_row(D_KVM, h, tsc_hz, Path::Stable)),
    );
    diag(
        D_HV,
        rdtscp(Persona::Hyperv).and_then(|h| hyperv_row(D_HV, h, tsc_hz, HvOut::Scale)),
    );
    const D_HV_RAW: &str = "diag: clockhal Hyper-V page read (100 ns units)";
    diag(
        D_HV_RAW,
        hyperv_row(D_HV_RAW, UserHw::new(Persona::Hyperv), tsc_hz, HvOut::Units),
    );
    const D_MUL: &str = "diag: ordered rdtsc + one 0.64 multiply (no exact-floor fixup)";
    diag(
        D_MUL,
        if tsc_hz > 1_000_000_000 {
            // What a conversion costs without Scale's exact-floor correction:
            // ns = (ticks * floor(2^64 * 10^9 / hz)) >> 64, floor or one below.
            let m = ((1_000_000_000u128 << 64) / tsc_hz as u128) as u64;
            Ok(Row::new(D_MUL, move || {
                ((hw.rdtsc_ordered() as u128 * m as u128) >> 64) as u64
            }))
        } else {
            Err("only for TSCs above 1 GHz".into())
        },
    );
    const D_HV100: &str = "diag: clockhal Hyper-V page read x 100 (integer ratio)";
    diag(
        D_HV100,
        hyperv_row(
            D_HV100,
            UserHw::new(Persona::Hyperv),
            tsc_hz,
            HvOut::Times100,
        ),
    );
    const D_SCALE: &str = "diag: Scale::ticks_to_ns alone";
    diag(
        D_SCALE,
        Frequency::from_hz(tsc_hz)
            .map_err(|e| e.to_string())
            .map(|f| {
                let scale = Scale::new(f);
                let mut t = 1u64 << 40;
                Row::new(D_SCALE, move || {
                    t += 1;
                    scale.ticks_to_ns(black_box(t))
                })
            }),
    );
    Built { rows, skipped }
}

/// The TSC backend on the real TSC, rate given as a pvclock-exact hint, and
/// the conversion to ns a caller does with its `Scale`.
fn tsc_row<H: Hardware + 'static>(name: &str, hw: H, tsc_hz: u64) -> Result<Row, String> {
    let rate = Frequency::from_hz(tsc_hz).map_err(|e| e.to_string())?;
    let hints = [(rate, RateProvenance::Pvclock)];
    let opts = TscOptions {
        hints: &hints,
        sync: SyncStatus::SingleCpu,
        ..TscOptions::new()
    };
    let tsc = Tsc::probe(hw, &opts).map_err(|e| e.to_string())?;
    let scale = Scale::new(tsc.frequency());
    Ok(Row::new(name, move || scale.ticks_to_ns(tsc.read())))
}

/// The facade's hosted clock on the TSC, rate given the way hosted mode
/// takes it from the live pvclock page (`HostedTsc::with_rate`).
fn facade_row(name: &str, tsc_hz: u64) -> Result<Row, String> {
    use clockhal::hosted::{Hosted, HostedTsc, RateOrigin};
    let rate = Frequency::from_hz(tsc_hz).map_err(|e| e.to_string())?;
    let hosted = Hosted::with_tsc(
        HostedTsc::with_rate(rate, RateOrigin::Kvmclock),
        &Policy::new(),
    );
    let hosted: &'static Hosted = Box::leak(Box::new(hosted));
    let clock = hosted.clock().map_err(|e| format!("{e:?}"))?;
    if clock.source_name() != "tsc" {
        return Err(format!("hosted mode chose {}", clock.source_name()));
    }
    Ok(Row::new(name, move || clock.now()))
}

/// Which kvmclock read path a row times.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Path {
    /// Trusted stable bit: the fast path (loads the guard, no shared write).
    Stable,
    /// No stable bit: every read goes through the global clamp.
    Clamp,
    /// The clamp while a second thread on another CPU reads the same clock.
    ClampContended,
}

/// A `Kvmclock` probed on [`UserHw`] over an area written once with the
/// real TSC rate (stable flag set or not).
fn kvmclock_row(name: &str, hw: UserHw, tsc_hz: u64, path: Path) -> Result<Row, String> {
    let (mul, shift) = pvclock_time_scale(tsc_hz).ok_or("TSC rate out of range")?;
    let areas = SharedMemory::default().alloc_pvclock_areas(1);
    let flags = if path == Path::Stable {
        PVCLOCK_TSC_STABLE_BIT
    } else {
        0
    };
    let area = areas.element(0).ok_or("no area")?.get();
    // Written once, as a host with a stable master clock serves it between
    // its (rare) updates.
    area.publish(hw.rdtsc_ordered(), 1_000_000_000, mul, shift, flags);
    let clock = Kvmclock::probe(hw, KvmclockConfig::new(areas), &Policy::new())
        .map_err(|e| e.to_string())?;
    if clock.stable() != (path == Path::Stable) {
        return Err("kvmclock did not take the intended path".into());
    }
    let clock: &'static Kvmclock<UserHw> = Box::leak(Box::new(clock));
    let row = Row::new(name, move || clock.read());
    if path != Path::ClampContended {
        return Ok(row);
    }
    let hammer = Hammer::start(move || {
        black_box(clock.read());
    });
    Ok(row.with_around(move |on| hammer.set(on)))
}

/// A Hyper-V page clock probed on [`UserHw`] over a page written once with
/// the real TSC rate, and the conversion `out`.
fn hyperv_row(name: &str, hw: UserHw, tsc_hz: u64, out: HvOut) -> Result<Row, String> {
    let scale = hv_reference_scale(tsc_hz).ok_or("TSC rate out of range")?;
    let page = SharedMemory::default().alloc_hv_page();
    page.get().publish(hv_next_sequence(0), scale, 0);
    let hv = Hyperv::probe(
        hw,
        HypervConfig::new()
            .with_tsc_page(page)
            .with_guest_os_id(clockhal_hyperv::DEFAULT_GUEST_OS_ID),
        &Policy::new(),
    )
    .map_err(|e| e.to_string())?;
    if hv.page().is_none() {
        return Err(format!("page rejected: {:?}", hv.page_error()));
    }
    let hv: &'static Hyperv<UserHw> = Box::leak(Box::new(hv));
    let clock = hv.page().ok_or("no page clock")?;
    Ok(match out {
        HvOut::Scale => {
            let scale = Scale::new(clock.frequency());
            Row::new(name, move || scale.ticks_to_ns(clock.read()))
        }
        HvOut::Units => Row::new(name, move || clock.read()),
        HvOut::Times100 => Row::new(name, move || clock.read() * 100),
    })
}

/// What a Hyper-V row returns.
#[derive(Clone, Copy)]
enum HvOut {
    /// ns through `Scale::ticks_to_ns` (what a caller of the facade gets).
    Scale,
    /// The raw 100 ns units.
    Units,
    /// ns as `units * 100` (the ratio is an integer: no rounding to fix).
    Times100,
}

/// A thread on CPU 1 that calls `f` in a loop while switched on, and parks
/// while off. [`Hammer::set`] returns once the thread has seen the switch,
/// so a timed sample starts with the contention already on and other rows
/// run without it.
struct Hammer {
    on: &'static AtomicBool,
    seen: &'static AtomicU64,
    thread: std::thread::Thread,
}

impl Hammer {
    fn start(f: impl Fn() + Send + 'static) -> Hammer {
        let on: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
        let seen: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
        let handle = std::thread::spawn(move || {
            host::pin_to_cpu(1);
            let mut last = false;
            loop {
                let now = on.load(Ordering::Acquire);
                if now != last {
                    seen.fetch_add(1, Ordering::Release);
                    last = now;
                }
                if now {
                    for _ in 0..256 {
                        f();
                    }
                } else {
                    std::thread::park_timeout(Duration::from_millis(10));
                }
            }
        });
        Hammer {
            on,
            seen,
            thread: handle.thread().clone(),
        }
    }

    fn set(&self, on: bool) {
        let before = self.seen.load(Ordering::Acquire);
        self.on.store(on, Ordering::Release);
        self.thread.unpark();
        while self.seen.load(Ordering::Acquire) == before {
            std::hint::spin_loop();
        }
    }
}
