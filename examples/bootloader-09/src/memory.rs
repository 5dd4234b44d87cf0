//! Paging, as blog_os's "Paging Implementation" post does it on bootloader
//! 0.9: an `OffsetPageTable` over the active level-4 table (all physical
//! memory is mapped at `BootInfo::physical_memory_offset`) and a frame
//! allocator over the usable regions of the loader's memory map. clockhal
//! needs two things from it: the physical address of its kvmclock and
//! Hyper-V statics (translation), and an uncached mapping of the HPET (the
//! loader's physical-memory mapping is write-back).

use bootloader::bootinfo::{MemoryMap, MemoryRegionType};
use bootloader::BootInfo;
use clockhal::x86::paging::{map_mmio, MapMmioError};
use clockhal::x86::MmioRegion;
use x86_64::registers::control::Cr3;
use x86_64::structures::paging::{
    mapper::TranslateResult, FrameAllocator, OffsetPageTable, PageTable, PageTableFlags, PhysFrame,
    Size4KiB, Translate,
};
use x86_64::{PhysAddr, VirtAddr};

/// The kernel's address space.
pub struct Memory {
    tables: OffsetPageTable<'static>,
    frames: BootInfoFrameAllocator,
}

impl Memory {
    /// The active address space.
    ///
    /// # Safety
    /// `boot_info` is the loader's (with `map_physical_memory`), its usable
    /// regions are unused, and only one `Memory` exists.
    ///
    /// Interrupt-safe: no (takes the only handle to the page tables).
    pub unsafe fn new(boot_info: &'static BootInfo) -> Memory {
        let offset = boot_info.physical_memory_offset;
        let (l4_frame, _) = Cr3::read();
        let l4 = (offset + l4_frame.start_address().as_u64()) as *mut PageTable;
        // SAFETY: CR3 names the live level-4 table, mapped at its physical
        // address + offset (the loader maps all physical memory there);
        // this is the only reference to it (only one Memory).
        let tables = unsafe { OffsetPageTable::new(&mut *l4, VirtAddr::new(offset)) };
        Memory {
            tables,
            frames: BootInfoFrameAllocator {
                map: &boot_info.memory_map,
                next: 0,
            },
        }
    }

    /// The page tables (translation for clockhal's hypervisor-shared memory).
    ///
    /// Interrupt-safe: yes (returns a reference).
    pub fn tables(&self) -> &OffsetPageTable<'static> {
        &self.tables
    }

    /// The page-table flags of the page holding `virt`, if mapped.
    ///
    /// Interrupt-safe: yes (reads the tables, no locks).
    pub fn flags_of(&self, virt: u64) -> Option<PageTableFlags> {
        match self.tables.translate(VirtAddr::new(virt)) {
            TranslateResult::Mapped { flags, .. } => Some(flags),
            _ => None,
        }
    }

    /// Maps the device registers at `phys..phys + len` uncached, in a
    /// level-4 slot nobody uses, through clockhal's `map_mmio`.
    ///
    /// Interrupt-safe: no (edits the page tables, allocates frames).
    pub fn map_uncached(&mut self, phys: u64, len: usize) -> Result<MmioRegion, MapMmioError> {
        let l4 = self.tables.level_4_table();
        let Some(slot) = (1..256).find(|&i| l4[i].is_unused()) else {
            return Err(MapMmioError::Overflow);
        };
        let virt = VirtAddr::new((slot as u64) << 39);
        // SAFETY: the live tables; the level-4 slot is unused, so the range
        // is ours alone; `phys` names device registers (ACPI's HPET), where
        // no Rust object lives.
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

/// blog_os's `BootInfoFrameAllocator`: the `next`-th usable frame of the
/// memory map (bootloader 0.9's regions are frame-aligned).
struct BootInfoFrameAllocator {
    map: &'static MemoryMap,
    next: usize,
}

// SAFETY: frames come from regions the loader marks usable, each handed out
// once (`next` only grows).
unsafe impl FrameAllocator<Size4KiB> for BootInfoFrameAllocator {
    fn allocate_frame(&mut self) -> Option<PhysFrame> {
        let frame = self
            .map
            .iter()
            .filter(|r| r.region_type == MemoryRegionType::Usable)
            .flat_map(|r| (r.range.start_addr()..r.range.end_addr()).step_by(4096))
            .nth(self.next)
            .map(|a| PhysFrame::containing_address(PhysAddr::new(a)));
        self.next += 1;
        frame
    }
}
