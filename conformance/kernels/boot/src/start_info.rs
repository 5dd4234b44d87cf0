//! The PVH `hvm_start_info` structure, turned into [`BootInfo`].
//!
//! Everything the kernel may want later (command line, memory map) is copied
//! into the kernel's own `.bss` at boot, because the firmware's copy sits in
//! low memory that the AP trampoline or the kernel may reuse.

use core::cell::UnsafeCell;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicBool, Ordering};

use crate::{acpi, phys};

/// `hvm_start_info.magic` ("xEn3" with the top bit set).
const START_INFO_MAGIC: u32 = 0x336e_c578;
/// Longest command line kept (longer ones are cut).
const CMDLINE_MAX: usize = 4096;
/// Most memory-map entries kept.
const MEMMAP_MAX: usize = 64;
/// Most modules kept (QEMU passes one: `-initrd`).
const MODULES_MAX: usize = 4;

/// Where [`BootInfo::rsdp_paddr`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RsdpSource {
    /// `hvm_start_info.rsdp_paddr`.
    StartInfo,
    /// Scan of the EBDA and 0xE0000..0xFFFFF (start info gave none).
    BiosScan,
    /// No valid RSDP anywhere.
    NotFound,
}

/// One entry of the firmware memory map (E820 semantics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct MemoryRegion {
    /// Physical start address.
    pub base: u64,
    /// Length in bytes.
    pub size: u64,
    /// E820 type: 1 RAM, 2 reserved, 3 ACPI reclaimable, 4 ACPI NVS, 5 bad.
    pub kind: u32,
}

impl MemoryRegion {
    /// E820 type of usable RAM.
    pub const RAM: u32 = 1;

    /// Whether the region is usable RAM.
    pub fn is_ram(&self) -> bool {
        self.kind == Self::RAM
    }
}

/// One boot module (QEMU `-initrd FILE` is module 0), as the PVH
/// `hvm_modlist_entry` describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Module {
    /// Physical start address.
    pub paddr: u64,
    /// Length in bytes.
    pub size: u64,
}

impl Module {
    /// The module's bytes, or `None` when they do not lie inside the
    /// identity map (or the module is empty).
    ///
    /// # Safety
    /// Nothing may write to the module's memory while the slice is alive.
    /// clockhal-boot itself never does (the AP trampoline uses a page below
    /// 640 KiB; QEMU loads modules at the top of low RAM).
    pub unsafe fn bytes(&self) -> Option<&'static [u8]> {
        let len = usize::try_from(self.size).ok()?;
        if len == 0 || !phys::is_mapped(self.paddr, self.size) {
            return None;
        }
        // SAFETY: mapped (checked), RAM that QEMU filled; the caller keeps it
        // unchanged while the slice lives.
        Some(unsafe { phys::bytes(self.paddr, len) })
    }
}

/// What the kernel learns at boot. Passed to the `entry!` function and
/// available later from [`crate::boot_info`].
#[derive(Debug)]
#[non_exhaustive]
pub struct BootInfo {
    /// Physical address of `hvm_start_info` (EBX at the PVH entry).
    pub start_info_paddr: u64,
    /// Whether `hvm_start_info.magic` was 0x336ec578. If not, the other
    /// start-info fields are empty and the RSDP comes from a BIOS scan.
    pub start_info_valid: bool,
    /// `hvm_start_info.version` (0 if invalid). Version 1 has a memory map.
    pub start_info_version: u32,
    /// Physical address of a checksum-verified ACPI RSDP, if any.
    pub rsdp_paddr: Option<u64>,
    /// Where `rsdp_paddr` came from.
    pub rsdp_source: RsdpSource,
    /// Kernel command line (QEMU `-append`); empty if none. Cut at 4095 bytes
    /// or at the first invalid UTF-8 byte.
    pub cmdline: &'static str,
    /// Firmware memory map (up to 64 non-empty entries; empty before start
    /// info version 1).
    pub memory_map: &'static [MemoryRegion],
    /// Boot modules (QEMU `-initrd`), up to 4.
    pub modules: &'static [Module],
}

/// Write-once storage for the boot data (written by the boot CPU before the
/// kernel or any other CPU runs).
struct Storage {
    ready: AtomicBool,
    info: UnsafeCell<MaybeUninit<BootInfo>>,
    cmdline: UnsafeCell<[u8; CMDLINE_MAX]>,
    memory_map: UnsafeCell<[MemoryRegion; MEMMAP_MAX]>,
    modules: UnsafeCell<[Module; MODULES_MAX]>,
}

// SAFETY: the cells are written only by `init`, once, on the boot CPU before
// `ready` is published; afterwards they are only read.
unsafe impl Sync for Storage {}

static STORAGE: Storage = Storage {
    ready: AtomicBool::new(false),
    info: UnsafeCell::new(MaybeUninit::uninit()),
    cmdline: UnsafeCell::new([0; CMDLINE_MAX]),
    memory_map: UnsafeCell::new(
        [MemoryRegion {
            base: 0,
            size: 0,
            kind: 0,
        }; MEMMAP_MAX],
    ),
    modules: UnsafeCell::new([Module { paddr: 0, size: 0 }; MODULES_MAX]),
};

/// The boot data, once [`init`] ran.
pub(crate) fn get() -> Option<&'static BootInfo> {
    if STORAGE.ready.load(Ordering::Acquire) {
        // SAFETY: `ready` is set only after `info` was written, never again.
        Some(unsafe { (*STORAGE.info.get()).assume_init_ref() })
    } else {
        None
    }
}

/// Parses `hvm_start_info` at `paddr` and publishes the [`BootInfo`].
/// Boot CPU only, once, before the kernel runs.
pub(crate) fn init(paddr: u64) -> &'static BootInfo {
    assert!(!STORAGE.ready.load(Ordering::Relaxed), "boot info initialized twice");
    // Fields (all little endian): 0 magic u32, 4 version u32, 8 flags u32,
    // 12 nr_modules u32, 16 modlist_paddr u64, 24 cmdline_paddr u64,
    // 32 rsdp_paddr u64; version >= 1: 40 memmap_paddr u64, 48 entries u32.
    let valid = phys::is_mapped(paddr, 56)
        // SAFETY: 56 bytes at paddr are mapped; QEMU's start info is RAM.
        && unsafe { phys::read::<u32>(paddr) } == START_INFO_MAGIC;
    let field_u64 = |offset: u64| -> u64 {
        if valid {
            // SAFETY: `valid` implies the 56-byte structure is mapped.
            unsafe { phys::read(paddr + offset) }
        } else {
            0
        }
    };
    let version = if valid {
        // SAFETY: as above.
        unsafe { phys::read::<u32>(paddr + 4) }
    } else {
        0
    };

    let (rsdp_paddr, rsdp_source) = match field_u64(32) {
        p if p != 0 && acpi::rsdp_is_valid(p) => (Some(p), RsdpSource::StartInfo),
        _ => match acpi::find_rsdp_in_bios() {
            Some(p) => (Some(p), RsdpSource::BiosScan),
            None => (None, RsdpSource::NotFound),
        },
    };

    // SAFETY: boot CPU only, before `ready`: nobody else can see the buffer.
    let cmdline_buf = unsafe { &mut *STORAGE.cmdline.get() };
    let cmdline = copy_cmdline(field_u64(24), cmdline_buf);

    let memory_map: &'static [MemoryRegion] = if version >= 1 {
        // SAFETY: `valid` (version >= 1) implies the 56 bytes are mapped.
        let entries = unsafe { phys::read::<u32>(paddr + 48) } as usize;
        // SAFETY: as for the command line buffer.
        let buf = unsafe { &mut *STORAGE.memory_map.get() };
        copy_memory_map(field_u64(40), entries, buf)
    } else {
        &[]
    };

    let modules: &'static [Module] = if valid {
        // SAFETY: `valid` implies the 56 bytes are mapped.
        let count = unsafe { phys::read::<u32>(paddr + 12) } as usize;
        // SAFETY: as for the command line buffer.
        let buf = unsafe { &mut *STORAGE.modules.get() };
        copy_modules(field_u64(16), count, buf)
    } else {
        &[]
    };

    let info = BootInfo {
        start_info_paddr: paddr,
        start_info_valid: valid,
        start_info_version: version,
        rsdp_paddr,
        rsdp_source,
        cmdline,
        memory_map,
        modules,
    };
    // SAFETY: as for the command line buffer; written exactly once.
    let info = unsafe { (*STORAGE.info.get()).write(info) };
    STORAGE.ready.store(true, Ordering::Release);
    info
}

fn copy_cmdline(paddr: u64, buf: &'static mut [u8; CMDLINE_MAX]) -> &'static str {
    if paddr == 0 {
        return "";
    }
    let mut len = 0;
    while len < CMDLINE_MAX - 1 && phys::is_mapped(paddr + len as u64, 1) {
        // SAFETY: the byte is mapped (checked); the command line is RAM.
        let byte: u8 = unsafe { phys::read(paddr + len as u64) };
        if byte == 0 {
            break;
        }
        buf[len] = byte;
        len += 1;
    }
    let buf: &'static [u8; CMDLINE_MAX] = buf; // done writing
    let bytes = &buf[..len];
    match core::str::from_utf8(bytes) {
        Ok(s) => s,
        // Keep the valid prefix rather than nothing.
        Err(e) => core::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or(""),
    }
}

fn copy_memory_map(
    paddr: u64,
    entries: usize,
    buf: &'static mut [MemoryRegion; MEMMAP_MAX],
) -> &'static [MemoryRegion] {
    // hvm_memmap_table_entry: addr u64, size u64, type u32, reserved u32.
    const ENTRY_LEN: u64 = 24;
    let count = entries.min(MEMMAP_MAX);
    if paddr == 0 || !phys::is_mapped(paddr, count as u64 * ENTRY_LEN) {
        return &[];
    }
    let mut kept = 0;
    for i in 0..count {
        let entry = paddr + i as u64 * ENTRY_LEN;
        // SAFETY: the whole table is mapped (checked above) and is RAM.
        let region = unsafe {
            MemoryRegion {
                base: phys::read(entry),
                size: phys::read(entry + 8),
                kind: phys::read(entry + 16),
            }
        };
        // QEMU's microvm map ends with an all-zero entry: drop empty ones.
        if region.size != 0 {
            buf[kept] = region;
            kept += 1;
        }
    }
    let buf: &'static [MemoryRegion; MEMMAP_MAX] = buf; // done writing
    &buf[..kept]
}

fn copy_modules(paddr: u64, count: usize, buf: &'static mut [Module; MODULES_MAX]) -> &'static [Module] {
    // hvm_modlist_entry: paddr u64, size u64, cmdline_paddr u64, reserved u64.
    const ENTRY_LEN: u64 = 32;
    let count = count.min(MODULES_MAX);
    if paddr == 0 || !phys::is_mapped(paddr, count as u64 * ENTRY_LEN) {
        return &[];
    }
    for (i, slot) in buf.iter_mut().enumerate().take(count) {
        let entry = paddr + i as u64 * ENTRY_LEN;
        // SAFETY: the whole list is mapped (checked above) and is RAM.
        *slot = unsafe {
            Module {
                paddr: phys::read(entry),
                size: phys::read(entry + 8),
            }
        };
    }
    let buf: &'static [Module; MODULES_MAX] = buf; // done writing
    &buf[..count]
}
