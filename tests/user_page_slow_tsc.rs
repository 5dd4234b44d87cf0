//! A TSC at or below 1 GHz (QEMU `-icount shift=0` runs it at 999,999,975
//! Hz; low-power parts run slower) still gets a TSC state on the user clock
//! page: user reads stay out of the kernel, and never run ahead of it.
#![cfg(all(feature = "tsc", feature = "hpet"))]

use clockhal::tsc::SyncStatus;
use clockhal::x86::Hardware;
use clockhal::{probe, Platform, SourceId};
use clockhal_sim::{HpetConfig, PmTimerConfig, SimConfig, SimMachine};
use clockhal_user::abi::{ClockPage, WindowLayout};
use clockhal_user::{ClockPageWriter, Source, TscRead, UserClock};

/// Bare metal with an invariant TSC stated exactly by leaf 0x15
/// (`crystal * num / den`).
fn machine(crystal: u32, num: u32, den: u32) -> SimMachine {
    let hz = crystal as u64 * num as u64 / den as u64;
    SimConfig::cpu(hz)
        .with_invariant_tsc(true)
        .with_tsc_leaf(den, num, crystal)
        .with_hpet(HpetConfig::classic())
        .with_pm_timer(PmTimerConfig::default())
        .build()
}

#[test]
fn a_tsc_at_or_below_1_ghz_is_a_tsc_state_on_the_page() {
    for (crystal, num, den) in [
        (24_000_000, 125, 3), // 1 GHz exactly
        (24_000_000, 100, 3), // 800 MHz
        (25_000_000, 4, 1),   // 100 MHz
        (24_000_000, 126, 3), // 1.008 GHz: the v1 mode, as before
    ] {
        let m = machine(crystal, num, den);
        let page: &'static ClockPage = Box::leak(Box::new(ClockPage::new()));
        let writer = ClockPageWriter::new(
            page,
            WindowLayout::CLOCK_PAGE_ONLY,
            &[],
            None,
            TscRead::LfenceRdtsc,
        )
        .unwrap();
        let view: UserClock<'static> = writer.view();
        let platform = Platform::new()
            .tsc_sync(SyncStatus::SingleCpu)
            .hpet_region(m.hpet_region().unwrap())
            .clock_page(writer);
        let clock = probe(&m, platform).into_clock().unwrap();
        if clock.source_id() != SourceId::Tsc {
            clock.force(SourceId::Tsc).unwrap();
        }
        let hz = crystal as u64 * num as u64 / den as u64;
        for step in [1_000u64, 1_000_000, 250_000_000, 3_000_000_000] {
            m.advance(step);
            let r = view
                .read_with(|| Hardware::rdtsc_ordered(&&m))
                .unwrap_or_else(|e| panic!("{hz} Hz: user read asks the kernel: {e}"));
            assert_eq!(r.source, Source::Tsc, "{hz} Hz");
            let kernel = clock.now().as_nanos();
            assert!(
                r.clock_ns <= kernel,
                "{hz} Hz: user {} ahead of the kernel read after it {kernel}",
                r.clock_ns
            );
            // Between the two reads only the simulated accesses' costs
            // pass (tens of ns): the page follows the clock's own line.
            assert!(
                kernel - r.clock_ns <= 10_000,
                "{hz} Hz: user {} behind kernel {kernel}",
                r.clock_ns
            );
        }
    }
}
