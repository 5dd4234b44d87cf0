//! The live pvclock page Linux maps into every process.
//!
//! A Linux guest on KVM maps vCPU 0's `pvclock_vcpu_time_info` read-only into
//! each process for its vDSO, and the real KVM host keeps writing it. User
//! space can therefore run the kvmclock read path against a
//! hypervisor-maintained page, and read the exact TSC rate from it instead of
//! calibrating. Where the page lives:
//!
//! - kernels >= 6.13: page 0 of the `[vvar_vclock]` mapping;
//! - older kernels: the second page of `[vvar]`.
//!
//! The kernel populates that page only if it ever ran its vDSO in pvclock
//! mode (kvm-clock with the stable bit); otherwise touching it raises
//! `SIGBUS`. [`live_pvclock`] therefore probes the page with a system call
//! first (the kernel turns the fault into `EFAULT`), then checks that it holds
//! a plausible, settled pvclock structure. Nothing is written: no MSR, no
//! page.
//!
//! ```no_run
//! use clockhal_linux::{live_pvclock, live_tsc_rate};
//! match live_pvclock() {
//!     Ok(live) => {
//!         let p = live.params();
//!         println!("pvclock v{} flags {:#x} at {:#x}", p.version, p.flags, live.address());
//!         let rate = live_tsc_rate().unwrap();
//!         println!("TSC = {}/{} Hz ({})", rate.numerator, rate.denominator, rate.provenance);
//!     }
//!     Err(e) => println!("no live pvclock page: {e}"),
//! }
//! ```

use clockhal_x86::paravirt::{
    pvclock_tsc_hz_ratio, PvclockVcpuTimeInfo, PVCLOCK_GUEST_STOPPED, PVCLOCK_TSC_STABLE_BIT,
};
use core::sync::atomic::{fence, Ordering};
use std::fmt;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Page size of the vDSO data mappings.
const PAGE: usize = 4096;

/// How long [`PvclockParams::read`] waits for an area whose version is odd
/// (update in progress) or zero (not yet written) before giving up. A host
/// update takes microseconds; this only bounds a hostile or dead page.
pub const SETTLE_TIMEOUT: Duration = Duration::from_millis(20);

/// Which vDSO mapping holds the page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VclockMapping {
    /// Page 0 of `[vvar_vclock]` (Linux >= 6.13).
    VvarVclock,
    /// Page 1 of `[vvar]` (Linux < 6.13).
    VvarSecondPage,
}

impl fmt::Display for VclockMapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            VclockMapping::VvarVclock => "page 0 of [vvar_vclock]",
            VclockMapping::VvarSecondPage => "page 1 of [vvar]",
        })
    }
}

/// Why there is no usable live pvclock page.
///
/// [`is_absent`](Self::is_absent) errors mean "this machine has none (or it
/// cannot be reached)": a test skips. The others mean the page exists but
/// does not hold a valid pvclock structure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LivePvclockError {
    /// Not Linux on x86_64: no vDSO pvclock page to look for.
    Unsupported,
    /// `/proc/self/maps` could not be read (no procfs?).
    MapsUnreadable(std::io::ErrorKind),
    /// Neither `[vvar_vclock]` nor `[vvar]` is mapped (vDSO disabled).
    NoMapping,
    /// The mapping is too small to hold the page.
    MappingTooSmall {
        /// Which mapping.
        mapping: VclockMapping,
        /// Its length in bytes.
        len: usize,
    },
    /// The page is mapped but the kernel does not back it (it never used
    /// the pvclock vDSO mode: not KVM, or kvm-clock without the stable bit).
    NotPopulated,
    /// The readability probe itself failed (the `errno` it returned).
    ProbeFailed(i32),
    /// The version stayed odd or zero for [`SETTLE_TIMEOUT`].
    NeverSettled {
        /// The last version seen.
        version: u32,
    },
    /// `tsc_to_system_mul` is zero, or the shift is outside `-32..=32`: no
    /// TSC rate can be derived.
    BadScale {
        /// `tsc_to_system_mul`.
        mul: u32,
        /// `tsc_shift`.
        shift: i8,
    },
    /// Flag bits other than `TSC_STABLE` and `GUEST_STOPPED` are set.
    UnknownFlags(u8),
}

impl LivePvclockError {
    /// Whether the error only says "this machine has no live page, or it
    /// cannot be reached" (as opposed to a page that exists but holds
    /// garbage).
    pub fn is_absent(&self) -> bool {
        matches!(
            self,
            LivePvclockError::Unsupported
                | LivePvclockError::MapsUnreadable(_)
                | LivePvclockError::NoMapping
                | LivePvclockError::MappingTooSmall { .. }
                | LivePvclockError::NotPopulated
                | LivePvclockError::ProbeFailed(_)
        )
    }
}

impl fmt::Display for LivePvclockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LivePvclockError::Unsupported => f.write_str("not Linux on x86_64: no vDSO pvclock page"),
            LivePvclockError::MapsUnreadable(k) => write!(f, "cannot read /proc/self/maps: {k}"),
            LivePvclockError::NoMapping => f.write_str("neither [vvar_vclock] nor [vvar] is mapped"),
            LivePvclockError::MappingTooSmall { mapping, len } => {
                write!(f, "{mapping} does not exist: the mapping is only {len} bytes")
            }
            LivePvclockError::NotPopulated => f.write_str(
                "the vDSO pvclock page is not backed: this kernel never used kvm-clock in its vDSO (not KVM, or no stable bit)",
            ),
            LivePvclockError::ProbeFailed(e) => write!(f, "probing the page failed with errno {e}"),
            LivePvclockError::NeverSettled { version } => {
                write!(f, "pvclock version stayed {version} (odd or zero) for {SETTLE_TIMEOUT:?}")
            }
            LivePvclockError::BadScale { mul, shift } => {
                write!(f, "unusable pvclock scale: mul {mul}, shift {shift}")
            }
            LivePvclockError::UnknownFlags(fl) => write!(f, "unknown pvclock flags {fl:#04x}"),
        }
    }
}

impl std::error::Error for LivePvclockError {}

/// One consistent copy of a pvclock area's fields (taken under its version
/// protocol), validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PvclockParams {
    /// Even, non-zero version the copy was taken at.
    pub version: u32,
    /// TSC value at `system_time`.
    pub tsc_timestamp: u64,
    /// Nanoseconds at `tsc_timestamp`.
    pub system_time: u64,
    /// 32.32 multiplier (non-zero).
    pub tsc_to_system_mul: u32,
    /// Pre-shift, within `-32..=32`.
    pub tsc_shift: i8,
    /// `TSC_STABLE` / `GUEST_STOPPED` only.
    pub flags: u8,
}

impl PvclockParams {
    /// Copies `area` consistently and validates it: the version must be
    /// even and non-zero (waiting at most [`SETTLE_TIMEOUT`] for an update
    /// to finish), the scale must give a TSC rate, and only known flags may
    /// be set.
    ///
    /// Uses only `Relaxed` loads plus fences, which Rust allows on
    /// read-only memory such as the vDSO page.
    pub fn read(area: &PvclockVcpuTimeInfo) -> Result<PvclockParams, LivePvclockError> {
        let start = Instant::now();
        let p = loop {
            let v = area.version.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            let p = PvclockParams {
                version: v,
                tsc_timestamp: area.tsc_timestamp.load(Ordering::Relaxed),
                system_time: area.system_time.load(Ordering::Relaxed),
                tsc_to_system_mul: area.tsc_to_system_mul.load(Ordering::Relaxed),
                tsc_shift: area.tsc_shift.load(Ordering::Relaxed),
                flags: area.flags.load(Ordering::Relaxed),
            };
            fence(Ordering::Acquire);
            if v != 0 && v & 1 == 0 && area.version.load(Ordering::Relaxed) == v {
                break p;
            }
            if start.elapsed() >= SETTLE_TIMEOUT {
                return Err(LivePvclockError::NeverSettled { version: v });
            }
            std::thread::yield_now();
        };
        if pvclock_tsc_hz_ratio(p.tsc_to_system_mul, p.tsc_shift).is_none() {
            return Err(LivePvclockError::BadScale {
                mul: p.tsc_to_system_mul,
                shift: p.tsc_shift,
            });
        }
        if p.flags & !(PVCLOCK_TSC_STABLE_BIT | PVCLOCK_GUEST_STOPPED) != 0 {
            return Err(LivePvclockError::UnknownFlags(p.flags));
        }
        Ok(p)
    }

    /// The TSC rate as `(numerator, denominator)` Hz
    /// (see [`pvclock_tsc_hz_ratio`]).
    pub fn tsc_hz_ratio(&self) -> (u128, u128) {
        // `read` rejected every scale for which this is `None`.
        pvclock_tsc_hz_ratio(self.tsc_to_system_mul, self.tsc_shift).unwrap_or((0, 1))
    }

    /// Whether the host set `PVCLOCK_TSC_STABLE_BIT`.
    pub fn tsc_stable(&self) -> bool {
        self.flags & PVCLOCK_TSC_STABLE_BIT != 0
    }
}

/// The process's live pvclock page, found and validated.
#[derive(Clone, Copy, Debug)]
pub struct LivePvclock {
    area: &'static PvclockVcpuTimeInfo,
    mapping: VclockMapping,
    params: PvclockParams,
}

impl LivePvclock {
    /// The page, for the kvmclock read path. Read-only: storing to it
    /// crashes the process (`SIGSEGV`); atomic `Relaxed` loads are the only
    /// accesses Rust guarantees on read-only memory.
    pub fn area(&self) -> &'static PvclockVcpuTimeInfo {
        self.area
    }

    /// Where it was found.
    pub fn mapping(&self) -> VclockMapping {
        self.mapping
    }

    /// Its virtual address.
    pub fn address(&self) -> usize {
        self.area as *const PvclockVcpuTimeInfo as usize
    }

    /// The validated copy taken when [`live_pvclock`] returned.
    pub fn params(&self) -> PvclockParams {
        self.params
    }
}

/// Finds this process's live pvclock page and validates its contents
/// (see [`PvclockParams::read`]). Read-only; never faults.
///
/// Locating and probing happen once per process; validation runs on every
/// call, so a later call sees the host's current parameters.
pub fn live_pvclock() -> Result<LivePvclock, LivePvclockError> {
    static LOCATED: OnceLock<
        Result<(&'static PvclockVcpuTimeInfo, VclockMapping), LivePvclockError>,
    > = OnceLock::new();
    let (area, mapping) = (*LOCATED.get_or_init(locate))?;
    let params = PvclockParams::read(area)?;
    Ok(LivePvclock {
        area,
        mapping,
        params,
    })
}

/// A TSC rate and where it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TscRate {
    /// Rate numerator (Hz = numerator / denominator).
    pub numerator: u128,
    /// Rate denominator.
    pub denominator: u128,
    /// Human-readable origin, for logs and selection reasons.
    pub provenance: &'static str,
}

/// The exact TSC rate the live pvclock page states, for hosted mode:
/// `clockhal_core::Frequency::from_ratio(r.numerator, r.denominator)`.
///
/// Where this fails, calibrate instead.
pub fn live_tsc_rate() -> Result<TscRate, LivePvclockError> {
    let live = live_pvclock()?;
    let (numerator, denominator) = live.params.tsc_hz_ratio();
    Ok(TscRate {
        numerator,
        denominator,
        provenance: match live.mapping {
            VclockMapping::VvarVclock => "KVM pvclock page (vDSO [vvar_vclock]) mul/shift",
            VclockMapping::VvarSecondPage => "KVM pvclock page (vDSO [vvar]) mul/shift",
        },
    })
}

/// Finds the page in `/proc/self/maps` and proves it readable.
fn locate() -> Result<(&'static PvclockVcpuTimeInfo, VclockMapping), LivePvclockError> {
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        return Err(LivePvclockError::Unsupported);
    }
    let maps = std::fs::read_to_string("/proc/self/maps")
        .map_err(|e| LivePvclockError::MapsUnreadable(e.kind()))?;
    let (start, mapping) = find_page(&maps)?;
    match probe_readable(start, PAGE) {
        Probe::Readable => {}
        Probe::Faults => return Err(LivePvclockError::NotPopulated),
        Probe::Error(e) => return Err(LivePvclockError::ProbeFailed(e)),
    }
    // SAFETY: `start` is page-aligned (so aligned for the 32-byte struct) and
    // the whole page was just proven readable. It is a vDSO special mapping
    // the kernel keeps for the process's lifetime (a process could munmap it
    // only through unsafe code of its own), so `'static` holds. Every field is
    // an atomic: the host's concurrent writes are not data races, and Rust
    // permits `Relaxed` register-sized atomic loads on read-only memory. A
    // store through the reference hits a read-only page and kills the
    // process with SIGSEGV; the compiler never invents stores to atomics.
    let area = unsafe { &*(start as *const PvclockVcpuTimeInfo) };
    Ok((area, mapping))
}

/// Address of the pvclock page, from `/proc/self/maps` text. Prefers
/// `[vvar_vclock]` (>= 6.13); falls back to `[vvar]` page 1.
fn find_page(maps: &str) -> Result<(usize, VclockMapping), LivePvclockError> {
    let range = |name: &str| {
        maps.lines().find_map(|line| {
            let mut cols = line.split_whitespace();
            let range = cols.next()?;
            if cols.nth(4)? != name {
                return None;
            }
            let (a, b) = range.split_once('-')?;
            let a = usize::from_str_radix(a, 16).ok()?;
            let b = usize::from_str_radix(b, 16).ok()?;
            Some((a, b.checked_sub(a)?))
        })
    };
    let (start, len, mapping, page) = if let Some((s, l)) = range("[vvar_vclock]") {
        (s, l, VclockMapping::VvarVclock, 0)
    } else if let Some((s, l)) = range("[vvar]") {
        (s, l, VclockMapping::VvarSecondPage, 1)
    } else {
        return Err(LivePvclockError::NoMapping);
    };
    if len < (page + 1) * PAGE || start % PAGE != 0 {
        return Err(LivePvclockError::MappingTooSmall { mapping, len });
    }
    Ok((start + page * PAGE, mapping))
}

/// Outcome of [`probe_readable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Probe {
    /// Every byte could be read.
    Readable,
    /// Reading faults (`EFAULT`): unmapped, or a mapping the kernel refuses
    /// to back.
    Faults,
    /// The probe itself failed with this errno.
    Error(i32),
}

/// Whether `len` bytes at `addr` can be read, without touching them from
/// user space: the kernel copies them into a socket, and turns a fault
/// (which would be `SIGBUS`/`SIGSEGV` for us) into `EFAULT`.
fn probe_readable(addr: usize, len: usize) -> Probe {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        use std::os::fd::AsRawFd;
        const SYS_WRITE: usize = 1;
        const EFAULT: isize = 14;
        let (tx, _rx) = match std::os::unix::net::UnixDatagram::pair() {
            Ok(p) => p,
            Err(e) => return Probe::Error(e.raw_os_error().unwrap_or(0)),
        };
        let ret: isize;
        // SAFETY: write(2) only reads `addr..addr + len` from inside the
        // kernel, where a fault becomes EFAULT instead of a signal; it writes
        // no user memory. The syscall clobbers rcx and r11 (declared) and
        // does not touch the user stack.
        unsafe {
            core::arch::asm!(
                "syscall",
                inlateout("rax") SYS_WRITE as isize => ret,
                in("rdi") tx.as_raw_fd() as usize,
                in("rsi") addr,
                in("rdx") len,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack, readonly, preserves_flags),
            );
        }
        if ret == len as isize {
            Probe::Readable
        } else if ret == -EFAULT {
            Probe::Faults
        } else {
            Probe::Error(if ret < 0 { -ret as i32 } else { 0 })
        }
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    {
        let _ = (addr, len);
        Probe::Error(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::Ordering::Relaxed;

    fn area(version: u32, mul: u32, shift: i8, flags: u8) -> PvclockVcpuTimeInfo {
        let a = PvclockVcpuTimeInfo::new();
        a.version.store(version, Relaxed);
        a.tsc_timestamp.store(1000, Relaxed);
        a.system_time.store(2000, Relaxed);
        a.tsc_to_system_mul.store(mul, Relaxed);
        a.tsc_shift.store(shift, Relaxed);
        a.flags.store(flags, Relaxed);
        a
    }

    #[test]
    fn valid_area_is_copied() {
        let p = PvclockParams::read(&area(18, 3_734_754_170, -1, 1)).unwrap();
        assert_eq!(
            p,
            PvclockParams {
                version: 18,
                tsc_timestamp: 1000,
                system_time: 2000,
                tsc_to_system_mul: 3_734_754_170,
                tsc_shift: -1,
                flags: 1
            }
        );
        assert!(p.tsc_stable());
        // 10^9 * 2^33 / 3_734_754_170 = 2_300_000_000.1 Hz (this machine).
        let (n, d) = p.tsc_hz_ratio();
        assert_eq!(n / d, 2_300_000_000);
    }

    #[test]
    fn odd_or_zero_version_times_out() {
        for v in [0, 7] {
            let t = Instant::now();
            assert_eq!(
                PvclockParams::read(&area(v, 1 << 31, 0, 0)),
                Err(LivePvclockError::NeverSettled { version: v })
            );
            assert!(t.elapsed() >= SETTLE_TIMEOUT);
        }
    }

    #[test]
    fn hostile_scale_and_flags_are_rejected() {
        assert_eq!(
            PvclockParams::read(&area(2, 0, 0, 1)),
            Err(LivePvclockError::BadScale { mul: 0, shift: 0 })
        );
        assert_eq!(
            PvclockParams::read(&area(2, 1, 100, 1)),
            Err(LivePvclockError::BadScale { mul: 1, shift: 100 })
        );
        assert_eq!(
            PvclockParams::read(&area(2, 1 << 31, 0, 0x81)),
            Err(LivePvclockError::UnknownFlags(0x81))
        );
        assert!(PvclockParams::read(&area(2, 1 << 31, 0, PVCLOCK_GUEST_STOPPED)).is_ok());
        // Garbage in a page that exists is a failure, not "no page here".
        assert!(!LivePvclockError::BadScale { mul: 0, shift: 0 }.is_absent());
        assert!(!LivePvclockError::NeverSettled { version: 1 }.is_absent());
        assert!(LivePvclockError::NotPopulated.is_absent());
    }

    const MAPS_613: &str = "\
7fa3bc4cd000-7fa3bc4d1000 r--p 00000000 00:00 0                          [vvar]
7fa3bc4d1000-7fa3bc4d3000 r--p 00000000 00:00 0                          [vvar_vclock]
7fa3bc4d3000-7fa3bc4d5000 r-xp 00000000 00:00 0                          [vdso]
";
    const MAPS_OLD: &str = "\
7ffd1a1f0000-7ffd1a1f4000 r--p 00000000 00:00 0                          [vvar]
7ffd1a1f4000-7ffd1a1f6000 r-xp 00000000 00:00 0                          [vdso]
";

    #[test]
    fn finds_the_page_on_new_and_old_kernels() {
        assert_eq!(
            find_page(MAPS_613),
            Ok((0x7fa3bc4d1000, VclockMapping::VvarVclock))
        );
        assert_eq!(
            find_page(MAPS_OLD),
            Ok((0x7ffd1a1f1000, VclockMapping::VvarSecondPage))
        );
        assert_eq!(
            find_page("00400000-00401000 r-xp 00000000 08:01 1 /bin/true\n"),
            Err(LivePvclockError::NoMapping)
        );
        assert_eq!(
            find_page("7ffd1a1f0000-7ffd1a1f1000 r--p 00000000 00:00 0 [vvar]\n"),
            Err(LivePvclockError::MappingTooSmall {
                mapping: VclockMapping::VvarSecondPage,
                len: PAGE
            })
        );
        // A file that merely contains the name in its path is not the mapping.
        assert_eq!(
            find_page("00400000-00402000 r--p 00000000 08:01 1 /tmp/[vvar_vclock]x\n"),
            Err(LivePvclockError::NoMapping)
        );
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "probes memory with an inline-asm syscall Miri cannot run"
    )]
    fn probe_tells_readable_from_faulting_memory() {
        let local = [0u8; 64];
        assert_eq!(
            probe_readable(local.as_ptr() as usize, local.len()),
            Probe::Readable
        );
        // Page 0 is never mapped (vm.mmap_min_addr); reading it from user
        // space would be SIGSEGV, the probe reports it instead.
        assert_eq!(probe_readable(0, 32), Probe::Faults);
        assert_eq!(probe_readable(usize::MAX - 4095, 32), Probe::Faults);
    }
}
