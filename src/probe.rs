//! The one probe call and the value that owns the backends.

use crate::check::Sources;
use crate::clock::PauseEvents;
use crate::{
    Candidate, Clock, NoClock, Note, Platform, Rejection, Report, SourceId, MAX_CANDIDATES,
};
use clockhal_core::{ClockSource, WatchdogConfig};
#[cfg(any(feature = "hpet", feature = "acpi-pm"))]
use clockhal_x86::acpi::{AcpiClocks, AcpiError};
use clockhal_x86::Hardware;
use core::fmt;
use core::mem::MaybeUninit;

/// Length of the HPET register block mapped through [`HpetAccess::Map`](crate::HpetAccess::Map).
pub const HPET_REGION_LEN: usize = 1024;

/// The probe result: every backend that could be constructed, the
/// candidate [`Report`], and what a [`Clock`] needs.
///
/// Owns the backends for the life of the system; [`Probed::clock`] borrows
/// them. Keep it in a `static` through a once-cell, then the clock in a
/// second one (see the crate docs), or move it into a caller-provided slot
/// with [`Probed::into_static`].
pub struct Probed<H: Hardware + Clone> {
    #[cfg(feature = "kvmclock")]
    kvmclock: Option<clockhal_kvmclock::Kvmclock<H>>,
    #[cfg(feature = "hyperv")]
    hyperv: Option<clockhal_hyperv::Hyperv<H>>,
    #[cfg(feature = "tsc")]
    tsc: Option<clockhal_tsc::Tsc<H>>,
    #[cfg(feature = "hpet")]
    hpet: Option<clockhal_hpet::Hpet<H>>,
    #[cfg(feature = "acpi-pm")]
    acpi_pm: Option<clockhal_acpi_pm::AcpiPm<H>>,
    extra: Option<&'static dyn ClockSource>,
    report: Report,
    watchdog: WatchdogConfig,
    _hw: core::marker::PhantomData<H>,
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
/// Never fails: what could not be used is in [`Probed::report`].
pub fn probe<H: Hardware + Clone>(hw: H, platform: &Platform<'_>) -> Probed<H> {
    let mut report = Report::new();
    report.set_force_request(platform.policy.force);

    #[cfg(feature = "kvmclock")]
    let kvmclock = probe_kvmclock(&hw, platform, &mut report);
    #[cfg(not(feature = "kvmclock"))]
    report.insert(Candidate::rejected(
        SourceId::Kvmclock,
        Rejection::FeatureDisabled,
    ));

    #[cfg(feature = "hyperv")]
    let hyperv = probe_hyperv(&hw, platform, &mut report);
    #[cfg(not(feature = "hyperv"))]
    {
        report.insert(Candidate::rejected(
            SourceId::HypervPage,
            Rejection::FeatureDisabled,
        ));
        report.insert(Candidate::rejected(
            SourceId::HypervMsr,
            Rejection::FeatureDisabled,
        ));
    }

    #[cfg(any(feature = "hpet", feature = "acpi-pm"))]
    let acpi = platform
        .acpi
        .map(|(rsdp, memory)| clockhal_x86::acpi::discover(&memory, rsdp));

    #[cfg(feature = "hpet")]
    let hpet = probe_hpet(&hw, platform, acpi.as_ref(), &mut report);
    #[cfg(not(feature = "hpet"))]
    report.insert(Candidate::rejected(
        SourceId::Hpet,
        Rejection::FeatureDisabled,
    ));

    #[cfg(feature = "acpi-pm")]
    let acpi_pm = probe_acpi_pm(&hw, platform, acpi.as_ref(), &mut report);
    #[cfg(not(feature = "acpi-pm"))]
    report.insert(Candidate::rejected(
        SourceId::AcpiPm,
        Rejection::FeatureDisabled,
    ));

    #[cfg(feature = "tsc")]
    let tsc = {
        #[cfg_attr(not(any(feature = "kvmclock", feature = "hyperv")), allow(unused_mut))]
        let mut hints = TscHints::new();
        #[cfg(feature = "kvmclock")]
        if let Some(f) = kvmclock.as_ref().and_then(|k| k.tsc_frequency()) {
            hints.push(f, clockhal_tsc::RateProvenance::Pvclock);
        }
        #[cfg(feature = "hyperv")]
        if let Some(f) = hyperv.as_ref().and_then(|h| h.tsc_frequency()) {
            hints.push(f, clockhal_tsc::RateProvenance::HypervMsr);
        }
        #[cfg_attr(not(any(feature = "hpet", feature = "acpi-pm")), allow(unused_mut))]
        let mut reference: Option<&dyn ClockSource> = None;
        #[cfg(feature = "hpet")]
        if reference.is_none() {
            reference = hpet.as_ref().map(|h| h as &dyn ClockSource);
        }
        #[cfg(feature = "acpi-pm")]
        if reference.is_none() {
            reference = acpi_pm.as_ref().map(|p| p as &dyn ClockSource);
        }
        probe_tsc(&hw, platform, hints.as_slice(), reference, &mut report)
    };
    #[cfg(not(feature = "tsc"))]
    report.insert(Candidate::rejected(
        SourceId::Tsc,
        Rejection::FeatureDisabled,
    ));

    if let Some(extra) = platform.extra {
        report.insert(Candidate::usable(SourceId::Extra, extra, Note::None));
    }
    let _ = &hw;

    let mut probed = Probed {
        #[cfg(feature = "kvmclock")]
        kvmclock,
        #[cfg(feature = "hyperv")]
        hyperv,
        #[cfg(feature = "tsc")]
        tsc,
        #[cfg(feature = "hpet")]
        hpet,
        #[cfg(feature = "acpi-pm")]
        acpi_pm,
        extra: platform.extra,
        report,
        watchdog: platform.watchdog,
        _hw: core::marker::PhantomData,
    };
    let mut report = probed.report;
    crate::finish(&mut report, &probed.sources(), &platform.self_check);
    probed.report = report;
    probed
}

impl<H: Hardware + Clone> Probed<H> {
    /// Every candidate with its verdict, and the selection.
    pub fn report(&self) -> &Report {
        &self.report
    }

    /// The ready clock on the selected source, borrowing the backends.
    pub fn clock(&self) -> Result<Clock<'_>, NoClock> {
        Clock::build(self.report, self.sources(), self.pause(), self.watchdog)
    }

    /// The backend behind `id`, if it was constructed.
    pub fn source(&self, id: SourceId) -> Option<&dyn ClockSource> {
        self.sources()[id.index()]
    }

    /// Every constructed backend, by [`SourceId::index`].
    pub(crate) fn sources(&self) -> Sources<'_> {
        let mut s: Sources<'_> = [None; MAX_CANDIDATES];
        #[cfg(feature = "kvmclock")]
        {
            s[SourceId::Kvmclock.index()] = self.kvmclock.as_ref().map(|k| k as &dyn ClockSource);
        }
        #[cfg(feature = "hyperv")]
        if let Some(h) = self.hyperv.as_ref() {
            s[SourceId::HypervPage.index()] = h.page().map(|p| p as &dyn ClockSource);
            s[SourceId::HypervMsr.index()] = h.msr().map(|m| m as &dyn ClockSource);
        }
        #[cfg(feature = "tsc")]
        {
            s[SourceId::Tsc.index()] = self.tsc.as_ref().map(|t| t as &dyn ClockSource);
        }
        #[cfg(feature = "hpet")]
        {
            s[SourceId::Hpet.index()] = self.hpet.as_ref().map(|h| h as &dyn ClockSource);
        }
        #[cfg(feature = "acpi-pm")]
        {
            s[SourceId::AcpiPm.index()] = self.acpi_pm.as_ref().map(|p| p as &dyn ClockSource);
        }
        s[SourceId::Extra.index()] = self.extra;
        s
    }

    fn pause(&self) -> Option<&dyn PauseEvents> {
        #[cfg(feature = "kvmclock")]
        if let Some(k) = self.kvmclock.as_ref() {
            return Some(k as &dyn PauseEvents);
        }
        None
    }

    /// The kvmclock backend (e.g. to call `register_this_cpu()` on each
    /// application processor before it reads the clock).
    #[cfg(feature = "kvmclock")]
    pub fn kvmclock(&self) -> Option<&clockhal_kvmclock::Kvmclock<H>> {
        self.kvmclock.as_ref()
    }

    /// The Hyper-V backend.
    #[cfg(feature = "hyperv")]
    pub fn hyperv(&self) -> Option<&clockhal_hyperv::Hyperv<H>> {
        self.hyperv.as_ref()
    }

    /// The TSC backend.
    #[cfg(feature = "tsc")]
    pub fn tsc(&self) -> Option<&clockhal_tsc::Tsc<H>> {
        self.tsc.as_ref()
    }

    /// Updates the TSC's synchronisation status (e.g. after SMP bring-up
    /// ran the warp test, see `clockhal_tsc::warp_participant`): the TSC's
    /// rating and flags follow, and the selection is redone. Call it before
    /// building the [`Clock`] (the probe result is not shared yet).
    #[cfg(feature = "tsc")]
    pub fn set_tsc_sync(&mut self, sync: clockhal_tsc::SyncStatus) {
        let Some(tsc) = self.tsc.as_mut() else {
            return;
        };
        tsc.set_sync(sync);
        let (rating, stability) = (tsc.quality(), tsc.stability());
        if let Some(c) = self.report.get_mut(SourceId::Tsc) {
            c.rating = Some(rating);
            c.stability = stability;
        }
        let mut report = self.report;
        crate::reselect(&mut report, &self.sources());
        self.report = report;
    }

    /// The HPET backend.
    #[cfg(feature = "hpet")]
    pub fn hpet(&self) -> Option<&clockhal_hpet::Hpet<H>> {
        self.hpet.as_ref()
    }

    /// The ACPI PM timer backend.
    #[cfg(feature = "acpi-pm")]
    pub fn acpi_pm(&self) -> Option<&clockhal_acpi_pm::AcpiPm<H>> {
        self.acpi_pm.as_ref()
    }

    /// Moves the probe result into a caller-provided `'static` slot (e.g.
    /// from a `static_cell::StaticCell`) and returns the shared reference
    /// the OS keeps for the life of the system.
    pub fn into_static(self, slot: &'static mut MaybeUninit<Self>) -> &'static Self
    where
        H: 'static,
    {
        slot.write(self)
    }
}

#[cfg(feature = "defmt")]
impl<H: Hardware + Clone> defmt::Format for Probed<H> {
    fn format(&self, f: defmt::Formatter) {
        defmt::write!(f, "Probed({})", self.report)
    }
}

#[cfg(feature = "kvmclock")]
impl<H: Hardware + Clone> PauseEvents for clockhal_kvmclock::Kvmclock<H> {
    fn take_guest_stopped(&self) -> bool {
        clockhal_kvmclock::Kvmclock::take_guest_stopped(self)
    }
}

/// "traps" when every read is a hypervisor exit (not on bare metal).
#[cfg(any(feature = "hpet", feature = "hyperv"))]
fn traps_note(source: &dyn ClockSource) -> Note {
    if source
        .stability()
        .contains(clockhal_core::Stability::TRAPS_EVERY_READ)
    {
        Note::Traps
    } else {
        Note::None
    }
}

/// Up to two TSC rate hints (pvclock, Hyper-V MSR).
#[cfg(feature = "tsc")]
struct TscHints {
    hints: [(clockhal_core::Frequency, clockhal_tsc::RateProvenance); 2],
    len: usize,
}

#[cfg(feature = "tsc")]
impl TscHints {
    fn new() -> TscHints {
        // Filler entries beyond `len` are never exposed.
        let filler = (
            crate::select::ONE_HZ,
            clockhal_tsc::RateProvenance::OsSupplied,
        );
        TscHints {
            hints: [filler; 2],
            len: 0,
        }
    }
    #[cfg(any(feature = "kvmclock", feature = "hyperv"))]
    fn push(&mut self, f: clockhal_core::Frequency, p: clockhal_tsc::RateProvenance) {
        if let Some(slot) = self.hints.get_mut(self.len) {
            *slot = (f, p);
            self.len += 1;
        }
    }
    fn as_slice(&self) -> &[(clockhal_core::Frequency, clockhal_tsc::RateProvenance)] {
        &self.hints[..self.len]
    }
}

#[cfg(feature = "kvmclock")]
fn probe_kvmclock<H: Hardware + Clone>(
    hw: &H,
    platform: &Platform<'_>,
    report: &mut Report,
) -> Option<clockhal_kvmclock::Kvmclock<H>> {
    use clockhal_kvmclock::{Kvmclock, KvmclockConfig};
    let id = SourceId::Kvmclock;
    let Some(areas) = platform.pvclock_areas else {
        let why = if clockhal_x86::cpuid::kvm(hw).is_none() {
            "not a KVM guest"
        } else {
            "no pvclock memory given"
        };
        report.insert(Candidate::rejected(id, Rejection::NotConfigured(why)));
        return None;
    };
    let config = KvmclockConfig {
        areas,
        wall_clock: platform.pvclock_wall_clock,
    };
    match Kvmclock::probe(hw.clone(), config, &platform.policy) {
        Ok(k) => {
            let note = if k.stable() {
                Note::None
            } else {
                Note::Clamped
            };
            report.insert(Candidate::usable(id, &k, note));
            Some(k)
        }
        Err(e) => {
            report.insert(Candidate::rejected(id, Rejection::Kvmclock(e)));
            None
        }
    }
}

#[cfg(feature = "hyperv")]
fn probe_hyperv<H: Hardware + Clone>(
    hw: &H,
    platform: &Platform<'_>,
    report: &mut Report,
) -> Option<clockhal_hyperv::Hyperv<H>> {
    use clockhal_hyperv::{Hyperv, HypervConfig};
    let config = HypervConfig {
        tsc_page: platform.hyperv_tsc_page,
        guest_os_id: platform.hyperv_guest_os_id,
    };
    match Hyperv::probe(hw.clone(), config, &platform.policy) {
        Ok(h) => {
            match h.page() {
                Some(p) => report.insert(Candidate::usable(SourceId::HypervPage, p, Note::None)),
                None => {
                    let why = match (platform.hyperv_tsc_page, h.page_error()) {
                        (None, _) => Rejection::NotConfigured("no reference TSC page memory given"),
                        (Some(_), Some(e)) => Rejection::HypervPage(e),
                        (Some(_), None) => {
                            Rejection::HypervPage(clockhal_hyperv::PageError::NotOffered)
                        }
                    };
                    report.insert(Candidate::rejected(SourceId::HypervPage, why));
                }
            }
            match h.msr() {
                Some(m) => report.insert(Candidate::usable(SourceId::HypervMsr, m, traps_note(m))),
                None => report.insert(Candidate::rejected(
                    SourceId::HypervMsr,
                    Rejection::HypervNoMsr,
                )),
            }
            Some(h)
        }
        Err(e) => {
            report.insert(Candidate::rejected(
                SourceId::HypervPage,
                Rejection::Hyperv(e),
            ));
            report.insert(Candidate::rejected(
                SourceId::HypervMsr,
                Rejection::Hyperv(e),
            ));
            None
        }
    }
}

/// Where a device's address comes from: explicit, else ACPI.
#[cfg(any(feature = "hpet", feature = "acpi-pm"))]
fn acpi_part<T: Copy>(
    acpi: Option<&Result<AcpiClocks, AcpiError>>,
    part: impl Fn(&AcpiClocks) -> Result<T, AcpiError>,
    missing: &'static str,
) -> Result<T, Rejection> {
    match acpi {
        None => Err(Rejection::NotConfigured(missing)),
        Some(Err(e)) => Err(Rejection::Acpi(*e)),
        Some(Ok(c)) => part(c).map_err(Rejection::Acpi),
    }
}

#[cfg(feature = "hpet")]
fn probe_hpet<H: Hardware + Clone>(
    hw: &H,
    platform: &Platform<'_>,
    acpi: Option<&Result<AcpiClocks, AcpiError>>,
    report: &mut Report,
) -> Option<clockhal_hpet::Hpet<H>> {
    use crate::HpetAccess;
    let id = SourceId::Hpet;
    let region: Result<clockhal_x86::MmioRegion, Rejection> = match platform.hpet {
        HpetAccess::Region(r) => Ok(r),
        HpetAccess::Map(map) => acpi_part(acpi, |c| c.hpet, "no ACPI tables or HPET region given")
            .and_then(|info| {
                map(info.base, HPET_REGION_LEN).ok_or(Rejection::NotMapped(info.base))
            }),
        HpetAccess::None => acpi_part(acpi, |c| c.hpet, "no HPET region or mapper given").and(Err(
            Rejection::NotConfigured("HPET found, but no mapper given"),
        )),
    };
    let region = match region {
        Ok(r) => r,
        Err(why) => {
            report.insert(Candidate::rejected(id, why));
            return None;
        }
    };
    match clockhal_hpet::Hpet::probe(hw.clone(), region, &platform.policy) {
        Ok(h) => {
            report.insert(Candidate::usable(id, &h, traps_note(&h)));
            Some(h)
        }
        Err(e) => {
            report.insert(Candidate::rejected(id, Rejection::Hpet(e)));
            None
        }
    }
}

#[cfg(feature = "acpi-pm")]
fn probe_acpi_pm<H: Hardware + Clone>(
    hw: &H,
    platform: &Platform<'_>,
    acpi: Option<&Result<AcpiClocks, AcpiError>>,
    report: &mut Report,
) -> Option<clockhal_acpi_pm::AcpiPm<H>> {
    let id = SourceId::AcpiPm;
    let port = match platform.pm_timer {
        Some(p) => Ok(p),
        None => acpi_part(
            acpi,
            |c| c.pm_timer,
            "no ACPI tables or PM timer port given",
        )
        .map(|info| (info.port, info.bits32)),
    };
    let (port, bits32) = match port {
        Ok(p) => p,
        Err(why) => {
            report.insert(Candidate::rejected(id, why));
            return None;
        }
    };
    match clockhal_acpi_pm::AcpiPm::probe(hw.clone(), port, bits32, &platform.policy) {
        Ok(p) => {
            report.insert(Candidate::usable(id, &p, Note::PmMode(p.mode())));
            Some(p)
        }
        Err(e) => {
            report.insert(Candidate::rejected(id, Rejection::AcpiPm(e)));
            None
        }
    }
}

/// Probes the TSC. An OS-supplied reference is always used (calibration or
/// cross-check); the automatic one (HPET, else PM timer) only when the TSC
/// has no stated rate (CPUID, hypervisor leaf, hints): calibrating costs up
/// to the policy's budget of boot time.
#[cfg(feature = "tsc")]
fn probe_tsc<H: Hardware + Clone>(
    hw: &H,
    platform: &Platform<'_>,
    hints: &[(clockhal_core::Frequency, clockhal_tsc::RateProvenance)],
    fallback_reference: Option<&dyn ClockSource>,
    report: &mut Report,
) -> Option<clockhal_tsc::Tsc<H>> {
    use clockhal_tsc::{RateProvenance, Tsc, TscError, TscOptions};
    let mut options = TscOptions {
        hints,
        reference: platform.tsc_reference,
        sync: platform.tsc_sync,
        policy: platform.policy,
    };
    let mut result = Tsc::probe(hw.clone(), &options);
    let needs_reference = match &result {
        Ok(t) => t.provenance() == RateProvenance::BaseFrequencyHint,
        Err(TscError::RateUnknown { .. }) => true,
        Err(_) => false,
    };
    if needs_reference && options.reference.is_none() && fallback_reference.is_some() {
        options.reference = fallback_reference;
        result = Tsc::probe(hw.clone(), &options);
    }
    match result {
        Ok(t) => {
            report.insert(Candidate::usable(
                SourceId::Tsc,
                &t,
                Note::TscRate(t.provenance()),
            ));
            Some(t)
        }
        Err(e) => {
            report.insert(Candidate::rejected(SourceId::Tsc, Rejection::Tsc(e)));
            None
        }
    }
}
