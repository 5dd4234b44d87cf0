//! A clock-heavy workload: the timing pattern of an I/O path.
//!
//! Each operation timestamps itself twice around a small piece of work (a
//! 16-bit one's-complement checksum over a 64-byte packet, as a network
//! stack does per packet), the way a driver accounts latency per request.
//! With a cheap clock the checksum dominates; with a clock whose every read
//! is a VM exit, the two reads do.

use core::hint::black_box;

/// Bytes checksummed per operation.
pub const PACKET: usize = 64;

/// What one batch measured.
#[derive(Clone, Copy, Debug)]
pub struct Outcome {
    /// Operations run.
    pub ops: u32,
    /// Wall time of the whole batch by the reference clock, in ns.
    pub elapsed_ns: u64,
    /// Sum of the per-operation intervals by the clock under test, in ns.
    pub timed_ns: u64,
}

impl Outcome {
    /// Operations per second (by the reference clock).
    pub fn ops_per_sec(&self) -> u64 {
        (u128::from(self.ops) * 1_000_000_000)
            .checked_div(u128::from(self.elapsed_ns))
            .unwrap_or(0) as u64
    }
}

/// The small work: RFC 1071 checksum of one packet (eight 64-bit words,
/// carries folded back in).
#[inline(never)]
fn checksum(packet: &[u8; PACKET]) -> u16 {
    let mut sum: u128 = 0;
    for word in packet.chunks_exact(8) {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        sum += u128::from(u64::from_be_bytes(w));
    }
    // Fold 128 -> 16 bits; each step keeps the one's-complement sum.
    let mut s = (sum as u64 as u128) + (sum >> 64);
    s = (s & 0xFFFF_FFFF_FFFF_FFFF) + (s >> 64);
    let mut x = s as u64;
    x = (x & 0xFFFF_FFFF) + (x >> 32);
    x = (x & 0xFFFF_FFFF) + (x >> 32);
    x = (x & 0xFFFF) + (x >> 16);
    x = (x & 0xFFFF) + (x >> 16);
    !(x as u16)
}

/// Runs `ops` operations timed by `now` (ns); the batch as a whole is timed
/// by `reference` (ns), so that every source is judged by the same clock.
pub fn run(ops: u32, now: impl Fn() -> u64, reference: impl Fn() -> u64) -> Outcome {
    let mut packet = [0u8; PACKET];
    let mut timed_ns = 0u64;
    let mut folded = 0u16;
    let start = reference();
    for i in 0..ops {
        // A new packet each time, so nothing can be hoisted out of the loop.
        packet[i as usize % PACKET] = i as u8;
        let t0 = now();
        folded ^= checksum(black_box(&packet));
        let t1 = now();
        timed_ns = timed_ns.wrapping_add(t1.wrapping_sub(t0));
    }
    let end = reference();
    black_box(folded);
    Outcome {
        ops,
        elapsed_ns: end.saturating_sub(start),
        timed_ns,
    }
}
