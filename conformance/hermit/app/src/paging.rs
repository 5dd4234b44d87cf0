//! What the page tables say: the physical address behind a virtual one, and
//! whether it is mapped uncached.
//!
//! Hermit gives applications no "virtual to physical" call, but they run at
//! CPL0 with Hermit's page tables in CR3, and Hermit keeps its page-table
//! frames identity mapped (its own `identity_mapped_page_table()` relies on
//! that), so the tables can be walked here. Every physical address the
//! application hands clockhal is looked up this way rather than assumed.

use clockhal::x86::{OffsetMapping, PhysMemory};
use core::arch::asm;

const PRESENT: u64 = 1 << 0;
/// PCD: caching disabled (with the power-on PAT: UC- or UC).
const CACHE_DISABLE: u64 = 1 << 4;
/// PS: this entry maps a 1 GiB or 2 MiB page.
const HUGE_PAGE: u64 = 1 << 7;
const ADDRESS_MASK: u64 = 0x000f_ffff_ffff_f000;
const PAGE: u64 = 4096;

/// Where a virtual address leads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Translation {
    /// Physical address.
    pub phys: u64,
    /// Whether the final entry disables caching.
    pub uncached: bool,
}

/// Walks the live 4-level page tables for `virt`.
pub fn translate(virt: u64) -> Option<Translation> {
    let cr3: u64;
    // SAFETY: reading CR3 has no side effects; Hermit runs applications at
    // CPL0 (a CPL3 caller would fault, not misbehave).
    unsafe { asm!("mov {}, cr3", out(reg) cr3, options(nomem, nostack, preserves_flags)) };
    let mut table = cr3 & ADDRESS_MASK;
    for (level, shift) in [(4, 39), (3, 30), (2, 21), (1, 12)] {
        let index = (virt >> shift) & 511;
        // SAFETY: `table` is the physical address of a live page table
        // (CR3 or a present non-leaf entry), and Hermit keeps page-table
        // frames identity mapped; the read is aligned and has no effects.
        let entry = unsafe { core::ptr::read_volatile((table + index * 8) as *const u64) };
        if entry & PRESENT == 0 {
            return None;
        }
        if level == 1 || (level <= 3 && entry & HUGE_PAGE != 0) {
            let page_mask = (1u64 << shift) - 1;
            return Some(Translation {
                phys: (entry & ADDRESS_MASK & !page_mask) | (virt & page_mask),
                uncached: entry & CACHE_DISABLE != 0,
            });
        }
        table = entry & ADDRESS_MASK;
    }
    None
}

/// The physical address of `value`, if its bytes are mapped contiguously
/// (every page of it translates to the next physical page).
pub fn phys_addr_of<T: ?Sized>(value: &T) -> Option<u64> {
    let start = value as *const T as *const u8 as u64;
    let len = core::mem::size_of_val(value) as u64;
    let phys = translate(start)?.phys;
    let mut page = start & !(PAGE - 1);
    while page < start + len {
        let expected = phys + page.max(start) - start;
        if translate(page.max(start))?.phys != expected {
            return None;
        }
        page += PAGE;
    }
    Some(phys)
}

/// Whether `phys..phys + len` is mapped at the same virtual addresses.
pub fn is_identity_mapped(phys: u64, len: u64, uncached: bool) -> bool {
    let Some(end) = phys.checked_add(len) else {
        return false;
    };
    let mut at = phys;
    while at < end {
        match translate(at) {
            Some(t) if t.phys == at && (!uncached || t.uncached) => {}
            _ => return false,
        }
        at = (at & !(PAGE - 1)) + PAGE;
    }
    true
}

/// Physical memory reads (for clockhal's ACPI table walk) through the
/// identity map, refused for any page that is not identity mapped.
pub struct IdentityMemory(OffsetMapping);

impl IdentityMemory {
    /// Reads below 4 GiB.
    pub fn new() -> IdentityMemory {
        // SAFETY: `read` forwards only ranges whose every page was just
        // found identity mapped, so each address is readable at phys + 0;
        // the ranges clockhal reads are ACPI tables (plain memory).
        IdentityMemory(unsafe { OffsetMapping::new(0, 1 << 32) })
    }
}

impl PhysMemory for IdentityMemory {
    fn read(&self, phys: u64, buf: &mut [u8]) -> bool {
        is_identity_mapped(phys, buf.len() as u64, false) && self.0.read(phys, buf)
    }
}
