//! How `Native` names the calling CPU, and whether clockhal re-checks it
//! after the TSC read.

use clockhal_x86::{Hardware, Native};
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

static CALLS: AtomicUsize = AtomicUsize::new(0);

fn counting_index() -> usize {
    CALLS.fetch_add(1, Ordering::Relaxed);
    3
}

#[test]
fn a_constant_index_is_fixed_and_an_os_function_is_rechecked() {
    let unknown = Native::hosted();
    assert_eq!(unknown.cpu_index(), 0);
    assert!(unknown.cpu_index_is_fixed());
    let one = Native::hosted().single_cpu();
    assert_eq!(one.cpu_index(), 0);
    assert!(one.cpu_index_is_fixed());
    // The OS's function may name another CPU after a migration it should
    // not have made: not fixed, so readers confirm it after the TSC read.
    let smp = Native::hosted().with_cpu_index(counting_index);
    assert!(!smp.cpu_index_is_fixed());
    assert_eq!(smp.cpu_index(), 3);
    assert!(CALLS.load(Ordering::Relaxed) >= 1);
    // Forwarded through a reference.
    fn fixed(hw: impl Hardware) -> bool {
        hw.cpu_index_is_fixed()
    }
    let (smp_ref, one_ref): (&Native, &Native) = (&smp, &one);
    assert!(!fixed(smp_ref));
    assert!(fixed(one_ref));
}

#[test]
fn the_floor_max_never_lowers_a_cell() {
    for hw in [Native::hosted(), Native::hosted().single_cpu()] {
        let cell = AtomicU64::new(10);
        assert_eq!(hw.fetch_max_local(&cell, 5), 10);
        assert_eq!(cell.load(Ordering::Relaxed), 10);
        assert_eq!(hw.fetch_max_local(&cell, 12), 12);
        assert_eq!(cell.load(Ordering::Relaxed), 12);
    }
}
