//! Conversions between numpy arrays and core views, and between core errors and exceptions.

use gptcore_core::gemm::MatRef;
use gptcore_core::Error;
use numpy::{PyArrayMethods, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::exceptions::{PyMemoryError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;

pub fn to_py_err(e: Error) -> PyErr {
    match e {
        Error::Value(s) => PyValueError::new_err(s),
        Error::Type(s) => PyTypeError::new_err(s),
        Error::Memory(s) => PyMemoryError::new_err(s),
    }
}

/// A 2-D numpy array as the core reads it: a strided view of the array's own memory, or,
/// when that memory is misaligned or its strides are not whole elements (a field of a
/// structured array, an unaligned buffer), a contiguous copy read element by element.
pub enum View2<'a, T> {
    Borrowed(MatRef<'a, T>),
    Owned(Vec<T>, usize, usize),
}

impl<T: Copy> View2<'_, T> {
    pub fn mat(&self) -> MatRef<'_, T> {
        match self {
            View2::Borrowed(m) => *m,
            View2::Owned(v, r, c) => MatRef::from_slice(v, *r, *c),
        }
    }
}

pub fn view2<'a, T: numpy::Element + Copy>(arr: &'a PyReadonlyArray2<'_, T>) -> View2<'a, T> {
    let shape = arr.shape();
    let (rows, cols) = (shape[0], shape[1]);
    let strides = arr.strides(); // in bytes
    let item = std::mem::size_of::<T>() as isize;
    let ptr = arr.data() as *const T;
    let aligned = (ptr as usize).is_multiple_of(std::mem::align_of::<T>());
    if aligned && strides[0] % item == 0 && strides[1] % item == 0 {
        // SAFETY: numpy guarantees every element addressed by shape and strides is readable;
        // the readonly borrow keeps the array alive and unmodified for 'a.
        return View2::Borrowed(unsafe {
            MatRef::from_raw(ptr, rows, cols, strides[0] / item, strides[1] / item)
        });
    }
    let base = ptr as *const u8;
    let mut v = Vec::with_capacity(rows * cols);
    for i in 0..rows {
        for j in 0..cols {
            // SAFETY: as above; the read does not assume alignment.
            v.push(unsafe {
                std::ptr::read_unaligned(
                    base.offset(i as isize * strides[0] + j as isize * strides[1]) as *const T,
                )
            });
        }
    }
    View2::Owned(v, rows, cols)
}

/// Run heavy work without the GIL; a Rust panic becomes a Python RuntimeError.
pub fn detach<R: Send>(py: Python<'_>, f: impl FnOnce() -> R + Send) -> PyResult<R> {
    py.detach(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)))
        .map_err(|p| {
            let msg = if let Some(s) = p.downcast_ref::<&str>() {
                s.to_string()
            } else if let Some(s) = p.downcast_ref::<String>() {
                s.clone()
            } else {
                "unknown panic".to_string()
            };
            PyRuntimeError::new_err(format!("internal error in gptcore (please report): {msg}"))
        })
}
