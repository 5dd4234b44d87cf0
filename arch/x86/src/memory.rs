//! Reading physical memory (firmware tables) through an OS-supplied mapping.

/// Byte-granular read access to physical memory, for parsing firmware tables.
///
/// An OS implements this over its own mapping, or uses [`OffsetMapping`]
/// (all physical memory mapped at a fixed virtual offset, including the
/// identity map). Tests use [`SliceMemory`].
pub trait PhysMemory {
    /// Copies `buf.len()` bytes starting at physical address `phys` into
    /// `buf`. Returns `false` (leaving `buf` unspecified) if any byte is not
    /// readable.
    /// Interrupt-safe: yes.
    fn read(&self, phys: u64, buf: &mut [u8]) -> bool;
}

impl<T: PhysMemory + ?Sized> PhysMemory for &T {
    fn read(&self, phys: u64, buf: &mut [u8]) -> bool {
        (**self).read(phys, buf)
    }
}

/// Physical memory mapped at `virt = phys + offset` (offset 0: identity map).
#[derive(Clone, Copy, Debug)]
pub struct OffsetMapping {
    offset: u64,
    limit: u64,
}

impl OffsetMapping {
    /// Physical addresses `0..limit` are readable at `phys + offset`.
    /// Interrupt-safe: yes.
    ///
    /// # Safety
    /// For as long as the mapping is used, every physical address below
    /// `limit` that clockhal is asked to read (ACPI tables named by the RSDP
    /// the OS passes) must be mapped readable at `phys + offset`, and reading
    /// it must have no side effects.
    pub const unsafe fn new(offset: u64, limit: u64) -> OffsetMapping {
        OffsetMapping { offset, limit }
    }
}

impl PhysMemory for OffsetMapping {
    fn read(&self, phys: u64, buf: &mut [u8]) -> bool {
        let Some(end) = phys.checked_add(buf.len() as u64) else {
            return false;
        };
        if end > self.limit {
            return false;
        }
        let Some(virt) = phys.checked_add(self.offset) else {
            return false;
        };
        for (i, b) in buf.iter_mut().enumerate() {
            // SAFETY: `phys + i < limit`, which `OffsetMapping::new`'s caller
            // promised is mapped readable at `phys + offset` without effects.
            *b = unsafe { core::ptr::read_volatile((virt as usize + i) as *const u8) };
        }
        true
    }
}

/// A byte slice standing in for physical memory from `base` on (tests, or an
/// OS that copied its tables).
#[derive(Clone, Copy, Debug)]
pub struct SliceMemory<'a> {
    base: u64,
    bytes: &'a [u8],
}

impl<'a> SliceMemory<'a> {
    /// `bytes[i]` is physical address `base + i`.
    /// Interrupt-safe: yes.
    pub const fn new(base: u64, bytes: &'a [u8]) -> Self {
        SliceMemory { base, bytes }
    }
}

impl PhysMemory for SliceMemory<'_> {
    fn read(&self, phys: u64, buf: &mut [u8]) -> bool {
        let Some(start) = phys.checked_sub(self.base) else {
            return false;
        };
        let Ok(start) = usize::try_from(start) else {
            return false;
        };
        match self.bytes.get(start..).and_then(|s| s.get(..buf.len())) {
            Some(src) => {
                buf.copy_from_slice(src);
                true
            }
            None => false,
        }
    }
}
