//! Memory the products keep between calls: each thread's packed-A buffer and slab buffer, and
//! the packed copies of plain right-hand sides.

use crate::buffer_pool::BufferPool;
use crate::kernels::HasKernels;
use std::cell::RefCell;

thread_local! {
    static A_BUF_F32: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static A_BUF_F64: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
    static SLAB_F32: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static SLAB_F64: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
}

static B_SCRATCH_F32: BufferPool<f32> = BufferPool::new();
static B_SCRATCH_F64: BufferPool<f64> = BufferPool::new();

/// Types the matmul runs on.
pub trait GemmElement: HasKernels {
    fn with_a_buffer<R>(f: impl FnOnce(&mut Vec<Self>) -> R) -> R;
    /// Memory that a product with `Rhs::PackHere` packs B into, kept between calls.
    fn b_scratch() -> &'static BufferPool<Self>;
    /// `f` on this thread's buffer for one slab of a B packed in slabs (a fresh one when the
    /// thread's own is in use further up its stack).
    fn with_slab_buffer<R>(f: impl FnOnce(&mut Vec<Self>) -> R) -> R;
}
impl GemmElement for f32 {
    fn with_a_buffer<R>(f: impl FnOnce(&mut Vec<f32>) -> R) -> R {
        A_BUF_F32.with(|b| match b.try_borrow_mut() {
            Ok(mut v) => f(&mut v),
            Err(_) => f(&mut Vec::new()),
        })
    }
    fn b_scratch() -> &'static BufferPool<f32> {
        &B_SCRATCH_F32
    }
    fn with_slab_buffer<R>(f: impl FnOnce(&mut Vec<f32>) -> R) -> R {
        SLAB_F32.with(|b| match b.try_borrow_mut() {
            Ok(mut v) => f(&mut v),
            Err(_) => f(&mut Vec::new()),
        })
    }
}
impl GemmElement for f64 {
    fn with_a_buffer<R>(f: impl FnOnce(&mut Vec<f64>) -> R) -> R {
        A_BUF_F64.with(|b| match b.try_borrow_mut() {
            Ok(mut v) => f(&mut v),
            Err(_) => f(&mut Vec::new()),
        })
    }
    fn b_scratch() -> &'static BufferPool<f64> {
        &B_SCRATCH_F64
    }
    fn with_slab_buffer<R>(f: impl FnOnce(&mut Vec<f64>) -> R) -> R {
        SLAB_F64.with(|b| match b.try_borrow_mut() {
            Ok(mut v) => f(&mut v),
            Err(_) => f(&mut Vec::new()),
        })
    }
}

/// Packed copies of B made for one product are kept for later products up to this size (at
/// most [`crate::buffer_pool::MAX_KEPT`] per type); larger ones are freed after the product.
pub const B_SCRATCH_MAX_BYTES: usize = 32 << 20;
