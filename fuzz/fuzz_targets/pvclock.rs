//! libFuzzer target: `clockhal_invariants::pvclock` (see its docs for the
//! invariants checked).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| clockhal_invariants::pvclock::check(data));
