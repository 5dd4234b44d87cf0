//! Publishing the clock to user space through a `clockhal_user` clock
//! page ([`Platform::clock_page`](crate::Platform::clock_page)): at every
//! change of the current source (the clock's creation, a switch, `force`,
//! `resume`), the page gets the mapping user programs read without a
//! system call.
//!
//! | current source | page state |
//! |---|---|
//! | TSC in step across CPUs, faster than 1 GHz | `Tsc`: the clock's own line through (TSC now, clock now) |
//! | kvmclock with a trusted stable bit | `Pvclock` on area 0, offset = the clock's offset for kvmclock |
//! | Hyper-V reference page | `HypervPage`, offset = the clock's offset for the page |
//! | TSC, kvmclock or the Hyper-V page only consistent per CPU (no trusted host or warp-test order) | `AskKernel(PerCpuOnly)` |
//! | HPET, PM timer, PIT, Hyper-V MSR, an OS source | `AskKernel(NotUserReadable)` |
//!
//! The page is republished at every such change and whenever a backend
//! withdraws a cross-CPU promise (an out-of-step warp test, kvmclock areas
//! that disagree). It carries the clock's high-water mark as its floor, so
//! no user reading is below a value the kernel returned before the
//! publication.
//! The reverse holds only to the anchoring error: right after a
//! publication a user reading may lead the kernel clock by the time two
//! reads take (well under 1 µs). A source the watchdog finds faulty is
//! switched away from at its next tick, and the switch republishes; until
//! then user programs read the raw page, which the kernel's read path
//! checks and user code does not (the reader's own plausibility checks
//! still apply). So a host update the kernel rejected (a jump ahead) can
//! reach user programs before that switch, and the next publication's
//! floor keeps them there: user time then stays ahead of the kernel's by
//! that jump until the kernel's clock passes it (never backwards, but not
//! bounded ahead).

use super::Clock;
use crate::{SourceId, Verdict};
use clockhal_core::Stability;
use clockhal_user::{tsc_mul, AskReason, PageSource, Publication};
use clockhal_x86::Hardware;
use core::sync::atomic::Ordering;

impl<H: Hardware + Clone> Clock<H> {
    /// Republishes the user clock page for the current source, if the OS
    /// gave one. Called with the watchdog lock held (or before the clock
    /// is shared): publications never race each other.
    pub(crate) fn publish_page(&self) {
        let Some(writer) = &self.clock_page else {
            return;
        };
        self.page_stale.store(false, Ordering::Release);
        let id = self.source_id();
        let i = id.index();
        let ordered = self
            .backends
            .source(id)
            .is_some_and(|s| s.stability().contains(Stability::MONOTONIC_ACROSS_CPUS));
        let offset = self.offsets[i].load(Ordering::Acquire);
        let source = match id {
            SourceId::Tsc if ordered => {
                let mul = self
                    .scale_of(i)
                    .and_then(|s| tsc_mul(s.frequency().numerator(), s.frequency().denominator()));
                match mul {
                    Some(mul) => {
                        let tsc = self.hw.rdtsc_ordered();
                        PageSource::tsc_anchored(mul, tsc, self.now_ns())
                    }
                    None => PageSource::AskKernel(AskReason::NotUserReadable),
                }
            }
            SourceId::Kvmclock if ordered && self.kvmclock_stable() => PageSource::Pvclock {
                area: 0,
                offset_ns: offset,
            },
            SourceId::HypervPage if ordered && self.backends.hyperv_page_ordered() => {
                PageSource::HypervPage { offset_ns: offset }
            }
            SourceId::Tsc | SourceId::Kvmclock | SourceId::HypervPage => {
                PageSource::AskKernel(AskReason::PerCpuOnly)
            }
            _ => PageSource::AskKernel(AskReason::NotUserReadable),
        };
        let usable = matches!(
            self.report.lock().get(id).map(|c| c.verdict),
            Some(Verdict::Usable(_) | Verdict::Demoted { .. })
        );
        let source = if usable {
            source
        } else {
            PageSource::AskKernel(AskReason::NoClock)
        };
        let p = Publication {
            source,
            floor_ns: self.high_water(),
            boot_wall_ns: self
                .unix_known
                .load(Ordering::Acquire)
                .then(|| self.unix_offset.load(Ordering::Acquire)),
        };
        let rdtsc = || self.hw.rdtsc_ordered();
        // The first publication after a restore does not read the replaced
        // state: the restored host's pages no longer continue it.
        let _ = if self.page_restored.swap(false, Ordering::AcqRel) {
            writer.publish_after_restore_with(&p, rdtsc)
        } else {
            writer.publish_with(&p, rdtsc)
        };
    }

    /// kvmclock orders readings across CPUs by a trusted stable bit (what
    /// a user program reading one area relies on).
    fn kvmclock_stable(&self) -> bool {
        #[cfg(feature = "kvmclock")]
        {
            self.backends.kvmclock.as_ref().is_some_and(|k| k.stable())
        }
        #[cfg(not(feature = "kvmclock"))]
        {
            false
        }
    }
}
