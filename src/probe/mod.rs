//! The one probe call and the value that owns the backends.
//!
//! Each backend has a module here that implements [`Backend`]: how to probe
//! it from the [`Platform`], which clock sources it provides, what it tells
//! the others (TSC rate hints, pauses) and what it does at each step of the
//! lifecycle. A backend whose cargo feature is off is a type with no values
//! whose probe only lists it as rejected ("feature disabled"), so nothing
//! outside these modules needs a `#[cfg]`.

mod acpi_pm;
mod hpet;
mod hyperv;
mod kvmclock;
mod pit;
mod tsc;

use crate::candidate::{Sources, TscSources};
use crate::probe_cost::Counted;
use crate::{Candidate, Note, Platform, Rejection, Report, SourceId, MAX_CANDIDATES};
use clockhal_core::ClockSource;
use clockhal_x86::acpi::{AcpiClocks, AcpiError};
use clockhal_x86::Hardware;
use core::fmt;
use core::sync::atomic::Ordering;

pub(crate) use acpi_pm::AcpiPmBackend;
pub(crate) use hpet::HpetBackend;
pub(crate) use hyperv::HypervBackend;
pub(crate) use kvmclock::KvmclockBackend;
pub(crate) use pit::PitBackend;
pub(crate) use tsc::{TscBackend, TscHints};

/// Length of the HPET register block mapped through [`HpetAccess::Map`](crate::HpetAccess::Map).
pub const HPET_REGION_LEN: usize = 1024;

/// What every backend's probe sees (with every backend disabled, little).
#[cfg_attr(
    not(any(
        feature = "kvmclock",
        feature = "hyperv",
        feature = "tsc",
        feature = "hpet",
        feature = "acpi-pm"
    )),
    allow(dead_code)
)]
pub(crate) struct Cx<'p, 'a, H: Hardware> {
    pub(crate) hw: &'p H,
    pub(crate) platform: &'p mut Platform<'a>,
    pub(crate) report: &'p mut Report,
    /// ACPI discovery, done once for the HPET and the PM timer.
    pub(crate) acpi: Option<Result<AcpiClocks, AcpiError>>,
}

impl<H: Hardware> Cx<'_, '_, H> {
    /// The CPUs that may read the clock: the OS's count, else the MADT's
    /// enabled processors, else 1 — but 2 (unknown, possibly several:
    /// nothing is trusted across CPUs untested) when the OS gave ACPI
    /// tables whose MADT is there but unreadable.
    #[cfg_attr(not(feature = "tsc"), allow(dead_code))]
    pub(crate) fn cpus(&self) -> usize {
        let madt = match &self.acpi {
            Some(Ok(a)) => match a.processors {
                Ok(n) if n > 0 => Some(n as usize),
                Err(AcpiError::NotFound { .. }) | Ok(_) => None,
                Err(_) => Some(2),
            },
            _ => None,
        };
        self.platform.cpus.or(madt).unwrap_or(1)
    }

    /// A device's ACPI-discovered part, or why it is missing.
    #[cfg_attr(not(any(feature = "hpet", feature = "acpi-pm")), allow(dead_code))]
    pub(crate) fn acpi_part<T: Copy>(
        &self,
        part: impl Fn(&AcpiClocks) -> Result<T, AcpiError>,
        missing: &'static str,
    ) -> Result<T, Rejection> {
        match &self.acpi {
            None => Err(Rejection::NotConfigured(missing)),
            Some(Err(e)) => Err(Rejection::Acpi(*e)),
            Some(Ok(c)) => part(c).map_err(Rejection::Acpi),
        }
    }

    /// Records a constructed candidate.
    pub(crate) fn usable(&mut self, id: SourceId, source: &dyn ClockSource, note: Note) {
        self.report.insert(Candidate::usable(id, source, note));
    }

    /// Records a rejected candidate.
    pub(crate) fn reject(&mut self, id: SourceId, why: Rejection) {
        self.report.insert(Candidate::rejected(id, why));
    }
}

/// The facade's view of one constructed backend (see the module docs).
pub(crate) trait Backend {
    /// Puts its clock sources into `out` by [`SourceId::index`].
    fn sources<'a>(&'a self, out: &mut Sources<'a>);
    /// Puts those of its sources that the clock reads through a TSC map
    /// into `out` by [`SourceId::index`].
    fn tsc_sources<'a>(&'a self, out: &mut TscSources<'a>) {
        let _ = out;
    }
    /// The TSC rate it knows exactly, for the TSC backend.
    fn tsc_hint(&self, hints: &mut TscHints) {
        let _ = hints;
    }
    /// Whether the hypervisor paused the guest since the last call.
    fn take_paused(&self) -> bool {
        false
    }
    /// Host updates it could not believe, so far (a running count).
    fn host_faults(&self) -> u64 {
        0
    }
    /// The watchdog's periodic self-check (e.g. kvmclock's stable-bit
    /// agreement across CPUs).
    fn tick(&self) {}
    /// Per-CPU setup on an application processor.
    fn register_this_cpu(&self) -> Result<(), crate::CpuError> {
        Ok(())
    }
    /// Per-CPU teardown before the memory is reused.
    fn unregister_this_cpu(&self) {}
    /// After a restore: the calling CPU's share (every CPU calls it).
    fn resume_this_cpu(&self) -> Result<(), crate::CpuError> {
        Ok(())
    }
    /// After a restore: what is done once for the machine (the boot CPU).
    fn resume_machine(&self) {}
    /// The TSC's CPUs are out of step: stop trusting a host's cross-CPU
    /// promise that rests on synchronised TSCs.
    fn tsc_unsynchronized(&self) {}
    /// Unix time now in ns, if this backend knows the wall time (kvmclock's
    /// wall clock).
    fn unix_ns_now(&self) -> Option<u64> {
        None
    }
    /// A TSC that is correct only under the watchdog's supervision.
    fn supervised(&self) -> bool {
        false
    }
    /// Its correctness rests on a claim nobody verified (a supervised TSC,
    /// an estimated rate): in a two-way disagreement, it loses.
    fn conditional(&self) -> bool {
        false
    }
    /// Its readings are each CPU's own TSC, uncorrected: they compare
    /// across CPUs only where the TSCs agree.
    fn raw_tsc(&self) -> bool {
        false
    }
    /// A TSC whose CPUs are known to be out of step.
    fn out_of_step(&self) -> bool {
        false
    }
    /// Changes when the backend's cached maps all become stale (a revoked
    /// cross-CPU promise, a resume): the clock then drops its own.
    fn epoch(&self) -> u32 {
        0
    }
    /// How a user program reads `id` (one of its sources) from the clock
    /// page while it is current; `ordered`: its readings are ordered
    /// across CPUs. `None`: not user-readable.
    fn page_export(&self, id: SourceId, ordered: bool) -> Option<PageExport> {
        let _ = (id, ordered);
        None
    }
    /// As a calibration reference: reads so far that may have lost a wrap
    /// of its counter (a running count; the PIT's 54.9 ms).
    #[cfg_attr(not(feature = "tsc"), allow(dead_code))]
    fn reference_overruns(&self) -> u64 {
        0
    }
}

/// How the clock page serves a TSC-based source ([`Backend::page_export`]).
#[allow(dead_code)] // each variant is one backend's, behind its feature
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PageExport {
    /// The TSC through the clock's own map of it.
    Tsc,
    /// The pvclock area user programs read (kvmclock's, stable).
    Pvclock,
    /// The Hyper-V reference TSC page.
    HypervPage,
    /// User-readable on each CPU but not ordered across them: the page
    /// tells programs to ask the kernel.
    PerCpuOnly,
}

/// How a backend is probed.
pub(crate) trait Probe<H: Hardware + Clone>: Backend + Sized {
    /// Probes it, recording its candidates in `cx.report`.
    fn probe(cx: &mut Cx<'_, '_, H>) -> Option<Self>;
}

/// A backend whose feature is off: a type with no values (one per backend:
/// `IDS` is the bit mask of its [`SourceId`]s), whose probe lists its
/// candidates as rejected, "feature disabled".
#[allow(dead_code)]
pub(crate) enum Disabled<H, const IDS: u32> {
    #[doc(hidden)]
    Never(core::convert::Infallible, core::marker::PhantomData<H>),
}

impl<H, const IDS: u32> Backend for Disabled<H, IDS> {
    fn sources<'a>(&'a self, _: &mut Sources<'a>) {
        match *self {
            Disabled::Never(never, _) => match never {},
        }
    }
}

impl<H, const IDS: u32> clockhal_core::TscSource for Disabled<H, IDS> {
    fn token(&self, _: usize) -> Option<u32> {
        match *self {
            Disabled::Never(never, _) => match never {},
        }
    }
    fn map_now(
        &self,
        _: usize,
        _: Option<clockhal_core::LastMap>,
        _: Option<u64>,
    ) -> Result<clockhal_core::MapNow, clockhal_core::MapMiss> {
        match *self {
            Disabled::Never(never, _) => match never {},
        }
    }
}

impl<H: Hardware + Clone, const IDS: u32> Probe<H> for Disabled<H, IDS> {
    fn probe(cx: &mut Cx<'_, '_, H>) -> Option<Self> {
        for id in SourceId::ALL {
            if IDS & (1 << id.index()) != 0 {
                cx.reject(id, Rejection::FeatureDisabled);
            }
        }
        None
    }
}

/// The [`Disabled`] mask of one id (used by the backends whose feature is
/// off).
#[allow(dead_code)]
pub(crate) const fn ids(id: SourceId) -> u32 {
    1 << id.index()
}

/// Owning one machine's clock hardware: released when the owner drops.
pub(crate) struct Lease<H: Hardware> {
    hw: Option<H>,
}

impl<H: Hardware> Lease<H> {
    fn take(hw: &H) -> Lease<H>
    where
        H: Clone,
    {
        let got = hw
            .clock_lease()
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        Lease {
            hw: got.then(|| hw.clone()),
        }
    }

    fn held(&self) -> bool {
        self.hw.is_some()
    }
}

impl<H: Hardware> Drop for Lease<H> {
    fn drop(&mut self) {
        if let Some(hw) = self.hw.take() {
            hw.clock_lease().store(false, Ordering::Release);
        }
    }
}

/// Every backend one probe constructed. Field order is drop order: the
/// backends (which unregister shared memory) go before the lease.
pub(crate) struct Backends<H: Hardware + Clone> {
    pub(crate) kvmclock: Option<KvmclockBackend<H>>,
    pub(crate) hyperv: Option<HypervBackend<H>>,
    pub(crate) tsc: Option<TscBackend<H>>,
    pub(crate) hpet: Option<HpetBackend<H>>,
    pub(crate) acpi_pm: Option<AcpiPmBackend<H>>,
    pub(crate) pit: Option<PitBackend<H>>,
    pub(crate) extra: Option<&'static dyn ClockSource>,
    /// The OS's source as the clock reads it through a map, if it is
    /// TSC-based ([`Platform::extra_tsc_source`](crate::Platform::extra_tsc_source)).
    pub(crate) extra_tsc: Option<&'static (dyn clockhal_core::DynTscSource + Sync)>,
    /// What ACPI discovery found (`None`: the probe had no tables), for
    /// later users such as the RTC's century register.
    #[allow(dead_code)]
    pub(crate) acpi: Option<Result<AcpiClocks, AcpiError>>,
    #[allow(dead_code)]
    lease: Lease<H>,
}

impl<H: Hardware + Clone> Backends<H> {
    /// Every constructed clock source, by [`SourceId::index`].
    pub(crate) fn sources(&self) -> Sources<'_> {
        let mut s: Sources<'_> = [None; MAX_CANDIDATES];
        self.each(|b| b.sources(&mut s));
        s[SourceId::Extra.index()] = self.extra;
        s
    }

    /// The source behind `id`.
    pub(crate) fn source(&self, id: SourceId) -> Option<&dyn ClockSource> {
        self.sources()[id.index()]
    }

    /// `id` as the clock reads it through a TSC map, if it is TSC-based.
    pub(crate) fn tsc_source(&self, id: SourceId) -> Option<&dyn clockhal_core::DynTscSource> {
        let mut out: TscSources<'_> = [None; MAX_CANDIDATES];
        self.each(|b| b.tsc_sources(&mut out));
        out[SourceId::Extra.index()] = self.extra_tsc.map(|e| e as _);
        out[id.index()]
    }

    /// The counter `id` reads now ([`crate::candidate::domain_in`]).
    pub(crate) fn domain(&self, id: SourceId) -> clockhal_core::CounterDomain {
        crate::candidate::domain_in(&self.sources(), id)
    }

    /// kvmclock as the clock reads it.
    #[inline(always)]
    pub(crate) fn kvmclock_mapped(&self) -> Option<&KvmclockBackend<H>> {
        self.kvmclock.as_ref()
    }

    /// The TSC as the clock reads it.
    #[inline(always)]
    pub(crate) fn tsc_mapped(&self) -> Option<&TscBackend<H>> {
        self.tsc.as_ref()
    }

    /// Whether `id`'s readings on CPU `cpu` are its own: kvmclock's only
    /// where the CPU's area is registered (elsewhere it holds).
    pub(crate) fn serves(&self, id: SourceId, cpu: usize) -> bool {
        self.tsc_source(id).is_none_or(|m| m.dyn_serves(cpu))
    }

    /// The backend that provides `id` (none for the OS's own source).
    fn backend_of(&self, id: SourceId) -> Option<&dyn Backend> {
        let mut found = None;
        self.each(|b| {
            let mut s: Sources<'_> = [None; MAX_CANDIDATES];
            b.sources(&mut s);
            if found.is_none() && s[id.index()].is_some() {
                found = Some(b);
            }
        });
        found
    }

    /// `id` is correct only under the watchdog's supervision.
    pub(crate) fn supervised(&self, id: SourceId) -> bool {
        self.backend_of(id).is_some_and(Backend::supervised)
    }

    /// How the clock page serves `id` ([`Backend::page_export`]).
    pub(crate) fn page_export(&self, id: SourceId, ordered: bool) -> Option<PageExport> {
        self.backend_of(id)?.page_export(id, ordered)
    }

    /// `id` reads each CPU's own TSC uncorrected ([`Backend::raw_tsc`]).
    pub(crate) fn raw_tsc(&self, id: SourceId) -> bool {
        self.backend_of(id).is_some_and(Backend::raw_tsc)
    }

    /// `id`'s correctness rests on an unverified claim ([`Backend::conditional`]);
    /// an OS-supplied source's always does (nothing here vouches for it).
    pub(crate) fn conditional(&self, id: SourceId) -> bool {
        match self.backend_of(id) {
            Some(b) => b.conditional(),
            None => self.source(id).is_some(),
        }
    }

    /// The TSC's CPUs are known to be out of step.
    pub(crate) fn tsc_out_of_step(&self) -> bool {
        self.tsc.as_ref().is_some_and(Backend::out_of_step)
    }

    /// The backends' epochs combined (see [`Backend::epoch`]).
    pub(crate) fn epochs(&self) -> u32 {
        let mut sum = 0u32;
        self.each(|b| sum = sum.wrapping_mul(31).wrapping_add(b.epoch()));
        sum
    }

    /// Unix time now, if some backend knows it.
    pub(crate) fn wall_clock_unix_ns(&self) -> Option<u64> {
        let mut out = None;
        self.each(|b| {
            if out.is_none() {
                out = b.unix_ns_now();
            }
        });
        out
    }

    /// Calls `f` on every constructed backend.
    pub(crate) fn each<'a>(&'a self, mut f: impl FnMut(&'a dyn Backend)) {
        if let Some(b) = &self.kvmclock {
            f(b);
        }
        if let Some(b) = &self.hyperv {
            f(b);
        }
        if let Some(b) = &self.tsc {
            f(b);
        }
        if let Some(b) = &self.hpet {
            f(b);
        }
        if let Some(b) = &self.acpi_pm {
            f(b);
        }
        if let Some(b) = &self.pit {
            f(b);
        }
    }
}

/// The probe result: every backend that could be constructed, the
/// candidate [`Report`], and what a [`Clock`](crate::Clock) needs.
///
/// Owns the backends; [`Probed::into_clock`] moves them into the clock,
/// which then owns the machine's clock hardware for the life of the system.
pub struct Probed<H: Hardware + Clone> {
    pub(crate) backends: Backends<H>,
    pub(crate) hw: H,
    pub(crate) report: Report,
    pub(crate) settings: crate::settings::Settings,
    pub(crate) clock_page: Option<clockhal_user::ClockPageWriter<'static>>,
}

impl<H: Hardware + Clone> fmt::Debug for Probed<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Probed")
            .field("report", &self.report)
            .finish_non_exhaustive()
    }
}

/// Probes every clock source clockhal knows on the machine behind `hw`,
/// checks each, and selects the best.
///
/// Order: kvmclock and Hyper-V first (they know the TSC rate), ACPI
/// discovery, HPET and PM timer (calibration references), then the TSC with
/// the best rate hints and a reference, then the OS's extra source. Each
/// constructed candidate then gets a bounded self-check (advances, monotonic
/// over a few reads, rate agrees with the others: [`SelfCheck`](crate::SelfCheck));
/// a failing one is demoted with the reason. Selection uses
/// `clockhal_core::select` with one hard rule on top: a trapping source is
/// never selected while an eligible no-trap source exists. A name forced by
/// [`Policy::force`](clockhal_core::Policy::force) wins if that candidate was
/// constructed (even if demoted).
///
/// **One owner at a time.** A probe result (and the [`Clock`](crate::Clock)
/// made from it) owns the machine's clock hardware: it registered pvclock
/// memory and enabled the Hyper-V page, and unregisters them when dropped.
/// A pvclock area is unregistered by an MSR write on its own CPU, so drop
/// the result on the CPU that probed, after every other CPU called
/// [`Clock::unregister_this_cpu`](crate::Clock::unregister_this_cpu): an
/// area whose CPU did neither stays registered (the host keeps writing it)
/// although the hardware is free for a new probe. A second `probe` on the same machine while the first result lives would
/// have its registrations torn down under it, so it is refused: every
/// candidate of its report is rejected with
/// [`Rejection::HardwareOwned`](crate::Rejection::HardwareOwned). Probe
/// once; share the [`Clock`](crate::Clock) (it is `Sync`) with every CPU.
///
/// Never fails otherwise: what could not be used is in [`Probed::report`].
/// Interrupt-safe: no (one-time probe: busy-waits for ms).
pub fn probe<H: Hardware + Clone>(hw: H, mut platform: Platform<'_>) -> Probed<H> {
    let started = hw.rdtsc_ordered();
    let mut report = Report::new();
    report.set_force_request(platform.policy.force);
    let lease = Lease::take(&hw);
    let settings = crate::settings::Settings::from_platform(&platform);
    if !lease.held() {
        for id in SourceId::ALL {
            report.insert(Candidate::rejected(id, Rejection::HardwareOwned));
        }
        return Probed {
            backends: Backends {
                kvmclock: None,
                hyperv: None,
                tsc: None,
                hpet: None,
                acpi_pm: None,
                pit: None,
                extra: None,
                extra_tsc: None,
                acpi: None,
                lease,
            },
            hw,
            report,
            settings,
            clock_page: None,
        };
    }
    let acpi = platform
        .acpi
        .map(|(rsdp, memory)| clockhal_x86::acpi::discover(&memory, rsdp));
    let mut cx = Cx {
        hw: &hw,
        platform: &mut platform,
        report: &mut report,
        acpi,
    };
    let kvmclock = <KvmclockBackend<H> as Probe<H>>::probe(&mut cx);
    let hyperv = <HypervBackend<H> as Probe<H>>::probe(&mut cx);
    let hpet = <HpetBackend<H> as Probe<H>>::probe(&mut cx);
    let acpi_pm = <AcpiPmBackend<H> as Probe<H>>::probe(&mut cx);
    let mut hints = TscHints::new();
    if let Some(f) = cx.platform.tsc_rate {
        hints.os(f);
    }
    if let Some(k) = &kvmclock {
        Backend::tsc_hint(k, &mut hints);
    }
    if let Some(h) = &hyperv {
        Backend::tsc_hint(h, &mut hints);
    }
    // The PIT only where the TSC would otherwise have no rate (no stated
    // rate — CPUID, hypervisor, OS —, no HPET, no PM timer, no OS
    // reference), or as the self-check's third witness: where the TSC is
    // calibrated and both an HPET and a PM timer could disagree about it,
    // and where a stated TSC rate and the one device counter could (a
    // broken HPET period register, a fast PM timer, a CPUID rate a
    // migration made stale: two alone cannot tell which is wrong).
    let stated = hints.has_stated_rate(cx.hw) || cx.platform.tsc_reference.is_some();
    let one_device = hpet.is_some() != acpi_pm.is_some();
    let pit_needed = if stated { one_device } else { !one_device };
    let pit = pit::probe(&mut cx, pit_needed);
    // The references' and the self-check's reads go through `Counted`:
    // the report's trapping-read tally (`ProbeCost`).
    const REFERENCE_IDS: [SourceId; 3] = [SourceId::Hpet, SourceId::AcpiPm, SourceId::Pit];
    let counted: [Option<(Counted<'_>, &dyn Backend)>; 3] = [
        hpet.as_ref()
            .and_then(|h| first_source(h).map(|s| (Counted::new(s), h as &dyn Backend))),
        acpi_pm
            .as_ref()
            .and_then(|p| first_source(p).map(|s| (Counted::new(s), p as &dyn Backend))),
        pit.as_ref()
            .and_then(|p| first_source(p).map(|s| (Counted::new(s), p as &dyn Backend))),
    ];
    let references = counted
        .each_ref()
        .map(|r| r.as_ref().map(|(s, b)| (s as &dyn ClockSource, *b)));
    let os_reference = cx.platform.tsc_reference.map(Counted::new);
    let tsc = tsc::probe(
        &mut cx,
        &hints,
        os_reference.as_ref().map(|r| r as &dyn ClockSource),
        &references,
    );
    for (id, r) in REFERENCE_IDS.into_iter().zip(&counted) {
        if let Some((s, _)) = r {
            cx.report.cost_mut().set_calibration(id, s.reads());
        }
    }
    if let Some(r) = &os_reference {
        cx.report.cost_mut().set_os_reference(r.reads());
    }
    let (extra, extra_tsc) = (cx.platform.extra, cx.platform.extra_tsc);
    if let Some(e) = extra {
        cx.usable(SourceId::Extra, e, Note::None);
    }
    let acpi = cx.acpi;
    let backends = Backends {
        kvmclock,
        hyperv,
        tsc,
        hpet,
        acpi_pm,
        pit,
        extra,
        extra_tsc,
        acpi,
        lease,
    };
    let sources = backends.sources();
    let counted = sources.map(|s| s.map(Counted::new));
    let mut checked: Sources<'_> = [None; MAX_CANDIDATES];
    for (to, from) in checked.iter_mut().zip(&counted) {
        *to = from.as_ref().map(|c| c as &dyn ClockSource);
    }
    // Self-check, then selection.
    crate::check::run(&mut report, &checked, &platform.self_check);
    crate::select::reselect(&mut report, &checked);
    #[cfg(feature = "tsc")]
    if let Some(t) = &backends.tsc {
        // As the clock will say: "supervised" only with something to
        // supervise it with.
        let note = crate::clock::tsc_note_in(&report, &backends, t);
        if let Some(c) = report.get_mut(SourceId::Tsc) {
            c.note = note;
        }
    }
    for id in SourceId::ALL {
        if let Some(c) = &counted[id.index()] {
            report.cost_mut().set_self_check(id, c.reads());
        }
    }
    let took = hw.rdtsc_ordered().wrapping_sub(started);
    let tsc_rate = report.get(SourceId::Tsc).and_then(|c| c.frequency());
    report.cost_mut().set_time(took, tsc_rate);
    Probed {
        backends,
        hw,
        report,
        settings,
        clock_page: platform.clock_page,
    }
}

/// "traps" when every read is a hypervisor exit (not on bare metal).
#[cfg_attr(not(any(feature = "hpet", feature = "hyperv")), allow(dead_code))]
pub(crate) fn traps_note(source: &dyn ClockSource) -> Note {
    if source
        .stability()
        .contains(clockhal_core::Stability::TRAPS_EVERY_READ)
    {
        Note::Traps
    } else {
        Note::None
    }
}

/// The first clock source a backend provides.
fn first_source<B: Backend>(b: &B) -> Option<&dyn ClockSource> {
    let mut s: Sources<'_> = [None; MAX_CANDIDATES];
    b.sources(&mut s);
    s.into_iter().flatten().next()
}

impl<H: Hardware + Clone> Probed<H> {
    /// Every candidate with its verdict, and the selection.
    /// Interrupt-safe: yes.
    pub fn report(&self) -> &Report {
        &self.report
    }

    /// The ready clock on the selected source, owning the backends (and so
    /// the machine's clock hardware). Keep it in a `static` (e.g. a
    /// `spin::Once`) and share it with every CPU; see the crate docs for
    /// the lifecycle. `Err` carries the report when nothing is usable.
    /// Interrupt-safe: no (one-time construction).
    // The error carries the whole report (no allocator to box it); this
    // runs once per boot.
    #[allow(clippy::result_large_err)]
    pub fn into_clock(self) -> Result<crate::Clock<H>, crate::NoClock> {
        crate::Clock::build(self)
    }

    /// The backend behind `id`, if it was constructed.
    /// Interrupt-safe: yes.
    pub fn source(&self, id: SourceId) -> Option<&dyn ClockSource> {
        self.backends.source(id)
    }
}

#[cfg(feature = "defmt")]
impl<H: Hardware + Clone> defmt::Format for Probed<H> {
    fn format(&self, f: defmt::Formatter) {
        defmt::write!(f, "Probed({})", self.report)
    }
}
