//! libFuzzer target: `clockhal_invariants::frequency` (see its docs for the
//! invariants checked).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| clockhal_invariants::frequency::check(data));
