//! Multiprocessor support: start the other CPUs and hand them work.
//!
//! [`start_aps`] finds the CPUs in the ACPI MADT and starts each with
//! INIT-SIPI-SIPI through the boot CPU's local APIC. Started CPUs get dense
//! indices `1..cpu_count()` and then spin on a per-CPU mailbox: [`post`] puts
//! a `fn(usize)` and an argument there, the CPU runs it and reports
//! completion, and [`Pending::wait`] waits for that (bounded). [`run_on`]
//! does both. All waits time out instead of hanging; a CPU that does not come
//! up within [`AP_START_TIMEOUT_MS`] is reported on the console, put back in
//! INIT state and left out.
//!
//! Idle CPUs spin with PAUSE (no interrupts are used), so each started vCPU
//! keeps a host CPU busy. That keeps the hand-off latency low, which
//! rendezvous-style tests (TSC warp) want.

use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::lapic::{self, Lapic};
use crate::percpu;
use crate::timeout::{delay_us, Deadline};
use crate::trampoline::Trampoline;
use crate::{acpi, idt, msr, start_info};

pub use crate::percpu::{current_cpu, MAX_CPUS};

/// How long [`start_aps`] waits for one AP to reach Rust code.
pub const AP_START_TIMEOUT_MS: u64 = 1_000;
/// How long [`run_on`] and [`Pending::wait`] wait for a job.
pub const JOB_TIMEOUT_MS: u64 = 10_000;
/// Stack size of each AP.
pub const AP_STACK_SIZE: usize = 64 * 1024;

/// Preferred trampoline page (SIPI vector 0x08).
const PREFERRED_TRAMPOLINE: u64 = 0x8000;

/// Number of CPUs running and taking work (starts at 1: the boot CPU).
static ONLINE: AtomicUsize = AtomicUsize::new(1);
/// Set by the first call of [`start_aps`].
static STARTED: AtomicBool = AtomicBool::new(false);

/// Why a cross-CPU request failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SmpError {
    /// No online CPU has this index.
    NoSuchCpu,
    /// [`post`] to the calling CPU itself (it would never get to run it).
    CurrentCpu,
    /// The CPU's mailbox holds a job that has not finished yet.
    Busy,
    /// The job did not finish in time (it may still be running).
    Timeout,
}

impl fmt::Display for SmpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SmpError::NoSuchCpu => "no such CPU online",
            SmpError::CurrentCpu => "cannot post to the current CPU",
            SmpError::Busy => "CPU busy with another job",
            SmpError::Timeout => "job timed out",
        })
    }
}

/// Number of CPUs online: 1 until [`start_aps`] started others.
#[must_use]
pub fn cpu_count() -> usize {
    ONLINE.load(Ordering::Acquire)
}

/// Local APIC ID of CPU `cpu`, if it is online.
#[must_use]
pub fn apic_id(cpu: usize) -> Option<u32> {
    if cpu >= cpu_count() {
        return None;
    }
    percpu::get(cpu).map(|c| c.apic_id.load(Ordering::Relaxed))
}

/// Starts every other enabled CPU listed in the ACPI MADT (at most
/// [`MAX_CPUS`] in total) and returns [`cpu_count`].
///
/// Boot CPU only; later calls (and calls from other CPUs) just return the
/// count. Costs about 10 ms per AP (the INIT delay) plus its start-up time.
/// Without an RSDP or MADT, or without a usable local APIC, it reports why
/// and stays single-CPU.
pub fn start_aps() -> usize {
    if current_cpu() != 0 || STARTED.swap(true, Ordering::AcqRel) {
        return cpu_count();
    }
    let Some(lapic) = Lapic::this_cpu() else {
        crate::println!("clockhal-boot: no usable local APIC; staying single-CPU");
        return cpu_count();
    };
    let bsp_id = lapic.id();
    if let Some(bsp) = percpu::get(0) {
        bsp.apic_id.store(bsp_id, Ordering::Relaxed);
    }

    let mut targets = [0u32; MAX_CPUS];
    let mut count = 0;
    let rsdp = start_info::get().and_then(|info| info.rsdp_paddr);
    let have_madt = rsdp.is_some_and(|rsdp| {
        acpi::for_each_local_apic(rsdp, |cpu| {
            if cpu.apic_id != bsp_id && count < targets.len() {
                targets[count] = cpu.apic_id;
                count += 1;
            }
        })
    });
    if !have_madt {
        crate::println!("clockhal-boot: no ACPI MADT; staying single-CPU");
        return cpu_count();
    }
    if count == 0 {
        return cpu_count();
    }

    let page = trampoline_page();
    // SAFETY: `trampoline_page` picked a page below 1 MiB that is RAM and
    // outside the kernel image; the kernel never uses low memory, and the
    // page's contents are restored when `tramp` drops, after every AP is
    // either past the trampoline or back in INIT state.
    let tramp = unsafe { Trampoline::install(page) };
    for &apic_id in &targets[..count] {
        let index = cpu_count();
        if index >= MAX_CPUS {
            crate::println!("clockhal-boot: more than {MAX_CPUS} CPUs; ignoring the rest");
            break;
        }
        if start_one(lapic, &tramp, apic_id, index) {
            ONLINE.store(index + 1, Ordering::Release);
        }
    }
    drop(tramp);
    cpu_count()
}

/// INIT-SIPI-SIPI for one AP; `true` once it runs Rust code as CPU `index`.
fn start_one(lapic: Lapic, tramp: &Trampoline, apic_id: u32, index: usize) -> bool {
    let Some(slot) = percpu::get(index) else { return false };
    tramp.prepare(clockhal_boot_ap_entry, index, ap_stack_top(index));
    // SAFETY: the target is a CPU listed in the MADT that no other code uses
    // (the same holds for every IPI below); INIT parks it, the SIPIs start it
    // in our trampoline.
    let sent = unsafe { lapic.send_ipi(apic_id, lapic::ICR_INIT_ASSERT) };
    delay_us(10_000);
    // SAFETY: as above.
    let sent = sent && unsafe { lapic.send_ipi(apic_id, lapic::ICR_STARTUP | tramp.vector()) };
    let deadline = Deadline::after_ms(AP_START_TIMEOUT_MS);
    let second_sipi = Deadline::after_us(200);
    while sent && !second_sipi.expired() && !slot.online.load(Ordering::Acquire) {
        core::hint::spin_loop();
    }
    if sent && !slot.online.load(Ordering::Acquire) {
        // The second SIPI is ignored by a CPU that already left wait-for-SIPI.
        // SAFETY: as above.
        unsafe { lapic.send_ipi(apic_id, lapic::ICR_STARTUP | tramp.vector()) };
    }
    while sent && !deadline.expired() {
        if slot.online.load(Ordering::Acquire) {
            return true;
        }
        core::hint::spin_loop();
    }
    // Late or dead: put it back in wait-for-SIPI so it cannot run on with
    // this index and stack while the next AP uses them.
    // SAFETY: as above.
    unsafe { lapic.send_ipi(apic_id, lapic::ICR_INIT_ASSERT) };
    slot.online.store(false, Ordering::Release);
    crate::println!(
        "clockhal-boot: CPU with APIC ID {apic_id} did not start within {AP_START_TIMEOUT_MS} ms (IPIs {}); continuing without it",
        if sent { "sent" } else { "not delivered" }
    );
    false
}

/// A page below 1 MiB for the trampoline: 0x8000 unless the memory map says
/// it is not RAM, else the highest RAM page below 0x9F000.
fn trampoline_page() -> u64 {
    let map = start_info::get().map_or(&[][..], |info| info.memory_map);
    let is_ram = |page: u64| {
        map.iter()
            .any(|r| r.is_ram() && r.base <= page && page + 4096 <= r.base.saturating_add(r.size))
    };
    if map.is_empty() || is_ram(PREFERRED_TRAMPOLINE) {
        return PREFERRED_TRAMPOLINE;
    }
    (1..0x9F)
        .rev()
        .map(|n: u64| n << 12)
        .find(|&page| is_ram(page))
        .unwrap_or(PREFERRED_TRAMPOLINE)
}

/// Stacks of CPUs 1.., 16-byte aligned.
#[repr(C, align(16))]
struct ApStacks([[u8; AP_STACK_SIZE]; MAX_CPUS - 1]);

// Written only by the CPU that owns each stack; the static is never read
// through Rust references.
static mut AP_STACKS: ApStacks = ApStacks([[0; AP_STACK_SIZE]; MAX_CPUS - 1]);

fn ap_stack_top(index: usize) -> u64 {
    let base = core::ptr::addr_of!(AP_STACKS) as u64;
    base + (index as u64) * AP_STACK_SIZE as u64 // top of stack index-1
}

/// First Rust code on an AP (called by the trampoline on its own stack).
extern "C" fn clockhal_boot_ap_entry(index: usize) -> ! {
    idt::load(); // first: any fault from here on gets reported
    let apic_id = Lapic::this_cpu().map_or(crate::cpu::initial_apic_id(), Lapic::id);
    percpu::init_this_cpu(index, apic_id);
    msr::set_tsc_aux(index);
    let Some(slot) = percpu::get(index) else {
        crate::cpu::halt_forever()
    };
    slot.online.store(true, Ordering::Release);
    slot.mailbox.serve()
}

// Mailbox states.
const IDLE: u32 = 0;
const CLAIMED: u32 = 1;
const POSTED: u32 = 2;
const RUNNING: u32 = 3;

/// One CPU's inbox: at most one job at a time.
pub(crate) struct Mailbox {
    state: AtomicU32,
    func: AtomicUsize,
    arg: AtomicUsize,
    /// Jobs finished so far; a [`Pending`] waits for its ticket.
    completed: AtomicU64,
}

impl Mailbox {
    pub(crate) const fn new() -> Self {
        Mailbox {
            state: AtomicU32::new(IDLE),
            func: AtomicUsize::new(0),
            arg: AtomicUsize::new(0),
            completed: AtomicU64::new(0),
        }
    }

    /// The AP's idle loop: run posted jobs forever.
    fn serve(&self) -> ! {
        loop {
            if self.state.load(Ordering::Acquire) == POSTED {
                self.state.store(RUNNING, Ordering::Relaxed);
                let raw = self.func.load(Ordering::Relaxed);
                // SAFETY: `post` stores only values obtained from a
                // `fn(usize)` before publishing POSTED (Acquire above).
                let func = unsafe { core::mem::transmute::<usize, fn(usize)>(raw) };
                func(self.arg.load(Ordering::Relaxed));
                self.completed.fetch_add(1, Ordering::Release);
                self.state.store(IDLE, Ordering::Release);
            } else {
                core::hint::spin_loop();
            }
        }
    }
}

/// A job handed to another CPU by [`post`].
#[must_use = "a posted job should be waited for"]
#[derive(Debug)]
pub struct Pending {
    cpu: usize,
    ticket: u64,
}

impl Pending {
    /// The CPU running the job.
    #[must_use]
    pub fn cpu(&self) -> usize {
        self.cpu
    }

    /// Whether the job has finished.
    #[must_use]
    pub fn is_done(&self) -> bool {
        percpu::get(self.cpu).is_some_and(|c| c.mailbox.completed.load(Ordering::Acquire) >= self.ticket)
    }

    /// Waits up to [`JOB_TIMEOUT_MS`] for the job to finish.
    ///
    /// # Errors
    /// [`SmpError::Timeout`] if it did not finish in time.
    pub fn wait(self) -> Result<(), SmpError> {
        self.wait_timeout_ms(JOB_TIMEOUT_MS)
    }

    /// Waits up to about `ms` milliseconds for the job to finish. On
    /// [`SmpError::Timeout`] the job may still be running and the CPU stays
    /// busy until it finishes.
    ///
    /// # Errors
    /// [`SmpError::Timeout`] if it did not finish in time.
    pub fn wait_timeout_ms(self, ms: u64) -> Result<(), SmpError> {
        let deadline = Deadline::after_ms(ms);
        loop {
            if self.is_done() {
                return Ok(());
            }
            if deadline.expired() {
                return Err(SmpError::Timeout);
            }
            core::hint::spin_loop();
        }
    }
}

/// Asks CPU `cpu` to run `func(arg)` and returns at once.
///
/// The job runs on that CPU's stack with interrupts off; it may print, probe
/// MSRs and post to other CPUs. `arg` is typically the address of a `'static`
/// (e.g. an atomic rendezvous); the caller keeps whatever it points to alive
/// until the job is done. A panic in the job fails the QEMU run.
///
/// # Errors
/// [`SmpError::CurrentCpu`] for the calling CPU, [`SmpError::NoSuchCpu`] for
/// a CPU that is not online, [`SmpError::Busy`] while its previous job runs.
pub fn post(cpu: usize, func: fn(usize), arg: usize) -> Result<Pending, SmpError> {
    if cpu == current_cpu() {
        return Err(SmpError::CurrentCpu);
    }
    let slot = percpu::get(cpu)
        .filter(|_| cpu < cpu_count())
        .ok_or(SmpError::NoSuchCpu)?;
    let mailbox = &slot.mailbox;
    mailbox
        .state
        .compare_exchange(IDLE, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
        .map_err(|_| SmpError::Busy)?;
    // Stable while CLAIMED: the AP only completes POSTED jobs.
    let ticket = mailbox.completed.load(Ordering::Relaxed) + 1;
    mailbox.func.store(func as usize, Ordering::Relaxed);
    mailbox.arg.store(arg, Ordering::Relaxed);
    mailbox.state.store(POSTED, Ordering::Release);
    Ok(Pending { cpu, ticket })
}

/// Runs `func(arg)` on CPU `cpu` and waits up to [`JOB_TIMEOUT_MS`] for it.
/// On the calling CPU itself it is a plain call.
///
/// # Errors
/// As for [`post`] (except `CurrentCpu`), plus [`SmpError::Timeout`].
pub fn run_on(cpu: usize, func: fn(usize), arg: usize) -> Result<(), SmpError> {
    if cpu == current_cpu() {
        func(arg);
        return Ok(());
    }
    post(cpu, func, arg)?.wait()
}
