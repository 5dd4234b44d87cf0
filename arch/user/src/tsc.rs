//! Reading the TSC from user space (and from the kernel, for the writer).
//!
//! The crate's only instructions: `rdtsc`/`rdtscp` with the fence that
//! orders them, and `cpuid` for [`TscRead::detect`]. All three are allowed
//! at every privilege level unless the OS set CR4.TSD (then `rdtsc` raises
//! #GP: the OS ends the process, a crash but never undefined behaviour; an
//! OS that sets TSD must not publish TSC-based states).

use crate::sync::{AtomicU32, Ordering};
use core::arch::asm;

/// How a TSC read is ordered after the loads before it (the clock page
/// names it, the kernel picks it the way `clockhal_x86::Native` does).
///
/// Later loads are *not* held back by the instruction itself; the readers'
/// seqlock re-checks, which must follow the counter read, load from an
/// address that depends on the value read (cheaper than a trailing
/// `lfence`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum TscRead {
    /// `lfence; rdtsc` (Intel and others).
    LfenceRdtsc = 0,
    /// `mfence; rdtsc` (AMD/Hygon when `rdtscp` is missing: LFENCE is only
    /// dispatch-serialising there when the OS set `DE_CFG[1]`).
    MfenceRdtsc = 1,
    /// `rdtscp` (where CPUID offers RDTSCP: the cheapest ordered read on
    /// current CPUs).
    Rdtscp = 2,
}

impl TscRead {
    /// The page encoding of this method.
    /// Interrupt-safe: yes.
    pub const fn code(self) -> u32 {
        self as u32
    }

    /// The method a page encoding names, `None` for an unknown code.
    /// Interrupt-safe: yes.
    pub const fn from_code(code: u32) -> Option<TscRead> {
        match code {
            0 => Some(TscRead::LfenceRdtsc),
            1 => Some(TscRead::MfenceRdtsc),
            2 => Some(TscRead::Rdtscp),
            _ => None,
        }
    }

    /// What this CPU supports, chosen as Linux's `rdtsc_ordered` does:
    /// `rdtscp` where CPUID reports it, else `mfence; rdtsc` on AMD/Hygon,
    /// else `lfence; rdtsc`.
    /// Interrupt-safe: yes.
    pub fn detect() -> TscRead {
        let vendor = cpuid(0);
        let amd =
            vendor.1 == u32::from_le_bytes(*b"Auth") || vendor.1 == u32::from_le_bytes(*b"Hygo");
        let rdtscp = cpuid(0x8000_0000).0 >= 0x8000_0001 && cpuid(0x8000_0001).3 & (1 << 27) != 0;
        if rdtscp {
            TscRead::Rdtscp
        } else if amd {
            TscRead::MfenceRdtsc
        } else {
            TscRead::LfenceRdtsc
        }
    }

    /// Reads the TSC, ordered after earlier loads.
    ///
    /// [`TscRead::Rdtscp`] on a CPU without RDTSCP raises #UD (the OS ends
    /// the process): use the method the clock page names, or [`detect`](Self::detect).
    /// Interrupt-safe: yes.
    #[inline(always)]
    pub fn read(self) -> u64 {
        // `rdtscp` inline, tested alone (one compare on every read); the
        // fenced reads of CPUs without it out of line.
        if let TscRead::Rdtscp = self {
            let (lo, hi): (u32, u32);
            // SAFETY: rdtscp only reads the counter and TSC_AUX into
            // registers; no memory is touched. Without the `nomem`
            // option the compiler keeps memory accesses on their side of
            // the read, as the seqlock needs.
            unsafe {
                asm!("rdtscp", out("eax") lo, out("edx") hi, out("ecx") _,
                    options(nostack, preserves_flags));
            }
            ((hi as u64) << 32) | lo as u64
        } else {
            self.fenced()
        }
    }

    /// `mfence; rdtsc` or `lfence; rdtsc`. Not inlined: a call, like the
    /// asm, is a compiler barrier for memory accesses.
    #[cold]
    #[inline(never)]
    fn fenced(self) -> u64 {
        let (lo, hi): (u32, u32);
        if let TscRead::MfenceRdtsc = self {
            // SAFETY: a fence and the counter read only.
            unsafe {
                asm!("mfence", "rdtsc", out("eax") lo, out("edx") hi,
                    options(nostack, preserves_flags));
            }
        } else {
            // SAFETY: as above.
            unsafe {
                asm!("lfence", "rdtsc", out("eax") lo, out("edx") hi,
                    options(nostack, preserves_flags));
            }
        }
        ((hi as u64) << 32) | lo as u64
    }
}

/// `cell.load(Relaxed)`, performed only once `after` is known: the load's
/// address depends on `after` (through an `and` with 0, which — unlike
/// `xor r, r` — CPUs do not treat as dependency-breaking), so it cannot run
/// before the instruction that produced `after`. The seqlocks use it to
/// re-check their sequence after the TSC read without a fence.
#[cfg(loom)]
#[inline(always)]
pub(crate) fn load_after(cell: &AtomicU32, after: u64) -> u32 {
    // The models check the atomics' ordering, not the CPU's: a plain load.
    let _ = after;
    cell.load(Ordering::Relaxed)
}

/// See above.
#[cfg(not(loom))]
#[inline(always)]
pub(crate) fn load_after(cell: &AtomicU32, after: u64) -> u32 {
    let mut addr = cell as *const AtomicU32;
    // The pointer is only added to, never dereferenced, inside the asm.
    #[allow(clippy::pointers_in_nomem_asm_block)]
    // SAFETY: register arithmetic only: `zero = after & 0`, `addr += zero`.
    // Done in one asm block so that the compiler cannot see that `addr` is
    // unchanged and load from `cell` directly (which would drop the
    // dependency).
    unsafe {
        asm!("and {z}, 0", "add {a}, {z}", z = inout(reg) after => _, a = inout(reg) addr,
            options(pure, nomem, nostack));
    }
    // SAFETY: `addr` is `cell`'s address plus 0: a valid, aligned
    // reference for as long as `cell`'s borrow.
    unsafe { &*addr }.load(Ordering::Relaxed)
}

/// CPUID `leaf` (subleaf 0): `(eax, ebx, ecx, edx)`.
fn cpuid(leaf: u32) -> (u32, u32, u32, u32) {
    let (eax, ebx, ecx, edx): (u32, u32, u32, u32);
    // SAFETY: CPUID only writes registers. RBX is reserved by LLVM, so it
    // is saved in a scratch register and swapped back.
    unsafe {
        asm!(
            "mov {tmp:r}, rbx",
            "cpuid",
            "xchg {tmp:r}, rbx",
            tmp = out(reg) ebx,
            inout("eax") leaf => eax,
            inout("ecx") 0u32 => ecx,
            out("edx") edx,
            options(nomem, nostack, preserves_flags),
        );
    }
    (eax, ebx, ecx, edx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_unknown_codes_are_refused() {
        for m in [TscRead::LfenceRdtsc, TscRead::MfenceRdtsc, TscRead::Rdtscp] {
            assert_eq!(TscRead::from_code(m.code()), Some(m));
        }
        assert_eq!(TscRead::from_code(3), None);
    }

    #[test]
    fn every_supported_method_counts_forward() {
        // lfence and mfence exist on every x86_64 CPU; rdtscp where detected.
        for m in [
            TscRead::LfenceRdtsc,
            TscRead::MfenceRdtsc,
            TscRead::detect(),
        ] {
            let a = m.read();
            let b = m.read();
            assert!(b > a, "{m:?}: {a} then {b}");
        }
    }
}
