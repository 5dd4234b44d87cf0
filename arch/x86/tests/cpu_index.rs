//! How `Native` names the calling CPU, and whether clockhal re-checks it
//! after the TSC read.

use clockhal_x86::{CpuIndex, Hardware, Native};
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
    let (smp_ref, one_ref) = (&smp, &one);
    assert!(!fixed(smp_ref));
    assert!(fixed(one_ref));
}

/// An OS's own per-CPU field as a type: read through the trait, not
/// re-checked unless it says so, and its cells raised without a lock.
#[derive(Clone, Copy, Debug)]
struct Fifth;

impl CpuIndex for Fifth {
    fn index(&self) -> usize {
        5
    }
}

#[derive(Clone, Copy, Debug)]
struct PinnedFifth;

impl CpuIndex for PinnedFifth {
    const FIXED: bool = true;
    fn index(&self) -> usize {
        5
    }
}

#[test]
fn an_os_index_type_is_what_it_declares() {
    let os = Native::hosted().with_cpu(Fifth);
    assert_eq!(os.cpu_index(), 5);
    assert!(!os.cpu_index_is_fixed(), "rechecked by default");
    let pinned = Native::hosted().with_cpu(PinnedFifth);
    assert_eq!(pinned.cpu_index(), 5);
    assert!(pinned.cpu_index_is_fixed());
    // The strategy changes with the type, the rest of the token does not.
    let back = pinned.single_cpu();
    assert_eq!(back.cpu_index(), 0);
    assert!(back.cpu_index_is_fixed());
}

fn never_lowers(hw: impl Hardware) {
    let cell = AtomicU64::new(10);
    assert_eq!(hw.fetch_max_local(&cell, 5), 10);
    assert_eq!(cell.load(Ordering::Relaxed), 10);
    assert_eq!(hw.fetch_max_local(&cell, 12), 12);
    assert_eq!(cell.load(Ordering::Relaxed), 12);
}

#[test]
fn the_floor_max_never_lowers_a_cell() {
    never_lowers(Native::hosted());
    never_lowers(Native::hosted().single_cpu());
    never_lowers(Native::hosted().with_cpu(Fifth));
    never_lowers(Native::hosted().with_cpu_index(counting_index));
}
