//! What the kernel offers for the cross-CPU (warp) test.

/// Runs work on a second CPU while the calling CPU works too.
///
/// Implemented by the kernel (or a host test over threads). The suite uses it
/// for the warp test: the calling CPU and CPU `cpu` take turns reading a
/// source under a spinlock and look for a reading smaller than the other
/// CPU's last one.
///
/// ```
/// use clockhal_conformance::Cpus;
/// /// Host-test runner: "CPU 1" is a scoped thread.
/// struct Threads;
/// impl Cpus for Threads {
///     fn count(&self) -> usize { 2 }
///     fn run_concurrently(
///         &self,
///         _cpu: usize,
///         remote: &(dyn Fn() + Sync),
///         local: &mut dyn FnMut(),
///     ) -> Result<(), &'static str> {
///         std::thread::scope(|s| {
///             s.spawn(|| remote());
///             local();
///         });
///         Ok(())
///     }
/// }
/// ```
pub trait Cpus: Sync {
    /// Number of CPUs that can run work, including the calling one.
    fn count(&self) -> usize;

    /// Index of the calling CPU (`0..count()`). Default 0: the suite is
    /// normally run from the boot CPU.
    fn current(&self) -> usize {
        0
    }

    /// Starts `remote` on CPU `cpu`, runs `local` on the calling CPU, and
    /// returns once both have returned.
    ///
    /// `remote` borrows the caller's stack: once it has started, the
    /// implementation must not return before it has finished (a kernel
    /// that gives up waiting must stop instead). If CPU `cpu` cannot take the
    /// work at all, return `Err(reason)` without running `remote` (`local`
    /// may or may not have run); the suite reports a skip with the reason.
    fn run_concurrently(
        &self,
        cpu: usize,
        remote: &(dyn Fn() + Sync),
        local: &mut dyn FnMut(),
    ) -> Result<(), &'static str>;
}
