//! The `x86_64` crate's address and page-table types (feature `x86_64`).
//!
//! A blog_os-style kernel already holds `PhysAddr`/`VirtAddr` and an
//! `OffsetPageTable`; these functions take them as they are, so it does not
//! re-derive what clockhal needs from them:
//!
//! - [`OffsetMapping::from_x86_64`]: firmware-table reads through the
//!   kernel's physical-memory mapping;
//! - [`PhysMapped::translated`]: hypervisor-shared memory paired with the
//!   physical address its page table gives, refused when it is not one
//!   physically contiguous run (a higher-half static straddling two frames);
//! - [`map_mmio`]: device registers (the HPET block) mapped uncached at a
//!   virtual address the kernel chooses, returned as the [`MmioRegion`]
//!   `Platform::hpet` takes.
//!
//! ```no_run
//! # fn demo(
//! #     tables: &mut x86_64::structures::paging::OffsetPageTable<'static>,
//! #     frames: &mut impl x86_64::structures::paging::FrameAllocator<
//! #         x86_64::structures::paging::Size4KiB,
//! #     >,
//! # ) {
//! use clockhal_x86::paging::map_mmio;
//! use clockhal_x86::paravirt::{PhysMapped, PvclockPage};
//! use x86_64::{PhysAddr, VirtAddr};
//!
//! static PVCLOCK: PvclockPage = PvclockPage::new();
//! // SAFETY: `tables` is the active address space, and the hypervisor may
//! // write PVCLOCK (it is only ever read through clockhal).
//! let areas = unsafe { PhysMapped::translated(&PVCLOCK, tables) }.expect("one frame");
//! // SAFETY: 0xffff_a000_0000_0000 is address space this kernel keeps for
//! // device mappings, and 0xfed0_0000 is the HPET the ACPI table names.
//! let hpet = unsafe {
//!     map_mmio(tables, frames, VirtAddr::new(0xffff_a000_0000_0000), PhysAddr::new(0xfed0_0000), 1024)
//! };
//! # let _ = (areas, hpet);
//! # }
//! ```

use core::fmt;

use x86_64::structures::paging::mapper::{MapToError, TranslateResult};
use x86_64::structures::paging::{
    FrameAllocator, Mapper, Page, PageTableFlags, PhysFrame, Size4KiB, Translate,
};
use x86_64::{PhysAddr, VirtAddr};

use crate::paravirt::PhysMapped;
use crate::{MmioRegion, OffsetMapping};

const PAGE: u64 = 4096;

impl OffsetMapping {
    /// Physical addresses below `limit` are readable at `offset + phys`
    /// (bootloader_api's `physical_memory_offset`, limited to the end of the
    /// memory map).
    /// Interrupt-safe: yes.
    ///
    /// # Safety
    /// As for [`OffsetMapping::new`]: every physical address below `limit`
    /// that clockhal reads must be mapped readable at `offset + phys`, and
    /// reading it must have no side effects.
    pub const unsafe fn from_x86_64(offset: VirtAddr, limit: PhysAddr) -> OffsetMapping {
        // SAFETY: the caller's promise is `new`'s.
        unsafe { OffsetMapping::new(offset.as_u64(), limit.as_u64()) }
    }
}

/// Why [`PhysMapped::translated`] found no single physical address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TranslateError {
    /// The page holding this virtual address is not mapped.
    NotMapped {
        /// The first unmapped address.
        virt: u64,
    },
    /// The page at this virtual address does not follow the previous one
    /// physically: the memory spans frames that are not adjacent. Use a
    /// page-aligned type ([`PvclockPage`](crate::paravirt::PvclockPage)).
    NotContiguous {
        /// Start of the first page out of line.
        virt: u64,
    },
}

impl fmt::Display for TranslateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TranslateError::NotMapped { virt } => write!(f, "{virt:#x} is not mapped"),
            TranslateError::NotContiguous { virt } => write!(
                f,
                "the page at {virt:#x} is not physically contiguous with the one before"
            ),
        }
    }
}

impl core::error::Error for TranslateError {}

/// The physical address of `start..start + len` if the page table maps it
/// to one contiguous physical run.
fn contiguous_phys(table: &impl Translate, start: u64, len: u64) -> Result<u64, TranslateError> {
    let translate = |virt: u64| {
        VirtAddr::try_new(virt)
            .ok()
            .and_then(|v| table.translate_addr(v))
            .map(PhysAddr::as_u64)
            .ok_or(TranslateError::NotMapped { virt })
    };
    let phys = translate(start)?;
    let end = start.saturating_add(len);
    let mut page = (start & !(PAGE - 1)).saturating_add(PAGE);
    while page < end {
        if translate(page)? != phys.wrapping_add(page - start) {
            return Err(TranslateError::NotContiguous { virt: page });
        }
        page += PAGE;
    }
    Ok(phys)
}

impl<T: ?Sized> PhysMapped<T> {
    /// Pairs `virt` with the physical address `table` maps it to, checking
    /// every page it covers: memory that is not one physically contiguous
    /// run is refused, not given a wrong address.
    /// Interrupt-safe: yes.
    ///
    /// # Safety
    /// `table` describes the address space the CPU that registers the
    /// memory runs in, and the OS lets the hypervisor write `*virt` for as
    /// long as it stays registered (as for [`PhysMapped::new`]).
    pub unsafe fn translated(
        virt: &'static T,
        table: &impl Translate,
    ) -> Result<PhysMapped<T>, TranslateError> {
        let start = virt as *const T as *const u8 as u64;
        let phys = contiguous_phys(table, start, core::mem::size_of_val(virt) as u64)?;
        // SAFETY: `phys` is `virt`'s physical address over its whole size
        // (checked page by page above, in the address space the caller
        // named); the caller lets the hypervisor write it.
        Ok(unsafe { PhysMapped::new(virt, phys) })
    }
}

/// Why [`map_mmio`] mapped nothing.
#[derive(Debug)]
pub enum MapMmioError {
    /// `len` is 0.
    Empty,
    /// `virt` is not page-aligned, or `phys` is not 8-byte aligned (every
    /// register access is naturally aligned, 64-bit ones included).
    Misaligned,
    /// The range runs past the end of the physical or virtual address
    /// space.
    Overflow,
    /// A page of the virtual range is already mapped (or lies in a huge
    /// page): nothing was changed.
    AlreadyMapped {
        /// Start of that page.
        virt: u64,
    },
    /// The page table refused a page (its frame allocator ran dry, ...):
    /// the pages mapped before it were unmapped again.
    Map(MapToError<Size4KiB>),
}

impl fmt::Display for MapMmioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MapMmioError::Empty => f.write_str("empty register range"),
            MapMmioError::Misaligned => {
                f.write_str("virtual base not page-aligned or registers not 8-byte aligned")
            }
            MapMmioError::Overflow => f.write_str("range runs past the end of the address space"),
            MapMmioError::AlreadyMapped { virt } => write!(f, "{virt:#x} is already mapped"),
            MapMmioError::Map(MapToError::FrameAllocationFailed) => {
                f.write_str("no frame for a new page table")
            }
            MapMmioError::Map(MapToError::ParentEntryHugePage) => {
                f.write_str("the range lies in a huge page")
            }
            MapMmioError::Map(MapToError::PageAlreadyMapped(_)) => {
                f.write_str("a page is already mapped")
            }
        }
    }
}

impl core::error::Error for MapMmioError {}

/// Maps the device registers at `phys..phys + len` uncached (PCD|PWT,
/// writable, not executable) at the page-aligned virtual address `virt`,
/// and returns them as an [`MmioRegion`] starting at `virt` plus `phys`'s
/// offset within its page.
///
/// Every page of the virtual range must be unmapped: the range is checked
/// before anything changes, and a failure part-way unmaps what was mapped
/// (page-table frames taken for it stay allocated). The registers are
/// written, so the parent entries above the range must be writable too:
/// `x86_64`'s mapper adds WRITABLE to parent entries that exist, on
/// success and also when the call then fails (the leaf pages are what the
/// rollback removes). An OS that keeps a read-only region above the range
/// maps the registers elsewhere. No TLB flush is needed
/// or issued: the pages were not present, and x86 caches no translation for
/// a page that is not present.
/// Interrupt-safe: no (edits page tables).
///
/// # Safety
/// `mapper` is the active address space (or one the OS switches to before
/// clockhal reads the region), `virt..virt + len` is address space the OS
/// reserves for this mapping, and `phys..phys + len` are device registers
/// that the backend may read and write as it documents (not memory a Rust
/// object lives in).
pub unsafe fn map_mmio<M, A>(
    mapper: &mut M,
    frames: &mut A,
    virt: VirtAddr,
    phys: PhysAddr,
    len: usize,
) -> Result<MmioRegion, MapMmioError>
where
    M: Mapper<Size4KiB> + Translate,
    A: FrameAllocator<Size4KiB> + ?Sized,
{
    if len == 0 {
        return Err(MapMmioError::Empty);
    }
    if virt.as_u64() % PAGE != 0 || phys.as_u64() % 8 != 0 {
        return Err(MapMmioError::Misaligned);
    }
    let first_frame = phys.align_down(PAGE);
    let in_page = phys.as_u64() - first_frame.as_u64();
    let span = in_page
        .checked_add(len as u64)
        .ok_or(MapMmioError::Overflow)?;
    let pages = span.div_ceil(PAGE);
    let last = pages - 1;
    // The last frame and page must exist: no wrap, canonical, below 2^52.
    PhysAddr::try_new(
        first_frame
            .as_u64()
            .checked_add(last * PAGE)
            .ok_or(MapMmioError::Overflow)?,
    )
    .map_err(|_| MapMmioError::Overflow)?;
    let last_virt = virt
        .as_u64()
        .checked_add(last * PAGE)
        .and_then(|v| VirtAddr::try_new(v).ok())
        .ok_or(MapMmioError::Overflow)?;
    // The last page must also be in the same canonical half as the first.
    if (virt.as_u64() >> 47) != (last_virt.as_u64() >> 47) {
        return Err(MapMmioError::Overflow);
    }
    // The region's own checks (its end must not wrap, as in the last page
    // of the address space), made before the tables change.
    // SAFETY: the region is returned only once it is mapped uncached to the
    // registers at `phys..phys + len` (below), never if mapping fails; the
    // caller lets the backend access them.
    let region = unsafe { MmioRegion::new((virt.as_u64() + in_page) as usize, len) }
        .ok_or(MapMmioError::Overflow)?;
    let page = |i: u64| Page::<Size4KiB>::containing_address(virt + i * PAGE);
    for i in 0..pages {
        let at = page(i).start_address();
        if !matches!(mapper.translate(at), TranslateResult::NotMapped) {
            return Err(MapMmioError::AlreadyMapped { virt: at.as_u64() });
        }
    }
    let flags = PageTableFlags::PRESENT
        | PageTableFlags::WRITABLE
        | PageTableFlags::NO_CACHE
        | PageTableFlags::WRITE_THROUGH
        | PageTableFlags::NO_EXECUTE;
    for i in 0..pages {
        let frame = PhysFrame::containing_address(first_frame + i * PAGE);
        // SAFETY: the page was unmapped (checked above) in address space the
        // caller reserved, so nothing aliases it; the frame holds device
        // registers, not memory a Rust object lives in (caller's promise).
        match unsafe { mapper.map_to(page(i), frame, flags, frames) } {
            // Not present before: no stale translation to flush.
            Ok(flush) => flush.ignore(),
            Err(e) => {
                for j in 0..i {
                    // Never read through, so no translation is cached either.
                    if let Ok((_, flush)) = mapper.unmap(page(j)) {
                        flush.ignore();
                    }
                }
                return Err(MapMmioError::Map(e));
            }
        }
    }
    Ok(region)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::boxed::Box;
    use std::string::ToString;
    use std::vec::Vec;

    use x86_64::structures::paging::{OffsetPageTable, PageTable};

    use super::*;

    /// Page tables on the heap at physical = virtual (offset 0): the mapper
    /// walks real tables, and the frames it maps are never touched.
    struct Tables {
        budget: usize,
        taken: Vec<u64>,
    }

    // SAFETY: each frame is a fresh, leaked, zeroed, 4 KiB-aligned table,
    // handed out once.
    unsafe impl FrameAllocator<Size4KiB> for Tables {
        fn allocate_frame(&mut self) -> Option<PhysFrame<Size4KiB>> {
            if self.budget == 0 {
                return None;
            }
            self.budget -= 1;
            let table: &'static mut PageTable = Box::leak(Box::new(PageTable::new()));
            let at = table as *mut PageTable as u64;
            self.taken.push(at);
            Some(PhysFrame::containing_address(PhysAddr::new(at)))
        }
    }

    fn tables(budget: usize) -> (OffsetPageTable<'static>, Tables) {
        let l4 = Box::leak(Box::new(PageTable::new()));
        // SAFETY: the level-4 table and every table the allocator gives are
        // heap memory at physical = virtual, owned by this test only.
        let mapper = unsafe { OffsetPageTable::new(l4, VirtAddr::new(0)) };
        let frames = Tables {
            budget,
            taken: Vec::new(),
        };
        (mapper, frames)
    }

    const VIRT: u64 = 0xffff_a000_0000_0000;
    const HPET: u64 = 0xfed0_0000;

    fn map(
        mapper: &mut OffsetPageTable<'static>,
        frames: &mut Tables,
        virt: u64,
        phys: u64,
        len: usize,
    ) -> Result<MmioRegion, MapMmioError> {
        // SAFETY: test tables, never loaded into CR3; the frames are never
        // dereferenced.
        unsafe {
            map_mmio(
                mapper,
                frames,
                VirtAddr::new(virt),
                PhysAddr::new(phys),
                len,
            )
        }
    }

    fn flags_at(mapper: &OffsetPageTable<'static>, virt: u64) -> Option<(u64, PageTableFlags)> {
        match mapper.translate(VirtAddr::new(virt)) {
            TranslateResult::Mapped { frame, flags, .. } => {
                Some((frame.start_address().as_u64(), flags))
            }
            _ => None,
        }
    }

    #[test]
    fn maps_the_hpet_block_uncached_and_says_where() {
        let (mut mapper, mut frames) = tables(8);
        let region = map(&mut mapper, &mut frames, VIRT, HPET, 1024).unwrap();
        assert_eq!((region.base() as u64, region.len()), (VIRT, 1024));
        let (frame, flags) = flags_at(&mapper, VIRT).unwrap();
        assert_eq!(frame, HPET);
        for f in [
            PageTableFlags::PRESENT,
            PageTableFlags::WRITABLE,
            PageTableFlags::NO_CACHE,
            PageTableFlags::WRITE_THROUGH,
            PageTableFlags::NO_EXECUTE,
        ] {
            assert!(flags.contains(f), "{f:?} missing from {flags:?}");
        }
        assert_eq!(flags_at(&mapper, VIRT + PAGE), None, "one page only");
        // Three new tables below the level-4 one.
        assert_eq!(frames.taken.len(), 3);
    }

    #[test]
    fn registers_that_cross_a_page_get_every_page_and_keep_their_offset() {
        let (mut mapper, mut frames) = tables(8);
        let phys = HPET + PAGE - 16;
        let region = map(&mut mapper, &mut frames, VIRT, phys, 64).unwrap();
        assert_eq!(region.base() as u64, VIRT + PAGE - 16);
        assert_eq!(flags_at(&mapper, VIRT).unwrap().0, HPET);
        assert_eq!(flags_at(&mapper, VIRT + PAGE).unwrap().0, HPET + PAGE);
        assert_eq!(flags_at(&mapper, VIRT + 2 * PAGE), None);
    }

    #[test]
    fn refuses_bad_ranges_without_touching_the_tables() {
        let (mut mapper, mut frames) = tables(8);
        let two_pages = 2 * PAGE as usize;
        // (virtual base, registers, length, what is wrong)
        let cases = [
            (VIRT, HPET, 0, "empty"),
            (VIRT + 8, HPET, 8, "misaligned"),
            (VIRT, HPET + 4, 8, "misaligned"),
            // Past the top of the physical address space (2^52).
            (VIRT, (1 << 52) - PAGE, two_pages, "overflow"),
            // Past the top of the lower canonical half.
            ((1 << 47) - PAGE, HPET, two_pages, "overflow"),
            // Past the top of the address space.
            (u64::MAX - PAGE + 1, HPET, two_pages, "overflow"),
            // The last page of the address space: the region's end wraps.
            (u64::MAX - PAGE + 1, HPET, PAGE as usize, "overflow"),
        ];
        for (virt, phys, len, wrong) in cases {
            let got = map(&mut mapper, &mut frames, virt, phys, len);
            let ok = match got {
                Err(MapMmioError::Empty) => wrong == "empty",
                Err(MapMmioError::Misaligned) => wrong == "misaligned",
                Err(MapMmioError::Overflow) => wrong == "overflow",
                _ => false,
            };
            assert!(
                ok,
                "{virt:#x} -> {phys:#x} + {len}: want {wrong}, got {got:?}"
            );
        }
        assert!(frames.taken.is_empty(), "nothing mapped");
    }

    #[test]
    fn an_already_mapped_page_changes_nothing() {
        let (mut mapper, mut frames) = tables(8);
        map(&mut mapper, &mut frames, VIRT + PAGE, HPET, 8).unwrap();
        let err = map(
            &mut mapper,
            &mut frames,
            VIRT,
            0x1000_0000,
            2 * PAGE as usize,
        )
        .unwrap_err();
        assert!(matches!(err, MapMmioError::AlreadyMapped { virt } if virt == VIRT + PAGE));
        assert_eq!(
            flags_at(&mapper, VIRT),
            None,
            "the first page was left alone"
        );
        assert_eq!(flags_at(&mapper, VIRT + PAGE).unwrap().0, HPET);
        assert!(err.to_string().contains("already mapped"));
    }

    #[test]
    fn a_frame_allocator_running_dry_part_way_unmaps_what_was_mapped() {
        // Three tables reach the first 2 MiB; the next page needs a new
        // level-1 table the allocator does not have.
        let (mut mapper, mut frames) = tables(3);
        let virt = VIRT + 0x20_0000 - PAGE;
        let err = map(&mut mapper, &mut frames, virt, HPET, 2 * PAGE as usize).unwrap_err();
        assert!(matches!(
            err,
            MapMmioError::Map(MapToError::FrameAllocationFailed)
        ));
        assert_eq!(flags_at(&mapper, virt), None, "rolled back");
        assert_eq!(flags_at(&mapper, virt + PAGE), None);
        assert_eq!(err.to_string(), "no frame for a new page table");
    }

    #[test]
    fn translation_follows_the_table_page_by_page() {
        let (mut mapper, mut frames) = tables(16);
        // Two adjacent frames at adjacent pages, then a gap.
        map(&mut mapper, &mut frames, VIRT, 0x10_0000, 2 * PAGE as usize).unwrap();
        map(&mut mapper, &mut frames, VIRT + 2 * PAGE, 0x30_0000, 8).unwrap();
        assert_eq!(
            contiguous_phys(&mapper, VIRT + 100, 2 * PAGE - 100),
            Ok(0x10_0000 + 100)
        );
        assert_eq!(
            contiguous_phys(&mapper, VIRT + 100, 2 * PAGE),
            Err(TranslateError::NotContiguous {
                virt: VIRT + 2 * PAGE
            })
        );
        assert_eq!(
            contiguous_phys(&mapper, VIRT + 2 * PAGE, 2 * PAGE),
            Err(TranslateError::NotMapped {
                virt: VIRT + 3 * PAGE
            })
        );
        assert_eq!(
            contiguous_phys(&mapper, VIRT + PAGE - 1, 0),
            Ok(0x10_0000 + PAGE - 1)
        );
        // A non-canonical address is simply not mapped.
        assert_eq!(
            contiguous_phys(&mapper, 1 << 47, 8),
            Err(TranslateError::NotMapped { virt: 1 << 47 })
        );
    }

    #[test]
    fn phys_mapped_takes_the_translated_address_or_refuses() {
        use crate::paravirt::PvclockPage;
        static PAGE_OF_AREAS: PvclockPage = PvclockPage::new();
        let (mut mapper, mut frames) = tables(16);
        let at = &PAGE_OF_AREAS as *const PvclockPage as u64;
        // SAFETY: test tables; the "frame" is a number, never dereferenced.
        let flush = unsafe {
            mapper.map_to(
                Page::<Size4KiB>::containing_address(VirtAddr::new(at)),
                PhysFrame::containing_address(PhysAddr::new(0x7_7000)),
                PageTableFlags::PRESENT,
                &mut frames,
            )
        };
        flush.unwrap().ignore();
        // SAFETY: the mapped memory is never registered with a hypervisor.
        let mapped = unsafe { PhysMapped::translated(&PAGE_OF_AREAS, &mapper) }.unwrap();
        assert_eq!(mapped.phys(), 0x7_7000);
        assert_eq!(
            mapped.areas().element(127).unwrap().phys(),
            0x7_7000 + 127 * 32
        );
        static ELSEWHERE: u64 = 0;
        // SAFETY: as above.
        let unmapped = unsafe { PhysMapped::translated(&ELSEWHERE, &mapper) };
        assert!(matches!(unmapped, Err(TranslateError::NotMapped { .. })));
    }

    #[test]
    fn offset_mapping_from_the_crate_types_reads_at_the_offset() {
        use crate::PhysMemory;
        let bytes: &'static [u8; 16] = Box::leak(Box::new(*b"RSD PTR clockhal"));
        let at = bytes.as_ptr() as u64;
        // Physical 0x1000 is at `at`: offset = at - 0x1000.
        // SAFETY: physical 0x1000..0x1010 is `bytes`, readable without
        // effects; nothing else is read (limit 0x1010).
        let memory = unsafe {
            OffsetMapping::from_x86_64(VirtAddr::new(at - 0x1000), PhysAddr::new(0x1010))
        };
        let mut buf = [0u8; 8];
        assert!(memory.read(0x1000, &mut buf));
        assert_eq!(&buf, b"RSD PTR ");
        assert!(!memory.read(0x1009, &mut buf), "past the limit");
    }
}
