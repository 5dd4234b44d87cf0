//! Reading the TSC from user space (and from the kernel, for the writer).
//!
//! The crate's only instructions: `rdtsc`/`rdtscp` with the fence that
//! orders them, and `cpuid` for [`TscRead::detect`]. All three are allowed
//! at every privilege level unless the OS set CR4.TSD (then `rdtsc` raises
//! #GP: the OS ends the process, a crash but never undefined behaviour; an
//! OS that sets TSD must not publish TSC-based states).

use core::arch::asm;

/// How a TSC read is ordered after the loads before it (the clock page
/// names it, the kernel picks it the way `clockhal_x86::Native` does).
///
/// Every variant also keeps later loads from running before the counter is
/// read (a trailing `lfence` for `rdtscp`; `lfence`/`mfence` already
/// dispatch-serialise the plain `rdtsc`), so a seqlock re-check after the
/// read really comes after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum TscRead {
    /// `lfence; rdtsc` (Intel and others).
    LfenceRdtsc = 0,
    /// `mfence; rdtsc` (AMD/Hygon when `rdtscp` is missing: LFENCE is only
    /// dispatch-serialising there when the OS set `DE_CFG[1]`).
    MfenceRdtsc = 1,
    /// `rdtscp; lfence` (where CPUID offers RDTSCP: the cheapest ordered
    /// read on current CPUs).
    Rdtscp = 2,
}

impl TscRead {
    /// The page encoding of this method.
    pub const fn code(self) -> u32 {
        self as u32
    }

    /// The method a page encoding names, `None` for an unknown code.
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

    /// Reads the TSC, ordered after earlier loads and before later ones.
    ///
    /// [`TscRead::Rdtscp`] on a CPU without RDTSCP raises #UD (the OS ends
    /// the process): use the method the clock page names, or [`detect`](Self::detect).
    #[inline(always)]
    pub fn read(self) -> u64 {
        let (lo, hi): (u32, u32);
        match self {
            TscRead::Rdtscp => {
                // SAFETY: rdtscp and lfence only read the counter and
                // TSC_AUX into registers; no memory is touched. Without the
                // `nomem` option the compiler keeps memory accesses on their
                // side of the read, as the seqlock needs.
                unsafe {
                    asm!("rdtscp", "lfence", out("eax") lo, out("edx") hi, out("ecx") _,
                        options(nostack, preserves_flags));
                }
            }
            TscRead::MfenceRdtsc => {
                // SAFETY: as above: fences and the counter read only.
                unsafe {
                    asm!("mfence", "rdtsc", out("eax") lo, out("edx") hi,
                        options(nostack, preserves_flags));
                }
            }
            TscRead::LfenceRdtsc => {
                // SAFETY: as above.
                unsafe {
                    asm!("lfence", "rdtsc", out("eax") lo, out("edx") hi,
                        options(nostack, preserves_flags));
                }
            }
        }
        ((hi as u64) << 32) | lo as u64
    }
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
