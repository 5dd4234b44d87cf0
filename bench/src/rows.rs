//! The measured operations: every row of the read-cost table, built once
//! for timing (`clockhal-bench`) or for counting instructions under
//! valgrind (`clockhal-read-count`, [`crate::count`]).
//!
//! Rows are built in this library (not in a binary) so that the code each
//! row runs is compiled once, here: the timed and the counted loops are the
//! same machine code.
//!
//! The clockhal rows run as a one-CPU kernel reads (`UserHw::one_cpu`: the
//! per-CPU floor raised with the interrupt-safe unlocked `cmpxchg`), unless
//! a row's name says otherwise (the clamp rows: one "CPU" per thread; the
//! diagnostic without a CPU index: the locked floor hosted threads share).

use crate::host;
use crate::hw::{Persona, UserHw};
use crate::measure::Row;
use clockhal::{Platform, SourceId};
use clockhal_core::{
    ClampGranule, ClockSource, Frequency, MapSlot, Migration, Policy, Scale, SlotEntry, TscMap,
};
use clockhal_hyperv::{Hyperv, HypervConfig};
use clockhal_kvmclock::{read_area, Kvmclock, KvmclockConfig};
use clockhal_linux::LivePvclock;
use clockhal_sim::SharedMemory;
use clockhal_tsc::{RateProvenance, SyncStatus, Tsc, TscOptions};
use clockhal_user::TscRead;
use clockhal_x86::paravirt::{
    hv_next_sequence, hv_reference_scale, pvclock_time_scale, PVCLOCK_TSC_STABLE_BIT,
};
use clockhal_x86::{cpu_local_max, CpuIndex, Hardware, Native};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Name of the baseline row every ratio is relative to.
pub const ORDERED_RDTSC: &str = "ordered rdtsc (Native::rdtsc_ordered)";

/// Name of the row that only counts loop overhead (count mode only): the
/// batch loop around a call that returns a constant.
pub const LOOP: &str = "loop overhead (black_box(0))";

/// `Clock::now()` built by `clockhal::probe()` on the TSC.
pub const FACADE_TSC: &str = "clockhal::Clock::now() via probe (tsc)";
/// `Clock::now()` built by `clockhal::probe()` on kvmclock, stable page.
pub const FACADE_KVM: &str = "clockhal::Clock::now() via probe (kvmclock, stable page)";
/// `Clock::now()` built by `clockhal::probe()` on the Hyper-V page.
pub const FACADE_HV: &str = "clockhal::Clock::now() via probe (Hyper-V page)";

/// The TSC backend's read and the caller's conversion to ns.
pub const TSC: &str = "clockhal TSC -> ns (Tsc::read + Scale)";
/// kvmclock's own read, stable page.
pub const KVM_STABLE: &str = "clockhal kvmclock -> ns (stable page)";
/// kvmclock's own read without the stable bit (the global clamp).
pub const KVM_CLAMP: &str = "clockhal kvmclock -> ns (clamp, 1 thread)";
/// The same through a clamp of 1024 ns resolution
/// (`KvmclockConfig::with_clamp_granule`, `Platform::clamp_granule`).
pub const KVM_COARSE: &str = "clockhal kvmclock -> ns (clamp, 1024 ns granule, 1 thread)";
/// A ring-3 read of the OS's clock page.
pub const USER: &str = "clockhal-user clock page (ClockReader::now, TSC state)";
/// The Hyper-V page clock's read (nanoseconds already: the page's 100 ns
/// units interpolated by the TSC through the validated map).
pub const HV: &str = "clockhal Hyper-V page -> ns";
/// `Clock::stamp()`: the unordered TSC stamp for tracing.
pub const STAMP: &str = "clockhal::Clock::stamp() (unordered, for tracing)";

/// `Clock::now()` built by `clockhal::probe()` on the TSC for an SMP
/// kernel: the CPU index given by `Native::with_cpu` (an inlined
/// thread-local load, [`crate::hw::ThreadLocalCpu`]).
pub const FACADE_SMP: &str = "clockhal::Clock::now() via probe (tsc, SMP: with_cpu)";
/// The same on kvmclock (stable page): the token is the CPU's own pvclock
/// area; the trusted stable bit orders the entries across CPUs, so the
/// index is not taken again after the TSC read.
pub const FACADE_KVM_SMP: &str =
    "clockhal::Clock::now() via probe (kvmclock, stable page, SMP: with_cpu)";
/// Hosted `Clock::now()` on the TSC (the CPU index is a thread-local).
pub const HOSTED: &str = "clockhal::Clock::now() (hosted, tsc)";
/// The least a checked read costs ([`crate::lean`]): the seqlocked
/// per-CPU line, the window, the unlocked-`cmpxchg` floor.
pub const LEAN: &str = "diag: least checked read";
/// The same with the source's token on a second, host-written line.
pub const LEAN_TOKEN: &str = "diag: least checked read + token line";
/// The least read on clockhal's own per-CPU line (`MapSlot::read_raised`:
/// epoch, 64.64 map), without the facade around it.
pub const SLOT_ONLY: &str = "diag: MapSlot::read_raised alone (clockhal's line, rdtscp)";

/// The clockhal fast paths whose instructions per read have a budget
/// (`bench/instruction-budgets.json`).
pub const BUDGETED: &[&str] = &[
    FACADE_TSC,
    FACADE_KVM,
    FACADE_HV,
    FACADE_SMP,
    FACADE_KVM_SMP,
    HOSTED,
    TSC,
    KVM_STABLE,
    KVM_CLAMP,
    KVM_COARSE,
    HV,
    USER,
    STAMP,
    LEAN,
    LEAN_TOKEN,
];

/// Why the contended rows have no instruction count.
const CONTENTION: &str =
    "contention is a timing effect (valgrind runs one thread at a time); the 1-thread row counts the path";
/// The exact clamp (the default).
const EXACT: ClampGranule = ClampGranule::EXACT;
/// The 1024 ns clamp of the coarse rows.
const COARSE: ClampGranule = match ClampGranule::from_log2(10) {
    Some(g) => g,
    None => panic!("2^10 is a valid granule"),
};

/// What the rows are built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Every row, for `clockhal-bench`'s timing.
    Timing,
    /// Only rows whose instructions valgrind can count (plus [`LOOP`]).
    Count,
}

/// The rows, and the rows that could not be built here (with why).
pub struct Built {
    /// Rows to measure.
    pub rows: Vec<Row>,
    /// `"<name>: <reason>"` for each row left out.
    pub skipped: Vec<String>,
    /// `(name, why)` of every row whose instructions are not counted.
    pub uncounted: Vec<(String, String)>,
}

/// What every row is built from.
pub struct Inputs {
    /// The real instructions.
    pub hw: Native,
    /// The real TSC rate in Hz.
    pub tsc_hz: u64,
    /// The kernel's live pvclock page, if any.
    pub live: Option<LivePvclock>,
    /// CPUs this process may run on.
    pub cpus: usize,
}

/// Whether valgrind can count a row's instructions, and if not, why.
type Countable = Result<(), &'static str>;
const COUNTED: Countable = Ok(());
const NO_VDSO: &str = "reads the host's CLOCK_MONOTONIC through rustix's vDSO lookup, which faults under valgrind (rustix issue 1559)";

/// Collects rows as they are built.
struct Rows {
    mode: Mode,
    built: Built,
}

impl Rows {
    /// Adds the row `make` builds, unless this is a count run and the row
    /// cannot be counted (`countable`).
    fn add(
        &mut self,
        name: &str,
        countable: Countable,
        make: impl FnOnce() -> Result<Row, String>,
    ) {
        if let Err(why) = countable {
            self.built
                .uncounted
                .push((name.to_string(), why.to_string()));
            if self.mode == Mode::Count {
                return;
            }
        }
        match make() {
            Ok(r) => self.built.rows.push(r),
            Err(why) => self.built.skipped.push(format!("{name}: {why}")),
        }
    }
}

/// Builds every row of `mode` for a TSC of `tsc_hz` Hz.
pub fn build(input: Inputs, mode: Mode) -> Built {
    let Inputs {
        hw,
        tsc_hz,
        live,
        cpus,
    } = input;
    let mut r = Rows {
        mode,
        built: Built {
            rows: Vec::new(),
            skipped: Vec::new(),
            uncounted: Vec::new(),
        },
    };
    if mode == Mode::Count {
        r.add(LOOP, COUNTED, || Ok(Row::new(LOOP, || 0u64)));
    }
    r.add("rdtsc", COUNTED, || {
        Ok(Row::new("rdtsc", move || hw.rdtsc()))
    });
    r.add(ORDERED_RDTSC, COUNTED, || {
        Ok(Row::new(ORDERED_RDTSC, move || hw.rdtsc_ordered()))
    });
    r.add("rdtscp", COUNTED, || {
        Ok(Row::new("rdtscp", move || hw.rdtscp().0))
    });

    r.add(TSC, COUNTED, || {
        tsc_row(TSC, UserHw::one_cpu(Persona::Kvm), tsc_hz)
    });
    r.add(FACADE_TSC, COUNTED, || {
        facade_row(FACADE_TSC, Facade::Tsc, UserHw::one_cpu, tsc_hz)
    });
    r.add(FACADE_KVM, COUNTED, || {
        facade_row(FACADE_KVM, Facade::Kvmclock, UserHw::one_cpu, tsc_hz)
    });
    r.add(FACADE_HV, COUNTED, || {
        facade_row(FACADE_HV, Facade::HypervPage, UserHw::one_cpu, tsc_hz)
    });
    r.add(STAMP, COUNTED, || {
        let clock: &'static clockhal::Clock<_> = Box::leak(Box::new(facade_clock(
            Facade::Tsc,
            UserHw::one_cpu,
            tsc_hz,
        )?));
        clock
            .stamp_converter()
            .ok_or("no stamp converter on the TSC")?;
        Ok(Row::new(STAMP, move || clock.stamp()))
    });
    r.add(FACADE_SMP, COUNTED, || {
        facade_row(FACADE_SMP, Facade::Tsc, UserHw::smp, tsc_hz)
    });
    r.add(FACADE_KVM_SMP, COUNTED, || {
        facade_row(FACADE_KVM_SMP, Facade::Kvmclock, UserHw::smp, tsc_hz)
    });
    r.add(HOSTED, COUNTED, || hosted_row(HOSTED, tsc_hz, mode));
    r.add(KVM_STABLE, COUNTED, || {
        kvmclock_row(
            KVM_STABLE,
            UserHw::one_cpu(Persona::Kvm),
            tsc_hz,
            Path::Stable,
            EXACT,
        )
    });
    r.add(KVM_CLAMP, COUNTED, || {
        kvmclock_row(
            KVM_CLAMP,
            UserHw::per_thread(Persona::Kvm),
            tsc_hz,
            Path::Clamp,
            EXACT,
        )
    });
    const KVM_CLAMP2: &str = "clockhal kvmclock -> ns (clamp, 2 threads)";
    r.add(KVM_CLAMP2, Err(CONTENTION), || {
        if cpus < 2 {
            return Err("needs 2 CPUs".into());
        }
        kvmclock_row(
            KVM_CLAMP2,
            UserHw::per_thread(Persona::Kvm),
            tsc_hz,
            Path::ClampContended,
            EXACT,
        )
    });
    r.add(KVM_COARSE, COUNTED, || {
        let hw = UserHw::per_thread(Persona::Kvm);
        kvmclock_row(KVM_COARSE, hw, tsc_hz, Path::Clamp, COARSE)
    });
    const KVM_COARSE2: &str = "clockhal kvmclock -> ns (clamp, 1024 ns granule, 2 threads)";
    r.add(KVM_COARSE2, Err(CONTENTION), || {
        if cpus < 2 {
            return Err("needs 2 CPUs".into());
        }
        let hw = UserHw::per_thread(Persona::Kvm);
        kvmclock_row(KVM_COARSE2, hw, tsc_hz, Path::ClampContended, COARSE)
    });
    r.add(USER, COUNTED, || user_page_row(USER, tsc_hz));
    r.add(HV, COUNTED, || {
        hyperv_row(HV, UserHw::one_cpu(Persona::Hyperv), tsc_hz)
    });
    const LIVE: &str = "clockhal kvmclock (live page, read_area)";
    r.add(
        LIVE,
        Err("the kernel's live page is not mapped under valgrind; the stable-page rows count the same decoding"),
        || {
            live.map(|l| {
                let area = l.area();
                Row::new(LIVE, move || {
                    read_area(area, || hw.rdtsc_ordered()).map_or(0, |t| t.ns)
                })
            })
            .ok_or_else(|| "no live pvclock page on this machine".to_string())
        },
    );

    const STD: &str = "std::time::Instant::now()";
    r.add(STD, Err(NO_VDSO), || {
        Ok(Row::new(STD, std::time::Instant::now))
    });
    const VDSO: &str = "clock_gettime(CLOCK_MONOTONIC) (vDSO)";
    r.add(VDSO, Err(NO_VDSO), || Ok(Row::new(VDSO, host::mono_ns)));
    const QUANTA: &str = "quanta::Instant::now()";
    r.add(QUANTA, Err("not clockhal"), || {
        let _ = quanta::Instant::now(); // calibrates once, outside the timing
        Ok(Row::new(QUANTA, quanta::Instant::now))
    });
    const MINSTANT: &str = "minstant::Instant::now()";
    r.add(MINSTANT, Err("not clockhal"), || {
        let _ = minstant::Instant::now();
        Ok(Row::new(MINSTANT, minstant::Instant::now))
    });

    // Diagnostics: where the time goes, and what ordering the TSC read with
    // rdtscp (as Linux and its vDSO do) instead of lfence would save.
    const D_TSC: &str = "diag: clockhal TSC -> ns, rdtscp-ordered";
    const D_KVM: &str = "diag: clockhal kvmclock (stable), rdtscp-ordered";
    const D_HV: &str = "diag: clockhal Hyper-V page -> ns, rdtscp-ordered";
    let rdtscp = |p| {
        UserHw::one_cpu(p)
            .with_rdtscp_ordering()
            .ok_or_else(|| "no RDTSCP".to_string())
    };
    r.add(D_TSC, COUNTED, || {
        rdtscp(Persona::Kvm).and_then(|h| tsc_row(D_TSC, h, tsc_hz))
    });
    r.add(D_KVM, COUNTED, || {
        rdtscp(Persona::Kvm).and_then(|h| kvmclock_row(D_KVM, h, tsc_hz, Path::Stable, EXACT))
    });
    r.add(D_HV, COUNTED, || {
        rdtscp(Persona::Hyperv).and_then(|h| hyperv_row(D_HV, h, tsc_hz))
    });
    const D_MUL: &str = "diag: ordered rdtsc + one 0.64 multiply (no exact-floor fixup)";
    r.add(D_MUL, COUNTED, || {
        if tsc_hz <= 1_000_000_000 {
            return Err("only for TSCs above 1 GHz".into());
        }
        // What a conversion costs without Scale's exact-floor correction:
        // ns = (ticks * floor(2^64 * 10^9 / hz)) >> 64, floor or one below.
        let m = ((1_000_000_000u128 << 64) / tsc_hz as u128) as u64;
        Ok(Row::new(D_MUL, move || {
            ((hw.rdtsc_ordered() as u128 * m as u128) >> 64) as u64
        }))
    });
    // The least any checked TSC-based read can cost here: the ordered
    // read, the 64.64 map every TSC-based source is reduced to, and the
    // interrupt-safe per-CPU floor; no slot, no token, no checks.
    const D_FLOOR: &str = "diag: ordered rdtsc + TscMap + CPU-local floor (no checks)";
    r.add(D_FLOOR, COUNTED, || {
        let f = Frequency::from_hz(tsc_hz).map_err(|e| e.to_string())?;
        let map = TscMap::through(&Scale::new(f), 0, 0);
        let floor: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
        Ok(Row::new(D_FLOOR, move || {
            cpu_local_max(floor, map.apply(hw.rdtsc_ordered()))
        }))
    });
    // The least a checked read costs (issue 27's references): see
    // `crate::lean`. Each row has a clock of its own.
    r.add(LEAN, COUNTED, || lean_row::<false>(LEAN, tsc_hz));
    r.add(LEAN_TOKEN, COUNTED, || lean_row::<true>(LEAN_TOKEN, tsc_hz));
    r.add(SLOT_ONLY, COUNTED, || slot_row(SLOT_ONLY, tsc_hz));
    // Without a CPU index (hosted threads that migrate) the per-CPU floor
    // is shared and raised with a locked instruction.
    const D_TSC_SHARED: &str = "diag: clockhal TSC -> ns, no CPU index (locked floor)";
    r.add(D_TSC_SHARED, COUNTED, || {
        tsc_row(D_TSC_SHARED, UserHw::new(Persona::Kvm), tsc_hz)
    });
    const D_SCALE: &str = "diag: Scale::ticks_to_ns alone";
    r.add(D_SCALE, COUNTED, || {
        let f = Frequency::from_hz(tsc_hz).map_err(|e| e.to_string())?;
        let scale = Scale::new(f);
        let mut t = 1u64 << 40;
        Ok(Row::new(D_SCALE, move || {
            t += 1;
            scale.ticks_to_ns(black_box(t))
        }))
    });
    r.built
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
/// takes it from the live pvclock page.
///
/// Counted (`Mode::Count`, under valgrind) on a clock probed with the same
/// [`HostedHw`](clockhal::hosted::HostedHw) and the TSC forced, but without
/// hosted mode's `CLOCK_MONOTONIC_RAW` candidate and watchdog reference:
/// hosted mode's probe reads that clock through rustix's vDSO lookup,
/// which faults under valgrind (rustix issue 1559). The read is the same
/// function (`Clock<HostedHw>::now`, this row's closure) on the same
/// selected source; `bench/trace-read.py` traces the timed clock for
/// comparison.
fn hosted_row(name: &str, tsc_hz: u64, mode: Mode) -> Result<Row, String> {
    let rate = Frequency::from_hz(tsc_hz).map_err(|e| e.to_string())?;
    let probed = match mode {
        Mode::Timing => clockhal::hosted::probe_with_rate(&Policy::new(), Some(rate)),
        Mode::Count => {
            let policy = Policy::new().force("tsc");
            let platform = Platform::new().tsc_rate(rate).policy(policy);
            clockhal::probe(clockhal::hosted::HostedHw::new(), platform)
        }
    };
    let clock = probed.into_clock().map_err(|e| e.to_string())?;
    let clock: &'static clockhal::Clock<_> = Box::leak(Box::new(clock));
    if clock.source_name() != "tsc" {
        return Err(format!("hosted mode chose {}", clock.source_name()));
    }
    Ok(Row::new(name, move || clock.now()))
}

/// Which source a [`facade_clock`] runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Facade {
    /// The TSC of a machine without hypervisor, rate stated by the OS,
    /// forced (`Policy::force("tsc")`: selected whatever CPUID says, also
    /// under valgrind's synthetic CPUID, and never switched away from).
    Tsc,
    /// kvmclock on one area with the stable bit (CPUID grants it).
    Kvmclock,
    /// The Hyper-V reference TSC page (the partition offers only it).
    HypervPage,
}

/// `Clock::now()` as a kernel gets it: `clockhal::probe()` on the
/// [`UserHw`] `hw` makes for the source's persona ([`UserHw::one_cpu`]
/// for a one-CPU kernel, [`UserHw::smp`] for an SMP one), with the clock
/// memory written once, before the probe, with the real TSC rate (as a
/// host with a stable master clock serves it between its rare updates),
/// then `into_clock()`. The clock's current source must be the intended
/// one.
///
/// This is the bench's only coupling to the facade's probe API.
pub fn facade_clock<C: CpuIndex + 'static>(
    which: Facade,
    hw: fn(Persona) -> UserHw<false, C>,
    tsc_hz: u64,
) -> Result<clockhal::Clock<UserHw<false, C>>, String> {
    let memory = SharedMemory::default();
    let (hw, platform, want) = match which {
        Facade::Tsc => {
            let rate = Frequency::from_hz(tsc_hz).map_err(|e| e.to_string())?;
            let policy = Policy::new().migration(Migration::WillNot).force("tsc");
            let platform = Platform::new().tsc_rate(rate).policy(policy);
            (hw(Persona::BareMetal), platform, SourceId::Tsc)
        }
        Facade::Kvmclock => {
            let hw = hw(Persona::Kvm);
            let (mul, shift) = pvclock_time_scale(tsc_hz).ok_or("TSC rate out of range")?;
            let areas = memory.alloc_pvclock_areas(1);
            let area = areas.element(0).ok_or("no area")?.get();
            area.publish(
                hw.rdtsc_ordered(),
                1_000_000_000,
                mul,
                shift,
                PVCLOCK_TSC_STABLE_BIT,
            );
            (hw, Platform::new().pvclock_areas(areas), SourceId::Kvmclock)
        }
        Facade::HypervPage => {
            let scale = hv_reference_scale(tsc_hz).ok_or("TSC rate out of range")?;
            let page = memory.alloc_hv_page();
            page.get().publish(hv_next_sequence(0), scale, 0);
            let platform = Platform::new()
                .hyperv_tsc_page(page)
                .hyperv_guest_os_id(clockhal_hyperv::DEFAULT_GUEST_OS_ID);
            (hw(Persona::Hyperv), platform, SourceId::HypervPage)
        }
    };
    let probed = clockhal::probe(hw, platform);
    let report = probed.report().to_string();
    let clock = probed.into_clock().map_err(|e| e.to_string())?;
    if clock.source_id() != want {
        return Err(format!(
            "the probe selected {} instead of {want:?}: {report}",
            clock.source_name()
        ));
    }
    Ok(clock)
}

/// A [`facade_clock`] row.
fn facade_row<C: CpuIndex + 'static>(
    name: &str,
    which: Facade,
    hw: fn(Persona) -> UserHw<false, C>,
    tsc_hz: u64,
) -> Result<Row, String> {
    let clock: &'static clockhal::Clock<_> = Box::leak(Box::new(facade_clock(which, hw, tsc_hz)?));
    let first = clock.now();
    if clock.now() < first {
        return Err("the clock went backwards".into());
    }
    Ok(Row::new(name, move || clock.now()))
}

/// A [`crate::lean::LeanClock`] row (`TOKEN`: with the token line), read
/// with `rdtscp`; none on a CPU without RDTSCP.
fn lean_row<const TOKEN: bool>(name: &str, tsc_hz: u64) -> Result<Row, String> {
    if TscRead::detect() != TscRead::Rdtscp {
        return Err("no RDTSCP".into());
    }
    let clock = crate::lean::LeanClock::new(tsc_hz, TscRead::Rdtscp.read())
        .ok_or("TSC rate out of range")?;
    let clock: &'static crate::lean::LeanClock = Box::leak(Box::new(clock));
    let first = clock.now::<TOKEN>();
    if clock.now::<TOKEN>() < first {
        return Err("the clock went backwards".into());
    }
    Ok(Row::new(name, move || clock.now::<TOKEN>()))
}

/// clockhal's per-CPU line on its own: [`MapSlot::read_raised`] with an
/// epoch, a constant token, `rdtscp`, and `cpu_local_max`; the slow path
/// (cold) stores a 1 s entry of the map at the TSC read. What the slot's
/// format (64.64 map, epoch, window) costs next to [`crate::lean`]'s,
/// without the facade's lookup, state and dispatch.
fn slot_row(name: &str, tsc_hz: u64) -> Result<Row, String> {
    if TscRead::detect() != TscRead::Rdtscp {
        return Err("no RDTSCP".into());
    }
    const EPOCH: u32 = 2;
    const TAG: u32 = 2;
    let f = Frequency::from_hz(tsc_hz).map_err(|e| e.to_string())?;
    let map = TscMap::through(&Scale::new(f), TscRead::Rdtscp.read(), 0);
    let slot: &'static MapSlot = Box::leak(Box::new(MapSlot::new()));
    #[cold]
    #[inline(never)]
    fn slow(slot: &MapSlot, map: &TscMap, t: u64) -> u64 {
        let ns = map.apply(t);
        let limit = ns.saturating_add(clockhal_core::REVALIDATE_NS);
        slot.store(&SlotEntry {
            tag: TAG,
            epoch: EPOCH | SlotEntry::ORDERED,
            map: *map,
            tsc: t,
            limit,
        });
        cpu_local_max(slot.floor(), ns)
    }
    Ok(Row::new(name, move || {
        let mut t = 0;
        slot.read_raised(
            EPOCH,
            |_| Some(TAG),
            || {
                t = TscRead::Rdtscp.read();
                t
            },
            |v| v,
            cpu_local_max,
        )
        .unwrap_or_else(|| slow(slot, &map, t))
    }))
}

/// What a user program pays per clock read through the OS's clock page
/// (`clockhal-user`) on a TSC-based state: a [`ClockReader`] over a page in
/// TSC mode at the real rate, read with the page's TSC method (`rdtscp`
/// where CPUID has it), as a process reads its read-only mapping.
///
/// [`ClockReader`]: clockhal_user::ClockReader
fn user_page_row(name: &str, tsc_hz: u64) -> Result<Row, String> {
    use clockhal_user::{
        tsc_mul, ClockPage, ClockPageWriter, ClockReader, PageSource, Publication, UserClock,
        WindowLayout,
    };
    let page: &'static ClockPage = Box::leak(Box::new(ClockPage::new()));
    let tsc = TscRead::detect();
    let writer = ClockPageWriter::new(page, WindowLayout::CLOCK_PAGE_ONLY, &[], None, tsc)
        .map_err(|e| e.to_string())?;
    let mul = tsc_mul(tsc_hz, 1).ok_or("TSC at or below 1 GHz: no TSC page state")?;
    writer
        .publish(&Publication {
            source: PageSource::tsc_anchored(mul, tsc.read(), 0),
            floor_ns: 0,
            boot_wall_ns: None,
        })
        .map_err(|e| e.to_string())?;
    let clock = UserClock::new(page, &[], None).map_err(|e| e.to_string())?;
    let mut reader = ClockReader::new(clock);
    if reader.now().is_err() {
        return Err("the page did not answer in TSC mode".into());
    }
    Ok(Row::new(name, move || reader.now().unwrap_or(0)))
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
fn kvmclock_row<H: Hardware + Clone + 'static>(
    name: &str,
    hw: H,
    tsc_hz: u64,
    path: Path,
    granule: ClampGranule,
) -> Result<Row, String> {
    let (mul, shift) = pvclock_time_scale(tsc_hz).ok_or("TSC rate out of range")?;
    // An area per reading thread (`UserHw::per_thread` numbers the bench's
    // threads in the order they first read; each contended row's second
    // thread has an area of its own, as a second vCPU has).
    const AREAS: usize = 8;
    let areas = SharedMemory::default().alloc_pvclock_areas(AREAS);
    let flags = if path == Path::Stable {
        PVCLOCK_TSC_STABLE_BIT
    } else {
        0
    };
    // Written once, as a host with a stable master clock serves them
    // between its (rare) updates.
    let t = hw.rdtsc_ordered();
    for i in 0..AREAS {
        let area = areas.element(i).ok_or("no area")?.get();
        area.publish(t, 1_000_000_000, mul, shift, flags);
    }
    let config = KvmclockConfig::new(areas).with_clamp_granule(granule);
    let clock = Kvmclock::probe(hw, config, &Policy::new()).map_err(|e| e.to_string())?;
    if clock.stable() != (path == Path::Stable) {
        return Err("kvmclock did not take the intended path".into());
    }
    let clock: &'static Kvmclock<H> = Box::leak(Box::new(clock));
    let row = Row::new(name, move || clock.read());
    if path != Path::ClampContended {
        return Ok(row);
    }
    let hammer = Hammer::start(
        move || clock.register_this_cpu().map_err(|e| e.to_string()),
        move || {
            black_box(clock.read());
        },
    )?;
    if clock.stats().unregistered_reads != 0 {
        return Err("a reader read an unregistered area".into());
    }
    Ok(row.with_around(move |on| hammer.set(on)))
}

/// A Hyper-V page clock probed on [`UserHw`] over a page written once with
/// the real TSC rate, read in ns (`read_ns`: no conversion after it).
fn hyperv_row<H: Hardware + Clone + 'static>(
    name: &str,
    hw: H,
    tsc_hz: u64,
) -> Result<Row, String> {
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
    let hv: &'static Hyperv<H> = Box::leak(Box::new(hv));
    let clock = hv.page().ok_or("no page clock")?;
    Ok(Row::new(name, move || clock.read_ns()))
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
    /// Runs `setup` on a new thread pinned to CPU 1 (its error ends the
    /// thread and is returned), then `f` while [`set`](Self::set) on.
    fn start(
        setup: impl FnOnce() -> Result<(), String> + Send + 'static,
        f: impl Fn() + Send + 'static,
    ) -> Result<Hammer, String> {
        let on: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
        let seen: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
        let (ready, started) = std::sync::mpsc::channel();
        let handle = std::thread::spawn(move || {
            host::pin_to_cpu(1);
            let r = setup();
            let failed = r.is_err();
            let _ = ready.send(r);
            if failed {
                return;
            }
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
        started
            .recv()
            .map_err(|_| "the second reader thread died".to_string())??;
        Ok(Hammer {
            on,
            seen,
            thread: handle.thread().clone(),
        })
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
