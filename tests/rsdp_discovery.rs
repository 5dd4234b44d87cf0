//! From nothing but low memory to a probed clock: `find_rsdp` through the
//! facade's `clockhal::x86::acpi`, as a BIOS kernel without a loader-given
//! RSDP (bootloader 0.9, multiboot1) writes it.
#![cfg(all(feature = "hpet", feature = "acpi-pm"))]

use clockhal::x86::acpi::{find_rsdp, AcpiError};
use clockhal::x86::MmioRegion;
use clockhal::{probe, Duration, Platform, SelfCheck, SourceId};
use clockhal_sim::{AcpiTablesBuilder, LowMemory, SimMachine};

fn probe_from_low_memory(m: &SimMachine, mem: &LowMemory) -> Result<clockhal::Report, AcpiError> {
    let mut map = |phys: u64, len: usize| Some(MmioRegion::simulated(phys as usize, len));
    let platform = Platform::new()
        .acpi(find_rsdp(mem)?, mem)
        .hpet_mapper(&mut map)
        .self_check(SelfCheck::new().rate_interval(Duration::from_millis(1)));
    Ok(*probe(m, platform).report())
}

#[test]
fn an_rsdp_in_the_ebda_gives_the_probe_its_hpet_and_pm_timer() {
    let m = SimMachine::kvm();
    let mut mem = LowMemory::with_tables(AcpiTablesBuilder::q35().build());
    mem.set_ebda_segment(0x9FC0);
    mem.place_rsdp(0x9_FC00);
    let r = probe_from_low_memory(&m, &mem).unwrap();
    assert!(
        r.get(SourceId::Hpet).unwrap().is_eligible(),
        "{}",
        r.table()
    );
    assert!(
        r.get(SourceId::AcpiPm).unwrap().is_eligible(),
        "{}",
        r.table()
    );
}

#[test]
fn no_rsdp_anywhere_is_an_error_before_the_probe() {
    let m = SimMachine::kvm();
    let mem = LowMemory::with_tables(AcpiTablesBuilder::q35().build());
    assert_eq!(
        probe_from_low_memory(&m, &mem).map(|_| ()),
        Err(AcpiError::NotFound { table: "RSDP" })
    );
}
