//! 16-bit weights: rounding float32 to bfloat16 / float16 and back, and half-size packed
//! right-hand sides for `matmul`.

use crate::convert::{detach, to_py_err, view2};
use gptcore_core::gemm::{self, Kernel, MatRef, Options, PackedB};
use gptcore_core::half::{Bf16, HalfFormat, WeightFormat, F16};
use numpy::{
    PyArray1, PyArrayDyn, PyArrayMethods, PyReadonlyArray2, PyReadonlyArrayDyn,
    PyUntypedArrayMethods,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

/// "bfloat16" or "float16" (the names numpy and ml_dtypes use).
pub fn parse_format(what: &str, name: &str) -> PyResult<WeightFormat> {
    match name {
        "bfloat16" => Ok(WeightFormat::Bf16),
        "float16" => Ok(WeightFormat::F16),
        _ => Err(PyValueError::new_err(format!(
            "{what} must be 'bfloat16' or 'float16', got {name:?}"
        ))),
    }
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

fn bits_of<H: HalfFormat>(x: &[f32]) -> Vec<u16> {
    x.iter().map(|&v| H::from_f32(v).to_bits()).collect()
}

fn values_of<H: HalfFormat>(b: &[u16]) -> Vec<f32> {
    b.iter().map(|&v| H::from_bits(v).to_f32()).collect()
}

/// float32 values -> their 16-bit patterns in `fmt` (round to nearest even).
#[pyfunction]
fn _to_half_bits<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    fmt: &str,
) -> PyResult<Bound<'py, PyArrayDyn<u16>>> {
    let f = parse_format("dtype", fmt)?;
    let (v, shape) = contiguous::<f32>("to_half_bits", x, "float32")?;
    let out = detach(py, || match f {
        WeightFormat::Bf16 => bits_of::<Bf16>(&v),
        _ => bits_of::<F16>(&v),
    })?;
    PyArray1::from_vec(py, out).reshape(shape)
}

/// 16-bit patterns in `fmt` -> their float32 values (exact).
#[pyfunction]
fn _from_half_bits<'py>(
    py: Python<'py>,
    bits: &Bound<'py, PyAny>,
    fmt: &str,
) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    let f = parse_format("dtype", fmt)?;
    let (v, shape) = contiguous::<u16>("from_half_bits", bits, "uint16")?;
    let out = detach(py, || match f {
        WeightFormat::Bf16 => values_of::<Bf16>(&v),
        _ => values_of::<F16>(&v),
    })?;
    PyArray1::from_vec(py, out).reshape(shape)
}

/// A half-size packed right-hand side.
pub enum HalfPacked {
    Bf16(PackedB<Bf16>),
    F16(PackedB<F16>),
}

impl HalfPacked {
    /// Packs a 2-D float32 array (rounded to `f`) or uint16 array (the patterns of `f`).
    pub fn new(py: Python<'_>, b: &Bound<'_, PyAny>, f: WeightFormat) -> PyResult<Self> {
        fn pack<H: HalfFormat + gemm::PanelValue>(
            py: Python<'_>,
            bits: Vec<u16>,
            k: usize,
            n: usize,
        ) -> PyResult<PackedB<H>> {
            let h = gptcore_core::half::from_bits_vec::<H>(bits);
            detach(py, || PackedB::try_pack(MatRef::from_slice(&h, k, n)))?.map_err(to_py_err)
        }
        let (bits, k, n) = if let Ok(a) = b.extract::<PyReadonlyArray2<f32>>() {
            let v = view2(&a);
            let v = v.mat();
            let mut vals = Vec::with_capacity(v.rows * v.cols);
            for i in 0..v.rows {
                for j in 0..v.cols {
                    vals.push(v.at(i, j));
                }
            }
            let bits = match f {
                WeightFormat::Bf16 => bits_of::<Bf16>(&vals),
                _ => bits_of::<F16>(&vals),
            };
            (bits, v.rows, v.cols)
        } else if let Ok(a) = b.extract::<PyReadonlyArray2<u16>>() {
            let v = view2(&a);
            let v = v.mat();
            let mut bits = Vec::with_capacity(v.rows * v.cols);
            for i in 0..v.rows {
                for j in 0..v.cols {
                    bits.push(v.at(i, j));
                }
            }
            (bits, v.rows, v.cols)
        } else {
            return Err(PyTypeError::new_err(format!(
                "PackedMatrix: with dtype={:?}, b must be a 2-D float32 array (rounded to {0}) \
                 or a 2-D uint16 array of {0} bit patterns",
                f.name()
            )));
        };
        Ok(match f {
            WeightFormat::Bf16 => HalfPacked::Bf16(pack(py, bits, k, n)?),
            _ => HalfPacked::F16(pack(py, bits, k, n)?),
        })
    }

    pub fn shape(&self) -> (usize, usize) {
        match self {
            HalfPacked::Bf16(p) => (p.rows(), p.cols()),
            HalfPacked::F16(p) => (p.rows(), p.cols()),
        }
    }
    pub fn nbytes(&self) -> usize {
        match self {
            HalfPacked::Bf16(p) => p.nbytes(),
            HalfPacked::F16(p) => p.nbytes(),
        }
    }
    pub fn dtype(&self) -> &'static str {
        match self {
            HalfPacked::Bf16(_) => "bfloat16",
            HalfPacked::F16(_) => "float16",
        }
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
        detach(py, || match self {
            HalfPacked::Bf16(p) => gemm::gemm_packed(av, p, &mut c, n, &opts),
            HalfPacked::F16(p) => gemm::gemm_packed(av, p, &mut c, n, &opts),
        })?;
        Ok(PyArray1::from_vec(py, c).reshape([m, n])?.into_any())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_to_half_bits, m)?)?;
    m.add_function(wrap_pyfunction!(_from_half_bits, m)?)?;
    Ok(())
}
