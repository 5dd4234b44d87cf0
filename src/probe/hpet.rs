//! The HPET in the facade.

#[cfg(feature = "hpet")]
mod enabled {
    use crate::candidate::Sources;
    use crate::probe::{Backend, Cx, Probe, HPET_REGION_LEN};
    use crate::{HpetAccess, Rejection, SourceId};
    use clockhal_hpet::Hpet;
    use clockhal_x86::{Hardware, MmioRegion};

    /// The backend type.
    pub(crate) type HpetBackend<H> = Hpet<H>;

    impl<H: Hardware + Clone> Probe<H> for Hpet<H> {
        fn probe(cx: &mut Cx<'_, '_, H>) -> Option<Self> {
            let id = SourceId::Hpet;
            let region: Result<MmioRegion, Rejection> =
                match core::mem::replace(&mut cx.platform.hpet, HpetAccess::None) {
                    HpetAccess::Region(r) => Ok(r),
                    HpetAccess::Map(map) => cx
                        .acpi_part(|c| c.hpet, "no ACPI tables or HPET region given")
                        .and_then(|info| {
                            map(info.base, HPET_REGION_LEN).ok_or(Rejection::NotMapped(info.base))
                        }),
                    HpetAccess::None => cx
                        .acpi_part(|c| c.hpet, "no HPET region or mapper given")
                        .and(Err(Rejection::NotConfigured(
                            "HPET found, but no mapper given",
                        ))),
                };
            let region = match region {
                Ok(r) => r,
                Err(why) => {
                    cx.reject(id, why);
                    return None;
                }
            };
            match Hpet::probe(cx.hw.clone(), region, &cx.platform.policy) {
                Ok(h) => {
                    cx.usable(id, &h, crate::probe::traps_note(&h));
                    Some(h)
                }
                Err(e) => {
                    cx.reject(id, Rejection::Hpet(e));
                    None
                }
            }
        }
    }

    impl<H: Hardware> Backend for Hpet<H> {
        fn sources<'a>(&'a self, out: &mut Sources<'a>) {
            out[SourceId::Hpet.index()] = Some(self);
        }
        fn resume_machine(&self) {
            self.resume();
        }
    }
}

#[cfg(not(feature = "hpet"))]
mod enabled {
    use crate::probe::{ids, Disabled};
    use crate::SourceId;

    /// The backend type: none, the feature is off.
    pub(crate) type HpetBackend<H> = Disabled<H, { ids(SourceId::Hpet) }>;
}

pub(crate) use enabled::HpetBackend;
