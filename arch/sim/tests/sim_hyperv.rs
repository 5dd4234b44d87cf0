//! The simulator's Hyper-V partition against a hand-written reference TSC
//! page decode, and its fault injection.

use clockhal_sim::SimMachine;
use clockhal_x86::paravirt::{hv_enable_reference_tsc, hv_set_guest_os_id, HvReferenceTscPage};
use clockhal_x86::{Hardware, Msr};
use std::sync::atomic::Ordering::SeqCst;

/// TLFS formula, written out independently: `None` while invalid.
fn decode_by_hand(m: &SimMachine, page: &HvReferenceTscPage) -> Option<u64> {
    loop {
        let s = page.sequence.load(SeqCst);
        if s == 0 || s == u32::MAX {
            return None;
        }
        let scale = page.scale.load(SeqCst) as u128;
        let offset = page.offset.load(SeqCst);
        let tsc = m.rdtsc() as u128;
        if page.sequence.load(SeqCst) == s {
            return Some((((tsc * scale) >> 64) as i128 + offset as i128) as u64);
        }
    }
}

fn enabled() -> (SimMachine, &'static HvReferenceTscPage) {
    let m = SimMachine::hyperv();
    let page = m.alloc_hv_page();
    hv_set_guest_os_id(&m, 1 << 63);
    hv_enable_reference_tsc(&m, page).unwrap();
    (m, page.get())
}

#[test]
fn page_tells_reference_time_and_matches_the_msr() {
    let (m, page) = enabled();
    m.reset_traps();
    for step in [0u64, 999, 1_000_000, 60_000_000_000] {
        m.advance(step);
        let before = m.now_ns() / 100;
        let v = decode_by_hand(&m, page).unwrap();
        // Truncations in scale and offset: one unit either way.
        assert!(
            v + 1 >= before && v <= m.now_ns() / 100 + 1,
            "page {v} vs {before}"
        );
    }
    assert_eq!(m.traps().exits(), 0);
    let msr = m.rdmsr(Msr::HV_TIME_REF_COUNT);
    assert_eq!(m.traps().msr_reads, 1);
    assert!(msr.abs_diff(decode_by_hand(&m, page).unwrap()) <= 1);
}

#[test]
fn invalid_windows_and_hostile_values() {
    let (m, page) = enabled();
    m.with_hyperv(|h, ctx| h.invalidate_page(ctx));
    assert_eq!(decode_by_hand(&m, page), None);
    m.with_hyperv(|h, ctx| h.update_page(ctx));
    assert!(decode_by_hand(&m, page).is_some());
    m.with_hyperv(|h, ctx| h.set_raw_sequence(ctx, u32::MAX));
    assert_eq!(decode_by_hand(&m, page), None);

    m.with_hyperv(|h, ctx| {
        h.set_page_override(Some((u64::MAX, i64::MIN)));
        h.update_page(ctx);
    });
    assert_eq!(page.scale.load(SeqCst), u64::MAX);
    assert_eq!(page.offset.load(SeqCst), i64::MIN);
    assert!(
        decode_by_hand(&m, page).is_some(),
        "override keeps the page valid"
    );

    m.with_hyperv(|h, ctx| {
        h.set_page_updates(false);
        h.invalidate_page(ctx);
        h.update_page(ctx);
    });
    assert_eq!(
        decode_by_hand(&m, page),
        None,
        "a host that stopped updating leaves it invalid"
    );
}

#[test]
fn msr_only_partition_refuses_the_page_msr() {
    let mut c = SimMachine::hyperv_config();
    c = c.with_hyperv(clockhal_sim::HypervConfig {
        reference_tsc: false,
        ..Default::default()
    });
    let m = c.build();
    assert_eq!(m.try_rdmsr(Msr::HV_REFERENCE_TSC), None);
    assert!(m.try_rdmsr(Msr::HV_TIME_REF_COUNT).is_some());
}

#[test]
fn a_10_mhz_tsc_gets_a_usable_page() {
    // Issue 18: the host's scale for a 10 MHz TSC was 2^64 truncated to 0,
    // which marks the page unusable.
    let mut c = SimMachine::hyperv_config();
    c.tsc_hz = 10_000_000;
    let m = c.build();
    let page = m.alloc_hv_page();
    hv_set_guest_os_id(&m, 1 << 63);
    hv_enable_reference_tsc(&m, page).unwrap();
    assert_ne!(page.get().scale.load(SeqCst), 0);
    m.advance(1_000_000_000);
    let v = decode_by_hand(&m, page.get()).unwrap();
    let truth = m.now_ns() / 100;
    assert!(v + 2 >= truth && v <= truth + 1, "page {v} vs {truth}");
}
