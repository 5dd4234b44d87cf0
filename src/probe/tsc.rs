//! The TSC in the facade.

#[cfg(feature = "tsc")]
mod enabled {
    use crate::check::Sources;
    use crate::clock::{MapNow, Mapped};
    use crate::probe::{Backend, Cx};
    use crate::{CpuError, Note, Rejection, SourceId};
    use clockhal_core::{ClockSource, Frequency, Stability};
    use clockhal_tsc::{RateProvenance, Tsc, TscError, TscOptions, SUPERVISED_MAX_UNCERTAINTY_PPM};
    use clockhal_x86::Hardware;

    /// The backend type.
    pub(crate) type TscBackend<H> = Tsc<H>;

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
    }

    /// Probes the TSC. An OS-supplied reference is always used (calibration
    /// or cross-check); the automatic ones (HPET, then the PM timer) only
    /// when the TSC has no stated rate, calibrating costs up to the policy's
    /// budget of boot time. A calibration that fails or is too uncertain to
    /// supervise a TSC with falls back to the next reference.
    pub(crate) fn probe<H: Hardware + Clone>(
        cx: &mut Cx<'_, '_, H>,
        hints: &TscHints,
        references: &[Option<&dyn ClockSource>],
    ) -> Option<Tsc<H>> {
        let mut options = TscOptions {
            hints: hints.as_slice(),
            reference: cx.platform.tsc_reference,
            sync: cx.platform.tsc_sync,
            cpus: cx.platform.cpus,
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
            for r in references.iter().flatten() {
                if !needs_reference(&result) {
                    break;
                }
                options.reference = Some(*r);
                let next = Tsc::probe(cx.hw.clone(), &options);
                // Keep the first usable result unless the next is better.
                if result.is_err() || !needs_reference(&next) {
                    result = next;
                }
            }
        }
        match result {
            Ok(t) => {
                let note = Note::Tsc {
                    rate: t.provenance(),
                    unusable: t.unusable(),
                    supervised: t.supervised(),
                };
                cx.usable(SourceId::Tsc, &t, note);
                Some(t)
            }
            Err(e) => {
                cx.reject(SourceId::Tsc, Rejection::Tsc(e));
                None
            }
        }
    }

    impl<H: Hardware> Mapped for Tsc<H> {
        #[inline(always)]
        fn tag(&self, _: usize) -> Option<u32> {
            Some(0)
        }
        fn map_now(&self, _: usize) -> Option<MapNow> {
            Some(MapNow {
                tag: 0,
                map: self.map(),
                ordered: self.stability().contains(Stability::MONOTONIC_ACROSS_CPUS),
                tsc: self.hardware().rdtsc_ordered(),
            })
        }
        fn fallback_ns(&self, _: usize) -> Option<u64> {
            None
        }
    }

    impl<H: Hardware> Backend for Tsc<H> {
        fn sources<'a>(&'a self, out: &mut Sources<'a>) {
            out[SourceId::Tsc.index()] = Some(self);
        }
        fn supervised(&self) -> bool {
            Tsc::supervised(self)
        }
        fn conditional(&self) -> bool {
            Tsc::supervised(self) || matches!(self.provenance(), RateProvenance::Calibrated { .. })
        }
        fn out_of_step(&self) -> bool {
            matches!(self.sync(), clockhal_tsc::SyncStatus::Unsynchronized { .. })
        }
        fn register_this_cpu(&self) -> Result<(), CpuError> {
            self.check_tsc_adjust_this_cpu()
                .map_err(|difference| CpuError::TscAdjust { difference })
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
    }

    pub(crate) fn probe<H: Hardware + Clone>(
        cx: &mut Cx<'_, '_, H>,
        _: &TscHints,
        _: &[Option<&dyn ClockSource>],
    ) -> Option<TscBackend<H>> {
        <TscBackend<H> as Probe<H>>::probe(cx)
    }
}

pub(crate) use enabled::{probe, TscBackend, TscHints};
