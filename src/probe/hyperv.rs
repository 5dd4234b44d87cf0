//! Hyper-V reference time in the facade.

#[cfg(feature = "hyperv")]
mod enabled {
    use crate::candidate::{Sources, TscSources};
    use crate::probe::{Backend, Cx, PageExport, Probe, TscHints};
    use crate::{Note, Rejection, SourceId};
    use clockhal_hyperv::{Hyperv, HypervConfig, HypervPageClock, PageError};
    use clockhal_x86::Hardware;

    /// The backend type.
    pub(crate) type HypervBackend<H> = Hyperv<H>;

    impl<H: Hardware + Clone> Probe<H> for Hyperv<H> {
        fn probe(cx: &mut Cx<'_, '_, H>) -> Option<Self> {
            let mut config = HypervConfig::new().with_bounds(cx.platform.update_bounds);
            if let Some(p) = cx.platform.hyperv_tsc_page {
                config = config.with_tsc_page(p);
            }
            if let Some(id) = cx.platform.hyperv_guest_os_id {
                config = config.with_guest_os_id(id);
            }
            let h = match Hyperv::probe(cx.hw.clone(), config, &cx.platform.policy) {
                Ok(h) => h,
                Err(e) => {
                    cx.reject(SourceId::HypervPage, Rejection::Hyperv(e));
                    cx.reject(SourceId::HypervMsr, Rejection::Hyperv(e));
                    return None;
                }
            };
            match h.page() {
                Some(p) => cx.usable(SourceId::HypervPage, p, Note::None),
                None => {
                    let why = match (cx.platform.hyperv_tsc_page, h.page_error()) {
                        (None, _) => Rejection::NotConfigured("no reference TSC page memory given"),
                        (Some(_), Some(e)) => Rejection::HypervPage(e),
                        (Some(_), None) => Rejection::HypervPage(PageError::NotOffered),
                    };
                    cx.reject(SourceId::HypervPage, why);
                }
            }
            match h.msr() {
                Some(m) => cx.usable(SourceId::HypervMsr, m, crate::probe::traps_note(m)),
                None => cx.reject(SourceId::HypervMsr, Rejection::HypervNoMsr),
            }
            Some(h)
        }
    }

    impl<H: Hardware + Clone> crate::probe::Backends<H> {
        /// The Hyper-V page as the clock reads it.
        #[inline(always)]
        pub(crate) fn hyperv_page_mapped(&self) -> Option<&HypervPageClock<H>> {
            self.hyperv.as_ref().and_then(|h| h.page())
        }
    }

    impl<H: Hardware> Backend for Hyperv<H> {
        fn sources<'a>(&'a self, out: &mut Sources<'a>) {
            out[SourceId::HypervPage.index()] = self.page().map(|p| p as _);
            out[SourceId::HypervMsr.index()] = self.msr().map(|m| m as _);
        }
        fn tsc_sources<'a>(&'a self, out: &mut TscSources<'a>) {
            out[SourceId::HypervPage.index()] = self.page().map(|p| p as _);
        }
        fn page_export(&self, id: SourceId, ordered: bool) -> Option<PageExport> {
            let page = self.page().filter(|_| id == SourceId::HypervPage)?;
            Some(if ordered && page.ordered() {
                PageExport::HypervPage
            } else {
                PageExport::PerCpuOnly
            })
        }
        fn tsc_hint(&self, hints: &mut TscHints) {
            if let Some(f) = self.tsc_frequency() {
                hints.hyperv_msr(f);
            }
        }
        fn epoch(&self) -> u32 {
            self.page().map_or(0, |p| p.epoch())
        }
        fn host_faults(&self) -> u64 {
            self.page().map_or(0, |p| p.stats().faults()) + self.msr().map_or(0, |m| m.faults())
        }
        fn resume_machine(&self) {
            self.resume();
        }
        fn tsc_unsynchronized(&self) {
            if let Some(p) = self.page() {
                p.distrust_order();
            }
        }
    }
}

#[cfg(not(feature = "hyperv"))]
mod enabled {
    use crate::probe::{ids, Disabled};
    use crate::SourceId;

    /// The backend type: none, the feature is off.
    pub(crate) type HypervBackend<H> =
        Disabled<H, { ids(SourceId::HypervPage) | ids(SourceId::HypervMsr) }>;

    impl<H: clockhal_x86::Hardware + Clone> crate::probe::Backends<H> {
        /// The Hyper-V page as the clock reads it: none.
        #[inline(always)]
        pub(crate) fn hyperv_page_mapped(&self) -> Option<&HypervBackend<H>> {
            None
        }
    }
}

pub(crate) use enabled::HypervBackend;
