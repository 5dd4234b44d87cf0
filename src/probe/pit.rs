//! The PIT in the facade: the TSC's calibration reference where nothing
//! better exists (QEMU microvm: no HPET, no PM timer, no stated rate), the
//! self-check's third witness between an HPET and a PM timer where the
//! TSC has no stated rate, and a clock of last resort only when the OS
//! commits to reading it often enough ([`Platform::pit`](crate::Platform::pit)).

#[cfg(feature = "pit")]
mod enabled {
    use crate::candidate::Sources;
    use crate::probe::{Backend, Cx};
    use crate::{Note, Rejection, SourceId};
    use clockhal_pit::{Pit, ReadCommitment};
    use clockhal_x86::Hardware;

    /// The backend type.
    pub(crate) type PitBackend<H> = Pit<H>;

    /// Probes the PIT if the OS allows it and it is wanted: as a clock
    /// (the OS committed to a read interval), or as a calibration
    /// reference when `needed` (no other reference, no stated TSC rate).
    /// Probing programs channel 2 (never channel 0, the OS's tick).
    pub(crate) fn probe<H: Hardware + Clone>(
        cx: &mut Cx<'_, '_, H>,
        needed: bool,
    ) -> Option<Pit<H>> {
        let id = SourceId::Pit;
        let Some(options) = cx.platform.pit else {
            cx.reject(
                id,
                Rejection::NotConfigured("the OS keeps the PIT to itself (Platform::pit(None))"),
            );
            return None;
        };
        if !needed && options.as_clock == ReadCommitment::None {
            cx.reject(
                id,
                Rejection::NotConfigured(
                    "not needed: the TSC has a stated rate or another calibration reference",
                ),
            );
            return None;
        }
        match Pit::probe(cx.hw.clone(), &options) {
            Ok(p) => {
                cx.usable(id, &p, Note::Pit(p.role()));
                Some(p)
            }
            Err(e) => {
                cx.reject(id, Rejection::Pit(e));
                None
            }
        }
    }

    impl<H: Hardware> Backend for Pit<H> {
        fn sources<'a>(&'a self, out: &mut Sources<'a>) {
            out[SourceId::Pit.index()] = Some(self);
        }
        fn reference_overruns(&self) -> u64 {
            self.overruns()
        }
    }
}

#[cfg(not(feature = "pit"))]
mod enabled {
    use crate::probe::{ids, Cx, Disabled};
    use crate::{Rejection, SourceId};
    use clockhal_x86::Hardware;

    /// The backend type: none, the feature is off.
    pub(crate) type PitBackend<H> = Disabled<H, { ids(SourceId::Pit) }>;

    pub(crate) fn probe<H: Hardware + Clone>(
        cx: &mut Cx<'_, '_, H>,
        _needed: bool,
    ) -> Option<PitBackend<H>> {
        cx.reject(SourceId::Pit, Rejection::FeatureDisabled);
        None
    }
}

pub(crate) use enabled::{probe, PitBackend};
