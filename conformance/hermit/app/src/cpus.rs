//! Work on a chosen CPU, for the TSC warp test and the suite's cross-CPU
//! check. `std::thread` cannot pin a thread, so this uses Hermit's own
//! system calls (its application ABI): `sys_spawn2` with a core selector,
//! and `sys_join`.
//!
//! The CPU a task runs on is read from CPUID (initial APIC ID); that QEMU's
//! APIC IDs equal Hermit's core numbers is checked on every job, not
//! assumed: a job that lands elsewhere is reported as not run.

use clockhal_conformance::Cpus;
use core::sync::atomic::{AtomicBool, Ordering};

/// Hermit's task id.
type Tid = i32;

extern "C" {
    /// Starts `func(arg)` as a new task on core `selector` (or any, -1).
    fn sys_spawn2(
        func: unsafe extern "C" fn(usize),
        arg: usize,
        prio: u8,
        stack_size: usize,
        selector: isize,
    ) -> Tid;
    /// Waits until task `id` has finished.
    fn sys_join(id: Tid) -> i32;
}

/// Hermit's NORMAL_PRIO.
const NORMAL_PRIO: u8 = 2;
/// Stack of a job task (the suite's remote halves only read clocks).
const JOB_STACK: usize = 64 * 1024;

/// The calling CPU's initial APIC ID (CPUID leaf 1, EBX[31:24]).
pub fn current_apic_id() -> usize {
    // SAFETY: CPUID leaf 1 exists on every x86_64 CPU and has no effects.
    let leaf1 = unsafe { core::arch::x86_64::__cpuid(1) };
    (leaf1.ebx >> 24) as usize
}

/// One job: what to run, where, and what happened.
struct Job<'a> {
    remote: &'a (dyn Fn() + Sync),
    cpu: usize,
    wrong_cpu: AtomicBool,
}

unsafe extern "C" fn job_entry(arg: usize) {
    // SAFETY: `arg` is the address of a `Job` that `run_on` keeps alive
    // until `sys_join` says this task has finished.
    let job = unsafe { &*(arg as *const Job<'_>) };
    if current_apic_id() == job.cpu {
        (job.remote)();
    } else {
        job.wrong_cpu.store(true, Ordering::SeqCst);
    }
}

/// The CPUs Hermit runs on.
pub struct HermitCpus {
    count: usize,
}

impl HermitCpus {
    /// `count` CPUs (from `available_parallelism`).
    pub fn new(count: usize) -> HermitCpus {
        HermitCpus { count }
    }
}

impl Cpus for HermitCpus {
    fn count(&self) -> usize {
        self.count
    }

    fn current(&self) -> usize {
        current_apic_id()
    }

    fn run_concurrently(
        &self,
        cpu: usize,
        remote: &(dyn Fn() + Sync),
        local: &mut dyn FnMut(),
    ) -> Result<(), &'static str> {
        if cpu >= self.count {
            return Err("no such CPU");
        }
        if cpu == self.current() {
            return Err("that is the calling CPU");
        }
        let job = Job {
            remote,
            cpu,
            wrong_cpu: AtomicBool::new(false),
        };
        // SAFETY: `job` outlives the task: we join it below before `job`
        // goes out of scope, and never return earlier.
        let tid = unsafe {
            sys_spawn2(
                job_entry,
                &job as *const Job<'_> as usize,
                NORMAL_PRIO,
                JOB_STACK,
                cpu as isize,
            )
        };
        if tid < 0 {
            return Err("Hermit could not start a task on that CPU");
        }
        local();
        // SAFETY: `tid` is the task just spawned; joining it has no other
        // effect. Its result only says whether the id was known.
        if unsafe { sys_join(tid) } != 0 {
            // The task can no longer be waited for: `job` must not be freed
            // while it might still run.
            println!("hermit-app: cannot join task {tid}; stopping");
            std::process::abort();
        }
        if job.wrong_cpu.load(Ordering::SeqCst) {
            return Err("Hermit started the task on another CPU than asked");
        }
        Ok(())
    }
}
