//! Few rows of A against B read in place along whole rows (the family's stream kernel): the
//! columns are cut into one contiguous range per thread.

use super::view::MatRef;
use crate::kernels::{CTile, StreamArgs, StreamFn};
use crate::threads;
use crate::Element;

/// Columns each thread's part of a stream product must have at least, else the panel path
/// runs: with shorter pieces of B's rows the streams are short, and the panel path's
/// four-panel kernel reads faster.
const STREAM_MIN_COLS: usize = 512;

/// Few rows of A against B read in place along whole rows ([`StreamFn`]); the
/// columns are cut into one contiguous range per thread. Returns false (and does nothing)
/// when the ranges would be too narrow for streaming to pay.
pub(super) fn stream_rows<T: Element>(
    stream: StreamFn<T>,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    c: &mut [T],
    ldc: usize,
) -> bool {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    if m == 0 || n == 0 {
        return true;
    }
    let flops = m as f64 * n as f64 * k as f64;
    let nthreads = if flops < 262_144.0 {
        1
    } else {
        threads::available()
    };
    if n / nthreads < STREAM_MIN_COLS {
        return false;
    }
    assert!(c.len() >= (m - 1) * ldc + n, "output too short");
    if k == 0 {
        for i in 0..m {
            c[i * ldc..i * ldc + n].fill(T::ZERO);
        }
        return true;
    }
    // One part per thread, of whole 64-byte lines, as equal as that allows.
    let parts = nthreads;
    let line = (64 / std::mem::size_of::<T>()).max(1);
    // A with unit column stride and a non-negative row stride is read where it is; otherwise
    // copied (at most STREAM_ROWS rows).
    let copy: Vec<T>;
    let (ap, lda) = if a.cs == 1 && a.rs >= 0 {
        (a.ptr, a.rs as usize)
    } else {
        copy = (0..m * k).map(|x| a.at(x / k, x % k)).collect();
        (copy.as_ptr(), k)
    };
    let ap = threads::SendPtr(ap as *mut T);
    let cp = threads::SendPtr(c.as_mut_ptr());
    let bound = |t: usize| {
        if t == parts {
            n
        } else {
            (t * n / parts) / line * line
        }
    };
    let part = |t: usize| {
        let (j0, j1) = (bound(t), bound(t + 1));
        // SAFETY: A holds m rows of k values lda apart; B's columns j0..j1 of k rows lie inside
        // B; C's block (m x (j1 - j0)) at column j0 lies inside C and belongs to this part.
        unsafe {
            stream(&StreamArgs {
                rows: m,
                cols: j1 - j0,
                k,
                a: ap.get(),
                lda,
                b: b.row_ptr(0).add(j0),
                ldb: b.rs as usize,
                c: CTile {
                    ptr: cp.get().add(j0),
                    ldc,
                },
            })
        }
    };
    if parts == 1 {
        part(0);
    } else {
        threads::parallel_for(parts, part);
    }
    true
}
