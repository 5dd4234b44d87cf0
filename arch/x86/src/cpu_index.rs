//! How a [`Native`](crate::Native) token learns the calling CPU: a type,
//! not a run-time choice, so a read compiles to exactly what its strategy
//! needs (a one-CPU kernel's index is the constant 0, an OS's own index
//! function is inlined) and tests nothing about it at run time.

use core::fmt;

/// The calling CPU's index for clockhal's per-CPU state, and what may be
/// assumed of it. Implemented by [`NoCpuIndex`], [`OneCpu`], [`CpuIndexFn`],
/// or by an OS for its own per-CPU field (a `gs:`-relative load), which a
/// read then inlines:
///
/// ```
/// use clockhal_x86::{CpuIndex, Hardware, Native};
/// #[derive(Clone, Copy, Debug)]
/// struct ThisCpu;
/// impl CpuIndex for ThisCpu {
///     fn index(&self) -> usize {
///         0 // e.g. `mov rax, gs:[CPU_NUMBER]`
///     }
/// }
/// let hw = Native::hosted().with_cpu(ThisCpu);
/// assert_eq!(hw.cpu_index(), 0);
/// ```
///
/// A wrong index cannot cause undefined behaviour (the per-CPU cells are
/// atomics), only wrong or non-monotonic time; that is why implementing it
/// is safe.
pub trait CpuIndex: Copy + Send + Sync + fmt::Debug {
    /// Whether [`index`](Self::index) names the calling CPU for a whole
    /// clock read by construction (a constant, one per thread), so a read
    /// takes it once; `false` (the default): every read also confirms
    /// after the TSC read that it did not change
    /// ([`Hardware::cpu_index_is_fixed`](crate::Hardware::cpu_index_is_fixed)).
    const FIXED: bool = false;
    /// Whether the index is truthful (distinct per CPU), so the calling
    /// CPU's own cells may be raised with an unlocked `cmpxchg`
    /// ([`cpu_local_max`](crate::cpu_local_max)); `false`: with a locked
    /// `fetch_max`, correct on any number of CPUs sharing one index.
    const LOCAL: bool = true;
    /// The calling CPU, `0..cpu_count`, unchanged for the duration of a
    /// clock read (interrupts may run in between, a migration may not).
    /// Interrupt-safe: must be (NMI too; no lock).
    fn index(&self) -> usize;
}

/// No index: every CPU is 0, and shared state is updated with locked
/// instructions (correct on any number of CPUs). [`Native::new`](crate::Native::new)'s.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoCpuIndex;

impl CpuIndex for NoCpuIndex {
    const FIXED: bool = true;
    const LOCAL: bool = false;
    #[inline(always)]
    fn index(&self) -> usize {
        0
    }
}

/// One CPU (or clockhal kept to one): index 0, and interrupts are the only
/// concurrency, so per-CPU state is updated without locks.
#[derive(Clone, Copy, Debug, Default)]
pub struct OneCpu;

impl CpuIndex for OneCpu {
    const FIXED: bool = true;
    #[inline(always)]
    fn index(&self) -> usize {
        0
    }
}

/// The OS's index through a function pointer (called before the TSC read
/// and, where the source's map is per CPU and not ordered across CPUs,
/// again after it: a kernel that migrates a reader is caught, not
/// trusted). An OS that can name its index as a type of its own
/// ([`CpuIndex`]) saves the indirect calls.
#[derive(Clone, Copy, Debug)]
pub struct CpuIndexFn(pub fn() -> usize);

impl CpuIndex for CpuIndexFn {
    #[inline(always)]
    fn index(&self) -> usize {
        (self.0)()
    }
}
