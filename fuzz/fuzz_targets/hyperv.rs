//! libFuzzer target: `clockhal_invariants::hyperv` (see its docs for the
//! invariants checked).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| clockhal_invariants::hyperv::check(data));
