//! The team of threads every parallel loop runs on, and its size.
//!
//! A team is the calling thread plus `n - 1` workers that live as long as the team. A parallel
//! loop publishes one job (a closure and the number of participants), the caller takes part
//! as participant 0, and the items of the loop are handed out in order from a shared counter.
//! After a job, workers keep watching for the next one for a short while ([`SPIN`]) before
//! they sleep, so the back-to-back loops of a forward pass or a decode step start in well under
//! a microsecond instead of paying an operating-system wake-up each time.
//!
//! A worker joins a job before it takes part, and the caller closes the job once it has run
//! out of items: a worker that had not joined by then (one the operating system had not let
//! run, on a machine with more runnable threads than cores) sits the job out, and the caller
//! waits only for the workers that joined. So a loop never waits for a thread to be scheduled
//! just to find that nothing is left to do. A caller still waiting after [`CALLER_SPIN`]
//! sleeps until the last joined worker wakes it, leaving its core to the threads it waits for.
//!
//! The default size is the number of cores the process may use (`GPTCORE_NUM_THREADS`
//! overrides it). Results never depend on the size: work is split over disjoint outputs and
//! every reduction runs in a fixed order inside one item. A loop started while the team is busy
//! (another Python thread, or a loop inside a loop) runs on its calling thread alone.
//!
//! A panic inside an item is caught on the thread that raised it and raised again on the
//! calling thread once every participant has stopped, so borrowed data outlives all uses.

use std::any::Any;
use std::cell::UnsafeCell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle worker keeps watching for the next job before it sleeps.
pub const SPIN: Duration = Duration::from_micros(500);

/// How long the caller watches for the joined workers to finish before it sleeps.
pub const CALLER_SPIN: Duration = Duration::from_micros(50);

/// The entry word: `(job counter << ENTRY_JOB_SHIFT) | CLOSED | workers joined`.
const ENTRY_JOB_SHIFT: u32 = 20;
/// Set in the entry word once the caller has closed the job to late workers.
const CLOSED: u64 = 1 << 19;
/// The entry word's count of joined workers.
const JOINED_MASK: u64 = CLOSED - 1;

/// Participants in the job word's low bits; the job counter above them.
const ACTIVE_BITS: u32 = 16;
/// Largest team size (the job word's low bits hold the participant count).
pub const MAX_THREADS: usize = 1024;

type Body<'a> = dyn Fn(usize) + Sync + 'a;

struct Shared {
    /// `(job counter << ACTIVE_BITS) | participants`; a new value means a new job.
    job_word: AtomicU64,
    /// The current job's body. Written by the caller only while no worker can be reading it:
    /// before the job word announces it, and after every participant has reported back.
    body: UnsafeCell<Option<*const Body<'static>>>,
    /// Who may still join the current job: its counter (the job word's, truncated), whether
    /// the caller has closed it, and how many workers joined. Workers join by incrementing it
    /// while it names their job and is open.
    entry: AtomicU64,
    /// Joined workers that have finished the current job.
    finished: AtomicUsize,
    /// The thread that published the current job (read by workers that joined it).
    caller: UnsafeCell<Option<std::thread::Thread>>,
    /// Set while the caller sleeps (or is about to) waiting for joined workers.
    caller_sleeping: AtomicBool,
    /// The first panic raised by a worker during the current job.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    /// Per worker: set while it sleeps (or is about to), so the caller knows to wake it.
    sleeping: Vec<AtomicBool>,
    shutdown: AtomicBool,
}

// SAFETY: `body` is only accessed under the protocol described on the field.
unsafe impl Sync for Shared {}
unsafe impl Send for Shared {}

struct Team {
    size: usize,
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    jobs: u64,
    pid: u32,
}

impl Team {
    fn new(size: usize) -> Team {
        let shared = Arc::new(Shared {
            job_word: AtomicU64::new(0),
            body: UnsafeCell::new(None),
            entry: AtomicU64::new(0),
            finished: AtomicUsize::new(0),
            caller: UnsafeCell::new(None),
            caller_sleeping: AtomicBool::new(false),
            panic: Mutex::new(None),
            sleeping: (0..size).map(|_| AtomicBool::new(false)).collect(),
            shutdown: AtomicBool::new(false),
        });
        let mut workers = Vec::with_capacity(size.saturating_sub(1));
        for tid in 1..size {
            let s = shared.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("gptcore-{tid}"))
                .spawn(move || worker(s, tid));
            match spawned {
                Ok(h) => workers.push(h),
                // The system refused another thread: run with the ones we have.
                Err(_) => break,
            }
        }
        Team {
            size: workers.len() + 1,
            shared,
            workers,
            jobs: 0,
            pid: std::process::id(),
        }
    }

    fn stop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        for h in &self.workers {
            h.thread().unpark();
        }
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
    }

    /// Run `body(tid)` on the caller (participant 0) and on those of participants 1..active
    /// that join before the caller runs out of items, and wait for all of them.
    fn run(&mut self, active: usize, body: &Body<'_>) {
        let s = &*self.shared;
        // SAFETY: every worker that joined the previous job has finished it, and workers that
        // did not join never read `body`; the lifetime is erased only until this function
        // returns, and it returns after every participant has stopped using it.
        unsafe {
            *s.body.get() = Some(
                std::mem::transmute::<&Body<'_>, &'static Body<'static>>(body)
                    as *const Body<'static>,
            );
        }
        self.jobs += 1;
        // SAFETY: as for `body`: no worker reads `caller` outside a job it joined, and every
        // joined worker of the previous job has finished.
        unsafe { *s.caller.get() = Some(std::thread::current()) };
        s.finished.store(0, Ordering::SeqCst);
        s.entry
            .store(entry_of(self.jobs) << ENTRY_JOB_SHIFT, Ordering::SeqCst);
        s.job_word
            .store((self.jobs << ACTIVE_BITS) | active as u64, Ordering::SeqCst);
        // The wake-up handshake is a store-buffering pattern: here the job word is stored and
        // then each worker's `sleeping` flag is loaded; a worker going to sleep stores its flag
        // and then loads the job word (see `worker`). Sequential consistency forbids both loads
        // seeing the old values (the caller skipping the unpark while the worker parks on a job
        // it never saw). The SeqCst store and load alone promise that, but an emulator may
        // translate them into instructions that do not keep the store before the later load
        // (QEMU's user mode on an x86-64 host lets an aarch64 STLR pass a later LDAR), and a
        // lost wake-up hangs the loop. An explicit full fence between the store and the load
        // on both sides keeps the order there too; natively it costs one barrier per job.
        std::sync::atomic::fence(Ordering::SeqCst);
        for tid in 1..active {
            if s.sleeping[tid].load(Ordering::SeqCst) {
                self.workers[tid - 1].thread().unpark();
            }
        }
        let mine = catch_unwind(AssertUnwindSafe(|| body(0)));
        // The caller has run out of items (or panicked): close the job, then wait for the
        // workers that joined it. One that joins no more cannot read `body` or `caller` again.
        let joined = (s.entry.fetch_or(CLOSED, Ordering::AcqRel) & JOINED_MASK) as usize;
        let mut since: Option<Instant> = None;
        let mut spins = 0u32;
        while s.finished.load(Ordering::Acquire) != joined {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64)
                && since.get_or_insert_with(Instant::now).elapsed() > CALLER_SPIN
            {
                // The same store-buffering handshake as the workers' sleep (see the fence
                // above): the flag before the count here, the count before the flag in
                // `worker`; park's token covers an unpark that comes before the park.
                s.caller_sleeping.store(true, Ordering::SeqCst);
                std::sync::atomic::fence(Ordering::SeqCst);
                if s.finished.load(Ordering::SeqCst) != joined {
                    std::thread::park();
                }
                s.caller_sleeping.store(false, Ordering::SeqCst);
                continue;
            }
            std::hint::spin_loop();
        }
        let theirs = s.panic.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Err(p) = mine {
            resume_unwind(p);
        }
        if let Some(p) = theirs {
            resume_unwind(p);
        }
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        self.stop();
    }
}

fn worker(s: Arc<Shared>, tid: usize) {
    let mut seen = 0u64;
    loop {
        // Wait for a job word other than the last one seen: spin a while, then sleep.
        let mut since: Option<Instant> = None;
        let mut spins = 0u32;
        let word = loop {
            let w = s.job_word.load(Ordering::Acquire);
            if w != seen {
                break w;
            }
            if s.shutdown.load(Ordering::Relaxed) {
                return;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) && since.get_or_insert_with(Instant::now).elapsed() > SPIN {
                s.sleeping[tid].store(true, Ordering::SeqCst);
                // The other half of the handshake in `Team::run`: the flag must be visible
                // before the job word (and `shutdown`) are read, or this worker could park on a
                // job whose caller saw it awake and did not unpark it. See the fence there.
                std::sync::atomic::fence(Ordering::SeqCst);
                if s.job_word.load(Ordering::SeqCst) == seen && !s.shutdown.load(Ordering::SeqCst) {
                    std::thread::park();
                }
                s.sleeping[tid].store(false, Ordering::SeqCst);
                since = None;
                continue;
            }
            std::hint::spin_loop();
        };
        seen = word;
        let active = (word & ((1 << ACTIVE_BITS) - 1)) as usize;
        if tid >= active || !join(&s, word >> ACTIVE_BITS) {
            continue;
        }
        // SAFETY: the caller wrote `body` and `caller` before publishing this job word and
        // keeps them until every joined worker has finished (it waits for `finished`).
        let body = unsafe { (*s.body.get()).expect("job without a body") };
        let caller = unsafe { (*s.caller.get()).clone() };
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| unsafe { (*body)(tid) })) {
            s.panic
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert(p);
        }
        s.finished.fetch_add(1, Ordering::SeqCst);
        // The other half of the caller's sleep handshake in `Team::run`.
        std::sync::atomic::fence(Ordering::SeqCst);
        if s.caller_sleeping.load(Ordering::SeqCst) {
            if let Some(t) = caller {
                t.unpark();
            }
        }
    }
}

/// A job counter as the entry word holds it (its low bits; a worker would have to miss
/// 2^44 jobs between reading the job word and joining for two jobs to look alike).
fn entry_of(job: u64) -> u64 {
    job & ((1 << (64 - ENTRY_JOB_SHIFT)) - 1)
}

/// Joins job `job` if the caller has not closed it yet; false: sit it out.
fn join(s: &Shared, job: u64) -> bool {
    let mut e = s.entry.load(Ordering::Acquire);
    loop {
        if e >> ENTRY_JOB_SHIFT != entry_of(job) || e & CLOSED != 0 {
            return false;
        }
        match s
            .entry
            .compare_exchange_weak(e, e + 1, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => return true,
            Err(now) => e = now,
        }
    }
}

static TEAM: Mutex<Option<Team>> = Mutex::new(None);
/// The size parallel work uses (0 until first asked).
static SIZE: AtomicUsize = AtomicUsize::new(0);

fn default_threads() -> usize {
    if let Ok(v) = std::env::var("GPTCORE_NUM_THREADS") {
        if let Ok(n) = v.trim().parse::<usize>() {
            if n >= 1 {
                return n.min(MAX_THREADS);
            }
        }
    }
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(MAX_THREADS)
}

/// Number of threads parallel work uses.
pub fn num_threads() -> usize {
    match SIZE.load(Ordering::Relaxed) {
        0 => {
            let n = default_threads();
            // Another thread may have set a size meanwhile; keep theirs.
            match SIZE.compare_exchange(0, n, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => n,
                Err(now) => now,
            }
        }
        n => n,
    }
}

/// Set the number of threads (1 ..= 1024). Loops already running finish on the old team.
pub fn set_num_threads(n: usize) -> crate::Result<()> {
    if n == 0 {
        return crate::value_error!("num_threads must be >= 1, got 0");
    }
    if n > MAX_THREADS {
        return crate::value_error!("num_threads must be <= {MAX_THREADS}, got {n}");
    }
    let mut team = TEAM.lock().unwrap_or_else(|e| e.into_inner());
    SIZE.store(n, Ordering::Relaxed);
    if team.as_ref().is_some_and(|t| t.size != n) {
        // Dropping the old team stops and joins its workers.
        *team = None;
    }
    Ok(())
}

std::thread_local! {
    /// Whether this thread is running a loop's body (see [`available`]).
    static IN_BODY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Threads a loop started here would run on: 1 inside a loop's body (the team is this loop's,
/// so a loop inside it runs on its calling thread alone), else [`num_threads`]. For plans that
/// cut work into items for the threads: a plan made for two threads inside an item ran its
/// items one after the other on one, in pieces cut smaller than one thread needs.
pub fn available() -> usize {
    if IN_BODY.with(|b| b.get()) {
        1
    } else {
        num_threads()
    }
}

/// Run `body(tid)` on up to `want` participants (tid 0 is the calling thread). Every
/// participant must share out the work itself (see [`parallel_for`]); a body run by one
/// participant alone must do all of it.
fn run(want: usize, body: &Body<'_>) {
    /// Restores the flag it replaced when dropped (after a panic too).
    struct Inside(bool);
    impl Drop for Inside {
        fn drop(&mut self) {
            IN_BODY.with(|b| b.set(self.0));
        }
    }
    let inside = |tid: usize| {
        let _was = Inside(IN_BODY.with(|b| b.replace(true)));
        body(tid)
    };
    let body: &Body<'_> = &inside;
    let want = want.min(num_threads());
    if want <= 1 {
        return body(0);
    }
    let mut guard = match TEAM.try_lock() {
        Ok(g) => g,
        Err(TryLockError::Poisoned(e)) => e.into_inner(),
        // Busy: another thread's loop, or this loop's own body. Run here, alone.
        Err(TryLockError::WouldBlock) => return body(0),
    };
    let size = num_threads();
    if guard.as_ref().is_some_and(|t| t.pid != std::process::id()) {
        // A forked child inherits the team's state but not its threads: start a new team
        // (the old one's threads do not exist here, so it is forgotten, not joined).
        std::mem::forget(guard.take());
    }
    let team = guard.get_or_insert_with(|| Team::new(size));
    let active = want.min(team.size);
    if active <= 1 {
        return body(0);
    }
    team.run(active, body);
}

/// Run `f(i)` for every `i` in `0..n`, on up to [`num_threads`] threads. Items are handed out
/// in increasing order, one at a time; `f` must only write what item `i` owns.
pub fn parallel_for(n: usize, f: impl Fn(usize) + Sync) {
    parallel_for_init(n, || (), |_, i| f(i));
}

/// [`parallel_for`] with per-thread scratch state made by `init` on first use.
pub fn parallel_for_init<S>(
    n: usize,
    init: impl Fn() -> S + Sync,
    f: impl Fn(&mut S, usize) + Sync,
) {
    if n == 0 {
        return;
    }
    if n == 1 {
        return f(&mut init(), 0);
    }
    let next = AtomicUsize::new(0);
    let body = |_tid: usize| {
        let mut state: Option<S> = None;
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= n {
                break;
            }
            f(state.get_or_insert_with(&init), i);
        }
    };
    run(n, &body);
}

/// A raw pointer that may cross threads; users guarantee disjoint writes.
pub struct SendPtr<T>(pub *mut T);
impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SendPtr<T> {}
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}
impl<T> SendPtr<T> {
    #[inline(always)]
    pub fn get(self) -> *mut T {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn every_item_runs_once_at_any_size() {
        for threads in [1, 2, 3, 5] {
            set_num_threads(threads).unwrap();
            for n in [0, 1, 2, 3, 7, 64, 1000] {
                let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
                parallel_for(n, |i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                });
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
            }
        }
        set_num_threads(2).unwrap();
    }

    #[test]
    fn nested_loops_and_panics() {
        set_num_threads(3).unwrap();
        let total = AtomicUsize::new(0);
        parallel_for(4, |_| {
            // The team is busy: this inner loop runs on its own thread, completely.
            parallel_for(10, |j| {
                total.fetch_add(j, Ordering::Relaxed);
            });
        });
        assert_eq!(total.load(Ordering::Relaxed), 4 * 45);
        for _ in 0..3 {
            let r = catch_unwind(|| {
                parallel_for(16, |i| {
                    if i == 11 {
                        panic!("item 11");
                    }
                })
            });
            let msg = r.unwrap_err();
            assert_eq!(msg.downcast_ref::<&str>(), Some(&"item 11"));
        }
        // The team still works after the panics, also after sleeping.
        std::thread::sleep(SPIN * 4);
        let sum = AtomicUsize::new(0);
        parallel_for(100, |i| {
            sum.fetch_add(i, Ordering::Relaxed);
        });
        assert_eq!(sum.load(Ordering::Relaxed), 4950);
        set_num_threads(2).unwrap();
    }

    /// Inside a loop's body, on every participant, a loop would run alone (`available` is 1);
    /// outside, and after a body that panicked, the flag is clear again.
    #[test]
    fn available_is_one_inside_a_body() {
        let in_body = || IN_BODY.with(|b| b.get());
        for threads in [1, 2, 3] {
            set_num_threads(threads).unwrap();
            assert!(!in_body());
            let inside = AtomicUsize::new(0);
            parallel_for(64, |_| {
                if available() == 1 && in_body() {
                    inside.fetch_add(1, Ordering::Relaxed);
                }
                // A loop inside a body: its body sees the same, and leaves the flag set.
                parallel_for(2, |_| assert_eq!(available(), 1));
                assert!(in_body());
            });
            assert_eq!(inside.load(Ordering::Relaxed), 64);
            assert!(!in_body());
            let r = catch_unwind(|| parallel_for(8, |i| assert_ne!(i, 5, "item 5")));
            assert!(r.is_err());
            assert!(!in_body(), "the flag outlived a panic");
        }
        set_num_threads(2).unwrap();
    }

    /// Many short loops back to back: workers join some and miss others (the caller closes a
    /// loop as soon as its items are gone), and every item of every loop still runs once.
    #[test]
    fn short_loops_run_every_item_once() {
        for threads in [2, 3] {
            set_num_threads(threads).unwrap();
            for r in 0..20_000usize {
                let n = 2 + r % 5;
                let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
                parallel_for(n, |i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                });
                assert!(
                    hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                    "loop {r}"
                );
            }
        }
        set_num_threads(2).unwrap();
    }

    #[test]
    fn concurrent_callers() {
        set_num_threads(2).unwrap();
        std::thread::scope(|sc| {
            for t in 0..4 {
                sc.spawn(move || {
                    for r in 0..200 {
                        let sum = AtomicUsize::new(0);
                        parallel_for(50 + t + r % 7, |i| {
                            sum.fetch_add(i, Ordering::Relaxed);
                        });
                        let n = 50 + t + r % 7;
                        assert_eq!(sum.load(Ordering::Relaxed), n * (n - 1) / 2);
                    }
                });
            }
        });
    }
}
