//! The TSC in the facade.

#[cfg(feature = "tsc")]
mod enabled {
    use crate::candidate::{Sources, TscSources};
    use crate::probe::{Backend, Cx, PageExport};
    use crate::{CpuError, Note, Rejection, SourceId};
    use clockhal_core::{ClockSource, Frequency};
    use clockhal_tsc::{RateProvenance, Tsc, TscError, TscOptions, SUPERVISED_MAX_UNCERTAINTY_PPM};
    use clockhal_x86::Hardware;

    /// The backend type.
    pub(crate) type TscBackend<H> = Tsc<H>;

    /// Calibrations against one reference before it is given up on when
    /// each may have lost a wrap of the reference's counter.
    const REFERENCE_TRIES: usize = 4;

    /// Up to three TSC rate hints (the OS's, pvclock's, Hyper-V's).
    pub(crate) struct TscHints {
        hints: [(Frequency, RateProvenance); 3],
        len: usize,
    }

    impl TscHints {
        pub(crate) fn new() -> TscHints {
            // Filler entries beyond `len` are never exposed.
            let filler = (
                Frequency::from_hz(1).unwrap_or_else(|_| unreachable!()),
                RateProvenance::OsSupplied,
            );
            TscHints {
                hints: [filler; 3],
                len: 0,
            }
        }

        fn push(&mut self, f: Frequency, p: RateProvenance) {
            if let Some(slot) = self.hints.get_mut(self.len) {
                *slot = (f, p);
                self.len += 1;
            }
        }

        /// The rate the OS or its loader states ([`Platform::tsc_rate`](crate::Platform::tsc_rate)).
        pub(crate) fn os(&mut self, f: Frequency) {
            self.push(f, RateProvenance::OsSupplied)
        }

        /// The rate a pvclock area's `mul`/`shift` imply.
        #[cfg_attr(not(feature = "kvmclock"), allow(dead_code))]
        pub(crate) fn pvclock(&mut self, f: Frequency) {
            self.push(f, RateProvenance::Pvclock)
        }

        /// The rate Hyper-V's frequency MSR states.
        #[cfg_attr(not(feature = "hyperv"), allow(dead_code))]
        pub(crate) fn hyperv_msr(&mut self, f: Frequency) {
            self.push(f, RateProvenance::HypervMsr)
        }

        fn as_slice(&self) -> &[(Frequency, RateProvenance)] {
            &self.hints[..self.len]
        }

        /// Whether the TSC will have a stated rate (CPUID, hypervisor, a
        /// hint) and so needs no calibration reference.
        pub(crate) fn has_stated_rate<H: Hardware>(&self, hw: &H) -> bool {
            clockhal_tsc::stated_rate(hw, self.as_slice()).is_some()
        }
    }

    /// Probes the TSC. An OS-supplied reference is always used (calibration
    /// or cross-check); the automatic ones (HPET, the PM timer, the PIT)
    /// only when the TSC has no stated rate, calibrating costs up to the
    /// policy's budget of boot time. A calibration that fails or is too
    /// uncertain to supervise a TSC with falls back to the next reference;
    /// one during which the reference may have lost a wrap of its counter
    /// ([`Backend::reference_overruns`]: a descheduled vCPU against the
    /// PIT's 54.9 ms) is measured again, up to [`REFERENCE_TRIES`] times.
    pub(crate) fn probe<H: Hardware + Clone>(
        cx: &mut Cx<'_, '_, H>,
        hints: &TscHints,
        os_reference: Option<&dyn ClockSource>,
        references: &[Option<(&dyn ClockSource, &dyn Backend)>],
    ) -> Option<Tsc<H>> {
        let mut options = TscOptions {
            hints: hints.as_slice(),
            reference: os_reference,
            measured: None,
            sync: cx.platform.tsc_sync,
            cpus: cx.cpus(),
            policy: cx.platform.policy,
        };
        let mut result = Tsc::probe(cx.hw.clone(), &options);
        let needs_reference = |r: &Result<Tsc<H>, TscError>| match r {
            Ok(t) => match t.provenance() {
                RateProvenance::BaseFrequencyHint => true,
                RateProvenance::Calibrated {
                    uncertainty_ppm, ..
                } => uncertainty_ppm > SUPERVISED_MAX_UNCERTAINTY_PPM,
                _ => false,
            },
            Err(TscError::RateUnknown { .. }) => true,
            Err(_) => false,
        };
        if options.reference.is_none() {
            for (r, backend) in references.iter().flatten() {
                if !needs_reference(&result) {
                    break;
                }
                options.reference = Some(*r);
                let measured = || {
                    let _ = r.read();
                    let before = backend.reference_overruns();
                    let t = Tsc::probe(cx.hw.clone(), &options);
                    (backend.reference_overruns() == before).then_some(t)
                };
                // A few tries: on a loaded host a descheduled vCPU can miss
                // the PIT's wrap more than once in a row.
                let Some(next) = (0..REFERENCE_TRIES).find_map(|_| measured()) else {
                    continue;
                };
                // Keep the first usable result unless the next is better.
                if result.is_err() || !needs_reference(&next) {
                    result = next;
                }
            }
        }
        // The reference of last resort: no rate from anything else.
        let unrated = match &result {
            Ok(t) => t.provenance() == RateProvenance::BaseFrequencyHint,
            Err(TscError::RateUnknown { .. }) => true,
            Err(_) => false,
        };
        if unrated && cx.platform.tsc_reference.is_none() {
            if let Some(c) = rtc_seconds(cx) {
                options.reference = None;
                options.measured = Some(c);
                let next = Tsc::probe(cx.hw.clone(), &options);
                if result.is_err() || !needs_reference(&next) {
                    result = next;
                }
            }
        }
        match result {
            Ok(t) => {
                cx.usable(SourceId::Tsc, &t, Note::of_tsc(&t));
                Some(t)
            }
            Err(e) => {
                cx.reject(SourceId::Tsc, Rejection::Tsc(e));
                None
            }
        }
    }

    /// TSC ticks a wait for one RTC edge may take at most: 1.1 s at 10 GHz,
    /// the fastest plausible TSC.
    #[cfg(feature = "rtc")]
    const RTC_EDGE_MAX_TICKS: u64 = 11_000_000_000;

    /// Edges a calibration's edge wait may take again after one it read
    /// too late ([`RtcError::EdgeLost`](clockhal_rtc::RtcError)).
    #[cfg(feature = "rtc")]
    const RTC_EDGE_RETRIES: usize = 2;

    /// The TSC calibrated against the CMOS RTC's second edges
    /// ([`Platform::rtc_reference`](crate::Platform::rtc_reference)), if
    /// allowed and it works.
    #[cfg(feature = "rtc")]
    fn rtc_seconds<H: Hardware + Clone>(cx: &Cx<'_, '_, H>) -> Option<clockhal_tsc::Calibration> {
        if !cx.platform.rtc_reference {
            return None;
        }
        let rtc =
            clockhal_rtc::Rtc::new(cx.hw.clone(), &clockhal_rtc::RtcOptions::default()).ok()?;
        let hw = cx.hw;
        clockhal_tsc::calibrate_against_seconds(
            || {
                // A read that came too late after the edge, or registers
                // caught changing, are bad luck: the next edge is taken.
                // An RTC that does not tick is a miss (before any edge,
                // the calibration's end).
                let mut edge = rtc.second_edge_on(|| hw.rdtsc_ordered(), RTC_EDGE_MAX_TICKS);
                for _ in 0..RTC_EDGE_RETRIES {
                    if !matches!(
                        edge,
                        Err(clockhal_rtc::RtcError::EdgeLost | clockhal_rtc::RtcError::Unstable)
                    ) {
                        break;
                    }
                    edge = rtc.second_edge_on(|| hw.rdtsc_ordered(), RTC_EDGE_MAX_TICKS);
                }
                let e = edge.ok()?;
                Some(clockhal_tsc::SecondEdge {
                    second: e.time.unix_seconds(),
                    tsc_from: e.from,
                    tsc_by: e.by,
                })
            },
            "rtc",
        )
        .ok()
    }

    #[cfg(not(feature = "rtc"))]
    fn rtc_seconds<H: Hardware + Clone>(_: &Cx<'_, '_, H>) -> Option<clockhal_tsc::Calibration> {
        None
    }

    impl<H: Hardware> Backend for Tsc<H> {
        fn sources<'a>(&'a self, out: &mut Sources<'a>) {
            out[SourceId::Tsc.index()] = Some(self);
        }
        fn tsc_sources<'a>(&'a self, out: &mut TscSources<'a>) {
            out[SourceId::Tsc.index()] = Some(self);
        }
        fn supervised(&self) -> bool {
            Tsc::supervised(self)
        }
        fn conditional(&self) -> bool {
            Tsc::supervised(self) || self.provenance().uncertainty_ppm().is_some()
        }
        fn page_export(&self, _: SourceId, ordered: bool) -> Option<PageExport> {
            Some(if ordered {
                PageExport::Tsc
            } else {
                PageExport::PerCpuOnly
            })
        }
        fn raw_tsc(&self) -> bool {
            true
        }
        fn out_of_step(&self) -> bool {
            matches!(self.sync(), clockhal_tsc::SyncStatus::Unsynchronized { .. })
        }
        fn register_this_cpu(&self) -> Result<(), CpuError> {
            self.check_tsc_adjust_this_cpu()
                .map_err(|difference| CpuError::TscAdjust { difference })
        }
        fn resume_this_cpu(&self) -> Result<(), CpuError> {
            Tsc::resume_this_cpu(self);
            Ok(())
        }
    }
}

#[cfg(not(feature = "tsc"))]
mod enabled {
    use crate::probe::{ids, Cx, Disabled, Probe};
    use crate::SourceId;
    use clockhal_core::{ClockSource, Frequency};
    use clockhal_x86::Hardware;

    /// The backend type: none, the feature is off.
    pub(crate) type TscBackend<H> = Disabled<H, { ids(SourceId::Tsc) }>;

    /// Rate hints nobody uses without the TSC backend.
    pub(crate) struct TscHints;

    #[allow(dead_code)]
    impl TscHints {
        pub(crate) fn new() -> TscHints {
            TscHints
        }
        pub(crate) fn os(&mut self, _: Frequency) {}
        pub(crate) fn pvclock(&mut self, _: Frequency) {}
        pub(crate) fn hyperv_msr(&mut self, _: Frequency) {}
        pub(crate) fn has_stated_rate<H: Hardware>(&self, _: &H) -> bool {
            true
        }
    }

    pub(crate) fn probe<H: Hardware + Clone>(
        cx: &mut Cx<'_, '_, H>,
        _: &TscHints,
        _: Option<&dyn ClockSource>,
        _: &[Option<(&dyn ClockSource, &dyn crate::probe::Backend)>],
    ) -> Option<TscBackend<H>> {
        <TscBackend<H> as Probe<H>>::probe(cx)
    }
}

pub(crate) use enabled::{probe, TscBackend, TscHints};
