//! Where the Hermit image goes in physical memory.
//!
//! The image runs at virtual = physical (our page tables are an identity
//! map), 2 MiB-aligned (Hermit maps its image with 2 MiB pages), inside one
//! RAM region of the firmware's memory map, in the cached part of the map
//! (below 3 GiB), and clear of everything that must survive the copy: the
//! loader itself (its `.bss` holds the page tables, the devicetree and the
//! stacks Hermit keeps using) and the module being copied from.
//!
//! Hermit only hands out RAM above the end of its image, so placing the
//! image above the loader also keeps the loader's memory from being reused.

use clockhal_boot::MemoryRegion;
use core::ops::Range;

/// Alignment of the image.
pub const IMAGE_ALIGN: u64 = 2 << 20;
/// End of the write-back part of clockhal-boot's identity map.
pub const CACHED_LIMIT: u64 = 3 << 30;

fn align_up(x: u64, a: u64) -> Option<u64> {
    Some(x.checked_add(a - 1)? & !(a - 1))
}

fn overlaps(a: &Range<u64>, b: &Range<u64>) -> bool {
    a.start < b.end && b.start < a.end
}

/// The lowest 2 MiB-aligned address for `size` bytes in a RAM region of
/// `ram`, at or above `not_below`, not overlapping any of `avoid`, ending
/// below [`CACHED_LIMIT`]. With `fixed` (a non-relocatable image) only that
/// address is tried.
pub fn place(
    size: u64,
    fixed: Option<u64>,
    not_below: u64,
    avoid: &[Range<u64>],
    ram: &[MemoryRegion],
) -> Option<u64> {
    let fits = |base: u64| {
        let Some(end) = base.checked_add(size) else {
            return false;
        };
        let image = base..end;
        end <= CACHED_LIMIT
            && base >= not_below
            && !avoid.iter().any(|a| overlaps(a, &image))
            && ram.iter().any(|r| {
                r.is_ram() && r.base <= base && r.base.checked_add(r.size).is_some_and(|e| end <= e)
            })
    };
    if let Some(base) = fixed {
        return fits(base).then_some(base);
    }
    for region in ram.iter().filter(|r| r.is_ram()) {
        let mut base = align_up(region.base.max(not_below), IMAGE_ALIGN)?;
        // Each step moves past one obstacle: at most one per avoided range.
        for _ in 0..=avoid.len() {
            if fits(base) {
                return Some(base);
            }
            let end = base.checked_add(size)?;
            let image = base..end;
            match avoid
                .iter()
                .filter(|a| overlaps(a, &image))
                .map(|a| a.end)
                .max()
            {
                Some(past) => base = align_up(past, IMAGE_ALIGN)?,
                None => break, // does not fit in this region at all
            }
        }
    }
    None
}
