//! loom model of the Hyper-V reference page seqlock: the real reader
//! (`read_reference_page`, i.e. `try_read`) against the real host writer
//! (`HvReferenceTscPage::publish`), `--cfg loom`. A reading must come from
//! one published state, never a mix. With `--cfg clockhal_loom_mutant` the
//! reader's acquire fence is gone and the model must find a torn read.
//! `./scripts/deep-checks.sh loom`. Empty without `cfg(loom)`.
#![cfg(loom)]

use clockhal_hyperv::{read_reference_page, PageError};
use clockhal_x86::paravirt::HvReferenceTscPage;
use loom::sync::Arc;
use loom::thread;

fn model() {
    loom::model(|| {
        // A 4 KiB page of loom atomics needs more than loom's default stack.
        let big = loom::thread::Builder::new().stack_size(1 << 22);
        big.spawn(body).unwrap().join().unwrap();
    });
}

fn body() {
    let page = Arc::new(HvReferenceTscPage::new());
    page.publish(1, 1 << 63, 100); // TSC 1000 -> 600
    let host = {
        let page = page.clone();
        thread::spawn(move || page.publish(2, 1 << 62, -50)) // -> 200
    };
    match read_reference_page(&page, || 1_000) {
        Ok(v) => assert!(v == 600 || v == 200, "torn: {v}"),
        // The host's sequence-0 window, or a sequence moving under us.
        Err(e) => assert!(e == PageError::Invalid || e == PageError::Busy, "{e:?}"),
    }
    host.join().unwrap();
}

#[test]
#[cfg(not(clockhal_loom_mutant))]
fn reader_sees_one_published_state() {
    model();
}

#[test]
#[cfg(clockhal_loom_mutant)]
#[should_panic(expected = "torn")]
fn mutant_reader_without_fence_tears() {
    model();
}
