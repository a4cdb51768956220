//! `RustlabRng`: the lessons' `seed` / `randn` stream, for reproducing their weights.

use crate::convert::{detach, to_py_err};
use gptcore_core::rng;
use numpy::{PyArray1, PyArray2, PyArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

/// rustlab's random stream: `RustlabRng(seed)` is `seed(seed)`; `randn(rows, cols)` is
/// `randn(rows, cols)` (row-major, float64); `randn(n)` is a 1 x n row.
#[pyclass(module = "gptcore._native")]
pub struct RustlabRng {
    inner: rng::RustlabRng,
    seed: u64,
}

fn seed_arg(seed: &Bound<'_, PyAny>) -> PyResult<u64> {
    let i = index_arg(seed).map_err(|_| {
        PyTypeError::new_err(format!(
            "RustlabRng: seed must be an int, got {}",
            type_name(seed)
        ))
    })?;
    u64::try_from(i).map_err(|_| {
        PyValueError::new_err(format!(
            "RustlabRng: seed must be in [0, 2**64 - 1], got {seed}"
        ))
    })
}

fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type()
        .name()
        .map(|s| s.to_string())
        .unwrap_or_else(|_| "?".to_string())
}

/// `operator.index(v)` as an i128 (bool refused); Err(()) when `v` is not an integer.
fn index_arg(v: &Bound<'_, PyAny>) -> Result<i128, ()> {
    if v.is_instance_of::<pyo3::types::PyBool>() {
        return Err(());
    }
    if let Ok(b) = v.getattr("dtype") {
        if b.getattr("kind")
            .and_then(|k| k.extract::<String>())
            .map(|k| k == "b")
            .unwrap_or(false)
        {
            return Err(());
        }
    }
    let i = v.call_method0("__index__").map_err(|_| ())?;
    // Values beyond i128 are certainly out of range; report them as huge.
    Ok(i.extract::<i128>().unwrap_or(i128::MAX))
}

fn dim_arg(name: &str, v: &Bound<'_, PyAny>) -> PyResult<usize> {
    let i = index_arg(v).map_err(|_| {
        PyTypeError::new_err(format!(
            "randn: {name} must be an int, got {}",
            type_name(v)
        ))
    })?;
    if i < 0 {
        return Err(PyValueError::new_err(format!(
            "randn: {name} must be >= 0, got {v}"
        )));
    }
    usize::try_from(i)
        .map_err(|_| PyValueError::new_err(format!("randn: {name} is too large, got {v}")))
}

#[pymethods]
impl RustlabRng {
    #[new]
    fn new(seed: &Bound<'_, PyAny>) -> PyResult<Self> {
        let s = seed_arg(seed)?;
        Ok(RustlabRng {
            inner: rng::RustlabRng::new(s),
            seed: s,
        })
    }

    /// Restart the stream, as rustlab's `seed(seed)`.
    fn reseed(&mut self, seed: &Bound<'_, PyAny>) -> PyResult<()> {
        let s = seed_arg(seed)?;
        self.inner.reseed(s);
        self.seed = s;
        Ok(())
    }

    /// The seed of the last (re)seeding.
    #[getter]
    fn seed(&self) -> u64 {
        self.seed
    }

    /// `rows * cols` standard-normal draws as a (rows, cols) float64 array, filled row by
    /// row; with one argument, a (1, rows) row as in rustlab.
    #[pyo3(signature = (rows, cols=None))]
    fn randn<'py>(
        &mut self,
        py: Python<'py>,
        rows: &Bound<'py, PyAny>,
        cols: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyArray2<f64>>> {
        let (m, n) = match cols {
            None => (1, dim_arg("rows", rows)?),
            Some(c) => (dim_arg("rows", rows)?, dim_arg("cols", c)?),
        };
        let inner = &mut self.inner;
        let data = detach(py, move || inner.randn(m, n))?.map_err(to_py_err)?;
        PyArray1::from_vec(py, data).reshape([m, n])
    }

    fn __repr__(&self) -> String {
        format!("RustlabRng(seed={})", self.seed)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<RustlabRng>()?;
    Ok(())
}
