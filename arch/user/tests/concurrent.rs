//! A kernel thread switching the clock page between the TSC, simulated
//! pvclock areas, a simulated Hyper-V page and "ask the kernel" every few
//! microseconds, changing rates and invalidating hypervisor pages, while
//! reader threads read the real TSC through the page and check every
//! reading:
//!
//! - never below their previous reading (page or kernel), so no backward
//!   step, stateless reader or handle;
//! - never below the kernel clock's value published before the read, and
//!   (every 64 reads) never above the kernel clock read after it: the page
//!   agrees with the kernel's own notion of time;
//! - within 5 ms of the nominal timeline `T(tsc)` the kernel steers
//!   towards. Consecutive states are built to differ grossly in their raw
//!   fields (rates 100+ ppm apart, pvclock areas with unrelated host bases),
//!   so a reading mixing two states is off by far more than that.
//!
//! The simulated hypervisor writes through clockhal-x86's layouts
//! (`PvclockVcpuTimeInfo::publish`, `HvReferenceTscPage::publish`).

use clockhal_user::abi::{ClockPage, WindowLayout};
use clockhal_user::paravirt::PageFault;
use clockhal_user::{
    tsc_map, tsc_mul, AskKernel, AskReason, ClockPageWriter, ClockReader, PageSource, Publication,
    Source, TscRead, UserClock,
};
use clockhal_x86::paravirt::{
    hv_next_sequence, hv_reference_scale, hv_scale_tsc, pvclock_scale_delta, pvclock_time_scale,
    HvReferenceTscPage, PvclockVcpuTimeInfo, PVCLOCK_TSC_STABLE_BIT,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The rate the simulated sources are built around (the real TSC's rate
/// does not matter: every source maps the same counter).
const NOMINAL_HZ: u64 = 2_000_000_000;
/// pvclock areas in the window, each an independent host timeline.
const AREAS: usize = 4;
/// Reads the readers take in total (at least).
const TARGET_READS: u64 = 3_000_000;
/// Kernel events (switches, rate changes, invalidations) at least.
const TARGET_EVENTS: u64 = 20_000;
/// Gives up after this long (a slow machine still checks what it did).
const MAX_RUN: Duration = Duration::from_secs(60);
/// How far a reading may be from the nominal timeline.
const BAND_NS: u64 = 5_000_000;

#[repr(C, align(4096))]
struct Window {
    clock: ClockPage,
    pvclock: [PvclockVcpuTimeInfo; 128],
    hyperv: HvReferenceTscPage,
}

const LAYOUT: WindowLayout = WindowLayout {
    pvclock_page: 1,
    pvclock_areas: AREAS as u32,
    hyperv_page: 2,
};

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A simulated pvclock host timeline (what the host last wrote).
#[derive(Clone, Copy)]
struct PvHost {
    tsc_timestamp: u64,
    system_time: u64,
    mul: u32,
    shift: i8,
}

impl PvHost {
    fn ns(&self, tsc: u64) -> u64 {
        self.system_time.saturating_add(pvclock_scale_delta(
            tsc.saturating_sub(self.tsc_timestamp),
            self.mul,
            self.shift,
        ))
    }
}

/// The simulated Hyper-V host (what it last wrote).
#[derive(Clone, Copy)]
struct HvHost {
    sequence: u32,
    scale: u64,
    offset: i64,
}

/// What the kernel clock currently maps the TSC through (its own
/// arithmetic, written out here rather than borrowed from the reader).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mapping {
    Tsc {
        mul: u64,
        add: u128,
    },
    Pvclock {
        area: usize,
        offset: u64,
    },
    Hyperv {
        offset: u64,
    },
    /// A source user code cannot read (a PM timer, say): same form as the
    /// TSC mapping, private to the kernel.
    Private {
        mul: u64,
        add: u128,
    },
}

struct State {
    mapping: Mapping,
    pv: [PvHost; AREAS],
    hv: HvHost,
    pv_stable: [bool; AREAS],
    hv_valid: bool,
    rng: Rng,
}

impl State {
    fn eval(&self, tsc: u64) -> u64 {
        match self.mapping {
            Mapping::Tsc { mul, add } | Mapping::Private { mul, add } => {
                ((tsc as u128 * mul as u128).wrapping_add(add) >> 64) as u64
            }
            Mapping::Pvclock { area, offset } => self.pv[area].ns(tsc).wrapping_add(offset),
            Mapping::Hyperv { offset } => hv_scale_tsc(tsc, self.hv.scale, self.hv.offset)
                .wrapping_mul(100)
                .wrapping_add(offset),
        }
    }
}

/// The simulated kernel: its clock (mapping + monotonic floor), the clock
/// page writer, and the simulated hypervisor pages.
struct Kernel {
    state: Mutex<State>,
    floor: AtomicU64,
    writer: ClockPageWriter<'static>,
    window: &'static Window,
    tsc: TscRead,
    /// The nominal timeline: `T(tsc) = tsc_map(tsc, nominal_mul, nominal_add)`.
    nominal_mul: u64,
    nominal_add: u128,
    /// The kernel clock's value after its latest event.
    published_now: AtomicU64,
    events: AtomicU64,
    switches: AtomicU64,
}

/// A rate `ppm` away from nominal, as a 64.64 ns-per-tick multiplier.
fn mul_for_ppm(nominal: u64, ppm: i64) -> u64 {
    (nominal as i128 + nominal as i128 * ppm as i128 / 1_000_000) as u64
}

/// The TSC rate (Hz) whose ns-per-tick is `ppm` away from nominal.
fn hz_for_ppm(ppm: i64) -> u64 {
    (NOMINAL_HZ as i128 * 1_000_000 / (1_000_000 + ppm as i128)) as u64
}

impl Kernel {
    fn new() -> &'static Kernel {
        let window: &'static Window = Box::leak(Box::new(Window {
            clock: ClockPage::new(),
            pvclock: [const { PvclockVcpuTimeInfo::new() }; 128],
            hyperv: HvReferenceTscPage::new(),
        }));
        let tsc = TscRead::detect();
        let writer = ClockPageWriter::new(
            &window.clock,
            LAYOUT,
            &window.pvclock[..AREAS],
            Some(&window.hyperv),
            tsc,
        )
        .unwrap();
        let nominal_mul = tsc_mul(NOMINAL_HZ, 1).unwrap();
        let t0 = tsc.read();
        // The timeline starts at 1 s so that floors and offsets are nonzero.
        let PageSource::Tsc {
            add: nominal_add, ..
        } = PageSource::tsc_anchored(nominal_mul, t0, 1_000_000_000)
        else {
            unreachable!()
        };
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ t0);
        // Each pvclock area: its own host timeline, with a base far from
        // the others (2^50..2^60 ns), so a mixed-up area/offset is obvious.
        let pv = core::array::from_fn(|i| {
            let (mul, shift) = pvclock_time_scale(hz_for_ppm(0)).unwrap();
            let p = PvHost {
                tsc_timestamp: t0,
                system_time: (1 << 50) + rng.below(1 << 60),
                mul,
                shift,
            };
            window.pvclock[i].publish(
                p.tsc_timestamp,
                p.system_time,
                p.mul,
                p.shift,
                PVCLOCK_TSC_STABLE_BIT,
            );
            p
        });
        let hv = HvHost {
            sequence: hv_next_sequence(0),
            scale: hv_reference_scale(hz_for_ppm(0)).unwrap(),
            offset: rng.next() as i64 >> 8,
        };
        window.hyperv.publish(hv.sequence, hv.scale, hv.offset);
        let k: &'static Kernel = Box::leak(Box::new(Kernel {
            state: Mutex::new(State {
                mapping: Mapping::Private {
                    mul: nominal_mul,
                    add: nominal_add,
                },
                pv,
                hv,
                pv_stable: [true; AREAS],
                hv_valid: true,
                rng,
            }),
            floor: AtomicU64::new(0),
            writer,
            window,
            tsc,
            nominal_mul,
            nominal_add,
            published_now: AtomicU64::new(0),
            events: AtomicU64::new(0),
            switches: AtomicU64::new(0),
        }));
        k.switch_to(&mut k.state.lock().unwrap(), 0);
        k
    }

    fn nominal(&self, tsc: u64) -> u64 {
        tsc_map(tsc, self.nominal_mul, self.nominal_add)
    }

    /// The kernel's clock ("the system call"): never backwards.
    fn now(&self) -> u64 {
        let s = self.state.lock().unwrap();
        self.now_locked(&s)
    }

    fn now_locked(&self, s: &State) -> u64 {
        let v = s.eval(self.tsc.read());
        self.floor.fetch_max(v, Ordering::AcqRel).max(v)
    }

    /// A rate offset that steers the clock back towards the nominal
    /// timeline, at least 100 ppm away from `previous` so consecutive
    /// states differ grossly in their raw fields.
    fn steer(&self, rng: &mut Rng, now: u64, tsc: u64, previous: i64) -> i64 {
        let ahead = now > self.nominal(tsc);
        loop {
            let ppm = 50 + rng.below(450) as i64;
            let ppm = if ahead { -ppm } else { ppm };
            if (ppm - previous).abs() >= 100 {
                return ppm;
            }
        }
    }

    /// Switches the clock (and the page) to a new mapping of kind `kind`
    /// (0 TSC, 1 pvclock, 2 Hyper-V, 3 private), continuing from now: the
    /// old mapping is read and the new one anchored at the same TSC value.
    fn switch_to(&self, s: &mut MutexGuard<'_, State>, kind: u64) {
        let previous_ppm = self.current_ppm(s);
        let (before, t0) = (self.now_locked(s), self.tsc.read());
        let ppm = self.steer(&mut s.rng, before, t0, previous_ppm);
        // A paravirtual source: the host moves it to the steered rate first
        // (a host update, continuous on the host's own timeline).
        let area = s.rng.below(AREAS as u64) as usize;
        match kind {
            1 => self.pv_rate_change(s, area, ppm),
            2 => self.hv_rate_change(s, ppm),
            _ => {}
        }
        let tsc = self.tsc.read();
        let v = s.eval(tsc);
        let mut now = self.floor.fetch_max(v, Ordering::AcqRel).max(v);
        // Now and then the new source starts a little behind and is
        // published a little later (a clock that continues from its last
        // returned instant and takes its time to switch, while user programs
        // keep reading the old state): the page's floor must then hold
        // readers where they were.
        let stall = s.rng.below(256) == 0;
        if stall {
            now -= 5_000 + s.rng.below(15_000);
        }
        let tsc_mapping = |mul| match PageSource::tsc_anchored(mul, tsc, now) {
            PageSource::Tsc { mul, add, .. } => (mul, add),
            _ => unreachable!(),
        };
        let (mapping, source) = match kind {
            0 => {
                let (mul, add) = tsc_mapping(mul_for_ppm(self.nominal_mul, ppm));
                (
                    Mapping::Tsc { mul, add },
                    PageSource::Tsc { mul, shift: 0, add },
                )
            }
            1 => {
                let offset = now.wrapping_sub(s.pv[area].ns(tsc));
                (
                    Mapping::Pvclock { area, offset },
                    PageSource::Pvclock {
                        area: area as u32,
                        offset_ns: offset,
                    },
                )
            }
            2 => {
                let units = hv_scale_tsc(tsc, s.hv.scale, s.hv.offset);
                let offset = now.wrapping_sub(units.wrapping_mul(100));
                (
                    Mapping::Hyperv { offset },
                    PageSource::HypervPage { offset_ns: offset },
                )
            }
            _ => {
                let (mul, add) = tsc_mapping(mul_for_ppm(self.nominal_mul, ppm));
                (
                    Mapping::Private { mul, add },
                    PageSource::AskKernel(AskReason::NotUserReadable),
                )
            }
        };
        if stall {
            let until = Instant::now() + Duration::from_nanos(5_000 + s.rng.below(15_000));
            while Instant::now() < until {
                std::hint::spin_loop();
            }
        }
        s.mapping = mapping;
        self.publish(s, source);
        self.switches.fetch_add(1, Ordering::Relaxed);
    }

    /// Publishes `source` with the clock's floor, and raises the clock's
    /// floor to what the page now carries (so the kernel is never behind
    /// its user programs).
    fn publish(&self, s: &State, source: PageSource) {
        let floor = self.now_locked(s);
        let p = self
            .writer
            .publish(&Publication {
                source,
                floor_ns: floor,
                boot_wall_ns: Some(1_700_000_000_000_000_000),
            })
            .expect("one writer: never busy, states valid");
        self.floor.fetch_max(p.floor_ns, Ordering::AcqRel);
    }

    /// The current mapping's rate offset from nominal (ppm, approximate).
    fn current_ppm(&self, s: &State) -> i64 {
        let mul = match s.mapping {
            Mapping::Tsc { mul, .. } | Mapping::Private { mul, .. } => mul,
            Mapping::Pvclock { area, .. } => {
                let p = s.pv[area];
                return (pvclock_scale_delta(1 << 40, p.mul, p.shift) as i128 * 1_000_000
                    / ((1i128 << 40) / 2)
                    - 1_000_000) as i64;
            }
            Mapping::Hyperv { .. } => {
                return ((s.hv.scale as i128 * 1_000_000
                    / hv_reference_scale(NOMINAL_HZ).unwrap() as i128)
                    - 1_000_000) as i64;
            }
        };
        ((mul as i128 - self.nominal_mul as i128) * 1_000_000 / self.nominal_mul as i128) as i64
    }

    /// The host rewrites pvclock area `i` at a new rate, continuous at the
    /// update: version odd first, then the TSC it anchors at.
    fn pv_rate_change(&self, s: &mut State, i: usize, ppm: i64) {
        let area = &self.window.pvclock[i];
        area.version.fetch_or(1, Ordering::SeqCst);
        let tsc = self.tsc.read();
        let (mul, shift) = pvclock_time_scale(hz_for_ppm(ppm)).unwrap();
        let p = PvHost {
            tsc_timestamp: tsc,
            system_time: s.pv[i].ns(tsc),
            mul,
            shift,
        };
        let flags = if s.pv_stable[i] {
            PVCLOCK_TSC_STABLE_BIT
        } else {
            0
        };
        area.publish(p.tsc_timestamp, p.system_time, p.mul, p.shift, flags);
        s.pv[i] = p;
    }

    /// The host sets or clears an area's TSC-stable flag (same timeline).
    fn pv_set_stable(&self, s: &mut State, i: usize, stable: bool) {
        s.pv_stable[i] = stable;
        let p = s.pv[i];
        let flags = if stable { PVCLOCK_TSC_STABLE_BIT } else { 0 };
        self.window.pvclock[i].publish(p.tsc_timestamp, p.system_time, p.mul, p.shift, flags);
    }

    /// The Hyper-V host changes the page's rate, continuous at the update:
    /// sequence 0 first, then the TSC it anchors at.
    fn hv_rate_change(&self, s: &mut State, ppm: i64) {
        let page = &self.window.hyperv;
        page.sequence.store(0, Ordering::SeqCst);
        let tsc = self.tsc.read();
        let units = hv_scale_tsc(tsc, s.hv.scale, s.hv.offset);
        let scale = hv_reference_scale(hz_for_ppm(ppm)).unwrap();
        let offset = units.wrapping_sub(((tsc as u128 * scale as u128) >> 64) as u64) as i64;
        s.hv = HvHost {
            sequence: hv_next_sequence(s.hv.sequence),
            scale,
            offset,
        };
        if s.hv_valid {
            page.publish(s.hv.sequence, s.hv.scale, s.hv.offset);
        }
    }

    /// The Hyper-V host marks the page invalid (a migration) or valid again.
    fn hv_set_valid(&self, s: &mut State, valid: bool) {
        s.hv_valid = valid;
        if valid {
            s.hv.sequence = hv_next_sequence(s.hv.sequence);
            self.window
                .hyperv
                .publish(s.hv.sequence, s.hv.scale, s.hv.offset);
        } else {
            self.window.hyperv.sequence.store(0, Ordering::SeqCst);
        }
    }

    /// One random event.
    fn event(&self) {
        let mut s = self.state.lock().unwrap();
        let roll = s.rng.below(100);
        let tsc = self.tsc.read();
        let now = self.now_locked(&s);
        match (roll, s.mapping) {
            // A source switch (to any kind, including the same kind afresh).
            (0..=39, _) => {
                let kind = s.rng.below(4);
                self.switch_to(&mut s, kind);
            }
            // A rate change of the current source, republished.
            (40..=69, Mapping::Tsc { .. }) => {
                self.switch_to(&mut s, 0);
            }
            (40..=69, Mapping::Pvclock { area, offset }) => {
                let previous = self.current_ppm(&s);
                let ppm = self.steer(&mut s.rng, now, tsc, previous);
                self.pv_rate_change(&mut s, area, ppm);
                // The host timeline is continuous: same offset.
                self.publish(
                    &s,
                    PageSource::Pvclock {
                        area: area as u32,
                        offset_ns: offset,
                    },
                );
            }
            (40..=69, Mapping::Hyperv { offset }) => {
                let previous = self.current_ppm(&s);
                let ppm = self.steer(&mut s.rng, now, tsc, previous);
                self.hv_rate_change(&mut s, ppm);
                self.publish(&s, PageSource::HypervPage { offset_ns: offset });
            }
            // The hypervisor withdraws (or restores) its guarantee behind
            // the kernel's back: readers must fall back, then recover.
            (70..=84, Mapping::Pvclock { area, .. }) => {
                let stable = !s.pv_stable[area];
                self.pv_set_stable(&mut s, area, stable);
            }
            (70..=84, Mapping::Hyperv { .. }) => {
                let valid = !s.hv_valid;
                self.hv_set_valid(&mut s, valid);
            }
            _ => {
                // Mostly nothing but time passing; now and then the host
                // restores what it withdrew (windows of tens of events, so
                // that readers meet them whatever the scheduling).
                if s.rng.below(8) == 0 {
                    for i in 0..AREAS {
                        if !s.pv_stable[i] {
                            self.pv_set_stable(&mut s, i, true);
                        }
                    }
                    if !s.hv_valid {
                        self.hv_set_valid(&mut s, true);
                    }
                }
            }
        }
        let now = self.now_locked(&s);
        drop(s);
        self.published_now.store(now, Ordering::Release);
        self.events.fetch_add(1, Ordering::Relaxed);
    }
}

/// What one reader thread saw.
#[derive(Default, Debug)]
struct Tally {
    reads: u64,
    tsc: u64,
    pvclock: u64,
    hyperv: u64,
    ask_not_user_readable: u64,
    ask_pv_not_stable: u64,
    ask_hv_invalid: u64,
    ask_busy: u64,
    ask_other: u64,
    wall_mismatch: u64,
    backward: u64,
    worst_backward_ns: u64,
    below_kernel_before: u64,
    worst_below_ns: u64,
    above_kernel_after: u64,
    worst_above_ns: u64,
    kernel_checks: u64,
    outside_band: u64,
    worst_band_ns: u64,
}

impl Tally {
    fn fallback(&mut self, why: AskKernel) {
        match why {
            AskKernel::Page(AskReason::NotUserReadable) => self.ask_not_user_readable += 1,
            AskKernel::Hypervisor(PageFault::PvclockNotStable) => self.ask_pv_not_stable += 1,
            AskKernel::Hypervisor(PageFault::HvInvalidSequence) => self.ask_hv_invalid += 1,
            // The kernel or the host mid-update (e.g. preempted).
            AskKernel::Busy | AskKernel::Hypervisor(PageFault::PvclockBusy | PageFault::HvBusy) => {
                self.ask_busy += 1
            }
            _ => self.ask_other += 1,
        }
    }

    fn add(&mut self, o: &Tally) {
        self.reads += o.reads;
        self.tsc += o.tsc;
        self.pvclock += o.pvclock;
        self.hyperv += o.hyperv;
        self.ask_not_user_readable += o.ask_not_user_readable;
        self.ask_pv_not_stable += o.ask_pv_not_stable;
        self.ask_hv_invalid += o.ask_hv_invalid;
        self.ask_busy += o.ask_busy;
        self.ask_other += o.ask_other;
        self.wall_mismatch += o.wall_mismatch;
        self.backward += o.backward;
        self.worst_backward_ns = self.worst_backward_ns.max(o.worst_backward_ns);
        self.below_kernel_before += o.below_kernel_before;
        self.worst_below_ns = self.worst_below_ns.max(o.worst_below_ns);
        self.above_kernel_after += o.above_kernel_after;
        self.worst_above_ns = self.worst_above_ns.max(o.worst_above_ns);
        self.kernel_checks += o.kernel_checks;
        self.outside_band += o.outside_band;
        self.worst_band_ns = self.worst_band_ns.max(o.worst_band_ns);
    }
}

/// Reads until `stop`: stateless page reads (`handle == false`) or a
/// `ClockReader` handle, every reading checked.
fn reader(
    k: &'static Kernel,
    clock: UserClock<'static>,
    handle: bool,
    stop: &AtomicBool,
    progress: &AtomicU64,
) -> Tally {
    let mut t = Tally::default();
    let mut prev = 0u64;
    let mut h = ClockReader::new(clock);
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..256 {
            let kernel_before = k.published_now.load(Ordering::Acquire);
            let tsc_before = k.tsc.read();
            let v = if handle {
                h.now_or_else(|why| {
                    t.fallback(why);
                    k.now()
                })
            } else {
                match clock.read() {
                    Ok(r) => {
                        match r.source {
                            Source::Tsc => t.tsc += 1,
                            Source::Pvclock => t.pvclock += 1,
                            Source::HypervPage => t.hyperv += 1,
                        }
                        if r.unix_ns != Some(1_700_000_000_000_000_000 + r.clock_ns) {
                            t.wall_mismatch += 1;
                        }
                        r.clock_ns
                    }
                    Err(why) => {
                        t.fallback(why);
                        k.now()
                    }
                }
            };
            let tsc_after = k.tsc.read();
            t.reads += 1;
            if v < prev {
                t.backward += 1;
                t.worst_backward_ns = t.worst_backward_ns.max(prev - v);
            }
            if v < kernel_before {
                t.below_kernel_before += 1;
                t.worst_below_ns = t.worst_below_ns.max(kernel_before - v);
            }
            let (lo, hi) = (k.nominal(tsc_before), k.nominal(tsc_after));
            let band = lo.saturating_sub(v).max(v.saturating_sub(hi));
            t.worst_band_ns = t.worst_band_ns.max(band);
            if band > BAND_NS {
                t.outside_band += 1;
            }
            prev = prev.max(v);
            if t.reads % 64 == 0 {
                let after = k.now();
                t.kernel_checks += 1;
                if after < v {
                    t.above_kernel_after += 1;
                    t.worst_above_ns = t.worst_above_ns.max(v - after);
                }
                prev = prev.max(after);
            }
        }
        progress.fetch_add(256, Ordering::Relaxed);
    }
    t
}

#[test]
fn readers_never_see_torn_or_backward_time_while_the_kernel_switches() {
    let k = Kernel::new();
    let stop: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
    let progress: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
    // SAFETY: the window is leaked ('static) and laid out as LAYOUT says
    // (clock page, pvclock page, Hyper-V page, contiguous).
    let from_window =
        unsafe { UserClock::from_window(k.window as *const Window as usize) }.unwrap();
    let direct = UserClock::new(
        &k.window.clock,
        &k.window.pvclock[..AREAS],
        Some(&k.window.hyperv),
    )
    .unwrap();
    let readers: Vec<_> = [(from_window, false), (direct, false), (direct, true)]
        .into_iter()
        .map(|(clock, handle)| std::thread::spawn(move || reader(k, clock, handle, stop, progress)))
        .collect();

    let started = Instant::now();
    let mut spin_rng = Rng(7);
    loop {
        k.event();
        // A few microseconds between events.
        let until = Instant::now() + Duration::from_nanos(2_000 + spin_rng.below(6_000));
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        let done = k.events.load(Ordering::Relaxed) >= TARGET_EVENTS
            && progress.load(Ordering::Relaxed) >= TARGET_READS;
        if done || started.elapsed() > MAX_RUN {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut all = Tally::default();
    for r in readers {
        all.add(&r.join().unwrap());
    }
    let elapsed = started.elapsed();
    println!(
        "{} reads in {:.2} s against {} kernel events ({} switches): {:?}",
        all.reads,
        elapsed.as_secs_f64(),
        k.events.load(Ordering::Relaxed),
        k.switches.load(Ordering::Relaxed),
        all
    );

    assert!(
        all.reads >= TARGET_READS,
        "only {} reads in {elapsed:?}",
        all.reads
    );
    assert_eq!(all.backward, 0, "backward steps: {all:?}");
    assert_eq!(all.outside_band, 0, "torn (out-of-band) readings: {all:?}");
    assert_eq!(
        all.below_kernel_before, 0,
        "below the kernel's earlier value: {all:?}"
    );
    assert_eq!(
        all.above_kernel_after, 0,
        "above the kernel's later value: {all:?}"
    );
    assert_eq!(all.wall_mismatch, 0, "{all:?}");
    assert_eq!(all.ask_other, 0, "unexpected fallback reasons: {all:?}");
    assert!(all.kernel_checks > 10_000, "{all:?}");
    // Every path was exercised, not just one.
    for (what, n) in [
        ("tsc", all.tsc),
        ("pvclock", all.pvclock),
        ("hyperv", all.hyperv),
        ("ask: not user readable", all.ask_not_user_readable),
        ("ask: pvclock not stable", all.ask_pv_not_stable),
        ("ask: hyperv invalid", all.ask_hv_invalid),
    ] {
        assert!(n >= 200, "{what}: only {n} reads: {all:?}");
    }
}
