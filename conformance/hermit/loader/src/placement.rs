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

/// The lowest 2 MiB-aligned address for `size` bytes in one of the `ram`
/// ranges, at or above `not_below`, not overlapping any of `avoid`, ending
/// below [`CACHED_LIMIT`]. With `fixed` (a non-relocatable image) only that
/// address is tried.
pub fn place(
    size: u64,
    fixed: Option<u64>,
    not_below: u64,
    avoid: &[Range<u64>],
    ram: &[Range<u64>],
) -> Option<u64> {
    let fits = |base: u64| {
        let Some(end) = base.checked_add(size) else {
            return false;
        };
        let image = base..end;
        end <= CACHED_LIMIT
            && base >= not_below
            && !avoid.iter().any(|a| overlaps(a, &image))
            && ram.iter().any(|r| r.start <= base && end <= r.end)
    };
    if let Some(base) = fixed {
        return fits(base).then_some(base);
    }
    for region in ram {
        let mut base = align_up(region.start.max(not_below), IMAGE_ALIGN)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    /// QEMU q35 with 256 MiB: low RAM, then 1 MiB..256 MiB.
    const RAM: [Range<u64>; 2] = [0..0x9_fc00, MIB..256 * MIB];

    #[test]
    fn lowest_aligned_place_above_the_loader() {
        let loader = MIB..MIB + 300 * 1024;
        let got = place(3 * MIB, None, loader.end, &[loader], &RAM);
        assert_eq!(got, Some(2 * MIB));
    }

    #[test]
    fn the_module_is_stepped_over() {
        let loader = MIB..MIB + 300 * 1024;
        // QEMU put the module right where the image would go.
        let module = 2 * MIB + 4096..5 * MIB;
        let got = place(3 * MIB, None, loader.end, &[loader, module], &RAM);
        assert_eq!(got, Some(6 * MIB));
    }

    #[test]
    #[allow(clippy::single_range_in_vec_init)] // one range is the point
    fn no_room_limits_and_fixed_addresses() {
        let loader = [MIB..2 * MIB];
        let end = 2 * MIB;
        assert_eq!(place(300 * MIB, None, end, &loader, &RAM), None);
        // Only cached (< 3 GiB) memory is used.
        let big: [Range<u64>; 1] = [0..4 << 30];
        assert_eq!(place(2 * MIB, None, CACHED_LIMIT - MIB, &[], &big), None);
        // A non-relocatable image goes exactly where it must, or nowhere.
        assert_eq!(place(MIB, Some(8 * MIB), end, &loader, &RAM), Some(8 * MIB));
        assert_eq!(place(MIB, Some(MIB), end, &loader, &RAM), None);
        assert_eq!(place(MIB, Some(300 * MIB), end, &loader, &RAM), None);
        assert_eq!(place(u64::MAX, None, 0, &[], &RAM), None);
    }
}
