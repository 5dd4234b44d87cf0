//! Publishing the clock to user space through a `clockhal_user` clock
//! page ([`Platform::clock_page`](crate::Platform::clock_page)): at every
//! change of the current source (the clock's creation, a switch, `force`,
//! `resume`), the page gets the mapping user programs read without a
//! system call.
//!
//! | current source | page state |
//! |---|---|
//! | TSC in step across CPUs, at any rate | `Tsc`: the clock's own line through (TSC now, clock now) (shift 0 above 1 GHz, `MODE_TSC_SHIFTED` at or below) |
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
//!
//! The reverse: a user reading is not ahead of a kernel reading taken
//! after it (on any CPU, the source being ordered across CPUs: the only
//! kind the page maps), to the synchronisation of the CPUs' TSCs; and
//! this holds across switches too:
//! - While the clock switches source (or rebases at `resume`) its reads
//!   hold at the high-water mark. The page is opened (odd sequence) before
//!   they start holding and published at the end: meanwhile user reads
//!   answer `AskKernel::Busy` after their bounded retries and ask the
//!   kernel. The switch takes one kernel reading of the old source after
//!   opening the page, before the hold, so the hold and the new timeline
//!   are above every user reading of the old state, however long the
//!   switching CPU is stopped in between. Every path through a switch
//!   closes the page (a dropped update closes it unchanged).
//! - The TSC state is the line of the TSC backend's own map, through one
//!   TSC sample and the map's value at it (no gap between reading the TSC
//!   and the time, however long the CPU is stopped), with the page's
//!   fixed-point multiplier truncated from the same rate as the map's slope; the
//!   pvclock and Hyper-V states carry the clock's own offset for the page.
//!   (Without a backend map, the TSC line goes through the clock's reading
//!   and a TSC read after it: user readings then trail the kernel's by
//!   the gap between the two, never lead.)
//!
//! The exceptions: right after a restore the page's floor is the kernel's
//! (a process that read after the kernel's last reading before the
//! suspend may see its own clock continue a little below its last
//! reading; see `publish_after_restore_with`); and a source the watchdog
//! or the read path finds faulty keeps its page state until the kernel
//! switches away from it (its next read or tick), so a host update the
//! kernel rejects (a jump ahead) reaches user programs that read the raw
//! page before the kernel does (the reader's own plausibility checks
//! still apply). The publication that follows does not carry it on: every
//! publication's floor is capped at a kernel reading taken after the page
//! was opened (`PageUpdate::publish_at_most`), so user time starts the new
//! state at or below the kernel's, and a program's stateless readings may
//! step back to it (a `ClockReader` keeps its own last value). Likewise a
//! host correction back that the kernel accepts (up to
//! `UpdateBounds::max_backward_ns`; the kernel's floor holds its own
//! time): the page keeps mapping the raw area, and stateless user
//! readings step back with it.

use super::Clock;
use crate::probe::PageExport;
use crate::Verdict;
use clockhal_core::Stability;
use clockhal_user::{AskReason, PageSource, PageUpdate, Publication, TscScale};
use clockhal_x86::Hardware;
use core::sync::atomic::Ordering;

impl<H: Hardware + Clone> Clock<H> {
    /// Opens the user clock page for an update, if the OS gave one: from
    /// here until the update is published (or dropped) user reads answer
    /// `AskKernel::Busy` and ask the kernel. Reads the state it replaces
    /// now (not after a restore: the restored host's pages no longer
    /// continue it). `None` without a page, or if another update is open
    /// (publications are serialised by the watchdog lock, so not in
    /// practice).
    pub(crate) fn open_page(&self) -> Option<PageUpdate<'static>> {
        let writer = self.clock_page.as_ref()?;
        let floor = self.high_water();
        if self.page_restored.load(Ordering::Acquire) {
            let u = writer.begin_after_restore(floor).ok()?;
            self.page_restored.store(false, Ordering::Release);
            Some(u)
        } else {
            writer.begin_with(floor, || self.hw.rdtsc_ordered()).ok()
        }
    }

    /// Republishes the user clock page for the current source, if the OS
    /// gave one. Called with the watchdog lock held (or before the clock
    /// is shared): publications never race each other.
    pub(crate) fn publish_page(&self) {
        self.publish_opened(self.open_page());
    }

    /// [`publish_page`](Self::publish_page) into an update opened earlier
    /// ([`open_page`](Self::open_page), by a switch), or a new one.
    pub(crate) fn publish_opened(&self, update: Option<PageUpdate<'static>>) {
        let Some(update) = update.or_else(|| self.open_page()) else {
            return;
        };
        self.page_stale.store(false, Ordering::Release);
        // Before the wall time is read: a request after this is kept.
        self.publish_requested.store(false, Ordering::SeqCst);
        let id = self.source_id();
        let i = id.index();
        let ordered = self
            .backends
            .source(id)
            .is_some_and(|s| s.stability().contains(Stability::MONOTONIC_ACROSS_CPUS));
        let offset = self.offsets[i].load(Ordering::Acquire);
        let source = match self.backends.page_export(id, ordered) {
            Some(PageExport::Tsc) => {
                let scale = self.scale_of(i).and_then(|s| {
                    TscScale::from_hz(s.frequency().numerator(), s.frequency().denominator())
                });
                match scale {
                    Some(scale) => {
                        let (tsc, ns) = self.tsc_anchor(offset);
                        PageSource::tsc_scaled(scale, tsc, ns)
                    }
                    None => PageSource::AskKernel(AskReason::NotUserReadable),
                }
            }
            Some(PageExport::Pvclock) => PageSource::Pvclock {
                area: 0,
                offset_ns: offset,
            },
            Some(PageExport::HypervPage) => PageSource::HypervPage { offset_ns: offset },
            Some(PageExport::PerCpuOnly) => PageSource::AskKernel(AskReason::PerCpuOnly),
            None => PageSource::AskKernel(AskReason::NotUserReadable),
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
        // A kernel reading after the opening: above every user reading of
        // the replaced state that the kernel's checks accept, and the cap
        // of the floor the page carries on (a host update the kernel
        // rejected, which user programs could read raw until now, does not
        // put user time ahead of the kernel's; principle of issue 26 §3).
        let _ = self.now_ns();
        let p = Publication {
            source,
            floor_ns: self.high_water(),
            boot_wall_ns: self
                .unix_known
                .load(Ordering::Acquire)
                .then(|| self.unix_offset.load(Ordering::Acquire)),
        };
        let _ = update.publish_at_most(&p, p.floor_ns);
    }

    /// A TSC value and the clock's time at it, for the page's TSC line:
    /// the TSC backend's own map applied to the TSC value it sampled (one
    /// read: no gap between the two, however long this CPU is stopped
    /// between instructions), shifted by the clock's `offset` for the TSC.
    /// Without a map, the clock's reading and then the TSC: a gap
    /// between them puts the line behind the kernel's, never ahead.
    fn tsc_anchor(&self, offset: u64) -> (u64, u64) {
        if let Some(n) = self.backends.tsc_mapped().and_then(|m| {
            self.map_now_of(m, crate::SourceId::Tsc, self.hw.cpu_index(), None)
                .ok()
        }) {
            return (n.tsc, n.map.apply(n.tsc).wrapping_add(offset));
        }
        let ns = self.now_ns();
        (self.hw.rdtsc_ordered(), ns)
    }
}
