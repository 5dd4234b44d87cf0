//! The ACPI PM timer in the facade.

#[cfg(feature = "acpi-pm")]
mod enabled {
    use crate::candidate::Sources;
    use crate::probe::{Backend, Cx, Probe};
    use crate::{Note, Rejection, SourceId};
    use clockhal_acpi_pm::AcpiPm;
    use clockhal_x86::Hardware;

    /// The backend type.
    pub(crate) type AcpiPmBackend<H> = AcpiPm<H>;

    impl<H: Hardware + Clone> Probe<H> for AcpiPm<H> {
        fn probe(cx: &mut Cx<'_, '_, H>) -> Option<Self> {
            let id = SourceId::AcpiPm;
            let port = match cx.platform.pm_timer {
                Some(p) => Ok(p),
                None => cx
                    .acpi_part(|c| c.pm_timer, "no ACPI tables or PM timer port given")
                    .map(|info| (info.port, info.bits32)),
            };
            let (port, bits32) = match port {
                Ok(p) => p,
                Err(why) => {
                    cx.reject(id, why);
                    return None;
                }
            };
            match AcpiPm::probe(cx.hw.clone(), port, bits32, &cx.platform.policy) {
                Ok(p) => {
                    cx.usable(id, &p, Note::PmMode(p.mode()));
                    Some(p)
                }
                Err(e) => {
                    cx.reject(id, Rejection::AcpiPm(e));
                    None
                }
            }
        }
    }

    impl<H: Hardware> Backend for AcpiPm<H> {
        fn sources<'a>(&'a self, out: &mut Sources<'a>) {
            out[SourceId::AcpiPm.index()] = Some(self);
        }
        fn resume_machine(&self) {
            self.resume();
        }
    }
}

#[cfg(not(feature = "acpi-pm"))]
mod enabled {
    use crate::probe::{ids, Disabled};
    use crate::SourceId;

    /// The backend type: none, the feature is off.
    pub(crate) type AcpiPmBackend<H> = Disabled<H, { ids(SourceId::AcpiPm) }>;
}

pub(crate) use enabled::AcpiPmBackend;
