//! Running borrowed closures on the other CPUs: kvmclock registration, the
//! TSC warp test, and the suite's cross-CPU check.

use clockhal::tsc::{warp_participant, SyncStatus, WarpBudget, WarpReport, WarpShared};
use clockhal::x86::Hardware;
use clockhal_boot::BootHw;
use clockhal_boot::{println, smp};
use clockhal_conformance::Cpus;

/// What a posted job gets: the address of a `&(dyn Fn() + Sync)` on the
/// poster's stack.
type Job<'a> = &'a (dyn Fn() + Sync);

fn trampoline(arg: usize) {
    // SAFETY: `arg` is the address of a `Job` that `start` created and that
    // stays alive until the job is known to have finished (`finish` never
    // returns otherwise).
    let job: &Job<'_> = unsafe { &*(arg as *const Job<'_>) };
    job()
}

/// Starts `*job` on `cpu`. The caller must pass the result to [`finish`]
/// before `job` goes out of scope.
fn start(cpu: usize, job: &Job<'_>) -> Result<smp::Pending, smp::SmpError> {
    smp::post(cpu, trampoline, job as *const Job<'_> as usize)
}

/// Waits for a started job. A job that does not finish still borrows the
/// caller's stack, so the kernel stops instead of returning.
fn finish(pending: smp::Pending) {
    let cpu = pending.cpu();
    if let Err(e) = pending.wait() {
        println!("kernel: job on cpu {cpu} did not finish ({e:?}); stopping");
        clockhal_boot::exit_qemu(clockhal_boot::EXIT_FAILURE);
    }
}

/// Runs `f` on `cpu` and waits for it.
pub fn run_on(cpu: usize, f: &(dyn Fn() + Sync)) -> Result<(), smp::SmpError> {
    let job: Job<'_> = f;
    let pending = start(cpu, &job)?;
    finish(pending);
    Ok(())
}

/// The suite's view of the CPUs clockhal-boot started.
pub struct BootCpus;

impl Cpus for BootCpus {
    fn count(&self) -> usize {
        smp::cpu_count()
    }

    fn current(&self) -> usize {
        smp::current_cpu()
    }

    fn run_concurrently(
        &self,
        cpu: usize,
        remote: &(dyn Fn() + Sync),
        local: &mut dyn FnMut(),
    ) -> Result<(), &'static str> {
        let job: Job<'_> = remote;
        let pending = start(cpu, &job).map_err(|e| match e {
            smp::SmpError::NoSuchCpu => "no such CPU",
            smp::SmpError::CurrentCpu => "that is the calling CPU",
            smp::SmpError::Busy => "CPU busy with an earlier job",
            _ => "could not post the job",
        })?;
        local();
        finish(pending);
        Ok(())
    }
}

/// The TSC warp test (clockhal-tsc's) between CPU 0 and every other CPU,
/// one pair at a time; prints each pair's verdict and evidence.
pub fn tsc_warp_test(hw: BootHw, cpus: usize) -> SyncStatus {
    if cpus <= 1 {
        return SyncStatus::SingleCpu;
    }
    let mut reports = [WarpReport::default(); smp::MAX_CPUS];
    let budget = WarpBudget::DEFAULT;
    let n = cpus.min(smp::MAX_CPUS);
    for (cpu, report) in reports.iter_mut().enumerate().take(n).skip(1) {
        let shared = WarpShared::new();
        let remote = || {
            warp_participant(&hw, &shared, cpu, &budget);
        };
        let job: Job<'_> = &remote;
        let t0 = hw.rdtsc();
        match start(cpu, &job) {
            Ok(pending) => {
                *report = warp_participant(&hw, &shared, 0, &budget);
                finish(pending);
            }
            Err(e) => println!("kernel: tsc warp test: cpu {cpu} unavailable ({e:?})"),
        }
        let took = hw.rdtsc().wrapping_sub(t0);
        println!("kernel: tsc warp test cpu 0 <-> {cpu}: {report}; took {took} ticks");
    }
    SyncStatus::from_reports(&reports[1..n])
}
