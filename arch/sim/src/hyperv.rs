//! Simulated Hyper-V partition: reference TSC page and reference counter.

use super::SimCtx;
use clockhal_x86::paravirt::{hv_next_sequence, hv_reference_scale, HvReferenceTscPage};
use std::sync::atomic::Ordering::SeqCst;

const MSR_GUEST_OS_ID: u32 = 0x4000_0000;
const MSR_TIME_REF_COUNT: u32 = 0x4000_0020;
const MSR_REFERENCE_TSC: u32 = 0x4000_0021;
const MSR_TSC_FREQUENCY: u32 = 0x4000_0022;
const MSR_APIC_FREQUENCY: u32 = 0x4000_0023;
const MSR_STIMER0_CONFIG: u32 = 0x4000_00B0;
const MSR_STIMER0_COUNT: u32 = 0x4000_00B1;

/// What the simulated partition offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HypervConfig {
    /// CPUID 0x40000003 EAX bit 1.
    pub time_ref_count: bool,
    /// EAX bit 9.
    pub reference_tsc: bool,
    /// EAX bit 11 + EDX bit 8.
    pub frequency_msrs: bool,
    /// EAX bit 15.
    pub invariant_controls: bool,
    /// Reserved bits 11:1 of HV_X64_MSR_REFERENCE_TSC as the host sets them
    /// (the guest must preserve them).
    pub reference_tsc_reserved: u64,
    /// Synthetic timers (EAX bit 3) with direct mode (EDX bit 19): off by
    /// default, so the recorded profiles' CPUID stays as it was; only
    /// STIMER0 is modelled.
    pub synthetic_timers: bool,
}

impl Default for HypervConfig {
    fn default() -> Self {
        HypervConfig {
            time_ref_count: true,
            reference_tsc: true,
            frequency_msrs: true,
            invariant_controls: true,
            reference_tsc_reserved: 0,
            synthetic_timers: false,
        }
    }
}

impl HypervConfig {
    /// CPUID 0x40000003 EAX.
    pub fn feature_eax(&self) -> u32 {
        (self.time_ref_count as u32) << 1
            | (self.reference_tsc as u32) << 9
            | (self.frequency_msrs as u32) << 11
            | (self.invariant_controls as u32) << 15
            | (self.synthetic_timers as u32) << 3
    }
    /// CPUID 0x40000003 EDX.
    pub fn feature_edx(&self) -> u32 {
        (self.frequency_msrs as u32) << 8 | (self.synthetic_timers as u32) << 19
    }
}

/// The simulated partition.
#[derive(Debug)]
pub struct HypervHost {
    config: HypervConfig,
    guest_os_id: u64,
    reference_tsc_msr: u64,
    sequence: u32,
    /// `(scale, offset)` written instead of the truth (fault injection).
    page_override: Option<(u64, i64)>,
    /// Whether the host fills the page (when off, it stays invalid).
    page_updates: bool,
    /// STIMER0 of each vCPU (grown on first use).
    stimers: Vec<Stimer>,
    /// Fault: every synthetic timer fires this many ns early.
    stimer_early_ns: u64,
}

/// One vCPU's synthetic timer 0.
#[derive(Clone, Copy, Debug, Default)]
struct Stimer {
    config: u64,
    count: u64,
}

/// STIMER config: Enable (bit 0), Periodic (1), AutoEnable (3), vector
/// (11:4), DirectMode (12).
const STIMER_ENABLE: u64 = 1 << 0;
const STIMER_PERIODIC: u64 = 1 << 1;
const STIMER_AUTO_ENABLE: u64 = 1 << 3;
const STIMER_DIRECT: u64 = 1 << 12;

impl HypervHost {
    /// A partition per `config`.
    pub fn new(config: HypervConfig) -> Self {
        let reserved = config.reference_tsc_reserved & 0xFFE;
        HypervHost {
            config,
            guest_os_id: 0,
            reference_tsc_msr: reserved,
            sequence: 0,
            page_override: None,
            page_updates: true,
            stimers: Vec::new(),
            stimer_early_ns: 0,
        }
    }

    fn stimer(&mut self, cpu: usize) -> &mut Stimer {
        if self.stimers.len() <= cpu {
            self.stimers.resize(cpu + 1, Stimer::default());
        }
        &mut self.stimers[cpu]
    }

    /// Fault: every synthetic timer fire comes `ns` early.
    pub fn set_stimer_early_ns(&mut self, ns: u64) {
        self.stimer_early_ns = ns;
    }

    /// When vCPU `cpu`'s STIMER0 fires, machine ns: one-shot, direct
    /// mode, enabled, count non-zero. An expiry in the past fires at once
    /// (TLFS). Periodic and SynIC-message modes are not modelled (`None`).
    pub fn stimer_next_fire_ns(&self, ctx: &SimCtx<'_>, cpu: usize) -> Option<u64> {
        let t = self.stimers.get(cpu)?;
        let on = t.config & STIMER_ENABLE != 0
            && t.config & STIMER_DIRECT != 0
            && t.config & STIMER_PERIODIC == 0
            && t.count != 0;
        on.then(|| {
            (t.count.saturating_mul(100))
                .saturating_sub(self.stimer_early_ns)
                .max(ctx.now_ns)
        })
    }

    /// vCPU `cpu`'s STIMER0 interrupt if it has fired by now: its vector
    /// (the timer is then disabled, as a one-shot is after expiry).
    pub fn stimer_take_interrupt(&mut self, ctx: &SimCtx<'_>, cpu: usize) -> Option<u8> {
        let at = self.stimer_next_fire_ns(ctx, cpu)?;
        if ctx.now_ns < at {
            return None;
        }
        let t = self.stimer(cpu);
        t.config &= !STIMER_ENABLE;
        Some((t.config >> 4) as u8)
    }

    /// The configuration.
    pub fn config(&self) -> &HypervConfig {
        &self.config
    }

    /// The guest OS ID the guest wrote (0 if none).
    pub fn guest_os_id(&self) -> u64 {
        self.guest_os_id
    }

    /// Current value of HV_X64_MSR_REFERENCE_TSC.
    pub fn reference_tsc_msr(&self) -> u64 {
        self.reference_tsc_msr
    }

    /// The partition reference time in 100 ns units (what TIME_REF_COUNT reads).
    pub fn reference_time(ctx: &SimCtx<'_>) -> u64 {
        ctx.now_ns / 100
    }

    /// The (scale, offset) that map CPU 0's TSC to the reference time now.
    pub fn scale_offset(ctx: &SimCtx<'_>) -> (u64, i64) {
        // Below 10 MHz no scale fits; saturate (the simulator never goes there).
        let scale = hv_reference_scale(ctx.tsc_hz).unwrap_or(u64::MAX);
        let scaled = ((ctx.tsc(0) as u128 * scale as u128) >> 64) as u64;
        (scale, Self::reference_time(ctx).wrapping_sub(scaled) as i64)
    }

    /// The enabled page, if the guest enabled one the simulator allocated.
    pub fn page(&self, ctx: &SimCtx<'_>) -> Option<&'static HvReferenceTscPage> {
        if self.reference_tsc_msr & 1 == 0 {
            return None;
        }
        ctx.memory.hv_page(self.reference_tsc_msr & !0xFFF)
    }

    /// Writes `(scale, offset)` instead of the truth from the next update on
    /// (`None` restores it): hostile or stale page contents.
    pub fn set_page_override(&mut self, scale_offset: Option<(u64, i64)>) {
        self.page_override = scale_offset;
    }

    /// Whether the host fills the page when it is enabled or updated (off:
    /// a host that offers the page but leaves it invalid).
    pub fn set_page_updates(&mut self, on: bool) {
        self.page_updates = on;
    }

    /// Marks the page invalid (sequence 0), as Hyper-V does around a live
    /// migration; the next [`update_page`](Self::update_page) ends the window.
    pub fn invalidate_page(&mut self, ctx: &SimCtx<'_>) {
        self.set_raw_sequence(ctx, 0);
    }

    /// Stores `sequence` in the page as is (e.g. the old `0xFFFFFFFF`
    /// "invalid" marker), leaving scale and offset alone.
    pub fn set_raw_sequence(&mut self, ctx: &SimCtx<'_>, sequence: u32) {
        if let Some(page) = self.page(ctx) {
            page.sequence.store(sequence, SeqCst);
        }
    }

    /// Rewrites the page (if enabled) from the current time, bumping the
    /// sequence (never to 0 or 0xFFFFFFFF).
    pub fn update_page(&mut self, ctx: &SimCtx<'_>) {
        if !self.page_updates {
            return;
        }
        let (scale, offset) = self
            .page_override
            .unwrap_or_else(|| Self::scale_offset(ctx));
        self.publish(ctx, scale, offset);
    }

    /// Writes `(scale, offset)` into the enabled page once, with the next
    /// valid sequence: one update a host may write (e.g. garbage after the
    /// guest probed: an offset of +2^62). The next
    /// [`update_page`](Self::update_page) writes the truth again.
    pub fn publish(&mut self, ctx: &SimCtx<'_>, scale: u64, offset: i64) {
        let Some(page) = self.page(ctx) else {
            return;
        };
        self.sequence = hv_next_sequence(self.sequence);
        page.publish(self.sequence, scale, offset);
    }

    pub(super) fn rdmsr(&mut self, ctx: &SimCtx<'_>, msr: u32) -> Option<Option<u64>> {
        Some(match msr {
            MSR_GUEST_OS_ID => Some(self.guest_os_id),
            MSR_TIME_REF_COUNT if self.config.time_ref_count => Some(Self::reference_time(ctx)),
            MSR_REFERENCE_TSC if self.config.reference_tsc => Some(self.reference_tsc_msr),
            MSR_TSC_FREQUENCY if self.config.frequency_msrs => Some(ctx.tsc_hz),
            MSR_APIC_FREQUENCY if self.config.frequency_msrs => Some(200_000_000),
            MSR_STIMER0_CONFIG if self.config.synthetic_timers => {
                Some(self.stimers.get(ctx.cpu).map_or(0, |t| t.config))
            }
            MSR_STIMER0_COUNT if self.config.synthetic_timers => {
                Some(self.stimers.get(ctx.cpu).map_or(0, |t| t.count))
            }
            MSR_STIMER0_CONFIG | MSR_STIMER0_COUNT => None,
            MSR_TIME_REF_COUNT | MSR_REFERENCE_TSC | MSR_TSC_FREQUENCY | MSR_APIC_FREQUENCY => None,
            _ => return None,
        })
    }

    pub(super) fn wrmsr(
        &mut self,
        ctx: &SimCtx<'_>,
        msr: u32,
        value: u64,
    ) -> Option<Result<(), ()>> {
        Some(match msr {
            MSR_GUEST_OS_ID => {
                self.guest_os_id = value;
                Ok(())
            }
            MSR_REFERENCE_TSC if self.config.reference_tsc => {
                // The TLFS: reserved bits must be preserved.
                if value & 0xFFE != self.config.reference_tsc_reserved & 0xFFE {
                    return Some(Err(()));
                }
                self.reference_tsc_msr = value;
                self.update_page(ctx);
                Ok(())
            }
            MSR_STIMER0_CONFIG if self.config.synthetic_timers => {
                self.stimer(ctx.cpu).config = value & 0xF_1FFF;
                Ok(())
            }
            MSR_STIMER0_COUNT if self.config.synthetic_timers => {
                let t = self.stimer(ctx.cpu);
                t.count = value;
                // TLFS: a count write with AutoEnable set enables the
                // timer; a zero count disables a one-shot.
                if value == 0 {
                    t.config &= !STIMER_ENABLE;
                } else if t.config & STIMER_AUTO_ENABLE != 0 {
                    t.config |= STIMER_ENABLE;
                }
                Ok(())
            }
            MSR_TIME_REF_COUNT | MSR_REFERENCE_TSC | MSR_TSC_FREQUENCY | MSR_APIC_FREQUENCY
            | MSR_STIMER0_CONFIG | MSR_STIMER0_COUNT => Err(()),
            _ => return None,
        })
    }
}
