//! Result arrays whose memory goes back to a model's buffer pool when Python lets go of them.
//!
//! The numpy array borrows the buffer and holds a `PooledBuffer` as its base object; numpy
//! drops the base only after the array and every view of it are gone, and the buffer then
//! returns to the pool (or is freed, when the model is gone too).

use gptcore_core::buffer_pool::{BufferPool, MIN_POOLED_BYTES};
use numpy::ndarray::ArrayView1;
use numpy::PyArray1;
use pyo3::prelude::*;
use std::sync::{Arc, Weak};

/// What a [`PooledBuffer`] owns.
pub enum Held {
    F32(Vec<f32>, Weak<BufferPool<f32>>),
    F64(Vec<f64>, Weak<BufferPool<f64>>),
    Nothing,
}

/// Owner of the memory of a large result array (its numpy `base`).
#[pyclass(frozen, module = "gptcore._native")]
pub struct PooledBuffer {
    held: Held,
}

impl Drop for PooledBuffer {
    fn drop(&mut self) {
        match std::mem::replace(&mut self.held, Held::Nothing) {
            Held::F32(buf, pool) => {
                if let Some(p) = pool.upgrade() {
                    p.give_back(buf)
                }
            }
            Held::F64(buf, pool) => {
                if let Some(p) = pool.upgrade() {
                    p.give_back(buf)
                }
            }
            Held::Nothing => {}
        }
    }
}

/// Element types whose buffers can be pooled.
pub trait Poolable: numpy::Element + gptcore_core::Element {
    fn hold(buf: Vec<Self>, pool: Weak<BufferPool<Self>>) -> Held;
}
impl Poolable for f32 {
    fn hold(buf: Vec<f32>, pool: Weak<BufferPool<f32>>) -> Held {
        Held::F32(buf, pool)
    }
}
impl Poolable for f64 {
    fn hold(buf: Vec<f64>, pool: Weak<BufferPool<f64>>) -> Held {
        Held::F64(buf, pool)
    }
}

/// `buf` as a 1-D numpy array; a large one's memory returns to `pool` after use.
pub fn into_array<'py, T: Poolable>(
    py: Python<'py>,
    buf: Vec<T>,
    pool: &Arc<BufferPool<T>>,
) -> PyResult<Bound<'py, PyArray1<T>>> {
    if buf.len() * std::mem::size_of::<T>() < MIN_POOLED_BYTES {
        return Ok(PyArray1::from_vec(py, buf));
    }
    let (ptr, len) = (buf.as_ptr(), buf.len());
    // Moving the Vec into the owner leaves its heap memory where it is.
    let owner = Bound::new(
        py,
        PooledBuffer {
            held: T::hold(buf, Arc::downgrade(pool)),
        },
    )?;
    // SAFETY: `len` values at `ptr` belong to `owner`, which never touches or reallocates
    // them while it lives; numpy keeps `owner` alive as the array's base until the array
    // and all its views are gone.
    unsafe {
        let view = ArrayView1::from_shape_ptr(len, ptr);
        Ok(PyArray1::borrow_from_array(&view, owner.into_any()))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PooledBuffer>()
}
