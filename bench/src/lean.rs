//! The least a checked TSC-based read costs: the reference rows of issue 27
//! (`diag: least checked read`, `diag: least checked read + token line`).
//!
//! A read that does everything a checked, monotonic, interrupt-safe clock
//! read needs, and nothing else:
//!
//! - **one per-CPU cache line** ([`LeanLine`]) under a seqlock: base TSC,
//!   base ns, `mult`/`shift` (Linux's vDSO arithmetic, one 64-bit
//!   multiply: `ns = base_ns + ((tsc - base_tsc) * mult) >> shift`), the
//!   window the line serves, the CPU's floor and the token it was anchored
//!   under. Only the sequence word is loaded before the TSC read (an
//!   ordered read waits for earlier loads), the fields after it, the
//!   sequence again last;
//! - **the window**: `tsc - base_tsc < window` (one unsigned compare, which
//!   also sends a TSC below `base_tsc`, one that stepped back, to the slow
//!   path). The window is [`WINDOW_NS`] (1 s, as clockhal's
//!   `REVALIDATE_NS`), and `window * mult < 2^64`, so the multiply cannot
//!   overflow inside it;
//! - a **cold slow path** outside the window (or on a torn line, or a
//!   changed token): the reading from the clock's authoritative 64.64 map
//!   ([`TscMap`]), and the line re-anchored at the TSC read. A writer that
//!   finds the line being written (an interrupted writer on the same CPU)
//!   gives up instead of waiting, so a read in an interrupt handler never
//!   blocks;
//! - **the floor**: the largest value this CPU returned, raised with
//!   clockhal's own unlocked `cmpxchg` ([`cpu_local_max`]): an interrupt on
//!   this CPU cannot split it, so a raise an interrupt handler made between
//!   its load and the `cmpxchg` is never lost (a plain load-and-store
//!   floor loses it, and is no faster: issue 27);
//! - with `TOKEN`, **the source's token** on a second cache line
//!   ([`TokenLine`], written by the "host", as kvmclock's version and the
//!   Hyper-V sequence are), loaded after the TSC read and compared with
//!   the token the line was anchored under, as `MapSlot::read_cached`
//!   checks a pvclock version (tokens only move forward, so one check
//!   after the TSC read is enough; an odd token, a host mid-update, is
//!   never anchored under, so equality also means "even").
//!
//! The TSC is read with a bare `rdtscp` ([`TscRead::Rdtscp`], a constant:
//! no test of a run-time fence choice); the rows are built only where the
//! CPU has RDTSCP. In a kernel the line is `gs:`-relative; here the pinned
//! bench thread is "CPU 0" and the clock is reached through the row's
//! captured `&'static`, kept in a register across the batch loop (no
//! instruction either).
//!
//! This is the bench's own code (no `unsafe`: the only instructions are
//! clockhal-user's `rdtscp` and clockhal-x86's `cpu_local_max`).

use clockhal_core::{Frequency, Scale, TscMap};
use clockhal_user::TscRead;
use clockhal_x86::cpu_local_max;
use std::sync::atomic::{
    fence, AtomicU32, AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};

/// How long past its anchor a line serves readings (1 s: the cached map is
/// re-validated once a second, as clockhal's are).
pub const WINDOW_NS: u64 = 1_000_000_000;

/// One CPU's read state: exactly one cache line.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct LeanLine {
    /// Even while the fields below are stable; odd while a writer is in.
    seq: AtomicU32,
    /// The map's shift (below 64).
    shift: AtomicU32,
    /// ns per tick, scaled by `2^shift`.
    mult: AtomicU64,
    /// The TSC the line was anchored at.
    base_tsc: AtomicU64,
    /// The reading at `base_tsc`.
    base_ns: AtomicU64,
    /// Ticks past `base_tsc` the line serves.
    window: AtomicU64,
    /// The largest value this CPU returned.
    floor: AtomicU64,
    /// The source's token the line was anchored under.
    tag: AtomicU32,
}
const _: () = assert!(std::mem::size_of::<LeanLine>() == 64);

/// The source's token on a cache line of its own, written by the host
/// (odd while it rewrites its parameters, as a pvclock version).
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct TokenLine {
    version: AtomicU32,
}
const _: () = assert!(std::mem::size_of::<TokenLine>() == 64);

/// A clock of one CPU (the bench's pinned thread): its line, the source's
/// token line, and the authoritative map the slow path reads.
#[derive(Debug)]
pub struct LeanClock {
    line: LeanLine,
    token: TokenLine,
    /// The authoritative map (128-bit; cost is the slow path's only).
    map: TscMap,
    /// `mult`, `shift`, `window` every anchor writes to the line.
    mult: u64,
    shift: u32,
    window: u64,
    /// Slow-path reads so far (the tests' witness; off the fast path).
    slow: AtomicU64,
}

impl LeanClock {
    /// A clock of a TSC of `hz` Hz whose timeline starts (ns 0) at TSC
    /// `tsc0`. `None` for a rate of 0.
    /// Interrupt-safe: yes (no lock, no allocation; the caller boxes it).
    pub fn new(hz: u64, tsc0: u64) -> Option<LeanClock> {
        let f = Frequency::from_hz(hz).ok()?;
        let window = (hz as u128 * WINDOW_NS as u128 / 1_000_000_000) as u64;
        // The largest shift at which the window's products still fit
        // 64 bits: the most precise one-multiply map.
        let (mult, shift) = (0..64u32).rev().find_map(|shift| {
            let mult = ((1_000_000_000u128 << shift) + hz as u128 / 2) / hz as u128;
            (mult > 0 && (mult * window as u128) < (1u128 << 64)).then_some((mult as u64, shift))
        })?;
        Some(LeanClock {
            line: LeanLine::default(),
            token: TokenLine {
                version: AtomicU32::new(2),
            },
            map: TscMap::through(&Scale::new(f), tsc0, 0),
            mult,
            shift,
            window,
            slow: AtomicU64::new(0),
        })
    }

    /// One checked read at the TSC `tsc()` returns: the seqlocked line,
    /// the window, with `TOKEN` the token line, the floor.
    /// Interrupt-safe: yes (a writer in the slow path that finds another
    /// in gives up; the floor is `cpu_local_max`).
    #[inline(always)]
    pub fn read<const TOKEN: bool>(&self, tsc: impl FnOnce() -> u64) -> u64 {
        let l = &self.line;
        let seq = l.seq.load(Acquire);
        let t = tsc();
        let d = t.wrapping_sub(l.base_tsc.load(Relaxed));
        let in_window = d < l.window.load(Relaxed);
        let ns = l.base_ns.load(Relaxed).wrapping_add(
            d.wrapping_mul(l.mult.load(Relaxed))
                .wrapping_shr(l.shift.load(Relaxed)),
        );
        let same_token = !TOKEN || self.token.version.load(Relaxed) == l.tag.load(Relaxed);
        // The field loads stay above the re-check (on x86 a compiler
        // barrier: loads are not reordered with loads).
        fence(Acquire);
        let ns = if in_window && same_token && seq & 1 == 0 && l.seq.load(Relaxed) == seq {
            ns
        } else {
            self.slow_path(t)
        };
        cpu_local_max(&l.floor, ns)
    }

    /// [`read`](Self::read) with `rdtscp`: what the rows time.
    /// Interrupt-safe: yes (as `read`).
    #[inline(always)]
    pub fn now<const TOKEN: bool>(&self) -> u64 {
        self.read::<TOKEN>(|| TscRead::Rdtscp.read())
    }

    /// Outside the window, a torn line or another token: the authoritative
    /// map, and the line re-anchored at `t` (unless the host is mid-update
    /// or another writer is in).
    #[cold]
    #[inline(never)]
    fn slow_path(&self, t: u64) -> u64 {
        self.slow.fetch_add(1, Relaxed);
        let ns = self.map.apply(t);
        let tag = self.token.version.load(Acquire);
        if tag & 1 == 0 {
            self.anchor(t, ns, tag);
        }
        ns
    }

    /// The seqlock's writer: the line serves from `(t, ns)` under `tag`.
    /// `false` (nothing written) if a writer is in: never waits.
    fn anchor(&self, t: u64, ns: u64, tag: u32) -> bool {
        let l = &self.line;
        let s = l.seq.load(Relaxed);
        if s & 1 != 0
            || l.seq
                .compare_exchange(s, s.wrapping_add(1), Acquire, Relaxed)
                .is_err()
        {
            return false;
        }
        fence(Release);
        l.mult.store(self.mult, Relaxed);
        l.shift.store(self.shift, Relaxed);
        l.window.store(self.window, Relaxed);
        l.base_tsc.store(t, Relaxed);
        l.base_ns.store(ns, Relaxed);
        l.tag.store(tag, Relaxed);
        l.seq.store(s.wrapping_add(2), Release);
        true
    }

    /// The host rewrites its parameters: the token goes odd, then to the
    /// next even value (the parameters themselves stay: the bench's host
    /// serves one rate).
    /// Interrupt-safe: yes (two atomic increments).
    pub fn host_update(&self) {
        self.token.version.fetch_add(1, Release);
        self.token.version.fetch_add(1, Release);
    }

    /// Slow-path reads so far.
    /// Interrupt-safe: yes.
    pub fn slow_reads(&self) -> u64 {
        self.slow.load(Relaxed)
    }

    /// The window in ticks.
    /// Interrupt-safe: yes.
    pub fn window_ticks(&self) -> u64 {
        self.window
    }
}

#[cfg(test)]
mod tests {
    //! The checks, with given TSC values on a 1 GHz TSC (1 tick = 1 ns),
    //! through the rows' own `read`.
    use super::*;

    const T0: u64 = 1_000;

    fn clock() -> LeanClock {
        LeanClock::new(1_000_000_000, T0).unwrap()
    }

    #[test]
    fn the_line_serves_the_map_within_its_window() {
        let c = clock();
        assert_eq!(c.window_ticks(), 1_000_000_000);
        assert!(c.mult as u128 * c.window as u128 <= u64::MAX as u128);
        assert_eq!(c.read::<false>(|| T0 + 5), 5); // first read: anchors
        assert_eq!(c.slow_reads(), 1);
        for t in [T0 + 10, T0 + 123_456, T0 + 999_000_000] {
            let want = c.map.apply(t);
            assert!(c.read::<false>(|| t).abs_diff(want) <= 1);
        }
        assert_eq!(c.slow_reads(), 1);
    }

    #[test]
    fn past_the_window_the_slow_path_reanchors() {
        let c = clock();
        c.read::<false>(|| T0);
        let far = T0 + 3_000_000_000;
        assert_eq!(c.read::<false>(|| far), 3_000_000_000);
        assert_eq!(c.slow_reads(), 2);
        assert_eq!(c.read::<false>(|| far + 7), 3_000_000_007);
        assert_eq!(c.slow_reads(), 2);
    }

    #[test]
    fn a_tsc_stepped_back_is_held_by_the_floor() {
        let c = clock();
        assert_eq!(c.read::<false>(|| T0 + 9_000), 9_000);
        // Below the line's base: the slow path (the window compare wraps)
        // gives 6000, the floor returns 9000.
        assert_eq!(c.read::<false>(|| T0 + 6_000), 9_000);
        assert_eq!(c.slow_reads(), 2);
        assert_eq!(c.read::<false>(|| T0 + 9_500), 9_500);
    }

    #[test]
    fn a_writer_during_the_read_sends_it_to_the_slow_path() {
        let c = clock();
        c.read::<false>(|| T0);
        // An interrupt handler re-anchors the line between the sequence
        // load and the TSC read: the re-check sees another sequence.
        let r = c.read::<false>(|| {
            assert!(c.anchor(T0 + 50, 50, 2));
            T0 + 60
        });
        assert_eq!(r, 60);
        assert_eq!(c.slow_reads(), 2);
    }

    #[test]
    fn a_line_being_written_is_not_used_nor_rewritten() {
        let c = clock();
        c.read::<false>(|| T0);
        c.line.seq.fetch_add(1, Relaxed); // a writer is in (odd)
        c.line.base_ns.store(1 << 40, Relaxed); // half-written
        assert_eq!(c.read::<false>(|| T0 + 70), 70);
        assert_eq!(c.read::<false>(|| T0 + 80), 80);
        assert_eq!(c.slow_reads(), 3);
        assert!(!c.anchor(T0, 0, 2));
    }

    #[test]
    fn a_new_token_sends_the_token_row_to_the_slow_path() {
        let c = clock();
        c.read::<true>(|| T0);
        c.read::<true>(|| T0 + 1);
        assert_eq!(c.slow_reads(), 1);
        c.host_update();
        assert_eq!(c.read::<true>(|| T0 + 2), 2);
        assert_eq!(c.slow_reads(), 2); // re-anchored under the new token
        c.read::<true>(|| T0 + 3);
        assert_eq!(c.slow_reads(), 2);
        // The row without a token does not look at it.
        c.host_update();
        c.read::<false>(|| T0 + 4);
        assert_eq!(c.slow_reads(), 2);
    }

    #[test]
    fn a_host_mid_update_is_never_anchored_under() {
        let c = clock();
        c.read::<true>(|| T0);
        c.token.version.fetch_add(1, Release); // odd: mid-update
        assert_eq!(c.read::<true>(|| T0 + 10), 10);
        assert_eq!(c.read::<true>(|| T0 + 20), 20);
        assert_eq!(c.slow_reads(), 3);
        c.token.version.fetch_add(1, Release);
        c.read::<true>(|| T0 + 30);
        c.read::<true>(|| T0 + 40);
        assert_eq!(c.slow_reads(), 4);
    }

    #[test]
    fn an_interrupt_read_in_the_middle_raises_the_floor_for_both() {
        let c = clock();
        c.read::<false>(|| T0 + 1_000);
        // The interrupted read took its TSC before the handler's complete
        // read at a later TSC; it returns at least the handler's value.
        let mut h = 0;
        let outer = c.read::<false>(|| {
            h = c.read::<false>(|| T0 + 8_000);
            T0 + 5_000
        });
        assert_eq!(h, 8_000);
        assert_eq!(outer, 8_000);
    }

    #[test]
    fn rdtscp_reads_advance() {
        if TscRead::detect() != TscRead::Rdtscp {
            eprintln!("SKIP rdtscp_reads_advance: no RDTSCP");
            return;
        }
        let c = LeanClock::new(2_000_000_000, TscRead::Rdtscp.read()).unwrap();
        let mut last = c.now::<true>();
        for _ in 0..10_000 {
            let v = c.now::<true>();
            assert!(v >= last);
            last = v;
        }
        assert!(c.slow_reads() <= 2);
    }
}
