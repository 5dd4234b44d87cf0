//! Refining a calibrated TSC rate from the watchdog's ticks, and switching
//! to the TSC once its rate is good enough to supervise (Linux's
//! `tsc: Refined TSC clocksource calibration`, then `Switched to
//! clocksource tsc`).
//!
//! Each tick takes one bracketed sample `(TSC, reference, TSC)` against
//! the tick's reference — a counter of another domain whose correctness
//! does not rest on supervision (HPET, PM timer, Hyper-V MSR). The first
//! is the baseline; once a later one bounds the rate to
//! [`REFINED_TARGET_PPM`] ([`refined_rate`]), the TSC backend adopts it
//! ([`Tsc::refine`](clockhal_tsc::Tsc::refine)): its rating and
//! descriptor follow, the watchdog is rebuilt with the new rate, and
//! selection runs again. A pause of the guest, a change of reference or a
//! result that disagrees with the boot calibration restarts the baseline.
//! Only a TSC that is not the current source is refined (its map changes).
//!
//! The refined rate is as good as the reference's own rate: the stated
//! uncertainty covers the measurement (brackets, tick quantization), not a
//! reference that runs off by less than the watchdog tolerates (its
//! `max_skew_ppm`); that error passes on to the TSC.

use super::watchdog::State;
use super::Clock;
use crate::{SourceId, WatchdogEvent};
use clockhal_core::{Bracketed, ClockSource, CounterDomain, Scale};
use clockhal_tsc::{refined_rate, RateProvenance, RefineError, Unusable, REFINED_TARGET_PPM};
use clockhal_x86::Hardware;

impl<H: Hardware + Clone> Clock<H> {
    /// One refinement step (see the module docs); `Some` when a refined
    /// rate was adopted this tick.
    pub(crate) fn refine_tsc(
        &self,
        st: &mut State,
        ref_id: SourceId,
        reference: &dyn ClockSource,
        paused: bool,
    ) -> Option<WatchdogEvent> {
        let tsc = self.backends.tsc.as_ref()?;
        let wanted = matches!(tsc.provenance(), RateProvenance::Calibrated { .. })
            && matches!(
                tsc.unusable(),
                None | Some(Unusable::NotInvariantRateUncertain { .. })
            )
            && self.source_id() != SourceId::Tsc
            && !self.tsc_faulted.load(core::sync::atomic::Ordering::Acquire)
            && !self.conditional(ref_id)
            && self.backends.domain(ref_id) != CounterDomain::Tsc;
        if !wanted || paused {
            st.refine = None;
            return None;
        }
        let sample = Bracketed::tightest(3, 0, || self.hw.rdtsc_ordered(), || reference.read())?;
        let base = match st.refine {
            Some((id, base)) if id == ref_id => base,
            _ => {
                st.refine = Some((ref_id, sample));
                return None;
            }
        };
        let Ok(r) = refined_rate(&base, &sample, reference.frequency()) else {
            st.refine = Some((ref_id, sample));
            return None;
        };
        if r.uncertainty_ppm > REFINED_TARGET_PPM {
            return None;
        }
        let baseline_ms = Scale::new(reference.frequency())
            .ticks_to_ns(r.reference_ticks)
            .div_ceil(1_000_000);
        let baseline_ms = u32::try_from(baseline_ms).unwrap_or(u32::MAX);
        match tsc.refine(&r, reference.name(), baseline_ms) {
            Ok(()) => {}
            Err(RefineError::Disagrees { .. }) | Err(RefineError::Implausible) => {
                st.refine = Some((ref_id, sample));
                return None;
            }
            Err(_) => {
                st.refine = None;
                return None;
            }
        }
        st.refine = None;
        self.tsc_scale.call_once(|| Scale::new(tsc.frequency()));
        {
            let note = self.tsc_note(tsc);
            let mut report = self.report.lock();
            if let Some(c) = report.get_mut(SourceId::Tsc) {
                c.set_descriptor(tsc.descriptor());
                c.note = note;
            }
        }
        // The members' rates changed: a new baseline for the comparison.
        st.core = None;
        self.reselect_held();
        Some(WatchdogEvent::RateRefined {
            source: SourceId::Tsc,
            uncertainty_ppm: r.uncertainty_ppm,
        })
    }
}
