//! libFuzzer target: `clockhal_invariants::monotonic_clamp` (see its docs for the
//! invariants checked).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| clockhal_invariants::monotonic_clamp::check(data));
