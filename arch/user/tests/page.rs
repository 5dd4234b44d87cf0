//! The clock page's behaviour, one state at a time, on a simulated TSC:
//! header checks, every mode's formula, floors, wall time, invalid
//! requests, stuck writers, and the raw-address window constructor.

use clockhal_user::abi::{self, ClockPage, WindowLayout};
use clockhal_user::paravirt::PageFault;
use clockhal_user::{
    tsc_map, tsc_mul, AskKernel, AskReason, ClockPageWriter, ClockReader, PageError, PageSource,
    Publication, PublishError, Source, TscRead, UserClock,
};
// The simulated host writes through clockhal-x86's layouts: the same types.
use clockhal_x86::paravirt::{
    hv_next_sequence, HvReferenceTscPage, PvclockVcpuTimeInfo, PVCLOCK_TSC_STABLE_BIT,
};
use std::sync::atomic::Ordering::Relaxed;

/// A clock window as an OS maps it: clock page, pvclock areas, Hyper-V page.
#[repr(C, align(4096))]
struct Window {
    clock: ClockPage,
    pvclock: [PvclockVcpuTimeInfo; 128],
    hyperv: HvReferenceTscPage,
}

const LAYOUT: WindowLayout = WindowLayout {
    pvclock_page: 1,
    pvclock_areas: 4,
    hyperv_page: 2,
};

fn window() -> &'static Window {
    Box::leak(Box::new(Window {
        clock: ClockPage::new(),
        pvclock: [const { PvclockVcpuTimeInfo::new() }; 128],
        hyperv: HvReferenceTscPage::new(),
    }))
}

fn writer(w: &'static Window) -> ClockPageWriter<'static> {
    ClockPageWriter::new(
        &w.clock,
        LAYOUT,
        &w.pvclock[..4],
        Some(&w.hyperv),
        TscRead::LfenceRdtsc,
    )
    .unwrap()
}

fn view(w: &'static Window) -> UserClock<'static> {
    UserClock::new(&w.clock, &w.pvclock[..4], Some(&w.hyperv)).unwrap()
}

fn publication(source: PageSource, floor_ns: u64) -> Publication {
    Publication {
        source,
        floor_ns,
        boot_wall_ns: None,
    }
}

#[test]
fn a_zeroed_page_is_refused_until_a_writer_initialises_it() {
    let w = window();
    assert_eq!(
        UserClock::new(&w.clock, &[], None).unwrap_err(),
        PageError::BadMagic(0)
    );
    let _writer = writer(w);
    // The header must match the pages the reader is given.
    assert_eq!(
        UserClock::new(&w.clock, &w.pvclock[..3], Some(&w.hyperv)).unwrap_err(),
        PageError::BadWindow
    );
    assert_eq!(
        UserClock::new(&w.clock, &w.pvclock[..4], None).unwrap_err(),
        PageError::BadWindow
    );
    let clock = view(w);
    assert_eq!(clock.now(), Err(AskKernel::Page(AskReason::NotPublished)));

    w.clock.version.store(2, Relaxed);
    assert_eq!(
        UserClock::new(&w.clock, &w.pvclock[..4], Some(&w.hyperv)).unwrap_err(),
        PageError::UnsupportedVersion(2)
    );
    w.clock.version.store(1, Relaxed);
    w.clock.size.store(0x40, Relaxed);
    assert_eq!(
        UserClock::new(&w.clock, &w.pvclock[..4], Some(&w.hyperv)).unwrap_err(),
        PageError::TooSmall(0x40)
    );
    w.clock.size.store(abi::V1_SIZE + 8, Relaxed); // a newer, larger page is fine
    w.clock.tsc_read.store(9, Relaxed);
    assert_eq!(
        UserClock::new(&w.clock, &w.pvclock[..4], Some(&w.hyperv)).unwrap_err(),
        PageError::BadTscRead(9)
    );
    w.clock.tsc_read.store(0, Relaxed);
    w.clock.window_pages.store(2, Relaxed); // claims fewer pages than it names
    assert_eq!(
        UserClock::new(&w.clock, &w.pvclock[..4], Some(&w.hyperv)).unwrap_err(),
        PageError::BadWindow
    );
}

#[test]
fn invalid_layouts_are_refused_by_the_writer() {
    let w = window();
    for bad in [
        WindowLayout {
            pvclock_page: 1,
            pvclock_areas: 129,
            hyperv_page: 0,
        },
        WindowLayout {
            pvclock_page: 0,
            pvclock_areas: 1,
            hyperv_page: 0,
        },
        WindowLayout {
            pvclock_page: 1,
            pvclock_areas: 1,
            hyperv_page: 1,
        },
    ] {
        assert_eq!(
            ClockPageWriter::new(&w.clock, bad, &w.pvclock[..1], None, TscRead::Rdtscp)
                .unwrap_err(),
            PageError::BadWindow,
            "{bad:?}"
        );
    }
}

#[test]
fn tsc_mode_maps_the_counter_and_respects_the_floor() {
    let w = window();
    let writer = writer(w);
    let clock = view(w);
    let mul = tsc_mul(2_000_000_000, 1).unwrap(); // 0.5 ns per tick
    let p = writer
        .publish_with(
            &Publication {
                source: PageSource::tsc_anchored(mul, 10_000, 1_000_000),
                floor_ns: 900_000,
                boot_wall_ns: Some(1_700_000_000_000_000_000),
            },
            || 0,
        )
        .unwrap();
    assert_eq!(p.floor_ns, 900_000);
    let r = clock.read_with(|| 12_000).unwrap();
    assert_eq!(r.clock_ns, 1_001_000);
    assert_eq!(r.source, Source::Tsc);
    assert_eq!(r.unix_ns, Some(1_700_000_000_000_000_000 + 1_001_000));
    assert_eq!(r.seq, p.seq);
    // Before the anchor the mapping is below the floor: the floor wins.
    assert_eq!(clock.read_with(|| 0).unwrap().clock_ns, 995_000);
    let low = writer
        .publish_with(
            &publication(PageSource::tsc_anchored(mul, 10_000, 0), 0),
            || 0,
        )
        .unwrap();
    // The floor never goes down: the replaced state read 995_000 at TSC 0,
    // and the previous floor was 900_000.
    assert_eq!(low.floor_ns, 995_000);
    assert_eq!(clock.read_with(|| 12_000).unwrap().clock_ns, 995_000);
    assert_eq!(
        clock.read_with(|| 10_000 + 4_000_000).unwrap().clock_ns,
        2_000_000
    );
    assert_eq!(clock.unix_ns(), Err(AskKernel::NoWallClock));
}

#[test]
fn a_switch_raises_the_floor_to_what_the_replaced_state_reads() {
    let w = window();
    let writer = writer(w);
    let clock = view(w);
    let two_ghz = tsc_mul(2_000_000_000, 1).unwrap();
    writer
        .publish_with(
            &publication(PageSource::tsc_anchored(two_ghz, 0, 0), 0),
            || 0,
        )
        .unwrap();
    let before = clock.read_with(|| 4_000_000).unwrap().clock_ns; // 2 ms
    assert_eq!(before, 2_000_000);
    assert_eq!(tsc_map(4_000_000, two_ghz, 0), before);
    // The new source is 1 ms behind at the switch (TSC 4_000_000), and the
    // kernel's floor is only 1 ms: the page's floor is what readers saw.
    let p = writer
        .publish_with(
            &publication(
                PageSource::tsc_anchored(two_ghz, 4_000_000, 1_000_000),
                1_000_000,
            ),
            || 4_000_000,
        )
        .unwrap();
    assert_eq!(p.floor_ns, 2_000_000);
    assert_eq!(clock.read_with(|| 4_000_000).unwrap().clock_ns, 2_000_000);
    assert_eq!(clock.read_with(|| 4_000_002).unwrap().clock_ns, 2_000_000);
    assert_eq!(clock.read_with(|| 8_000_000).unwrap().clock_ns, 3_000_000);
}

#[test]
fn pvclock_mode_reads_the_mapped_area_with_the_kernels_checks() {
    let w = window();
    let writer = writer(w);
    let clock = view(w);
    let area = &w.pvclock[2];
    // 2 GHz: mul 2^31, shift 0.
    area.publish(1_000, 50_000, 1 << 31, 0, PVCLOCK_TSC_STABLE_BIT);
    writer
        .publish_with(
            &publication(
                PageSource::Pvclock {
                    area: 2,
                    offset_ns: 7u64.wrapping_sub(50_000),
                },
                0,
            ),
            || 0,
        )
        .unwrap();
    let r = clock.read_with(|| 3_000).unwrap();
    assert_eq!((r.clock_ns, r.source), (7 + 1_000, Source::Pvclock));
    // The host clears the stable flag: readers must ask the kernel.
    area.publish(1_000, 50_000, 1 << 31, 0, 0);
    assert_eq!(
        clock.read_with(|| 3_000),
        Err(AskKernel::Hypervisor(PageFault::PvclockNotStable))
    );
    area.publish(1_000, 50_000, 0, 0, PVCLOCK_TSC_STABLE_BIT);
    assert_eq!(
        clock.read_with(|| 3_000),
        Err(AskKernel::Hypervisor(PageFault::PvclockNotWritten))
    );
    area.publish(1_000, 50_000, 1 << 31, -33, PVCLOCK_TSC_STABLE_BIT);
    assert_eq!(
        clock.read_with(|| 3_000),
        Err(AskKernel::Hypervisor(PageFault::PvclockShiftOutOfRange(
            -33
        )))
    );
    area.version.store(9, Relaxed); // the host stopped mid-update
    assert_eq!(
        clock.read_with(|| 3_000),
        Err(AskKernel::Hypervisor(PageFault::PvclockBusy))
    );
    // An area the window does not map is refused, and published as
    // "ask the kernel".
    assert_eq!(
        writer.publish_with(
            &publication(
                PageSource::Pvclock {
                    area: 4,
                    offset_ns: 0
                },
                0
            ),
            || 0
        ),
        Err(PublishError::NoSuchArea(4))
    );
    assert_eq!(
        clock.read_with(|| 3_000),
        Err(AskKernel::Page(AskReason::Misconfigured))
    );
    // A state naming an unmapped area (e.g. a page from a newer writer)
    // is bounds-checked by the reader too.
    w.clock.seq.fetch_add(1, Relaxed);
    w.clock.mode.store(abi::MODE_PVCLOCK, Relaxed);
    w.clock.arg.store(1_000, Relaxed);
    w.clock.seq.fetch_add(1, Relaxed);
    assert_eq!(clock.read_with(|| 3_000), Err(AskKernel::NotMapped));
}

#[test]
fn hyperv_mode_reads_the_mapped_page_with_the_kernels_checks() {
    let w = window();
    let writer = writer(w);
    let clock = view(w);
    // Half a 100 ns unit per tick, offset -10 units.
    w.hyperv.publish(hv_next_sequence(0), 1 << 63, -10);
    writer
        .publish_with(
            &publication(PageSource::HypervPage { offset_ns: 5 }, 0),
            || 0,
        )
        .unwrap();
    let r = clock.read_with(|| 1_000).unwrap();
    assert_eq!((r.clock_ns, r.source), (490 * 100 + 5, Source::HypervPage));
    w.hyperv.publish(0, 1 << 63, -10); // invalid while migrating
    assert_eq!(
        clock.read_with(|| 1_000),
        Err(AskKernel::Hypervisor(PageFault::HvInvalidSequence))
    );
    w.hyperv.publish(7, 0, -10);
    assert_eq!(
        clock.read_with(|| 1_000),
        Err(AskKernel::Hypervisor(PageFault::HvZeroScale))
    );
    // Without a Hyper-V page in the window, a Hyper-V state is refused.
    let w2 = window();
    let no_hv = ClockPageWriter::new(
        &w2.clock,
        WindowLayout::CLOCK_PAGE_ONLY,
        &[],
        None,
        TscRead::LfenceRdtsc,
    )
    .unwrap();
    assert_eq!(
        no_hv.publish_with(
            &publication(PageSource::HypervPage { offset_ns: 0 }, 0),
            || 0
        ),
        Err(PublishError::HypervNotMapped)
    );
    assert_eq!(
        no_hv.publish_with(
            &publication(
                PageSource::Tsc {
                    mul: 0,
                    shift: 0,
                    add: 0
                },
                0
            ),
            || 0
        ),
        Err(PublishError::ZeroMultiplier)
    );
}

#[test]
fn ask_kernel_states_and_unknown_modes_say_why() {
    let w = window();
    let writer = writer(w);
    let clock = view(w);
    for r in [
        AskReason::NotUserReadable,
        AskReason::Suspended,
        AskReason::NoClock,
        AskReason::PerCpuOnly,
        AskReason::Other(77),
    ] {
        writer
            .publish_with(&publication(PageSource::AskKernel(r), 5), || 0)
            .unwrap();
        assert_eq!(clock.read_with(|| 0), Err(AskKernel::Page(r)));
        assert_eq!(AskReason::from_code(r.code()), r);
    }
    w.clock.seq.fetch_add(1, Relaxed);
    w.clock.mode.store(42, Relaxed);
    w.clock.seq.fetch_add(1, Relaxed);
    assert_eq!(clock.read_with(|| 0), Err(AskKernel::UnknownMode(42)));
}

#[test]
fn a_writer_stuck_mid_update_gives_busy_never_a_hang_or_a_torn_value() {
    let w = window();
    let writer = writer(w);
    let clock = view(w);
    let mul = tsc_mul(2_000_000_000, 1).unwrap();
    writer
        .publish_with(&publication(PageSource::tsc_anchored(mul, 0, 0), 0), || 0)
        .unwrap();
    // A writer that died after making the sequence odd.
    w.clock.seq.fetch_add(1, Relaxed);
    let mut samples = 0;
    assert_eq!(
        clock.read_with(|| {
            samples += 1;
            0
        }),
        Err(AskKernel::Busy)
    );
    assert_eq!(samples, 0, "an odd sequence is never read past");
    assert_eq!(
        writer.publish_with(&publication(PageSource::tsc_anchored(mul, 0, 0), 0), || 0),
        Err(PublishError::Busy)
    );
    // A sequence that changes under every sample: bounded, then Busy.
    w.clock.seq.fetch_add(1, Relaxed);
    let seq = &w.clock.seq;
    let mut n = 0;
    assert_eq!(
        clock.read_with(|| {
            n += 1;
            seq.fetch_add(2, Relaxed);
            0
        }),
        Err(AskKernel::Busy)
    );
    assert_eq!(n, clockhal_user::READ_ATTEMPTS);
}

#[test]
fn a_reader_handle_never_returns_less_than_before() {
    let w = window();
    let writer = writer(w);
    let mut reader = ClockReader::new(view(w));
    let tsc = TscRead::detect();
    assert_eq!(reader.now_or_else(|_| 500), 500);
    assert_eq!(
        reader.now_or_else(|_| 400),
        500,
        "a smaller kernel answer is raised"
    );
    let mul = tsc_mul(3_000_000_000, 1).unwrap();
    writer
        .publish(&publication(
            PageSource::tsc_anchored(mul, tsc.read(), 10),
            0,
        ))
        .unwrap();
    let a = reader.now().unwrap();
    assert!(a >= 500);
    let b = reader.now().unwrap();
    assert!(b >= a);
    // The kernel re-anchors far behind (and with floor 0): the page's
    // floor, raised to what the replaced state read, still holds.
    writer
        .publish(&publication(
            PageSource::tsc_anchored(mul, tsc.read(), 0),
            0,
        ))
        .unwrap();
    assert!(reader.now().unwrap() >= b);
    assert_eq!(reader.observe(1), reader.last());
}

#[test]
fn from_window_finds_the_hypervisor_pages_through_the_header() {
    let w = window();
    let writer = writer(w);
    w.pvclock[3].publish(0, 1_000, 1 << 31, 0, PVCLOCK_TSC_STABLE_BIT);
    w.hyperv.publish(1, 1 << 63, 0);
    // SAFETY: `w` is leaked ('static), readable, and laid out exactly as
    // LAYOUT says: clock page, pvclock page, Hyper-V page, contiguous.
    let clock = unsafe { UserClock::from_window(w as *const Window as usize) }.unwrap();
    assert_eq!((clock.pvclock_len(), clock.has_hyperv()), (4, true));
    writer
        .publish_with(
            &publication(
                PageSource::Pvclock {
                    area: 3,
                    offset_ns: 0,
                },
                0,
            ),
            || 0,
        )
        .unwrap();
    assert_eq!(clock.read_with(|| 2).unwrap().clock_ns, 1_001);
    writer
        .publish_with(
            &publication(PageSource::HypervPage { offset_ns: 0 }, 0),
            || 0,
        )
        .unwrap();
    // 40 ticks = 20 units = 2 us; the floor (pvclock at the switch) is 1 us.
    assert_eq!(clock.read_with(|| 40).unwrap().clock_ns, 2_000);
    assert_eq!(clock.read_with(|| 0).unwrap().clock_ns, 1_000);
    // SAFETY: a misaligned address is refused before anything is read.
    let misaligned = unsafe { UserClock::from_window(w as *const Window as usize + 8) };
    assert_eq!(misaligned.unwrap_err(), PageError::Misaligned);
}

/// A page held open ([`ClockPageWriter::begin`]) sends readers to the
/// kernel (bounded: `Busy`), covers what they read of the replaced state,
/// refuses a second writer, and closes however the update ends.
#[test]
fn an_open_update_sends_readers_to_the_kernel_and_always_closes() {
    let w = window();
    let writer = writer(w);
    let clock = view(w);
    let mul = tsc_mul(2_000_000_000, 1).unwrap(); // 0.5 ns per tick
    let p0 = writer
        .publish_with(&publication(PageSource::tsc_anchored(mul, 0, 0), 0), || 0)
        .unwrap();
    assert_eq!(clock.read_with(|| 2_000).unwrap().clock_ns, 1_000);

    // Opened at TSC 4_000 (2_000 ns): the floor covers it.
    let u = writer.begin_with(500, || 4_000).unwrap();
    assert_eq!(u.floor_ns(), 2_000);
    assert_eq!(clock.read_with(|| 6_000), Err(AskKernel::Busy));
    assert_eq!(writer.begin_with(0, || 0).err(), Some(PublishError::Busy));
    assert_eq!(
        writer
            .publish_with(&publication(PageSource::tsc_anchored(mul, 0, 0), 0), || 0)
            .err(),
        Some(PublishError::Busy)
    );
    // Dropped: the old state again, under the raised floor.
    drop(u);
    let r = clock.read_with(|| 2_000).unwrap();
    assert_eq!((r.clock_ns, r.seq), (2_000, p0.seq.wrapping_add(2)));
    assert_eq!(clock.read_with(|| 10_000).unwrap().clock_ns, 5_000);

    // Cancelled: the same.
    let c = writer.begin_with(0, || 12_000).unwrap().cancel();
    assert_eq!(c.floor_ns, 6_000);
    assert_eq!(clock.read_with(|| 0).unwrap().clock_ns, 6_000);

    // Published: the new state, floor max(opened, requested); the replaced
    // state is not read again at the close.
    let u = writer.begin_with(0, || 16_000).unwrap(); // old state: 8_000
    let p = u
        .publish(&publication(
            PageSource::tsc_anchored(mul, 100_000, 1_000),
            7_000,
        ))
        .unwrap();
    assert_eq!(p.floor_ns, 8_000);
    assert_eq!(p.seq & 1, 0);
    assert_eq!(clock.read_with(|| 100_000).unwrap().clock_ns, 8_000);
    assert_eq!(clock.read_with(|| 120_000).unwrap().clock_ns, 11_000);

    // An invalid state published into an open update: "ask the kernel",
    // and the page is closed.
    let u = writer.begin_after_restore(0).unwrap();
    assert_eq!(u.floor_ns(), 8_000);
    assert_eq!(
        u.publish(&publication(
            PageSource::Tsc {
                mul: 0,
                shift: 0,
                add: 0
            },
            0
        )),
        Err(PublishError::ZeroMultiplier)
    );
    assert_eq!(
        clock.read_with(|| 0),
        Err(AskKernel::Page(AskReason::Misconfigured))
    );
    assert_eq!(w.clock.seq.load(Relaxed) & 1, 0);
}
