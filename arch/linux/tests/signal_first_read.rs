//! A thread's first clock read may be a signal handler's (signals are a
//! hosted thread's interrupts): claiming its slot must not allocate. Found
//! by red-team round 7: the claim registered a thread-exit destructor
//! through glibc's `__cxa_thread_atexit_impl`, which calls `calloc`; a
//! handler that interrupted `malloc` then waited for the arena lock its own
//! thread held, for ever.

use clockhal_linux::HostedHw;
use clockhal_x86::Hardware;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

static HW: OnceLock<HostedHw> = OnceLock::new();
static HANDLED: AtomicU64 = AtomicU64::new(0);
static SLOT_SEEN: AtomicUsize = AtomicUsize::new(usize::MAX);

extern "C" fn on_sigusr1(_: libc::c_int) {
    if let Some(hw) = HW.get() {
        SLOT_SEEN.store(hw.cpu_index(), SeqCst);
    }
    HANDLED.fetch_add(1, SeqCst);
}

/// Ends the process without allocating (the stuck thread holds its malloc
/// arena's lock, which a panic's message might need).
fn deadlocked() -> ! {
    let msg = b"DEADLOCK: a signal handler's first clock read never returned\n";
    // SAFETY: writes a static buffer to stderr, then ends the process.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::_exit(42)
    }
}

#[test]
fn a_first_read_in_a_signal_handler_that_interrupted_malloc_returns() {
    let hw = HW.get_or_init(HostedHw::new);
    // SAFETY: the handler only reads the slot index and bumps atomics.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigusr1 as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
    }
    for _ in 0..300 {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let s2 = stop.clone();
        let worker = std::thread::spawn(move || {
            // SAFETY: the calling thread's own handle.
            tx.send(unsafe { libc::pthread_self() }).unwrap();
            // Allocation-heavy: the signal most likely lands inside malloc.
            let mut keep: Vec<Vec<u8>> = Vec::new();
            let mut i = 0usize;
            while !s2.load(Relaxed) {
                keep.push(Vec::with_capacity(2048 + (i * 4099) % 60000));
                if keep.len() > 64 {
                    keep.clear();
                }
                i += 1;
            }
            // The slot the handler claimed stays the thread's.
            HW.get().unwrap().cpu_index()
        });
        let thread = rx.recv().unwrap();
        std::thread::sleep(Duration::from_micros(200));
        let before = HANDLED.load(SeqCst);
        // SAFETY: `thread` is alive until `stop` is set and it is joined.
        unsafe { libc::pthread_kill(thread, libc::SIGUSR1) };
        let t0 = Instant::now();
        while HANDLED.load(SeqCst) == before {
            if t0.elapsed() > Duration::from_secs(5) {
                deadlocked();
            }
            std::thread::yield_now();
        }
        stop.store(true, Relaxed);
        let after = worker.join().unwrap();
        assert_eq!(after, SLOT_SEEN.load(SeqCst));
    }
    // Every worker gave its slot back at exit: one more thread gets one.
    let last = std::thread::spawn(|| HW.get().unwrap().cpu_index())
        .join()
        .unwrap();
    assert!(last < clockhal_core::PER_CPU_SLOTS - 1, "slot {last}");
    let _ = hw;
}
