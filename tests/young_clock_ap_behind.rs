//! An application CPU behind the boot CPU on a young clock (found by
//! red-team round 11): a reading "before zero" by more than `max_jump`
//! was taken for garbage and counted towards `STUCK_READS`, so an AP that
//! read 10,000 times while the boot CPU did not demoted the Hyper-V page
//! (or kvmclock) for good. Only readings no real clock can give (more
//! than 2^60 ns before zero, e.g. a TSC that crossed 2^64) are counted.
#![cfg(all(
    feature = "kvmclock",
    feature = "hyperv",
    feature = "tsc",
    feature = "hpet"
))]

use clockhal::tsc::SyncStatus;
use clockhal::{Duration, SourceId};
use clockhal_sim::SimMachine;

mod adversarial;

use adversarial::{clock_with, leak, ms};

fn ticks(m: &SimMachine, ns: u64) -> i64 {
    (ns as u128 * m.config().tsc_hz as u128 / 1_000_000_000) as i64
}
/// CPU 1 reads 10,001 times (past `STUCK_READS`) while CPU 0 does not;
/// every reading is at least CPU 0's last and the AP's previous one. The
/// source before and after, and the report.
fn ap_reads_past_stuck_reads(
    m: &SimMachine,
    c: &adversarial::SimClock,
    before: SourceId,
) -> (SourceId, SourceId, String) {
    let t_bsp = c.now().as_nanos();
    let mut last = 0;
    m.on_cpu(1, || {
        for _ in 0..10_001 {
            let t = c.now().as_nanos();
            assert!(
                t >= last && t >= t_bsp,
                "AP went back: {t} < {last}/{t_bsp}"
            );
            last = t;
        }
    });
    (before, c.source_id(), format!("{}", c.report()))
}

/// Hyper-V guest, CPU 1's TSC `behind_ns` behind CPU 0's, the OS's warp test says so.
/// The clock is `age_ns` old when the AP starts reading; it reads 10,001 times.
fn hv_ap_behind(
    behind_ns: u64,
    age_ns: u64,
    max_jump: Option<u64>,
) -> (SourceId, SourceId, String) {
    let m = leak(SimMachine::hyperv_config().with_cpus(2, &[]).build());
    m.advance(ms(60_000)); // firmware + bootloader: the TSCs are 60 s (CPU 0) and 60 s - behind (CPU 1) old
    m.set_tsc_offset(1, -ticks(m, behind_ns));
    let sync = SyncStatus::Unsynchronized {
        worst_backward_ticks: ticks(m, behind_ns) as u64,
    };
    let (c, _) = clock_with(m, |p| {
        let p = p.tsc_sync(sync);
        match max_jump {
            Some(j) => p.max_jump(Duration::from_nanos(j)),
            None => p,
        }
    });
    let before = c.source_id();
    m.advance(age_ns);
    ap_reads_past_stuck_reads(m, &c, before)
}

#[test]
fn hv_ap_20s_behind_young_clock_does_not_switch_source() {
    let (before, after, rep) = hv_ap_behind(ms(20_000), ms(1_000), None);
    assert_eq!(before, SourceId::HypervPage);
    assert_eq!(
        after, before,
        "AP 20 s behind, clock 1 s old: source switched\n{rep}"
    );
}

#[test]
fn hv_ap_20s_behind_old_clock_control() {
    let (before, after, rep) = hv_ap_behind(ms(20_000), ms(30_000), None);
    assert_eq!(before, SourceId::HypervPage);
    assert_eq!(after, before, "control: clock 30 s old\n{rep}");
}

#[test]
fn hv_ap_5ms_behind_small_max_jump_does_not_switch_source() {
    let (before, after, rep) = hv_ap_behind(ms(5), ms(1), Some(ms(1)));
    assert_eq!(before, SourceId::HypervPage);
    assert_eq!(
        after, before,
        "AP 5 ms behind, max_jump 1 ms: source switched\n{rep}"
    );
}

/// KVM guest, two vCPUs, no stable bit: CPU 1's kvmclock area lies `skew_ns`
/// behind CPU 0's (an unsynchronised host); clock `age_ns` old; the
/// registered AP reads 10,001 times.
fn kvm_ap_behind(skew_ns: u64, tsc_behind_ns: u64, age_ns: u64) -> (SourceId, SourceId, String) {
    let m = leak(
        SimMachine::kvm_config()
            .with_cpus(2, &[])
            .with_kvm(clockhal_sim::KvmConfig {
                stable_bit: false,
                ..Default::default()
            })
            .build(),
    );
    m.advance(ms(60_000));
    m.set_tsc_offset(1, -ticks(m, tsc_behind_ns));
    let (c, _) = clock_with(m, |p| p);
    let before = c.source_id();
    m.with_kvm(|k, _| k.set_system_time_skew(Some(1), -(skew_ns as i64)));
    m.advance(age_ns);
    m.on_cpu(1, || c.register_this_cpu()).unwrap();
    ap_reads_past_stuck_reads(m, &c, before)
}

#[test]
fn kvm_ap_area_20s_behind_young_clock_does_not_switch_source() {
    let (before, after, rep) = kvm_ap_behind(ms(20_000), 0, ms(1_000));
    assert_eq!(before, SourceId::Kvmclock, "{rep}");
    assert_eq!(
        after, before,
        "AP's area 20 s behind, clock 1 s old: source switched\n{rep}"
    );
}

#[test]
fn kvm_ap_tsc_offset_20s_control() {
    let (before, after, rep) = kvm_ap_behind(0, ms(20_000), ms(1_000));
    assert_eq!(before, SourceId::Kvmclock, "{rep}");
    assert_eq!(after, before, "{rep}");
}
