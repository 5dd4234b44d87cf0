//! Pages written once from user space with the arch crate's host-side
//! helpers (what the bench rows do) decode through the backends' own read
//! paths.

use clockhal_x86::paravirt::{
    hv_next_sequence, hv_reference_scale, pvclock_time_scale, HvReferenceTscPage,
    PvclockVcpuTimeInfo,
};
use std::sync::atomic::Ordering::Relaxed;

#[test]
fn written_pages_decode_with_the_backends() {
    let area = PvclockVcpuTimeInfo::new();
    let (mul, shift) = pvclock_time_scale(2_000_000_000).unwrap();
    area.publish(1_000, 5_000, mul, shift, 1);
    area.publish(1_000, 5_000, mul, shift, 1);
    assert_eq!(area.version.load(Relaxed), 4);
    let t = clockhal_kvmclock::read_area(&area, || 3_000).unwrap();
    assert_eq!((t.ns, t.flags), (5_000 + 1_000, 1));

    let page = HvReferenceTscPage::new();
    page.publish(
        hv_next_sequence(page.sequence.load(Relaxed)),
        hv_reference_scale(2_000_000_000).unwrap(),
        7,
    );
    assert_eq!(page.sequence.load(Relaxed), 1);
    assert_eq!(
        clockhal_hyperv::read_reference_page(&page, || 2_000_000_000),
        Ok(10_000_000 - 1 + 7)
    );
}
