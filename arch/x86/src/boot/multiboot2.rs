//! Multiboot2 (GRUB, Limine's multiboot2 mode): the RSDP copy in the
//! boot information's ACPI tag (the ACPI 2.0 "new RSDP" tag preferred, else
//! the 1.0 "old RSDP" one). Multiboot2 maps nothing: the kernel gives its
//! own mapping of physical memory and the physical address of the boot
//! information (what the loader put in EBX).

use super::BootMemory;
use crate::OffsetMapping;
use multiboot2::BootInformation;

/// Bytes before the RSDP copy in an RSDP tag (its `type` and `size`).
const TAG_HEADER_LEN: usize = 8;

impl BootMemory {
    /// From a Multiboot2 boot information that the kernel loaded from
    /// physical address `mbi_phys`, with physical memory readable through
    /// `phys`. The RSDP is the tag's copy, at its physical address inside
    /// the boot information; it is validated (checksums, bounded length)
    /// where it is read, by `discover`, not trusted here (multiboot2's
    /// own `checksum_is_valid` reads as many bytes as the tag's length
    /// field says). Without a tag, [`BootMemory::rsdp`] searches the BIOS
    /// areas through `phys`.
    ///
    /// Interrupt-safe: yes (reads `info` only).
    pub fn from_multiboot2(
        info: &BootInformation,
        mbi_phys: u64,
        phys: OffsetMapping,
    ) -> BootMemory {
        let start = info.start_address();
        let tag = info
            .rsdp_v2_tag()
            .map(|t| t as *const _ as usize)
            .or_else(|| info.rsdp_v1_tag().map(|t| t as *const _ as usize));
        // Where the copy sits in the boot information, wherever the kernel
        // mapped it: the same offset from its physical start.
        let rsdp = tag.and_then(|t| {
            let into = t.checked_sub(start)?.checked_add(TAG_HEADER_LEN)?;
            mbi_phys.checked_add(into as u64)
        });
        BootMemory::from_parts(phys, rsdp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acpi::{rsdp_at, AcpiError};
    use multiboot2::{Builder, MaybeDynSized, RsdpV1Tag, RsdpV2Tag};

    /// Where the tests say the loader put the boot information.
    const MBI_PHYS: u64 = 0x1_0000;

    fn sum(b: &[u8]) -> u8 {
        b.iter().fold(0u8, |s, &x| s.wrapping_add(x))
    }

    /// A v2 tag whose checksums hold (`ext_fix`: add this to the extended
    /// checksum to break it).
    fn v2_tag(length: u32, ext_fix: u8) -> RsdpV2Tag {
        let (rsdt, xsdt) = (0x7FE_0040u32, 0x7FE_0080u64);
        let mut b = [0u8; 36];
        b[..8].copy_from_slice(b"RSD PTR ");
        b[9..15].copy_from_slice(b"BOCHS ");
        b[15] = 2;
        b[16..20].copy_from_slice(&rsdt.to_le_bytes());
        b[20..24].copy_from_slice(&length.to_le_bytes());
        b[24..32].copy_from_slice(&xsdt.to_le_bytes());
        let checksum = sum(&b[..20]).wrapping_neg();
        b[8] = checksum;
        let ext = sum(&b).wrapping_neg().wrapping_add(ext_fix);
        RsdpV2Tag::new(checksum, *b"BOCHS ", 2, rsdt, length, xsdt, ext)
    }

    /// Lays `builder`'s image at [`MBI_PHYS`] in a zeroed "first MiB" of
    /// physical memory and loads it from there, as a kernel would.
    fn with_image<R>(builder: Builder, f: impl FnOnce(BootMemory) -> R) -> R {
        let image = builder.build();
        let bytes = image.as_bytes();
        // u64s: the boot information must be 8-byte aligned.
        let mut low = std::vec![0u64; 0x10_0000 / 8];
        let at = MBI_PHYS as usize / 8;
        for (i, chunk) in bytes.chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            low[at + i] = u64::from_le_bytes(w);
        }
        let base = low.as_ptr() as u64;
        // SAFETY: a valid boot information (the builder's bytes), alive
        // while `low` is.
        let info = unsafe { BootInformation::load((base + MBI_PHYS) as *const _) }.unwrap();
        // SAFETY: physical 0..1 MiB is `low` at `base`, alive for this
        // call; reading it has no side effects.
        let phys = unsafe { OffsetMapping::new(base, 0x10_0000) };
        let r = f(BootMemory::from_multiboot2(&info, MBI_PHYS, phys));
        drop(low);
        r
    }

    #[test]
    fn the_acpi_2_tag_is_preferred_and_its_copy_validates_in_place() {
        let b = Builder::new()
            .rsdpv1(RsdpV1Tag::new(0, *b"OLDOLD", 0, 0x1234))
            .rsdpv2(v2_tag(36, 0));
        with_image(b, |boot| {
            let rsdp = boot.loader_rsdp().expect("tag found");
            assert!(rsdp > MBI_PHYS && rsdp < MBI_PHYS + 0x1000, "{rsdp:#x}");
            let r = rsdp_at(boot.phys_memory(), rsdp).unwrap();
            assert_eq!(
                (r.revision, r.rsdt, r.xsdt),
                (2, 0x7FE_0040, Some(0x7FE_0080))
            );
        });
    }

    #[test]
    fn an_acpi_1_tag_alone_is_used() {
        let mut b = [0u8; 20];
        b[..8].copy_from_slice(b"RSD PTR ");
        b[9..15].copy_from_slice(b"BOCHS ");
        b[16..20].copy_from_slice(&0x7FE_0040u32.to_le_bytes());
        let checksum = sum(&b).wrapping_neg();
        let builder = Builder::new().rsdpv1(RsdpV1Tag::new(checksum, *b"BOCHS ", 0, 0x7FE_0040));
        with_image(builder, |boot| {
            let r = rsdp_at(boot.phys_memory(), boot.rsdp().unwrap()).unwrap();
            assert_eq!((r.revision, r.rsdt, r.xsdt), (0, 0x7FE_0040, None));
        });
    }

    #[test]
    fn hostile_tags_are_caught_where_they_are_read() {
        with_image(Builder::new().rsdpv2(v2_tag(36, 1)), |boot| {
            assert_eq!(
                rsdp_at(boot.phys_memory(), boot.rsdp().unwrap()),
                Err(AcpiError::BadChecksum { table: "RSDP" })
            );
        });
        // A length far past the tag: bounded, never read.
        with_image(Builder::new().rsdpv2(v2_tag(u32::MAX, 0)), |boot| {
            assert_eq!(
                rsdp_at(boot.phys_memory(), boot.rsdp().unwrap()),
                Err(AcpiError::BadLength {
                    table: "RSDP",
                    len: u32::MAX
                })
            );
        });
    }

    #[test]
    fn without_a_tag_the_bios_areas_are_searched_through_the_kernels_mapping() {
        with_image(Builder::new(), |boot| {
            assert_eq!(boot.loader_rsdp(), None);
            // An empty first MiB: the search says none is there.
            assert_eq!(boot.rsdp(), Err(AcpiError::NotFound { table: "RSDP" }));
        });
    }
}
