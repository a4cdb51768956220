//! Result buffers handed back after use and given out again for later results.
//!
//! A large result (the logits of a long forward pass: 206 MB for GPT-2 small at T = 1024)
//! written to fresh memory pays a page fault and a zeroing pass per page on first touch; on a
//! virtual machine that reports freed memory to its host, a host fault as well (a visible share
//! of a long forward pass when other work ran between two passes). A pool keeps a
//! few buffers whose owners (the Python arrays) are gone and gives them out again, so
//! repeated passes write to memory that is already mapped.

use crate::Element;
use std::sync::Mutex;

/// Buffers below this size are left to the allocator (its heap reuses them anyway).
pub const MIN_POOLED_BYTES: usize = 1 << 20;

/// Buffers kept at most by one pool.
pub const MAX_KEPT: usize = 2;

/// A small set of reusable buffers of element type `T`.
pub struct BufferPool<T> {
    kept: Mutex<Vec<Vec<T>>>,
}

impl<T> Default for BufferPool<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> BufferPool<T> {
    /// An empty pool (usable in a `static`).
    pub const fn new() -> Self {
        BufferPool {
            kept: Mutex::new(Vec::new()),
        }
    }
}

impl<T: Element> BufferPool<T> {
    /// A buffer of exactly `n` values, for a caller that overwrites every one: a kept buffer
    /// with room for `n` and at most twice that (its values are stale), or new zeroed memory
    /// (`what` names it in the out-of-memory error).
    pub fn take(&self, n: usize, what: &str) -> crate::Result<Vec<T>> {
        if n.saturating_mul(std::mem::size_of::<T>()) >= MIN_POOLED_BYTES {
            let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(i) = kept
                .iter()
                .position(|b| b.capacity() >= n && b.capacity() / 2 <= n)
            {
                let mut buf = kept.swap_remove(i);
                drop(kept);
                crate::memory::resize_for_overwrite(&mut buf, n);
                return Ok(buf);
            }
        }
        crate::memory::try_zeroed(n, what)
    }

    /// Keep `buf` for a later [`BufferPool::take`]; dropped when it is small or the pool is
    /// full (the oldest kept buffer makes room for it).
    pub fn give_back(&self, buf: Vec<T>) {
        if buf.capacity() * std::mem::size_of::<T>() < MIN_POOLED_BYTES {
            return;
        }
        let oldest = {
            let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
            let oldest = (kept.len() == MAX_KEPT).then(|| kept.remove(0));
            kept.push(buf);
            oldest
        };
        drop(oldest); // freed outside the lock
    }

    /// Bytes held by kept buffers.
    pub fn nbytes(&self) -> usize {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.iter().map(|b| b.capacity()).sum::<usize>() * std::mem::size_of::<T>()
    }

    /// Free every kept buffer.
    pub fn clear(&self) {
        let old = std::mem::take(&mut *self.kept.lock().unwrap_or_else(|e| e.into_inner()));
        drop(old);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_reused_by_size_and_small_ones_are_not_kept() {
        let pool = BufferPool::<f32>::default();
        let n = MIN_POOLED_BYTES; // 4 MiB of f32
        let mut a = pool.take(n, "a").unwrap();
        assert_eq!(a.len(), n);
        assert!(a.iter().all(|&x| x == 0.0), "new memory is zeroed");
        a.fill(7.0);
        let ptr = a.as_ptr();
        pool.give_back(a);
        assert_eq!(pool.nbytes(), n * 4);
        // Same size: the same memory, stale values (the caller overwrites them).
        let b = pool.take(n, "b").unwrap();
        assert_eq!((b.as_ptr(), b.len()), (ptr, n));
        pool.give_back(b);
        // Less than half the kept capacity: new memory, the big buffer stays kept.
        let c = pool.take(n / 3, "c").unwrap();
        assert_ne!(c.as_ptr(), ptr);
        assert_eq!(pool.nbytes(), n * 4);
        // Smaller but within half: the kept buffer, cut to length.
        let d = pool.take(n * 2 / 3, "d").unwrap();
        assert_eq!((d.as_ptr(), d.len()), (ptr, n * 2 / 3));
        assert_eq!(pool.nbytes(), 0);
        // Small buffers are not kept; at most MAX_KEPT large ones.
        pool.give_back(vec![1.0; 10]);
        assert_eq!(pool.nbytes(), 0);
        pool.give_back(d);
        pool.give_back(c);
        pool.give_back(pool.take(n, "e").unwrap());
        assert_eq!(pool.kept.lock().unwrap().len(), MAX_KEPT);
        pool.clear();
        assert_eq!(pool.nbytes(), 0);
    }
}
