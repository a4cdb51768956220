//! Weight storage formats from Python: their names (`dtype`, `weight_dtype`), rounding float32
//! to a 16-bit format's patterns and back, and packed right-hand sides stored in a format for
//! `matmul`. Every registered format of the core is taken by name ([`WeightFormat::named`]).

use crate::convert::{detach, to_py_err, view2};
use gptcore_core::decoder::Packed;
use gptcore_core::formats::{Bits16, StoredFormat, WeightFormat};
use gptcore_core::gemm::{Kernel, Options};
use numpy::{
    PyArray1, PyArrayDyn, PyArrayMethods, PyReadonlyArray2, PyReadonlyArrayDyn,
    PyUntypedArrayMethods,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

/// The registered formats' names, quoted: `'bfloat16' or 'float16'`.
fn format_names() -> String {
    let names: Vec<String> = StoredFormat::all()
        .iter()
        .map(|f| format!("'{}'", f.name()))
        .collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => names.concat(),
    }
}

/// A registered format's name ("bfloat16", "float16": the names numpy and ml_dtypes use),
/// else a ValueError naming the argument `what` and the formats there are.
pub fn parse_format(what: &str, name: &str) -> PyResult<WeightFormat> {
    WeightFormat::named(name).ok_or_else(|| {
        PyValueError::new_err(format!("{what} must be {}, got {name:?}", format_names()))
    })
}

/// The 16-bit conversions of the format named `name`.
fn bits16(name: &str) -> PyResult<Bits16> {
    let WeightFormat::Stored(f) = parse_format("dtype", name)? else {
        unreachable!("parse_format names a stored format")
    };
    f.bits16().ok_or_else(|| {
        PyValueError::new_err(format!(
            "dtype {name:?} does not store 16-bit values (no bit patterns to convert)"
        ))
    })
}

fn contiguous<'py, T: numpy::Element + Copy>(
    what: &str,
    x: &Bound<'py, PyAny>,
    dtype: &str,
) -> PyResult<(Vec<T>, Vec<usize>)> {
    let arr = x.extract::<PyReadonlyArrayDyn<'py, T>>().map_err(|_| {
        PyTypeError::new_err(format!("{what}: expected a numpy array of dtype {dtype}"))
    })?;
    let shape = arr.shape().to_vec();
    let v = match arr.as_slice() {
        Ok(s) => s.to_vec(),
        Err(_) => arr.as_array().iter().copied().collect(),
    };
    Ok((v, shape))
}

/// float32 values -> their 16-bit patterns in `fmt` (round to nearest even).
#[pyfunction]
fn _to_half_bits<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    fmt: &str,
) -> PyResult<Bound<'py, PyArrayDyn<u16>>> {
    let round = bits16(fmt)?.round;
    let (v, shape) = contiguous::<f32>("to_half_bits", x, "float32")?;
    let out = detach(py, || round(&v))?;
    PyArray1::from_vec(py, out).reshape(shape)
}

/// 16-bit patterns in `fmt` -> their float32 values (exact).
#[pyfunction]
fn _from_half_bits<'py>(
    py: Python<'py>,
    bits: &Bound<'py, PyAny>,
    fmt: &str,
) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    let widen = bits16(fmt)?.widen;
    let (v, shape) = contiguous::<u16>("from_half_bits", bits, "uint16")?;
    let out = detach(py, || widen(&v))?;
    PyArray1::from_vec(py, out).reshape(shape)
}

/// A right-hand side packed in a storage format (float32 products).
pub struct StoredPacked {
    inner: Packed<f32>,
    format: WeightFormat,
}

impl StoredPacked {
    /// Packs a 2-D float32 array (rounded to `f`) or uint16 array (the patterns of `f`).
    pub fn new(py: Python<'_>, b: &Bound<'_, PyAny>, f: WeightFormat) -> PyResult<Self> {
        let inner = if let Ok(a) = b.extract::<PyReadonlyArray2<f32>>() {
            let v = view2(&a);
            let v = v.mat();
            detach(py, || Packed::pack(v, f))?.map_err(to_py_err)?
        } else if let Ok(a) = b.extract::<PyReadonlyArray2<u16>>() {
            let v = view2(&a);
            let v = v.mat();
            let mut bits = Vec::with_capacity(v.rows * v.cols);
            for i in 0..v.rows {
                for j in 0..v.cols {
                    bits.push(v.at(i, j));
                }
            }
            let (k, n) = (v.rows, v.cols);
            detach(py, || Packed::pack_bits(&bits, k, n, false, f))?.map_err(to_py_err)?
        } else {
            return Err(PyTypeError::new_err(format!(
                "PackedMatrix: with dtype={:?}, b must be a 2-D float32 array (rounded to {0}) \
                 or a 2-D uint16 array of {0} bit patterns",
                f.name()
            )));
        };
        Ok(StoredPacked { inner, format: f })
    }

    pub fn shape(&self) -> (usize, usize) {
        (self.inner.rows(), self.inner.cols())
    }
    pub fn nbytes(&self) -> usize {
        self.inner.nbytes()
    }
    pub fn dtype(&self) -> &'static str {
        self.format.name()
    }

    /// `a @ self` for a 2-D float32 `a`.
    pub fn product<'py>(
        &self,
        py: Python<'py>,
        a: &Bound<'py, PyAny>,
        kernel: Kernel,
    ) -> PyResult<Bound<'py, PyAny>> {
        let a = a.extract::<PyReadonlyArray2<f32>>().map_err(|_| {
            PyTypeError::new_err(format!(
                "matmul: a must be a 2-D float32 array to match the {} PackedMatrix",
                self.dtype()
            ))
        })?;
        let (m, k) = (a.shape()[0], a.shape()[1]);
        let (bk, n) = self.shape();
        if k != bk {
            return Err(PyValueError::new_err(format!(
                "matmul: shapes ({m}, {k}) and ({bk}, {n}) are not aligned: a has {k} columns, b has {bk} rows"
            )));
        }
        let av = view2(&a);
        let av = av.mat();
        let len = m.checked_mul(n).ok_or_else(|| {
            pyo3::exceptions::PyMemoryError::new_err("matmul: output size overflows")
        })?;
        let mut c =
            gptcore_core::memory::try_zeroed::<f32>(len, "matmul output").map_err(to_py_err)?;
        let opts = Options::with_kernel(kernel);
        detach(py, || self.inner.gemm(av, &mut c, n, &opts))?;
        Ok(PyArray1::from_vec(py, c).reshape([m, n])?.into_any())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_to_half_bits, m)?)?;
    m.add_function(wrap_pyfunction!(_from_half_bits, m)?)?;
    Ok(())
}
