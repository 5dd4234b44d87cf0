//! kvmclock in the facade.

#[cfg(feature = "kvmclock")]
mod enabled {
    use crate::candidate::{Sources, TscSources};
    use crate::probe::{Backend, Cx, PageExport, Probe, TscHints};
    use crate::{CpuError, Note, Rejection, SourceId};
    use clockhal_kvmclock::{Kvmclock, KvmclockConfig};
    use clockhal_x86::Hardware;

    /// The backend type.
    pub(crate) type KvmclockBackend<H> = Kvmclock<H>;

    impl<H: Hardware + Clone> Probe<H> for Kvmclock<H> {
        fn probe(cx: &mut Cx<'_, '_, H>) -> Option<Self> {
            let id = SourceId::Kvmclock;
            let Some(areas) = cx.platform.pvclock_areas else {
                let why = if clockhal_x86::cpuid::kvm(cx.hw).is_none() {
                    "not a KVM guest"
                } else {
                    "no pvclock memory given"
                };
                cx.reject(id, Rejection::NotConfigured(why));
                return None;
            };
            // kvmclock's own reads stay exact: the probe's self-check and
            // the watchdog measure the counter through them (a coarse clamp
            // stands still for a granule: 2,000 reads may not see it move,
            // and 2^20 ns in a 250 ms round is 4,000 ppm of "drift"). The
            // platform's granule is the facade's clamp's, on `now()`.
            let mut config = KvmclockConfig::new(areas).with_bounds(cx.platform.update_bounds);
            if let Some(w) = cx.platform.pvclock_wall_clock {
                config = config.with_wall_clock(w);
            }
            match Kvmclock::probe(cx.hw.clone(), config, &cx.platform.policy) {
                Ok(k) => {
                    let note = if k.stable() {
                        Note::None
                    } else {
                        Note::Clamped
                    };
                    cx.usable(id, &k, note);
                    Some(k)
                }
                Err(e) => {
                    cx.reject(id, Rejection::Kvmclock(e));
                    None
                }
            }
        }
    }

    impl<H: Hardware> Backend for Kvmclock<H> {
        fn unix_ns_now(&self) -> Option<u64> {
            let w = self.wall_clock()?;
            Some(w.unix_ns(self.read_ns()))
        }
        fn sources<'a>(&'a self, out: &mut Sources<'a>) {
            out[SourceId::Kvmclock.index()] = Some(self);
        }
        fn tsc_sources<'a>(&'a self, out: &mut TscSources<'a>) {
            out[SourceId::Kvmclock.index()] = Some(self);
        }
        fn page_export(&self, _: SourceId, ordered: bool) -> Option<PageExport> {
            // One area for every program: only a trusted stable bit orders
            // its readings across CPUs.
            Some(if ordered && self.stable() {
                PageExport::Pvclock
            } else {
                PageExport::PerCpuOnly
            })
        }
        fn tsc_hint(&self, hints: &mut TscHints) {
            if let Some(f) = self.tsc_frequency() {
                hints.pvclock(f);
            }
        }
        fn take_paused(&self) -> bool {
            self.take_guest_stopped()
        }
        fn epoch(&self) -> u32 {
            Kvmclock::epoch(self)
        }
        fn host_faults(&self) -> u64 {
            self.stats().faults()
        }
        fn tick(&self) {
            self.check_stable_agreement();
        }
        fn register_this_cpu(&self) -> Result<(), CpuError> {
            Kvmclock::register_this_cpu(self).map_err(CpuError::Kvmclock)
        }
        fn unregister_this_cpu(&self) {
            Kvmclock::unregister_this_cpu(self)
        }
        fn resume_this_cpu(&self) -> Result<(), CpuError> {
            Kvmclock::resume_this_cpu(self).map_err(CpuError::Kvmclock)
        }
        fn tsc_unsynchronized(&self) {
            self.distrust_stable()
        }
    }
}

#[cfg(not(feature = "kvmclock"))]
mod enabled {
    use crate::probe::{ids, Disabled};
    use crate::SourceId;

    /// The backend type: none, the feature is off.
    pub(crate) type KvmclockBackend<H> = Disabled<H, { ids(SourceId::Kvmclock) }>;
}

pub(crate) use enabled::KvmclockBackend;
