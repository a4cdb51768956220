//! The thread pool every parallel loop runs on, and its size.
//!
//! The default size is the number of cores the process may use (`GPTCORE_NUM_THREADS`
//! overrides it). Results never depend on the size: work is split over disjoint outputs and
//! every reduction runs in a fixed order inside one thread.

use rayon::ThreadPool;
use std::sync::{Arc, OnceLock, RwLock};

static POOL: OnceLock<RwLock<Arc<ThreadPool>>> = OnceLock::new();

fn default_threads() -> usize {
    if let Ok(v) = std::env::var("GPTCORE_NUM_THREADS") {
        if let Ok(n) = v.trim().parse::<usize>() {
            if n >= 1 {
                return n;
            }
        }
    }
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

fn build(n: usize) -> Arc<ThreadPool> {
    Arc::new(
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .thread_name(|i| format!("gptcore-{i}"))
            .build()
            .expect("cannot start the gptcore thread pool"),
    )
}

fn cell() -> &'static RwLock<Arc<ThreadPool>> {
    POOL.get_or_init(|| RwLock::new(build(default_threads())))
}

/// The pool to run parallel work on.
pub fn pool() -> Arc<ThreadPool> {
    cell().read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Number of threads parallel work uses.
pub fn num_threads() -> usize {
    pool().current_num_threads()
}

/// Resize the pool (n >= 1). Work already running finishes on the old pool.
pub fn set_num_threads(n: usize) -> crate::Result<()> {
    if n == 0 {
        return crate::value_error!("num_threads must be >= 1, got 0");
    }
    if n > 1024 {
        return crate::value_error!("num_threads must be <= 1024, got {n}");
    }
    let mut w = cell().write().unwrap_or_else(|e| e.into_inner());
    if w.current_num_threads() != n {
        *w = build(n);
    }
    Ok(())
}

/// Run `f` on the pool (parallel iterators inside it use the pool's threads).
pub fn install<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    let p = pool();
    p.install(f)
}

/// A raw pointer that may cross threads; users guarantee disjoint writes.
#[derive(Clone, Copy)]
pub struct SendPtr<T>(pub *mut T);
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}
impl<T> SendPtr<T> {
    #[inline(always)]
    pub fn get(self) -> *mut T {
        self.0
    }
}
