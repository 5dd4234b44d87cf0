//! A PVH loader that boots a Hermit image in QEMU.
//!
//! ```text
//! qemu-system-x86_64 -cpu max -kernel clockhal-hermit-loader -initrd <hermit image> [-append "<args>"]
//! ```
//!
//! A Hermit image (kernel and application linked into one ELF) has no boot
//! header QEMU understands, and upstream's loader is in no registry, so this
//! kernel (on clockhal-boot: PVH entry, identity-mapped long mode) does its
//! job:
//!
//! 1. takes the image from PVH module 0 (`-initrd`) and checks it with
//!    `hermit-entry` (ELF note "HERMIT", entry ABI version 4);
//! 2. copies and relocates it to a free, 2 MiB-aligned place (virtual =
//!    physical, see [`placement`]);
//! 3. describes RAM, the RSDP and the command line in a devicetree
//!    ([`devicetree`]): the command line is `env=CLOCKHAL_RSDP=0x<rsdp>`
//!    (how the application learns the RSDP, which Hermit does not pass on)
//!    followed by QEMU's `-append` text;
//! 4. fills Hermit's `BootInfo` (platform `Fdt`, COM1) and jumps to the
//!    entry point with RDI = the raw boot info, RSI = 0 (CPU 0), RSP = the
//!    bottom of a 32 KiB stack, our page tables in CR3 and GS base 0
//!    ([`clockhal_boot::handoff`]).
//!
//! Any failure is printed and ends QEMU with status 35.
#![no_std]
#![no_main]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

use clockhal_boot::{handoff, println, BootInfo, MemoryRegion};
use clockhal_hermit_loader::{devicetree, placement};
use core::cell::UnsafeCell;
use core::fmt::{self, Write};
use core::mem::MaybeUninit;
use core::num::{NonZeroU16, NonZeroU64};
use core::ops::Range;
use hermit_entry::boot_info::{
    BootInfo as HermitBootInfo, HardwareInfo, PlatformInfo, RawBootInfo,
};
use hermit_entry::elf::{KernelObject, ParseKernelError};

clockhal_boot::entry!(kmain);

/// Hermit 0.11's KERNEL_STACK_SIZE: its entry adds this (minus a marker) to
/// the RSP it is given.
const HERMIT_STACK_SIZE: usize = 0x8000;
/// COM1, where Hermit's console goes.
const COM1: u16 = 0x3f8;
/// The environment variable that carries the RSDP to the application.
pub const RSDP_ENV: &str = "CLOCKHAL_RSDP";
/// ELFOSABI_STANDALONE: what an exported Hermit image carries.
const ELFOSABI_STANDALONE: u8 = 255;

/// The boot stack Hermit keeps as its first task's stack. Rust never
/// touches its contents; only its address is taken.
#[repr(C, align(4096))]
struct HermitStack(UnsafeCell<[u8; HERMIT_STACK_SIZE]>);

// SAFETY: no Rust code reads or writes the stack's contents (only its
// address is used, once, by the boot CPU); Hermit owns it after the jump.
unsafe impl Sync for HermitStack {}

static HERMIT_STACK: HermitStack = HermitStack(UnsafeCell::new([0; HERMIT_STACK_SIZE]));

/// Most RAM regions passed on.
const RAM_MAX: usize = 64;

/// The RAM regions of the firmware memory map as ranges (up to
/// [`RAM_MAX`]); returns how many.
fn ram_ranges(map: &[MemoryRegion], out: &mut [Range<u64>; RAM_MAX]) -> usize {
    let mut n = 0;
    for r in map.iter().filter(|r| r.is_ram()) {
        let (Some(slot), Some(end)) = (out.get_mut(n), r.base.checked_add(r.size)) else {
            continue;
        };
        *slot = r.base..end;
        n += 1;
    }
    n
}

/// 8-byte aligned buffer for the devicetree blob.
#[repr(C, align(8))]
struct Blob([u8; 4096]);

/// Why the image cannot be started.
enum LoadError {
    NoModule,
    ModuleUnmapped,
    NotElf,
    NotHermit(ParseKernelError),
    NoRsdp,
    NoRoom(u64),
    CommandLine,
    Devicetree(devicetree::DtError),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::NoModule => f.write_str("no module: pass the Hermit image with -initrd"),
            LoadError::ModuleUnmapped => f.write_str("module 0 is empty or above 4 GiB"),
            LoadError::NotElf => f.write_str("module 0 is not a 64-bit ELF file"),
            LoadError::NotHermit(e) => write!(f, "module 0 is not a Hermit image: {e}"),
            LoadError::NoRsdp => f.write_str(
                "no ACPI RSDP: Hermit 0.11 (feature acpi) would scan the EBDA and panic",
            ),
            LoadError::NoRoom(size) => write!(f, "no free RAM below 3 GiB for {size:#x} bytes"),
            LoadError::CommandLine => f.write_str("command line longer than 1 KiB"),
            LoadError::Devicetree(e) => write!(f, "{e}"),
        }
    }
}

fn kmain(info: &'static BootInfo) -> ! {
    let mut blob = Blob([0; 4096]);
    let mut cmdline = Text::<1024>::new();
    let mut raw = MaybeUninit::<RawBootInfo>::uninit();
    // The buffers live in this frame, which is never left: Hermit may use
    // them for as long as it runs.
    if let Err(e) = load_and_enter(info, &mut blob.0, &mut cmdline, &mut raw) {
        println!("loader: {e}");
    }
    clockhal_boot::exit_qemu(clockhal_boot::EXIT_FAILURE)
}

/// Returns only on failure.
fn load_and_enter(
    info: &'static BootInfo,
    blob_buf: &mut [u8],
    cmdline: &mut Text<1024>,
    raw: &mut MaybeUninit<RawBootInfo>,
) -> Result<(), LoadError> {
    let module = info.modules.first().ok_or(LoadError::NoModule)?;
    // SAFETY: nothing writes to the module before the copy below, which
    // goes elsewhere (placement avoids the module's range).
    let elf = unsafe { module.bytes() }.ok_or(LoadError::ModuleUnmapped)?;
    // hermit-entry indexes the header without checking the length.
    if elf.len() < 64 || !elf.starts_with(b"\x7fELF\x02") {
        return Err(LoadError::NotElf);
    }
    let image = KernelObject::parse(elf).map_err(LoadError::NotHermit)?;
    if elf[7] != ELFOSABI_STANDALONE {
        println!(
            "loader: warning: OSABI {} (an exported Hermit image has 255)",
            elf[7]
        );
    }
    let rsdp = info.rsdp_paddr.ok_or(LoadError::NoRsdp)?;

    let mut ram = [const { 0..0 }; RAM_MAX];
    let ram_len = ram_ranges(info.memory_map, &mut ram);
    let ram = &ram[..ram_len];
    let size = image.mem_size() as u64;
    let loader = handoff::kernel_image();
    let module_range = module.paddr..module.paddr + module.size;
    let base = placement::place(
        size,
        image.start_addr(),
        loader.end,
        &[loader.clone(), module_range],
        ram,
    )
    .ok_or(LoadError::NoRoom(size))?;
    // SAFETY: base..base+size is RAM inside the identity map (placement
    // checked the memory map and the cached limit), used by nothing: not the
    // loader image (its .bss included) and not the module. Nothing else
    // refers to it while the slice lives.
    let memory =
        unsafe { core::slice::from_raw_parts_mut(base as *mut MaybeUninit<u8>, size as usize) };
    let loaded = image.load_kernel(memory, base);
    println!(
        "loader: Hermit image {} bytes from {:#x}, loaded at {:#x}..{:#x}, entry {:#x}",
        module.size,
        module.paddr,
        base,
        base + size,
        loaded.entry_point
    );

    write!(cmdline, "env={RSDP_ENV}={rsdp:#x} {}", info.cmdline)
        .map_err(|_| LoadError::CommandLine)?;
    let dt = devicetree::build(
        blob_buf,
        &devicetree::Contents {
            memory: ram,
            rsdp,
            bootargs: cmdline.as_str(),
        },
    )
    .map_err(LoadError::Devicetree)?;
    println!(
        "loader: devicetree {} bytes (checked with Hermit's parser), bootargs {:?}",
        dt.len(),
        cmdline.as_str()
    );

    let ram_end = ram.iter().map(|r| r.end).max().unwrap_or(0);
    let boot_info = HermitBootInfo {
        hardware_info: HardwareInfo {
            phys_addr_range: 0..ram_end,
            serial_port_base: NonZeroU16::new(COM1),
            device_tree: NonZeroU64::new(dt.as_ptr() as u64),
        },
        load_info: loaded.load_info,
        platform_info: PlatformInfo::Fdt,
    };
    let raw: &RawBootInfo = raw.write(RawBootInfo::from(boot_info));
    println!("loader: entering Hermit");
    // SAFETY: the entry point is in the image just loaded and relocated at
    // virtual = physical; it expects RDI = &RawBootInfo, RSI = CPU 0, RSP =
    // the bottom of a KERNEL_STACK_SIZE stack. The boot info, devicetree and
    // command line live in kmain's frame, which is never left, and the stack
    // is a static: all below the image, so Hermit never hands their memory
    // out (it uses RAM above its image only).
    unsafe {
        handoff::jump(
            loaded.entry_point,
            HERMIT_STACK.0.get() as u64,
            raw as *const RawBootInfo as u64,
            0,
        )
    }
}

/// A fixed-capacity string (writes past the end fail).
struct Text<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> Text<N> {
    const fn new() -> Self {
        Text {
            buf: [0; N],
            len: 0,
        }
    }

    fn as_str(&self) -> &str {
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl<const N: usize> Write for Text<N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self
            .len
            .checked_add(s.len())
            .filter(|&e| e <= N)
            .ok_or(fmt::Error)?;
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}
