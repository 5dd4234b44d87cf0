//! Hyper-V reference time on the simulated partition: the page and its
//! invalid windows, sequence changes mid-read, MSR-only partitions, hostile
//! page contents, exits per read, and every probe failure.

use clockhal_core::{ClockSource, Frequency, Policy, ReadCost, Stability};
use clockhal_hyperv::{
    read_reference_page, Hyperv, HypervConfig, HypervError, PageError, DEFAULT_GUEST_OS_ID,
    MAX_READ_ATTEMPTS,
};
use clockhal_sim::{HypervConfig as SimHv, SimConfig, SimMachine};
use clockhal_x86::paravirt::HvReferenceTscPage;
use clockhal_x86::paravirt::RegisterError;
use clockhal_x86::{Hardware, Msr};
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::Arc;

fn with_page(m: &SimMachine) -> Result<Hyperv<&SimMachine>, HypervError> {
    Hyperv::probe(
        m,
        HypervConfig::new()
            .with_tsc_page(m.alloc_hv_page())
            .with_guest_os_id(DEFAULT_GUEST_OS_ID),
        &Policy::new(),
    )
}

fn partition(hv: SimHv) -> SimMachine {
    SimConfig::cpu(2_400_000_000)
        .with_invariant_tsc(true)
        .with_hyperv(hv)
        .build()
}

/// Reference time of the machine now in `clock`'s unit: ns for the page
/// clock, 100 ns for the MSR clock.
fn truth(clock: &dyn ClockSource, m: &SimMachine) -> u64 {
    m.now_ns() / (1_000_000_000 / clock.frequency().hz_rounded())
}

/// Reads `clock`, checking it against the machine's time around the read;
/// `ahead` (in the clock's unit) is how far a held value may lead.
fn read_checked(clock: &dyn ClockSource, m: &SimMachine, ahead: u64) -> u64 {
    let unit = 1_000_000_000 / clock.frequency().hz_rounded();
    let before = truth(clock, m);
    let v = clock.read();
    let after = truth(clock, m);
    // The page interpolates inside the host's 100 ns units.
    let slack = 100 / unit;
    assert!(
        v + slack >= before && v <= after + slack + ahead,
        "{v} outside [{before}, {after}]"
    );
    v
}

#[test]
fn valid_page_reads_reference_time_without_exits() {
    let m = SimMachine::hyperv();
    let hv = with_page(&m).unwrap();
    assert_eq!(hv.page_error(), None);
    let page = hv.page().unwrap();
    assert_eq!(page.name(), "hyperv-page");
    assert_eq!(page.quality().get(), 450);
    assert_eq!(page.read_cost(), ReadCost::NoTrap);
    // Reference time in ns: the page's 100 ns units, interpolated by the TSC.
    assert_eq!(page.frequency(), Frequency::from_hz(1_000_000_000).unwrap());
    assert!(page
        .stability()
        .contains(Stability::MONOTONIC_ACROSS_CPUS | Stability::SURVIVES_MIGRATION));
    assert!(!page.stability().contains(Stability::COUNTS_WHILE_PAUSED));

    m.reset_traps();
    let mut prev = 0;
    for i in 0..1_000u64 {
        m.advance(i * 1_013);
        let v = read_checked(page, &m, 0);
        assert!(v >= prev);
        prev = v;
    }
    assert_eq!(m.traps().msr_reads, 0, "0 MSR reads per page read");
    assert_eq!(m.traps().exits(), 0);
    assert_eq!(page.stats().msr_fallbacks, 0);
}

#[test]
fn msr_clock_is_one_exit_per_read() {
    let m = SimMachine::hyperv();
    let hv = with_page(&m).unwrap();
    let msr = hv.msr().unwrap();
    assert_eq!(msr.name(), "hyperv-msr");
    assert_eq!(msr.quality().get(), 280);
    assert_eq!(msr.read_cost(), ReadCost::OneTrap);
    assert!(msr.stability().contains(Stability::TRAPS_EVERY_READ));
    for _ in 0..100 {
        m.reset_traps();
        read_checked(msr, &m, 0);
        assert_eq!(m.traps().msr_reads, 1);
        assert_eq!(m.traps().exits(), 1);
    }
}

#[test]
fn sequence_zero_windows_fall_back_to_exactly_one_msr_read() {
    let m = SimMachine::hyperv();
    let hv = with_page(&m).unwrap();
    let page = hv.page().unwrap();
    let mut prev = read_checked(page, &m, 0);
    for invalid in [0u32, u32::MAX] {
        m.with_hyperv(|h, ctx| h.set_raw_sequence(ctx, invalid));
        for _ in 0..10 {
            m.advance(50_000);
            m.reset_traps();
            let v = read_checked(page, &m, 0);
            assert_eq!(
                m.traps().msr_reads,
                1,
                "exactly one MSR read per fallback read"
            );
            assert!(v >= prev);
            prev = v;
        }
        // The window ends: back to the page, never backwards. The new
        // parameters are checked once against TIME_REF_COUNT (the old map
        // may have drifted in the window), then reads make no exits.
        m.with_hyperv(|h, ctx| h.update_page(ctx));
        m.reset_traps();
        let v = read_checked(page, &m, 0);
        assert!(m.traps().msr_reads <= 1);
        assert!(v >= prev);
        m.reset_traps();
        let v = read_checked(page, &m, 0);
        assert_eq!(m.traps().msr_reads, 0);
        assert!(v >= prev);
        prev = v;
    }
    assert_eq!(page.stats().msr_fallbacks, 20);
}

#[test]
fn page_to_msr_switches_never_step_back() {
    // The page runs ahead of TIME_REF_COUNT by 30 units (3 us): a read that
    // falls back to the MSR must not step back, on the page clock; the MSR
    // clock on its own never steps back either.
    let m = SimMachine::hyperv();
    let hv = with_page(&m).unwrap();
    let page = hv.page().unwrap();
    let (scale, offset) = m
        .with_hyperv(|_, ctx| clockhal_sim::HypervHost::scale_offset(ctx))
        .unwrap();
    m.with_hyperv(|h, ctx| {
        h.set_page_override(Some((scale, offset + 30)));
        h.update_page(ctx);
    });
    let (mut prev, mut prev_msr) = (0, 0);
    for i in 0..200 {
        m.advance(10_000);
        if i % 3 == 0 {
            m.with_hyperv(|h, ctx| h.invalidate_page(ctx));
        } else {
            m.with_hyperv(|h, ctx| h.update_page(ctx));
        }
        let v = page.read();
        assert!(v >= prev, "step back {prev} -> {v} at {i}");
        prev = v;
        let v = hv.msr().unwrap().read();
        assert!(
            v >= prev_msr,
            "msr clock stepped back {prev_msr} -> {v} at {i}"
        );
        prev_msr = v;
    }
    assert!(page.stats().msr_fallbacks > 0);
}

#[test]
fn sequence_changing_mid_read_retries() {
    let m = SimMachine::hyperv();
    let hv = with_page(&m).unwrap();
    let page = hv.page().unwrap();
    let left = Arc::new(AtomicU32::new(5));
    let l = left.clone();
    m.set_rdtsc_hook(move |m| {
        if l.fetch_sub(1, SeqCst) > 0 {
            m.with_hyperv(|h, ctx| h.update_page(ctx));
        }
    });
    m.reset_traps();
    read_checked(page, &m, 0);
    m.clear_rdtsc_hook();
    assert_eq!(m.traps().msr_reads, 0, "retries stay on the page");

    // A sequence that never settles: bounded, then one MSR read.
    m.set_rdtsc_hook(|m| {
        m.with_hyperv(|h, ctx| h.update_page(ctx));
    });
    m.reset_traps();
    read_checked(page, &m, 0);
    m.clear_rdtsc_hook();
    assert_eq!(m.traps().msr_reads, 1);
    // The cached read's TSC, then every bounded attempt.
    assert_eq!(m.traps().rdtsc, MAX_READ_ATTEMPTS as u64 + 1);
    assert_eq!(page.stats().msr_fallbacks, 1);
}

#[test]
fn msr_only_partition() {
    let m = partition(SimHv {
        reference_tsc: false,
        ..SimHv::default()
    });
    let hv = with_page(&m).unwrap();
    assert!(hv.page().is_none());
    assert_eq!(hv.page_error(), Some(PageError::NotOffered));
    let msr = hv.msr().unwrap();
    m.reset_traps();
    read_checked(msr, &m, 0);
    assert_eq!(m.traps().msr_reads, 1);

    // Offered but not given: MSR only too.
    let m = SimMachine::hyperv();
    let hv = Hyperv::probe(&m, HypervConfig::new(), &Policy::new()).unwrap();
    assert!(hv.page().is_none());
    assert_eq!(hv.page_error(), Some(PageError::NoMemory));
    assert!(hv.msr().is_some());
}

#[test]
fn page_only_partition_holds_when_the_page_is_invalid() {
    let m = partition(SimHv {
        time_ref_count: false,
        ..SimHv::default()
    });
    let hv = with_page(&m).unwrap();
    assert!(hv.msr().is_none());
    let page = hv.page().unwrap();
    let a = read_checked(page, &m, 0);
    m.with_hyperv(|h, ctx| h.invalidate_page(ctx));
    m.advance(1_000_000);
    m.reset_traps();
    let b = page.read();
    assert_eq!(m.traps().msr_reads, 0, "no MSR to fall back to");
    assert_eq!(b, a, "held");
    assert_eq!(page.stats().held_reads, 1);
}

#[test]
fn hostile_scale_and_offset_never_panic_or_step_back() {
    // Garbage written after the probe: implausible rates are rejected (the
    // previous parameters stay in use), a plausible rate with an absurd
    // offset is reanchored (time continues). Either way time stays true.
    let hostile = [
        (u64::MAX, i64::MAX),
        (u64::MAX, i64::MIN),
        (1, 0),
        (1, i64::MIN),
        (u64::MAX / 3, -1),
        (12345, 1 << 62),
        (0, 5),
    ];
    for (scale, offset) in hostile {
        let m = SimMachine::hyperv();
        let hv = with_page(&m).unwrap();
        let page = hv.page().unwrap();
        let mut prev = page.read();
        m.with_hyperv(|h, ctx| {
            h.set_page_override(Some((scale, offset)));
            h.update_page(ctx);
        });
        m.reset_traps();
        for _ in 0..50 {
            m.advance(100_000);
            let v = read_checked(page, &m, 0);
            assert!(v >= prev, "scale {scale:#x} offset {offset}: {prev} -> {v}");
            prev = v;
        }
        assert_eq!(m.traps().msr_reads, 0, "the previous parameters serve");
        assert_eq!(page.stats().rejected_updates, 1, "judged once");
        // The decoder is total: the TLFS formula, wrapping.
        let t = m.tsc_of(0);
        let expected = (((t as u128 * scale as u128) >> 64) as u64).wrapping_add(offset as u64);
        match read_reference_page(page.page(), || t) {
            Ok(v) => assert_eq!(v, expected),
            Err(e) => assert_eq!((e, scale), (PageError::ZeroScale, 0)),
        }
    }
    // The true scale with an offset 10^15 units (3 years) ahead: reanchored.
    // (An offset 2^62 units off is 2^64 * 25 ns off: invisible on the ns
    // timeline, which counts modulo 2^64.)
    let m = SimMachine::hyperv();
    let hv = with_page(&m).unwrap();
    let page = hv.page().unwrap();
    let (scale, offset) = m
        .with_hyperv(|_, ctx| clockhal_sim::HypervHost::scale_offset(ctx))
        .unwrap();
    let a = read_checked(page, &m, 0);
    m.with_hyperv(|h, ctx| {
        h.set_page_override(Some((scale, offset.wrapping_add(1_000_000_000_000_000))));
        h.update_page(ctx);
    });
    m.advance(1_000_000);
    let b = read_checked(page, &m, 0);
    // One host unit (100 ns) of truncation in the new page is allowed.
    assert!(b + 100 >= a + 1_000_000, "{a} -> {b}: {:?}", page.stats());
    assert_eq!(page.stats().reanchored_updates, 1);
}

#[test]
fn hostile_page_is_refused_at_probe() {
    // Scale 0, wildly wrong offset, never filled: each is disabled again
    // and reported, leaving the MSR clock.
    let cases = [
        (Some((0, 0)), true, PageError::ZeroScale),
        (None, false, PageError::Invalid),
    ];
    for (over, updates, expected) in cases {
        let m = SimMachine::hyperv();
        m.with_hyperv(|h, _| {
            h.set_page_override(over);
            h.set_page_updates(updates);
        });
        let hv = with_page(&m).unwrap();
        assert_eq!(hv.page_error(), Some(expected));
        assert_eq!(
            m.with_hyperv(|h, _| h.reference_tsc_msr() & 1).unwrap(),
            0,
            "disabled again"
        );
        assert!(hv.msr().is_some());
    }
    let m = SimMachine::hyperv();
    let (scale, offset) = m
        .with_hyperv(|_, ctx| clockhal_sim::HypervHost::scale_offset(ctx))
        .unwrap();
    m.with_hyperv(|h, _| h.set_page_override(Some((scale, offset + 1_000_000))));
    let hv = with_page(&m).unwrap();
    assert!(matches!(hv.page_error(), Some(PageError::Disagrees { .. })));
}

#[test]
fn guest_os_id_is_written_only_when_zero_and_allowed() {
    // Not allowed: never written, and no page without an identity.
    let m = SimMachine::hyperv();
    let hv = Hyperv::probe(
        &m,
        HypervConfig::new().with_tsc_page(m.alloc_hv_page()),
        &Policy::new(),
    )
    .unwrap();
    assert_eq!(hv.guest_os_id(), 0);
    assert_eq!(m.rdmsr(Msr::HV_GUEST_OS_ID), 0);
    assert_eq!(hv.page_error(), Some(PageError::NoGuestOsId));
    assert!(hv.msr().is_some());
    drop(hv);

    let m = SimMachine::hyperv();
    let hv = with_page(&m).unwrap();
    assert_eq!(hv.guest_os_id(), DEFAULT_GUEST_OS_ID);
    assert_eq!(m.rdmsr(Msr::HV_GUEST_OS_ID), DEFAULT_GUEST_OS_ID);
    assert_eq!(DEFAULT_GUEST_OS_ID >> 63, 1, "open source");
    assert_eq!(
        (DEFAULT_GUEST_OS_ID >> 56) & 0x7F,
        0,
        "no allocated OS type"
    );
    assert_eq!(
        (DEFAULT_GUEST_OS_ID >> 16) & 0xFFFF_FFFF,
        0x00_01_00,
        "clockhal 0.1.0"
    );
    drop(hv);

    // The OS's own identity.
    let m = SimMachine::hyperv();
    let id = 0x8100_0000_0000_0042;
    let hv = Hyperv::probe(&m, HypervConfig::new().with_guest_os_id(id), &Policy::new()).unwrap();
    assert_eq!(hv.guest_os_id(), id);
    // Already set: left alone.
    let m = SimMachine::hyperv();
    // Someone (the OS, its loader) already identified the guest.
    clockhal_x86::paravirt::hv_set_guest_os_id(&m, 77);
    let hv = Hyperv::probe(&m, HypervConfig::new().with_guest_os_id(id), &Policy::new()).unwrap();
    assert_eq!(hv.guest_os_id(), 77);
    assert_eq!(m.rdmsr(Msr::HV_GUEST_OS_ID), 77);
}

#[test]
fn reserved_bits_are_preserved_and_shutdown_disables_the_page() {
    let m = partition(SimHv {
        reference_tsc_reserved: 0xA5A,
        ..SimHv::default()
    });
    // The simulated host faults on a write that changes reserved bits.
    let hv = with_page(&m).unwrap();
    assert!(hv.page().is_some());
    let msr = m.with_hyperv(|h, _| h.reference_tsc_msr()).unwrap();
    assert_eq!(msr & 0xFFF, 0xA5A | 1);
    hv.shutdown();
    assert_eq!(
        m.with_hyperv(|h, _| h.reference_tsc_msr()).unwrap() & 0xFFF,
        0xA5A
    );
}

#[test]
fn tsc_frequency_from_the_msr() {
    let m = SimMachine::hyperv();
    let hv = Hyperv::probe(&m, HypervConfig::new(), &Policy::new()).unwrap();
    assert_eq!(hv.tsc_frequency(), Frequency::from_hz(2_400_000_000).ok());
    let m = partition(SimHv {
        frequency_msrs: false,
        ..SimHv::default()
    });
    assert_eq!(
        Hyperv::probe(&m, HypervConfig::new(), &Policy::new())
            .unwrap()
            .tsc_frequency(),
        None
    );
}

#[test]
fn read_reference_page_errors() {
    let page = HvReferenceTscPage::new();
    assert_eq!(read_reference_page(&page, || 1), Err(PageError::Invalid));
    page.sequence.store(u32::MAX, SeqCst);
    assert_eq!(read_reference_page(&page, || 1), Err(PageError::Invalid));
    page.sequence.store(3, SeqCst);
    assert_eq!(read_reference_page(&page, || 1), Err(PageError::ZeroScale));
    page.scale.store(1 << 63, SeqCst);
    let mut n = 0;
    // The sequence changes under every sample: bounded.
    let r = read_reference_page(&page, || {
        n += 1;
        page.sequence.fetch_add(1, SeqCst);
        0
    });
    assert_eq!(r, Err(PageError::Busy));
    assert_eq!(n, MAX_READ_ATTEMPTS);
}

#[test]
fn every_probe_failure_returns_its_error() {
    let p = Policy::new();
    let probe = |m: &SimMachine| Hyperv::probe(m, HypervConfig::new(), &p).map(|_| ());
    assert_eq!(
        probe(&SimMachine::bare_metal()),
        Err(HypervError::NoHypervisor)
    );
    assert_eq!(
        probe(&SimMachine::kvm()),
        Err(HypervError::NoHypervSignature)
    );
    assert_eq!(
        probe(&SimMachine::qemu_tcg()),
        Err(HypervError::NoHypervSignature)
    );
    // Signature without the "Hv#1" interface.
    let m = SimMachine::hyperv_config()
        .with_cpuid(0x4000_0001, 0, clockhal_sim::regs(0, 0, 0, 0))
        .build();
    assert_eq!(probe(&m), Err(HypervError::NoHvInterface));
    // Neither time source.
    let m = partition(SimHv {
        time_ref_count: false,
        reference_tsc: false,
        ..SimHv::default()
    });
    assert_eq!(probe(&m), Err(HypervError::NoTimeSource));
    // Guest OS ID 0.
    let m = SimMachine::hyperv();
    let e = Hyperv::probe(&m, HypervConfig::new().with_guest_os_id(0), &p).unwrap_err();
    assert_eq!(e, HypervError::InvalidGuestOsId);
    // Page only, and no page given / page unusable.
    let page_only = || {
        partition(SimHv {
            time_ref_count: false,
            ..SimHv::default()
        })
    };
    assert_eq!(
        probe(&page_only()),
        Err(HypervError::Page(PageError::NoMemory))
    );
    let m = page_only();
    m.with_hyperv(|h, _| h.set_page_updates(false));
    assert_eq!(
        with_page(&m).map(|_| ()),
        Err(HypervError::Page(PageError::Invalid))
    );
    let m = page_only();
    let bad = m.misaligned(m.alloc_hv_page(), 0x800);
    let e = Hyperv::probe(
        &m,
        HypervConfig::new()
            .with_tsc_page(bad)
            .with_guest_os_id(DEFAULT_GUEST_OS_ID),
        &p,
    )
    .unwrap_err();
    assert_eq!(
        e,
        HypervError::Page(PageError::Refused(RegisterError::Misaligned))
    );
    for e in [
        HypervError::NoHypervisor,
        HypervError::NoHypervSignature,
        HypervError::NoHvInterface,
        HypervError::NoTimeSource,
        HypervError::InvalidGuestOsId,
        HypervError::Page(PageError::Disagrees { page: 1, msr: 2 }),
        HypervError::Page(PageError::Busy),
    ] {
        assert!(!e.to_string().is_empty());
    }
}

/// The MSR fallback on one CPU after page readings on another that ran
/// ahead of TIME_REF_COUNT (an accepted forward step of the page): the
/// fallback's clamp takes in what the page returned everywhere first.
#[test]
fn the_msr_fallback_is_ordered_after_other_cpus_page_reads() {
    use clockhal_sim::HypervHost;
    let m = SimConfig::cpu(2_400_000_000)
        .with_invariant_tsc(true)
        .with_hyperv(SimHv::default())
        .with_cpus(2, &[0, 0])
        .build();
    let hv = with_page(&m).unwrap();
    let page = hv.page().unwrap();
    m.with_hyperv(|h, ctx| {
        let (s, o) = HypervHost::scale_offset(ctx);
        h.publish(ctx, s, o + 50_000_000); // +5 s, continuous enough
    });
    let a = m.on_cpu(0, || page.read());
    m.with_hyperv(|h, ctx| h.invalidate_page(ctx));
    let b = m.on_cpu(1, || page.read());
    assert!(b >= a, "cross-CPU step back of {} ns", a - b);
}
