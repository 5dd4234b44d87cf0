//! Unix time from times an OS builds itself (the fields are public): any
//! values, never a panic, and the documented saturation at 0.

use clockhal_rtc::{Century, RtcEdge, RtcFormat, RtcTime};

fn time(year: u16, month: u8, day: u8, hour: u8) -> RtcTime {
    RtcTime {
        year,
        month,
        day,
        hour,
        minute: 0,
        second: 0,
        century: Century::Pivot,
        format: RtcFormat {
            binary: false,
            hour24: true,
        },
    }
}

#[test]
fn times_before_1970_saturate_at_0() {
    assert_eq!(time(1969, 12, 31, 23).unix_seconds(), 0);
    assert_eq!(time(0, 1, 1, 0).unix_seconds(), 0);
    assert_eq!(time(1970, 1, 1, 0).unix_seconds(), 0);
    assert_eq!(time(1970, 1, 1, 1).unix_seconds(), 3_600);
    let edge = RtcEdge {
        time: time(1969, 12, 31, 0),
        at_ns: 1_000,
        uncertainty_ns: 0,
    };
    assert_eq!(edge.unix_ns_at(0), 0);
    assert_eq!(edge.unix_ns_at(u64::MAX), u64::MAX - 1_000);
}

#[test]
fn out_of_range_fields_count_on_and_never_panic() {
    // Day 0 is the last day of the month before.
    assert_eq!(
        time(2026, 3, 0, 0).unix_seconds(),
        time(2026, 2, 28, 0).unix_seconds()
    );
    // Month 13 is the next January; hour 24 the next day.
    assert_eq!(
        time(2026, 13, 1, 0).unix_seconds(),
        time(2027, 1, 1, 0).unix_seconds()
    );
    assert_eq!(
        time(2026, 5, 1, 24).unix_seconds(),
        time(2026, 5, 2, 0).unix_seconds()
    );
    for (y, m, d, h) in [
        (0, 0, 0, 0),
        (u16::MAX, u8::MAX, u8::MAX, u8::MAX),
        (1970, 0, 0, 0),
    ] {
        let t = time(y, m, d, h);
        let _ = t.unix_seconds();
        let edge = RtcEdge {
            time: t,
            at_ns: u64::MAX,
            uncertainty_ns: u64::MAX,
        };
        let _ = edge.unix_ns_at(0);
        let _ = edge.unix_ns_at(u64::MAX);
    }
}
