//! How much of the boot CPU's stack has been used: the entry code paints
//! the stack with [`PAINT`] before the first call; the lowest byte that
//! differs is the deepest the stack went.

/// The byte the entry code fills the boot stack with.
pub(crate) const PAINT: u8 = 0x5A;

extern "C" {
    /// The lowest byte of the boot stack (entry.rs).
    static clockhal_boot_stack_bottom: u8;
}

/// The boot stack's size in bytes.
pub const BOOT_STACK_SIZE: usize = crate::entry::BOOT_STACK_SIZE;

/// The deepest the boot CPU's stack has been so far, in bytes (a lower
/// bound: a frame that skipped over bytes without writing them, e.g. an
/// unused buffer, is counted only from its lowest written byte). Call on
/// the boot CPU or any other: it only reads the painted region.
pub fn boot_stack_high_water() -> usize {
    // Taking the address of the symbol (the start of the stack region
    // entry.rs reserves in .bss) reads nothing.
    let bottom = core::ptr::addr_of!(clockhal_boot_stack_bottom);
    for i in 0..BOOT_STACK_SIZE {
        // SAFETY: bottom + i lies in the stack region (i < its size), which
        // is mapped, initialised (painted at entry) and aligned for u8; a
        // volatile read of a byte the boot CPU may be writing at the same
        // time returns either value.
        let b = unsafe { core::ptr::read_volatile(bottom.add(i)) };
        if b != PAINT {
            return BOOT_STACK_SIZE - i;
        }
    }
    0
}
