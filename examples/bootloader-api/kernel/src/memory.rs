//! Page tables, blog_os style: the bootloader maps all physical memory at an
//! offset; an `OffsetPageTable` over the active level-4 table translates
//! addresses and maps the HPET uncached, with frames for new tables taken
//! from the usable regions of the bootloader's memory map.

use bootloader_api::info::{MemoryRegionKind, MemoryRegions};
use x86_64::registers::control::Cr3;
use x86_64::structures::paging::{
    mapper::TranslateResult, FrameAllocator, Mapper, OffsetPageTable, Page, PageTable,
    PageTableFlags, PhysFrame, Size4KiB, Translate,
};
use x86_64::{PhysAddr, VirtAddr};

const PAGE: u64 = 4096;

/// The kernel's address space.
pub struct Memory {
    tables: OffsetPageTable<'static>,
    frames: UsableFrames,
    phys_offset: u64,
}

impl Memory {
    /// The active address space.
    ///
    /// # Safety
    /// All physical memory must be mapped at `phys_offset` (bootloader_api's
    /// `physical_memory` mapping), the regions marked usable must be unused,
    /// and only one `Memory` may exist.
    pub unsafe fn new(phys_offset: u64, regions: &'static MemoryRegions) -> Memory {
        let (l4_frame, _) = Cr3::read();
        let l4 = (phys_offset + l4_frame.start_address().as_u64()) as *mut PageTable;
        // SAFETY: CR3 names the live level-4 table, reachable at its
        // physical address + offset (caller's promise); this is the only
        // reference to it (only one Memory).
        let tables = unsafe { OffsetPageTable::new(&mut *l4, VirtAddr::new(phys_offset)) };
        Memory {
            tables,
            frames: UsableFrames::new(regions),
            phys_offset,
        }
    }

    /// Where physical memory is mapped.
    pub fn phys_offset(&self) -> u64 {
        self.phys_offset
    }

    /// The physical address of `value`, if all of its bytes are mapped to
    /// consecutive physical addresses.
    pub fn phys_addr_of<T: ?Sized>(&self, value: &T) -> Option<u64> {
        let start = value as *const T as *const u8 as u64;
        let len = core::mem::size_of_val(value) as u64;
        let phys = self.tables.translate_addr(VirtAddr::new(start))?.as_u64();
        let mut at = (start & !(PAGE - 1)) + PAGE;
        while at < start + len {
            let p = self.tables.translate_addr(VirtAddr::new(at))?.as_u64();
            if p != phys + (at - start) {
                return None;
            }
            at += PAGE;
        }
        Some(phys)
    }

    /// The page-table flags of the page holding `virt`, if mapped.
    pub fn flags_of(&self, virt: u64) -> Option<PageTableFlags> {
        match self.tables.translate(VirtAddr::new(virt)) {
            TranslateResult::Mapped { flags, .. } => Some(flags),
            _ => None,
        }
    }

    /// Maps the device registers at `phys..phys + len` uncached (the
    /// physical-memory mapping is write-back) in an unused part of the
    /// address space; returns their virtual address.
    pub fn map_uncached(&mut self, phys: u64, len: usize) -> Option<u64> {
        // A level-4 entry nobody uses is 512 GiB of free address space.
        let l4 = self.tables.level_4_table();
        let slot = (1..256).find(|&i| l4[i].is_unused())?;
        let virt_base = (slot as u64) << 39;
        let first = phys & !(PAGE - 1);
        let end = phys.checked_add(len as u64)?;
        let flags = PageTableFlags::PRESENT
            | PageTableFlags::WRITABLE
            | PageTableFlags::NO_CACHE
            | PageTableFlags::WRITE_THROUGH
            | PageTableFlags::NO_EXECUTE;
        let mut frame_at = first;
        while frame_at < end {
            let page =
                Page::<Size4KiB>::containing_address(VirtAddr::new(virt_base + (frame_at - first)));
            let frame = PhysFrame::containing_address(PhysAddr::new(frame_at));
            // SAFETY: the page lies in an unused level-4 slot, so no other
            // mapping aliases it; the frame holds device registers, not
            // memory any Rust object lives in.
            let flush = unsafe { self.tables.map_to(page, frame, flags, &mut self.frames) }.ok()?;
            flush.flush();
            frame_at += PAGE;
        }
        Some(virt_base + (phys - first))
    }
}

/// 4 KiB frames from the usable regions of the memory map, handed out once.
struct UsableFrames {
    regions: &'static MemoryRegions,
    region: usize,
    next: u64,
}

impl UsableFrames {
    fn new(regions: &'static MemoryRegions) -> UsableFrames {
        UsableFrames {
            regions,
            region: 0,
            next: 0,
        }
    }
}

// SAFETY: every frame is handed out at most once (`next` only grows within a
// region, regions are visited in order), and usable regions are unused.
unsafe impl FrameAllocator<Size4KiB> for UsableFrames {
    fn allocate_frame(&mut self) -> Option<PhysFrame<Size4KiB>> {
        while let Some(r) = self.regions.get(self.region) {
            let start = ((r.start + PAGE - 1) & !(PAGE - 1)).max(self.next);
            if r.kind == MemoryRegionKind::Usable && start + PAGE <= r.end {
                self.next = start + PAGE;
                return Some(PhysFrame::containing_address(PhysAddr::new(start)));
            }
            self.region += 1;
        }
        None
    }
}
