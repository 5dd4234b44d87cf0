//! PIT channel 0 as a one-shot timer on the simulated 8254.

use clockhal_core::timer::{plan_piece, Expiry, OneShot, TimerDevice, TimerError};
use clockhal_pit::channel0::{PitChannel0, MAX_COUNT};
use clockhal_sim::SimMachine;
use clockhal_x86::pit::Channel0Grant;

fn tick_ns(ticks: u64) -> u64 {
    // 105/88 MHz: ticks * 88 / 105 µs, exact ceiling in ns.
    (ticks as u128 * 88_000).div_ceil(105) as u64
}

#[test]
fn fires_after_the_count_never_before() {
    let m = SimMachine::bare_metal();
    let t = PitChannel0::new(&m, Channel0Grant::simulated());
    for ticks in [1u64, 2, 100, 1_193, MAX_COUNT] {
        let before = m.now_ns();
        t.program(ticks).unwrap();
        let at = m.pit_ch0_next_fire_ns().unwrap();
        assert!(at >= before + tick_ns(ticks), "{ticks}: early");
        assert!(!m.pit_ch0_take_interrupt(), "not yet");
        m.advance(at - m.now_ns());
        assert!(m.pit_ch0_take_interrupt());
        assert!(!m.pit_ch0_take_interrupt(), "one edge");
    }
    assert_eq!(t.program(0), Err(TimerError::OutOfRange { ticks: 0 }));
    assert_eq!(
        t.program(MAX_COUNT + 1),
        Err(TimerError::OutOfRange {
            ticks: MAX_COUNT + 1
        })
    );
}

#[test]
fn cancel_stops_it() {
    let m = SimMachine::bare_metal();
    let t = PitChannel0::new(&m, Channel0Grant::simulated());
    t.program(1_000).unwrap();
    t.cancel();
    assert_eq!(m.pit_ch0_next_fire_ns(), None);
}

#[test]
fn a_100_ms_deadline_takes_two_pieces() {
    let m = SimMachine::bare_metal();
    let t = PitChannel0::new(&m, Channel0Grant::simulated());
    let d = t.descriptor();
    assert_eq!(d.rating, 10);
    let deadline = m.now_ns() + 100_000_000;
    let state = OneShot::new();
    state.arm(deadline);
    let mut irqs = 0;
    loop {
        let rem = deadline.saturating_sub(m.now_ns());
        let ticks = plan_piece(rem, t.rate().unwrap(), 1, d.max_delta_ticks).unwrap();
        t.program(ticks).unwrap();
        let at = m.pit_ch0_next_fire_ns().unwrap();
        m.advance(at - m.now_ns());
        assert!(m.pit_ch0_take_interrupt());
        irqs += 1;
        match state.on_interrupt(m.now_ns()) {
            Expiry::Fired { .. } => break,
            Expiry::Rearm { .. } => assert!(irqs < 10),
            Expiry::Spurious => panic!(),
        }
    }
    assert!(m.now_ns() >= deadline);
    assert_eq!(irqs, 2);
}
