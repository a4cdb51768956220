//! `gptcore._native`: the thin PyO3 layer over gptcore-core.
//!
//! Validation that needs Python knowledge (dtypes, names, configs) lives in the Python
//! package; this layer converts numpy arrays to views, releases the GIL around heavy work,
//! and maps core errors and panics to Python exceptions.

mod convert;
mod formats;
mod lessons;
mod matmul;
mod model;
mod pooled;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    matmul::register(m)?;
    model::register(m)?;
    lessons::register(m)?;
    pooled::register(m)?;
    formats::register(m)?;
    Ok(())
}
