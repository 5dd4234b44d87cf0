//! The Hyper-V reference TSC page arithmetic and its seqlock read.
//!
//! - `hv_scale_tsc` equals `((tsc * scale) >> 64) + offset` modulo 2^64.
//! - `hv_reference_scale` (the host side) is `None` exactly below 10 MHz,
//!   never `Some(0)`, and counts one second of ticks as 10^7 units or one
//!   below; `hv_tsc_hz_from_scale` is `None` exactly for 0 and otherwise
//!   the exact `10^7 * 2^64 / scale`.
//! - `hv_sequence_valid` rejects exactly 0 and `0xFFFFFFFF`;
//!   `hv_next_sequence` always gives a valid sequence other than its input.
//! - `read_reference_page`, with the host publishing new contents or
//!   changing the sequence *inside* the reader's window: a reading is the
//!   formula over one page state the host actually published (valid
//!   sequence, non-zero scale) and a TSC the reader took; `Invalid` and
//!   `ZeroScale` name a state that had them; `Busy` only when the sequence
//!   moved; at most `MAX_READ_ATTEMPTS` TSC reads.

use crate::big::{big, low64};
use crate::script::{self, Step};
use arbitrary::Arbitrary;
use clockhal_hyperv::{read_reference_page, PageError, MAX_READ_ATTEMPTS};
use clockhal_x86::paravirt::{
    hv_next_sequence, hv_reference_scale, hv_scale_tsc, hv_sequence_valid, hv_tsc_hz_from_scale,
    HvReferenceTscPage, HV_REFERENCE_HZ,
};
use std::sync::atomic::Ordering::Relaxed;
use std::vec::Vec;

#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
struct Page {
    sequence: u32,
    scale: u64,
    offset: i64,
}

/// A host write inside the reader's window.
#[derive(Arbitrary, Debug)]
enum Write {
    /// `HvReferenceTscPage::publish` (sequence 0, fields, sequence).
    Publish(Page),
    /// Only the sequence changes.
    Sequence(u32),
}

#[derive(Arbitrary, Debug)]
struct Case {
    tsc: u64,
    scale: u64,
    offset: i64,
    host_hz: u64,
    page: Page,
    steps: Vec<Step<Write>>,
}

/// Runs the check on `data`.
pub fn check(data: &[u8]) {
    let Some(case) = crate::decode::<Case>(data) else {
        return;
    };
    let exact =
        low64(&((big(case.tsc) * big(case.scale)) >> 64u32)).wrapping_add(case.offset as u64);
    assert_eq!(hv_scale_tsc(case.tsc, case.scale, case.offset), exact);
    let seq = case.page.sequence;
    assert_eq!(hv_sequence_valid(seq), seq != 0 && seq != u32::MAX);
    let next = hv_next_sequence(seq);
    assert!(hv_sequence_valid(next) && next != seq, "{seq} -> {next}");
    match hv_tsc_hz_from_scale(case.scale) {
        None => assert_eq!(case.scale, 0),
        Some((n, d)) => assert_eq!(
            (n, d),
            ((HV_REFERENCE_HZ as u128) << 64, case.scale as u128)
        ),
    }
    check_host_scale(case.host_hz);
    check_read(&case.page, &case.steps);
}

fn check_host_scale(hz: u64) {
    let Some(scale) = hv_reference_scale(hz) else {
        assert!(hz < HV_REFERENCE_HZ, "{hz} Hz refused");
        return;
    };
    assert!(hz >= HV_REFERENCE_HZ, "{hz} Hz accepted");
    assert_ne!(scale, 0, "{hz} Hz: zero scale marks the page unusable");
    let exact = ((HV_REFERENCE_HZ as u128) << 64) / hz as u128;
    assert_eq!(scale as u128, exact.min(u64::MAX as u128), "{hz} Hz");
    let second = hv_scale_tsc(hz, scale, 0);
    assert!(
        second == HV_REFERENCE_HZ || second + 1 == HV_REFERENCE_HZ,
        "{hz} Hz: one second is {second} units"
    );
}

fn store(page: &HvReferenceTscPage, p: &Page) {
    page.sequence.store(p.sequence, Relaxed);
    page.scale.store(p.scale, Relaxed);
    page.offset.store(p.offset, Relaxed);
}

fn load(page: &HvReferenceTscPage) -> Page {
    Page {
        sequence: page.sequence.load(Relaxed),
        scale: page.scale.load(Relaxed),
        offset: page.offset.load(Relaxed),
    }
}

/// What a reader must see in a page that does not change.
fn expected_error(p: &Page) -> Option<PageError> {
    if !hv_sequence_valid(p.sequence) {
        Some(PageError::Invalid)
    } else if p.scale == 0 {
        Some(PageError::ZeroScale)
    } else {
        None
    }
}

fn check_read(initial: &Page, steps: &[Step<Write>]) {
    let page = HvReferenceTscPage::new();
    store(&page, initial);
    let mut history = std::vec![*initial];
    let trace = script::run(
        steps,
        |w| {
            match *w {
                Write::Publish(p) => page.publish(p.sequence, p.scale, p.offset),
                Write::Sequence(s) => page.sequence.store(s, Relaxed),
            }
            history.push(load(&page));
        },
        |rdtsc| read_reference_page(&page, rdtsc),
    );
    assert!(
        trace.tscs.len() <= MAX_READ_ATTEMPTS as usize,
        "{} TSC reads",
        trace.tscs.len()
    );
    match trace.result {
        Ok(v) => {
            let from = history
                .iter()
                .filter(|p| expected_error(p).is_none())
                .any(|p| {
                    trace
                        .tscs
                        .iter()
                        .any(|&t| hv_scale_tsc(t, p.scale, p.offset) == v)
                });
            assert!(from, "{v} from no published state: {history:?}");
        }
        Err(PageError::Busy) => {
            assert!(trace.writes > 0, "Busy on a page that did not change");
            assert_eq!(trace.tscs.len(), MAX_READ_ATTEMPTS as usize);
        }
        Err(e) => {
            assert!(
                history.iter().any(|p| expected_error(p) == Some(e)),
                "{e:?} from no published state: {history:?}"
            );
        }
    }
    if trace.writes == 0 {
        assert_eq!(trace.result.err(), expected_error(initial), "{initial:?}");
    }
}
