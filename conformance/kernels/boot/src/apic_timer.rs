//! The executing CPU's local APIC timer, only as far as measuring its rate
//! needs it (`clockhal::Clock::calibrate_lapic`): one-shot, masked, a
//! divide configuration, an initial count, the current count. No
//! interrupt is ever delivered (the LVT entry stays masked).

use crate::lapic::Lapic;

// xAPIC register offsets and x2APIC MSRs.
const XAPIC_LVT_TIMER: u64 = 0x320;
const XAPIC_INITIAL_COUNT: u64 = 0x380;
const XAPIC_CURRENT_COUNT: u64 = 0x390;
const XAPIC_DIVIDE: u64 = 0x3E0;
const X2APIC_LVT_TIMER: u32 = 0x832;
const X2APIC_INITIAL_COUNT: u32 = 0x838;
const X2APIC_CURRENT_COUNT: u32 = 0x839;
const X2APIC_DIVIDE: u32 = 0x83E;

/// LVT timer: masked, one-shot, vector 0xEF (never delivered).
const LVT_MASKED_ONE_SHOT: u32 = (1 << 16) | 0xEF;
/// Divide configuration register value for divide by 16 (bits 3,1,0 = 011).
const DIVIDE_BY_16: u32 = 0b0011;

/// The calling CPU's APIC timer, masked, counting at its input rate / 16.
#[derive(Clone, Copy, Debug)]
pub struct ApicTimer(Lapic);

impl ApicTimer {
    /// The divide configuration the timer runs with.
    pub const DIVIDER: u32 = 16;

    /// The executing CPU's APIC timer, masked and one-shot, divide by 16;
    /// `None` without a usable local APIC.
    pub fn this_cpu() -> Option<ApicTimer> {
        let lapic = Lapic::this_cpu()?;
        lapic.write(XAPIC_LVT_TIMER, X2APIC_LVT_TIMER, LVT_MASKED_ONE_SHOT);
        lapic.write(XAPIC_DIVIDE, X2APIC_DIVIDE, DIVIDE_BY_16);
        Some(ApicTimer(lapic))
    }

    /// Starts a one-shot count down from `initial`.
    pub fn start(&self, initial: u32) {
        self.0.write(XAPIC_INITIAL_COUNT, X2APIC_INITIAL_COUNT, initial);
    }

    /// The current count.
    pub fn current(&self) -> u32 {
        self.0.read(XAPIC_CURRENT_COUNT, X2APIC_CURRENT_COUNT)
    }
}
