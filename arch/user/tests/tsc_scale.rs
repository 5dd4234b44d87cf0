//! The TSC modes at every rate: the shifted mode for a TSC at or below
//! 1 GHz, exact at the anchor, never ahead of the exact rate after it, and
//! refused when a page names a shift no writer publishes.

use clockhal_user::abi::{ClockPage, WindowLayout, MODE_TSC, MODE_TSC_SHIFTED};
use clockhal_user::{
    tsc_map_scaled, tsc_mul, AskKernel, AskReason, ClockPageWriter, PageSource, Publication,
    PublishError, Source, TscRead, TscScale, UserClock,
};
use std::sync::atomic::Ordering::Relaxed;

const RATES: [u64; 12] = [
    1,
    3,
    32_768,
    1_000_000,
    24_000_000,
    999_999_975,
    1_000_000_000,
    1_000_000_001,
    2_592_000_000,
    5_000_000_000,
    1 << 40,
    u64::MAX,
];

#[test]
fn every_rate_has_a_scale_that_never_runs_ahead() {
    for hz in RATES {
        let s = TscScale::from_hz(hz, 1).unwrap_or_else(|| panic!("{hz} Hz"));
        assert_eq!(s.shift == 0, hz > 1_000_000_000, "{hz} Hz: {s:?}");
        if s.shift == 0 {
            assert_eq!(Some(s.mul), tsc_mul(hz, 1));
        }
        let PageSource::Tsc { add, .. } = PageSource::tsc_scaled(s, 1_000, 7_000_000) else {
            unreachable!()
        };
        assert_eq!(
            tsc_map_scaled(1_000, s, add),
            7_000_000,
            "{hz} Hz at the anchor"
        );
        for d in [1u64, 2, 999, 1_000_000, 1 << 32, 1 << 40] {
            let exact = 7_000_000 + (d as u128 * 1_000_000_000 / hz as u128);
            if exact >= 1 << 63 {
                continue;
            }
            let v = tsc_map_scaled(1_000 + d, s, add) as u128;
            assert!(v <= exact, "{hz} Hz, {d} ticks: {v} ahead of {exact}");
            assert!(
                v + 1 + (exact >> 62) >= exact,
                "{hz} Hz, {d} ticks: {v} far behind {exact}"
            );
        }
    }
    assert_eq!(TscScale::from_hz(0, 1), None);
    assert_eq!(TscScale::from_hz(1, 0), None);
    // Slower than one tick per 2^63 ns: no shift fits.
    assert_eq!(TscScale::from_hz(1, 10_000_000_000), None);
}

fn page() -> (
    &'static ClockPage,
    ClockPageWriter<'static>,
    UserClock<'static>,
) {
    let p: &'static ClockPage = Box::leak(Box::new(ClockPage::new()));
    let w = ClockPageWriter::new(
        p,
        WindowLayout::CLOCK_PAGE_ONLY,
        &[],
        None,
        TscRead::LfenceRdtsc,
    )
    .unwrap();
    (p, w, UserClock::new(p, &[], None).unwrap())
}

#[test]
fn a_999_999_975_hz_tsc_is_read_on_the_page_without_the_kernel() {
    let (p, w, clock) = page();
    let s = TscScale::from_hz(999_999_975, 1).unwrap();
    w.publish_with(
        &Publication {
            source: PageSource::tsc_scaled(s, 10_000, 1_000_000),
            floor_ns: 1_000_000,
            boot_wall_ns: Some(5),
        },
        || 10_000,
    )
    .unwrap();
    assert_eq!(p.mode.load(Relaxed), MODE_TSC_SHIFTED);
    assert_eq!(p.arg.load(Relaxed), s.shift);
    let r = clock.read_with(|| 10_000 + 999_999_975).unwrap();
    assert_eq!(r.source, Source::Tsc);
    assert_eq!(
        r.clock_ns,
        1_000_000 + 999_999_999,
        "1 s less the truncation"
    );
    assert_eq!(r.unix_ns, Some(5 + r.clock_ns));
    // A faster TSC keeps the v1 mode, which every reader knows.
    let fast = TscScale::from_hz(3_000_000_000, 1).unwrap();
    w.publish_with(
        &Publication {
            source: PageSource::tsc_scaled(fast, 0, 0),
            floor_ns: 0,
            boot_wall_ns: None,
        },
        || 0,
    )
    .unwrap();
    assert_eq!(p.mode.load(Relaxed), MODE_TSC);
}

#[test]
fn shifts_no_writer_publishes_are_refused() {
    let (p, w, clock) = page();
    assert_eq!(
        w.publish_with(
            &Publication {
                source: PageSource::Tsc {
                    mul: 1,
                    shift: 64,
                    add: 0
                },
                floor_ns: 0,
                boot_wall_ns: None,
            },
            || 0,
        ),
        Err(PublishError::BadShift(64))
    );
    assert_eq!(clock.now(), Err(AskKernel::Page(AskReason::Misconfigured)));
    // A forged page: shifted mode with shift 0 or past 63.
    for shift in [0, 64, u32::MAX] {
        let seq = p.seq.load(Relaxed);
        p.seq.store(seq + 1, Relaxed);
        p.mode.store(MODE_TSC_SHIFTED, Relaxed);
        p.arg.store(shift, Relaxed);
        p.tsc_mul.store(1 << 63, Relaxed);
        p.seq.store(seq + 2, Relaxed);
        assert_eq!(
            clock.read_with(|| 1_000),
            Err(AskKernel::Page(AskReason::Misconfigured)),
            "shift {shift}"
        );
    }
}
