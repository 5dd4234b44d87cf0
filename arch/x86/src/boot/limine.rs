//! The Limine boot protocol: the higher-half direct map (HHDM request) and
//! the RSDP request's answer.
//!
//! Before base revision 3 the RSDP address is virtual (inside the HHDM)
//! and Limine maps all of 0..4 GiB there; from revision 3 on it is
//! physical and only the memory map's regions are mapped (ACPI's
//! included), so the BIOS areas are not searched without an answer.

use super::BootMemory;
use limine::request::{HhdmRequest, RsdpRequest};
use limine::BaseRevision;

/// How far the HHDM maps physical memory that clockhal may read: 4 GiB
/// (firmware tables live below it).
const HHDM_LIMIT: u64 = 1 << 32;

impl BootMemory {
    /// From the kernel's Limine requests, after Limine answered them.
    /// `None` when the HHDM request has no answer.
    ///
    /// # Safety
    /// The three are the kernel's own request statics that Limine answered
    /// (or left unanswered), and the HHDM stays mapped while the value (and
    /// any `Platform` or `Clock` made from it) is used.
    ///
    /// Interrupt-safe: yes (reads the answers only).
    pub unsafe fn from_limine(
        base_revision: &BaseRevision,
        hhdm: &HhdmRequest,
        rsdp: &RsdpRequest,
    ) -> Option<BootMemory> {
        let offset = hhdm.get_response()?.offset();
        let revision = base_revision.loaded_revision().unwrap_or(0);
        let answer = rsdp.get_response().map(|r| r.address() as u64);
        // SAFETY: the caller's promise that these are Limine's answers:
        // the HHDM maps every region clockhal reads (ACPI's, and before
        // revision 3 all of 0..4 GiB).
        Some(unsafe { BootMemory::from_limine_answers(offset, revision, answer) })
    }

    /// # Safety
    /// As [`from_limine`](Self::from_limine): `offset` is Limine's HHDM
    /// offset, `revision` its loaded base revision, `rsdp` its RSDP answer.
    unsafe fn from_limine_answers(offset: u64, revision: u64, rsdp: Option<u64>) -> BootMemory {
        let rsdp = if revision >= 3 {
            rsdp
        } else {
            // A virtual address in the HHDM before revision 3.
            rsdp.and_then(|virt| virt.checked_sub(offset))
        };
        // SAFETY: passed on from the caller.
        let mut boot = unsafe { BootMemory::new(offset, HHDM_LIMIT, rsdp) };
        // Revision 3 leaves the BIOS areas unmapped: no search there.
        boot.search_bios = revision < 3;
        boot
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acpi::AcpiError;
    use limine::response::{HhdmResponse, RsdpResponse};

    /// Answers `request` as Limine does: writes the response pointer into
    /// the request's response slot (after its 4-word ID and revision).
    /// Limine offers no constructor for answers; this is the image the
    /// bootloader writes.
    fn answer<Q, R>(request: &Q, response: &R) {
        // SAFETY: the slot is an `UnsafeCell<Option<NonNull<R>>>` at byte
        // 40 of the `repr(C)` request; `response` outlives the test's reads.
        unsafe {
            let slot = (request as *const Q as *const u8).add(40) as *mut *const R;
            slot.write_volatile(response);
        }
    }

    /// `[revision, value]`: the layout of both `HhdmResponse` and
    /// `RsdpResponse`.
    fn response<R>(image: &[u64; 2]) -> &R {
        // SAFETY: both responses are `repr(C)` `{ revision: u64, value:
        // u64/usize }`, and `image` is 8-aligned and outlives the borrow.
        unsafe { &*(image.as_ptr() as *const R) }
    }

    /// Loaded base revision `loaded`, as Limine writes it.
    fn base_revision(loaded: u64) -> BaseRevision {
        let b = BaseRevision::new();
        // SAFETY: `loaded` and `revision` are `UnsafeCell<u64>`s at bytes
        // 8 and 16 of the `repr(C)` tag; Limine writes them the same way.
        unsafe {
            let p = &b as *const BaseRevision as *mut u64;
            p.add(1).write_volatile(loaded);
            p.add(2).write_volatile(0); // supported
        }
        b
    }

    #[test]
    fn unanswered_requests_give_nothing() {
        // SAFETY: nothing is mapped or read.
        let boot = unsafe {
            BootMemory::from_limine(
                &BaseRevision::new(),
                &HhdmRequest::new(),
                &RsdpRequest::new(),
            )
        };
        assert!(boot.is_none());
    }

    #[test]
    fn revision_3_passes_the_physical_rsdp_and_never_searches() {
        let hhdm = [0u64, 0xFFFF_8000_0000_0000];
        let (hreq, rreq) = (HhdmRequest::new(), RsdpRequest::new());
        answer(&hreq, response::<HhdmResponse>(&hhdm));
        let rev = base_revision(3);
        // SAFETY: nothing is read through this mapping.
        let boot = unsafe { BootMemory::from_limine(&rev, &hreq, &rreq) }.unwrap();
        assert_eq!(boot.loader_rsdp(), None);
        // Unanswered RSDP in revision 3: no search through unmapped memory.
        assert_eq!(boot.rsdp(), Err(AcpiError::NotFound { table: "RSDP" }));
        let rsdp = [0u64, 0x7FE_0000];
        answer(&rreq, response::<RsdpResponse>(&rsdp));
        // SAFETY: as above.
        let boot = unsafe { BootMemory::from_limine(&rev, &hreq, &rreq) }.unwrap();
        assert_eq!(boot.rsdp(), Ok(0x7FE_0000));
        let m = std::format!("{:?}", boot.phys_memory());
        assert!(m.contains("offset: 18446603336221196288"), "{m}");
    }

    #[test]
    fn before_revision_3_the_rsdp_is_virtual_and_the_bios_areas_are_searched() {
        // Limine's HHDM maps 0..4 GiB; the test reads only the first MiB,
        // `padded`, which therefore sits at the HHDM offset.
        let padded = crate::boot::tests::first_mib_with_microvm_tables();
        let offset = padded.as_ptr() as u64;
        let hhdm = [0u64, offset];
        let (hreq, rreq) = (HhdmRequest::new(), RsdpRequest::new());
        answer(&hreq, response::<HhdmResponse>(&hhdm));
        let rev = base_revision(2);
        // SAFETY: the test reads only physical 0..1 MiB, `padded`, which
        // outlives `boot`.
        let boot = unsafe { BootMemory::from_limine(&rev, &hreq, &rreq) }.unwrap();
        assert_eq!(boot.rsdp(), Ok(0xE_0000)); // found by the search
        let rsdp = [0u64, offset + 0xE_0000]; // virtual, in the HHDM
        answer(&rreq, response::<RsdpResponse>(&rsdp));
        // SAFETY: as above.
        let boot = unsafe { BootMemory::from_limine(&rev, &hreq, &rreq) }.unwrap();
        assert_eq!(boot.loader_rsdp(), Some(0xE_0000));
        assert!(crate::acpi::discover(boot.phys_memory(), 0xE_0000).is_ok());
        drop(padded);
    }
}
