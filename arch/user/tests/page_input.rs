//! The page as untrusted input: window indices at the top of `u32`, frames
//! that held anything before the writer took them (an odd sequence left by
//! a crash mid-update, a previous boot's floor, garbage), and updates that
//! will never close. Run in debug and in `--release` (wrapping arithmetic
//! would pass silently there).

use clockhal_user::abi::{ClockPage, WindowLayout, MAGIC, MODE_TSC, V1_SIZE, VERSION};
use clockhal_user::{
    tsc_mul, AskKernel, AskReason, ClockPageWriter, PageError, PageSource, Publication,
    PublishError, TscRead, UserClock,
};
use clockhal_x86::paravirt::PvclockVcpuTimeInfo;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU64};

fn page() -> &'static ClockPage {
    Box::leak(Box::new(ClockPage::new()))
}

fn tsc_state(tsc: u64, ns: u64) -> PageSource {
    PageSource::tsc_anchored(tsc_mul(2_000_000_000, 1).unwrap(), tsc, ns)
}

fn publication(source: PageSource, floor_ns: u64) -> Publication {
    Publication {
        source,
        floor_ns,
        boot_wall_ns: None,
    }
}

/// Every layout whose highest index is at the top of `u32` (where
/// "highest + 1" overflows) or past the window limit.
fn oversized_layouts() -> Vec<WindowLayout> {
    let mut v = Vec::new();
    for big in [u32::MAX, u32::MAX - 1, 1 << 31, 64, 65] {
        v.push(WindowLayout {
            pvclock_page: big,
            pvclock_areas: 1,
            hyperv_page: 0,
        });
        v.push(WindowLayout {
            pvclock_page: 0,
            pvclock_areas: 0,
            hyperv_page: big,
        });
        v.push(WindowLayout {
            pvclock_page: 1,
            pvclock_areas: 1,
            hyperv_page: big,
        });
    }
    v
}

#[test]
fn window_indices_at_the_top_of_u32_are_refused_not_wrapped() {
    let max = WindowLayout {
        pvclock_page: u32::MAX,
        pvclock_areas: 0,
        hyperv_page: 0,
    };
    assert_eq!(max.pages(), None, "u32::MAX + 1 pages");
    let last_ok = WindowLayout {
        pvclock_page: 63,
        pvclock_areas: 1,
        hyperv_page: 0,
    };
    assert_eq!(last_ok.pages(), Some(64));
    assert!(last_ok.is_valid());
    for bad in oversized_layouts() {
        assert!(!bad.is_valid(), "{bad:?}");
        let p = page();
        let areas = [const { PvclockVcpuTimeInfo::new() }; 1];
        assert_eq!(
            ClockPageWriter::new(
                p,
                bad,
                &areas[..bad.pvclock_areas as usize],
                None,
                TscRead::LfenceRdtsc
            )
            .unwrap_err(),
            PageError::BadWindow,
            "{bad:?}"
        );
    }
}

/// A header written by someone else (a hostile or broken kernel, a
/// corrupted frame): the reader checks it, in every constructor.
fn forge_header(p: &ClockPage, layout: WindowLayout, window_pages: u32) {
    p.version.store(VERSION, Relaxed);
    p.size.store(V1_SIZE, Relaxed);
    p.tsc_read.store(0, Relaxed);
    p.window_pages.store(window_pages, Relaxed);
    p.pvclock_page.store(layout.pvclock_page, Relaxed);
    p.pvclock_areas.store(layout.pvclock_areas, Relaxed);
    p.hyperv_page.store(layout.hyperv_page, Relaxed);
    p.magic.store(MAGIC, SeqCst);
}

#[test]
fn forged_headers_with_huge_indices_are_refused_by_the_reader() {
    for bad in oversized_layouts() {
        for window_pages in [0, 1, 64, u32::MAX] {
            let p = page();
            forge_header(p, bad, window_pages);
            let areas = [const { PvclockVcpuTimeInfo::new() }; 1];
            let hv = clockhal_x86::paravirt::HvReferenceTscPage::new();
            let hyperv = (bad.hyperv_page != 0).then_some(&hv);
            assert_eq!(
                UserClock::new(p, &areas[..bad.pvclock_areas as usize], hyperv).unwrap_err(),
                PageError::BadWindow,
                "{bad:?} window_pages {window_pages}"
            );
            // The raw-address constructor refuses it before touching any
            // page the header names (none of them is mapped here).
            // SAFETY: `p` is a leaked, page-aligned clock page; the header
            // is refused before any other page is formed.
            let from_window = unsafe { UserClock::from_window(p as *const ClockPage as usize) };
            assert_eq!(from_window.unwrap_err(), PageError::BadWindow, "{bad:?}");
        }
    }
}

#[test]
fn a_frame_left_odd_by_a_crash_mid_update_is_taken_back() {
    for seq in [1, 7, u32::MAX, u32::MAX - 2] {
        let p = page();
        p.seq.store(seq, Relaxed);
        let writer = ClockPageWriter::new(
            p,
            WindowLayout::CLOCK_PAGE_ONLY,
            &[],
            None,
            TscRead::LfenceRdtsc,
        )
        .unwrap();
        let clock = UserClock::new(p, &[], None).unwrap();
        assert_eq!(clock.now(), Err(AskKernel::Page(AskReason::NotPublished)));
        let published = writer
            .publish_with(&publication(tsc_state(1_000, 5_000), 5_000), || 1_000)
            .expect("the writer owns its page");
        assert_eq!(published.seq & 1, 0);
        assert_eq!(
            clock.read_with(|| 3_000).unwrap().clock_ns,
            6_000,
            "seq {seq:#x}"
        );
    }
}

#[test]
fn an_update_that_never_closes_can_be_reclaimed() {
    let p = page();
    let writer = ClockPageWriter::new(
        p,
        WindowLayout::CLOCK_PAGE_ONLY,
        &[],
        None,
        TscRead::LfenceRdtsc,
    )
    .unwrap();
    writer
        .publish_with(&publication(tsc_state(0, 0), 0), || 0)
        .unwrap();
    // A kernel path leaks its update: the page stays odd.
    std::mem::forget(writer.begin_with(0, || 10_000).unwrap());
    assert_eq!(
        writer.publish_with(&publication(tsc_state(0, 0), 0), || 0),
        Err(PublishError::Busy)
    );
    let clock = UserClock::new(p, &[], None).unwrap();
    assert_eq!(clock.read_with(|| 10_000), Err(AskKernel::Busy));
    // The kernel (its publications serialised) takes it back.
    let update = writer.reclaim_with(7_000, || 12_000);
    assert_eq!(update.floor_ns(), 7_000, "the odd state is not read");
    update
        .publish(&publication(tsc_state(12_000, 7_000), 7_000))
        .unwrap();
    assert_eq!(clock.read_with(|| 14_000).unwrap().clock_ns, 8_000);
    // On an even page, reclaiming is an ordinary update: it covers every
    // reading of the state it replaces.
    let update = writer.reclaim_with(0, || 20_000);
    assert_eq!(update.floor_ns(), 11_000);
    drop(update);
    assert_eq!(clock.read_with(|| 20_000).unwrap().clock_ns, 11_000);
}

/// What a frame may hold before a writer takes it: a previous boot's floor
/// far ahead, a TSC mapping far ahead, an odd or even sequence.
fn garbage(p: &ClockPage, seq: u32, fill: u64) {
    p.seq.store(seq, Relaxed);
    p.mode.store(MODE_TSC, Relaxed);
    p.arg.store(fill as u32, Relaxed);
    p.floor_ns.store(fill, Relaxed);
    p.tsc_mul.store(fill, Relaxed);
    p.tsc_add_lo.store(fill, Relaxed);
    p.tsc_add_hi.store(fill >> 1, Relaxed);
    p.pv_offset_ns.store(fill, Relaxed);
    p.boot_wall_ns.store(fill, Relaxed);
    p.flags.store(u32::MAX, Relaxed);
    for r in &p.reserved {
        r.store(fill, Relaxed);
    }
}

#[test]
fn nothing_of_a_garbage_frame_puts_user_time_ahead_of_the_kernel() {
    for seq in [0, 1, 2, 0x8000_0001, u32::MAX] {
        for fill in [u64::MAX, u64::MAX / 3, 1 << 62, 0x0123_4567_89ab_cdef] {
            let p = page();
            garbage(p, seq, fill);
            let writer = ClockPageWriter::new(
                p,
                WindowLayout::CLOCK_PAGE_ONLY,
                &[],
                None,
                TscRead::LfenceRdtsc,
            )
            .unwrap();
            let clock = UserClock::new(p, &[], None).unwrap();
            assert_eq!(clock.now(), Err(AskKernel::Page(AskReason::NotPublished)));
            assert!(p.reserved.iter().all(|r| r.load(Relaxed) == 0));
            // The kernel's clock reads 1 ms at TSC 2,000,000 (2 GHz).
            let kernel = |tsc: u64| 1_000_000 + (tsc - 2_000_000) / 2;
            let published = writer
                .publish_with(
                    &publication(tsc_state(2_000_000, kernel(2_000_000)), 1_000_000),
                    || 2_000_000,
                )
                .unwrap();
            assert_eq!(published.floor_ns, 1_000_000, "seq {seq:#x} fill {fill:#x}");
            for tsc in [2_000_000, 2_000_001, 3_000_000, 1 << 40] {
                let r = clock.read_with(|| tsc).unwrap();
                assert!(
                    r.clock_ns <= kernel(tsc),
                    "seq {seq:#x} fill {fill:#x}: user {} ahead of kernel {}",
                    r.clock_ns,
                    kernel(tsc)
                );
                assert_eq!(r.unix_ns, None, "no wall clock was published");
            }
        }
    }
}

/// Readers spinning on a frame while the writer takes it back (from an odd
/// garbage state and from a leaked update) and publishes: every reading is
/// one of the published states, never a mix with the garbage.
#[test]
fn readers_never_see_a_torn_value_while_the_page_is_taken_back() {
    const GARBAGE: u64 = 0xdead_beef_dead_beef;
    let p = page();
    garbage(p, 0x11, GARBAGE);
    // Publication k maps every TSC to k ms exactly (mul 1: the product never
    // reaches the high half), with floor k ms.
    let state = |k: u64| PageSource::Tsc {
        mul: 1,
        shift: 0,
        add: ((k * 1_000_000) as u128) << 64,
    };
    let stop = AtomicBool::new(false);
    let last = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                let mut reads = 0u64;
                while !stop.load(Relaxed) {
                    // The header may not be written yet: a reader that sees
                    // none asks the kernel.
                    let Ok(clock) = UserClock::new(p, &[], None) else {
                        continue;
                    };
                    let Ok(r) = clock.read_with(|| 5) else {
                        continue;
                    };
                    let k = r.clock_ns / 1_000_000;
                    assert_eq!(r.clock_ns % 1_000_000, 0, "torn: {r:?}");
                    assert!(k >= 1 && k <= last.load(SeqCst), "torn or ahead: {r:?}");
                    assert_eq!(r.unix_ns, None, "torn wall clock: {r:?}");
                    reads += 1;
                }
                reads
            });
        }
        // However the writer's side ends (a failed assertion too), the
        // readers stop.
        struct Stop<'a>(&'a AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Relaxed);
            }
        }
        let _stop = Stop(&stop);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let writer = ClockPageWriter::new(
            p,
            WindowLayout::CLOCK_PAGE_ONLY,
            &[],
            None,
            TscRead::LfenceRdtsc,
        )
        .unwrap();
        for k in 1..=2_000u64 {
            last.store(k, SeqCst);
            let pub_k = publication(state(k), k * 1_000_000);
            if k % 3 == 0 {
                // A leaked update, then the kernel takes the page back.
                std::mem::forget(writer.begin_with(0, || 5).unwrap());
                garbage_fields_mid_update(p, GARBAGE);
                writer
                    .reclaim_with(k * 1_000_000, || 5)
                    .publish(&pub_k)
                    .unwrap();
            } else {
                writer.publish_with(&pub_k, || 5).unwrap();
            }
        }
    });
}

/// A writer that died mid-update left half its fields written.
fn garbage_fields_mid_update(p: &ClockPage, fill: u64) {
    p.tsc_add_hi.store(fill, Relaxed);
    p.floor_ns.store(fill, Relaxed);
}
