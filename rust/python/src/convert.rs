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

/// A strided view of a 2-D numpy array (valid while `arr` is borrowed).
pub fn view2<'a, T: numpy::Element + Copy>(arr: &'a PyReadonlyArray2<'_, T>) -> MatRef<'a, T> {
    let shape = arr.shape();
    let strides = arr.strides();
    let item = std::mem::size_of::<T>() as isize;
    let ptr = arr.data() as *const T;
    // SAFETY: numpy guarantees every element addressed by shape and strides is readable;
    // the readonly borrow keeps the array alive and unmodified for 'a.
    unsafe { MatRef::from_raw(ptr, shape[0], shape[1], strides[0] / item, strides[1] / item) }
}

/// Run heavy work without the GIL; a Rust panic becomes a Python RuntimeError.
pub fn detach<R: Send>(py: Python<'_>, f: impl FnOnce() -> R + Send) -> PyResult<R> {
    py.detach(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))).map_err(|p| {
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
