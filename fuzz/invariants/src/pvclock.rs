//! The pvclock ABI arithmetic and the seqlock read of an area.
//!
//! - `pvclock_scale_delta` equals the exact `((delta >> -shift or <<
//!   shift) * mul) >> 32`, saturated, for every input.
//! - `pvclock_tsc_hz_ratio` is `None` exactly for `mul == 0` or `|shift| >
//!   32`, else exactly `10^9 * 2^32 / (mul * 2^shift)` with both parts below
//!   2^95; `pvclock_time_scale` (the host side, Linux's
//!   `kvm_get_time_scale`) round-trips a rate to within 2^-29 with a
//!   32-bit-significant `mul` (truncating the pre-shifted rate to ~30 bits
//!   costs up to 10^-9, truncating `mul` up to 2^-31).
//! - `read_area`, with the host publishing new contents or bumping the
//!   version *inside* the reader's window: a reading is
//!   `system_time + scale(tsc - tsc_timestamp)` (a TSC behind the timestamp
//!   counts as 0, the sum saturates) of one area state the host actually
//!   published, at an even version, with a TSC the reader took; an error
//!   names a state that had it; `Busy` only when the version was odd or
//!   moving; at most `MAX_READ_ATTEMPTS` TSC reads.
//! - `area_tsc_frequency` agrees with the ratio and `Frequency::from_ratio`.

use crate::big::{big, saturate, within_rel};
use crate::script::{self, Step};
use arbitrary::Arbitrary;
use clockhal_core::Frequency;
use clockhal_kvmclock::{area_tsc_frequency, read_area, PvclockError, MAX_READ_ATTEMPTS};
use clockhal_x86::paravirt::{
    pvclock_scale_delta, pvclock_time_scale, pvclock_tsc_hz_ratio, PvclockVcpuTimeInfo,
};
use num_bigint::BigUint;
use std::sync::atomic::Ordering::Relaxed;
use std::vec::Vec;

/// What an area holds.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
struct Area {
    version: u32,
    tsc_timestamp: u64,
    system_time: u64,
    mul: u32,
    shift: i8,
    flags: u8,
}

/// A host write inside the reader's window.
#[derive(Arbitrary, Debug)]
enum Write {
    /// `PvclockVcpuTimeInfo::publish` (version odd, fields, version even).
    Publish {
        tsc_timestamp: u64,
        system_time: u64,
        mul: u32,
        shift: i8,
        flags: u8,
    },
    /// Only the version changes (a stuck-odd or hostile host).
    Version(u32),
}

#[derive(Arbitrary, Debug)]
struct Case {
    delta: u64,
    mul: u32,
    shift: i8,
    host_hz: u64,
    area: Area,
    steps: Vec<Step<Write>>,
}

/// Runs the check on `data`.
pub fn check(data: &[u8]) {
    let Some(case) = crate::decode::<Case>(data) else {
        return;
    };
    assert_eq!(
        pvclock_scale_delta(case.delta, case.mul, case.shift),
        reference_scale(case.delta, case.mul, case.shift),
        "pvclock_scale_delta({}, {}, {})",
        case.delta,
        case.mul,
        case.shift
    );
    check_ratio(case.mul, case.shift);
    check_host_scale(case.host_hz);
    check_read(&case.area, &case.steps);
}

/// The exact scaled delta, saturated.
fn reference_scale(delta: u64, mul: u32, shift: i8) -> u64 {
    let d = if shift < 0 {
        big(delta) >> (-(shift as i32)) as u32
    } else {
        big(delta) << shift as u32
    };
    saturate(&((d * mul) >> 32u32))
}

/// `10^9 * 2^32` and `mul * 2^shift` as big integers scaled to integers.
fn exact_rate(mul: u32, shift: i8) -> (BigUint, BigUint) {
    let num = big(1_000_000_000u64) << 32u32;
    if shift >= 0 {
        (num, big(mul) << shift as u32)
    } else {
        (num << (-(shift as i32)) as u32, big(mul))
    }
}

fn check_ratio(mul: u32, shift: i8) {
    let r = pvclock_tsc_hz_ratio(mul, shift);
    if mul == 0 || !(-32..=32).contains(&shift) {
        assert_eq!(r, None, "mul={mul} shift={shift}");
        return;
    }
    let (n, d) = r.unwrap_or_else(|| panic!("mul={mul} shift={shift} rejected"));
    assert!(n < 1 << 95 && d < 1 << 95, "{n}/{d} too wide");
    let (en, ed) = exact_rate(mul, shift);
    assert_eq!(
        big(n) * &ed,
        en * big(d),
        "mul={mul} shift={shift}: {n}/{d}"
    );
}

fn check_host_scale(hz: u64) {
    // Refused: 0 Hz, and rates whose shift would pass -32 (the delta
    // shifted right 33 times still above 2e9: beyond ~8.6e18 Hz).
    let beyond = hz >> 32 > 2_000_000_000;
    let Some((mul, shift)) = pvclock_time_scale(hz) else {
        assert!(hz == 0 || beyond, "pvclock_time_scale({hz}) refused");
        return;
    };
    assert!(
        !beyond && (-32..=32).contains(&shift),
        "{hz} Hz: shift {shift}"
    );
    assert!(mul >= 1 << 31, "{hz} Hz: mul {mul} lost precision");
    let (n, d) = exact_rate(mul, shift);
    assert!(
        within_rel(&n, &d, &big(hz), &big(1u32), 29),
        "{hz} Hz encoded as mul={mul} shift={shift}"
    );
}

fn store(area: &PvclockVcpuTimeInfo, a: &Area) {
    area.version.store(a.version, Relaxed);
    area.tsc_timestamp.store(a.tsc_timestamp, Relaxed);
    area.system_time.store(a.system_time, Relaxed);
    area.tsc_to_system_mul.store(a.mul, Relaxed);
    area.tsc_shift.store(a.shift, Relaxed);
    area.flags.store(a.flags, Relaxed);
}

fn load(area: &PvclockVcpuTimeInfo) -> Area {
    Area {
        version: area.version.load(Relaxed),
        tsc_timestamp: area.tsc_timestamp.load(Relaxed),
        system_time: area.system_time.load(Relaxed),
        mul: area.tsc_to_system_mul.load(Relaxed),
        shift: area.tsc_shift.load(Relaxed),
        flags: area.flags.load(Relaxed),
    }
}

fn usable(a: &Area) -> bool {
    a.mul != 0 && (-32..=32).contains(&a.shift)
}

/// What a reader must see in a settled area `a`.
fn expected_error(a: &Area) -> Option<PvclockError> {
    if a.version & 1 != 0 {
        Some(PvclockError::Busy)
    } else if a.mul == 0 {
        Some(PvclockError::NotWritten)
    } else if !usable(a) {
        Some(PvclockError::ShiftOutOfRange(a.shift))
    } else {
        None
    }
}

fn check_read(initial: &Area, steps: &[Step<Write>]) {
    let area = PvclockVcpuTimeInfo::new();
    store(&area, initial);
    let mut history = std::vec![*initial];
    let trace = script::run(
        steps,
        |w| {
            match *w {
                Write::Publish {
                    tsc_timestamp,
                    system_time,
                    mul,
                    shift,
                    flags,
                } => area.publish(tsc_timestamp, system_time, mul, shift, flags),
                Write::Version(v) => area.version.store(v, Relaxed),
            }
            history.push(load(&area));
        },
        |rdtsc| read_area(&area, rdtsc),
    );
    assert!(
        trace.tscs.len() <= MAX_READ_ATTEMPTS as usize,
        "{} TSC reads",
        trace.tscs.len()
    );
    let settled = history.iter().filter(|a| a.version & 1 == 0);
    match trace.result {
        Ok(t) => {
            assert!(trace.tscs.contains(&t.tsc), "TSC {} never read", t.tsc);
            let from = settled
                .filter(|a| a.version == t.version && a.flags == t.flags && usable(a))
                .find(|a| {
                    let delta = t.tsc.saturating_sub(a.tsc_timestamp);
                    t.ns == a
                        .system_time
                        .saturating_add(reference_scale(delta, a.mul, a.shift))
                });
            assert!(from.is_some(), "{t:?} from no published state: {history:?}");
        }
        Err(PvclockError::Busy) => {
            assert!(
                trace.writes > 0 || initial.version & 1 != 0,
                "Busy on a settled area {initial:?}"
            );
        }
        Err(e) => {
            assert!(
                settled.clone().any(|a| expected_error(a) == Some(e)),
                "{e:?} from no published state: {history:?}"
            );
        }
    }
    if trace.writes == 0 {
        if let Some(e) = expected_error(initial) {
            assert_eq!(trace.result.err(), Some(e), "{initial:?}");
        }
    }
    // The rate of the final (now unchanging) state.
    let last = load(&area);
    let rate = area_tsc_frequency(&area);
    match expected_error(&last) {
        Some(e) => assert_eq!(rate, Err(e), "{last:?}"),
        None => {
            let (n, d) = pvclock_tsc_hz_ratio(last.mul, last.shift).unwrap();
            let want = Frequency::from_ratio(n, d).map_err(|_| PvclockError::FrequencyOutOfRange);
            assert_eq!(rate, want, "{last:?}");
        }
    }
}
