//! libFuzzer target: `clockhal_invariants::cpuid` (see its docs for the
//! invariants checked).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| clockhal_invariants::cpuid::check(data));
