//! Reading firmware-provided structures by physical address.
//!
//! The boot page tables identity-map the low 4 GiB, so a physical address
//! below 4 GiB is also a valid pointer. Anything above is not mapped.

/// End of the identity map.
pub(crate) const MAPPED_END: u64 = 1 << 32;

/// Whether `[paddr, paddr + len)` lies inside the identity map. Address 0
/// counts as "absent" (firmware uses it for "no such structure"); the rest of
/// page 0 is valid (QEMU's PVH memory map lives there).
pub(crate) fn is_mapped(paddr: u64, len: u64) -> bool {
    paddr != 0 && paddr.checked_add(len).is_some_and(|end| end <= MAPPED_END)
}

/// Reads a `T` at physical address `paddr` (any alignment).
///
/// # Safety
/// `[paddr, paddr + size_of::<T>())` must be mapped (see [`is_mapped`]) and
/// be plain memory (firmware tables or RAM), not MMIO with read side
/// effects, and every bit pattern must be a valid `T`.
pub(crate) unsafe fn read<T: Copy>(paddr: u64) -> T {
    // SAFETY: identity mapping makes the address a valid pointer; the caller
    // guarantees it is mapped plain memory holding a valid T.
    unsafe { core::ptr::read_unaligned(paddr as *const T) }
}

/// Borrows `len` bytes at physical address `paddr`.
///
/// # Safety
/// As for [`read`], for the whole range; the memory must not change while
/// the slice is alive (firmware tables never do).
pub(crate) unsafe fn bytes(paddr: u64, len: usize) -> &'static [u8] {
    // SAFETY: the caller guarantees the range is mapped, immutable memory.
    unsafe { core::slice::from_raw_parts(paddr as *const u8, len) }
}
