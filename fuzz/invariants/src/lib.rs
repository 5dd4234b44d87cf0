//! # clockhal-invariants
//!
//! One check per untrusted input or lock-free part of clockhal. Each takes
//! arbitrary bytes, decodes a case from them with [`arbitrary`], runs the
//! real code and **asserts the invariants it must keep** (panicking on a
//! violation) — not only that it does not panic:
//!
//! | target | code under test | invariants |
//! |---|---|---|
//! | [`acpi`] | `acpi::discover`, `acpi::find_table` over arbitrary memory | bounded reads; every table reported has its signature, length and a zero checksum and is listed by the root table; results decode the table's bytes |
//! | [`pvclock`] | `pvclock_scale_delta`, `pvclock_tsc_hz_ratio`, `read_area`, `area_tsc_frequency` | exact against a big-integer reference; a reading comes from one consistent area state; bounded retries |
//! | [`hyperv`] | `hv_scale_tsc`, `hv_reference_scale`, `hv_tsc_hz_from_scale`, `read_reference_page` | exact against a big-integer reference; never a zero scale; a reading comes from one consistent page state; bounded retries |
//! | [`frequency`] | `Frequency::from_ratio`, `Scale` | range exact; stored rate within 2^-64; conversions floor or one below, monotonic |
//! | [`wrap_extender`] | `WrapExtender` (both cells) | equals the true counter under the read-interval rule; never backwards otherwise |
//! | [`monotonic_clamp`] | `MonotonicClamp` (both cells) | running maximum since reset |
//! | [`cpuid`] | CPUID decoders, `Tsc::probe` over an arbitrary CPUID table | results match a model of the table; never a leaf above a range's maximum; rates in range or rejected |
//!
//! The libFuzzer targets in `fuzz/` call these; on stable, `tests/stream.rs`
//! feeds them a fixed pseudo-random stream and replays the committed corpus.

pub mod acpi;
mod big;
pub mod cpuid;
pub mod frequency;
pub mod hyperv;
pub mod monotonic_clamp;
pub mod pvclock;
mod script;
pub mod wrap_extender;

/// One invariant check: panics when `data` makes the code break one.
pub type Check = fn(data: &[u8]);

/// Every check by target name (the fuzz target and corpus directory names).
pub const TARGETS: &[(&str, Check)] = &[
    ("acpi", acpi::check),
    ("pvclock", pvclock::check),
    ("hyperv", hyperv::check),
    ("frequency", frequency::check),
    ("wrap_extender", wrap_extender::check),
    ("monotonic_clamp", monotonic_clamp::check),
    ("cpuid", cpuid::check),
];

/// Decodes a case; `None` when the bytes run out (not a failure).
fn decode<'a, T: arbitrary::Arbitrary<'a>>(data: &'a [u8]) -> Option<T> {
    T::arbitrary_take_rest(arbitrary::Unstructured::new(data)).ok()
}
