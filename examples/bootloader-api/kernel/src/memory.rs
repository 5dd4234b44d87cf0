//! Page tables, blog_os style: the bootloader maps all physical memory at an
//! offset; an `OffsetPageTable` over the active level-4 table, handed to
//! clockhal's `x86_64`-crate functions as it is, translates addresses and
//! maps the HPET uncached, with frames for new tables taken from the usable
//! regions of the bootloader's memory map.

use bootloader_api::info::{MemoryRegionKind, MemoryRegions};
use clockhal::x86::paging::{map_mmio, MapMmioError};
use clockhal::x86::MmioRegion;
use x86_64::registers::control::Cr3;
use x86_64::structures::paging::{
    mapper::TranslateResult, FrameAllocator, OffsetPageTable, PageTable, PageTableFlags, PhysFrame,
    Size4KiB, Translate,
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

    /// The page tables (translation for clockhal's hypervisor-shared memory).
    pub fn tables(&self) -> &OffsetPageTable<'static> {
        &self.tables
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
    /// address space, through clockhal's `map_mmio`.
    pub fn map_uncached(&mut self, phys: u64, len: usize) -> Result<MmioRegion, MapMmioError> {
        // A level-4 entry nobody uses is 512 GiB of free address space.
        let l4 = self.tables.level_4_table();
        let Some(slot) = (1..256).find(|&i| l4[i].is_unused()) else {
            return Err(MapMmioError::Overflow);
        };
        let virt = VirtAddr::new((slot as u64) << 39);
        // SAFETY: these are the live tables; the level-4 slot is unused, so
        // the range is ours alone; `phys` names device registers (ACPI's
        // HPET), which no Rust object lives in.
        unsafe {
            map_mmio(
                &mut self.tables,
                &mut self.frames,
                virt,
                PhysAddr::new(phys),
                len,
            )
        }
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
