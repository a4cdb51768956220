//! Weight storage formats from Python: their names (`dtype`, `weight_dtype`), rounding float32
//! to a 16-bit format's patterns and back, quantizing float32 to a block format's file blocks,
//! and packed right-hand sides stored in a format for `matmul`. Every registered format of the
//! core is taken by name ([`WeightFormat::named`]).

use crate::convert::{detach, to_py_err, view2};
use gptcore_core::decoder::Packed;
use gptcore_core::formats::block::BlockCodec;
use gptcore_core::formats::{Bits16, StoredFormat, WeightFormat};
use gptcore_core::gemm::{Kernel, Options};
use numpy::{
    PyArray1, PyArrayDyn, PyArrayMethods, PyReadonlyArray2, PyReadonlyArrayDyn,
    PyUntypedArrayMethods,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

/// The registered formats' names, quoted: `'bfloat16', 'float16', 'q8_0' or 'q4_0'`.
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

/// A registered format's name ("bfloat16", "float16": the names numpy and ml_dtypes use;
/// "q8_0", "q4_0": ggml's), else a ValueError naming the argument `what` and the formats
/// there are.
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

/// The block codec of the format named `name`.
fn codec(what: &str, name: &str) -> PyResult<BlockCodec> {
    let WeightFormat::Stored(f) = parse_format(what, name)? else {
        unreachable!("parse_format names a stored format")
    };
    f.block_codec().ok_or_else(|| {
        PyValueError::new_err(format!(
            "{what} {name:?} is no block format ('q8_0' or 'q4_0')"
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

/// float32 rows `(r, k)` quantized to the block format `fmt` along each row: the file blocks,
/// `(r, ceil(k / 32) * block bytes)` uint8 (a short last block where 32 does not divide `k`).
#[pyfunction]
fn _quantize_blocks<'py>(
    py: Python<'py>,
    x: PyReadonlyArray2<'py, f32>,
    fmt: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let c = codec("fmt", fmt)?;
    let (r, k) = (x.shape()[0], x.shape()[1]);
    let v = view2(&x);
    let m = v.mat();
    // The rows of x are the runs: its transpose, (k x r), is quantized along K.
    // SAFETY: the transposed view addresses the same elements.
    let t = unsafe { gptcore_core::gemm::MatRef::from_raw(m.ptr, k, r, m.cs, m.rs) };
    let out = detach(py, || (c.quantize)(t))?.map_err(to_py_err)?;
    let row = k.div_ceil(32) * c.file_block_bytes;
    Ok(PyArray1::from_vec(py, out).reshape([r, row])?.into_any())
}

/// The float32 values of file blocks `(r, bytes)` (uint8) of the block format `fmt`: `(r, k)`.
#[pyfunction]
fn _widen_blocks<'py>(
    py: Python<'py>,
    blocks: PyReadonlyArray2<'py, u8>,
    k: usize,
    fmt: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let c = codec("fmt", fmt)?;
    let (r, row) = (blocks.shape()[0], blocks.shape()[1]);
    if row != k.div_ceil(32) * c.file_block_bytes {
        return Err(PyValueError::new_err(format!(
            "widen_blocks: rows of {row} bytes do not hold {k} values of {fmt}"
        )));
    }
    let b = blocks.as_array();
    let mut out = vec![0f32; r * k];
    for (i, dst) in out.chunks_mut(k.max(1)).enumerate().take(r) {
        let src: Vec<u8> = b.row(i).iter().copied().collect();
        (c.widen_row)(&src, dst);
    }
    Ok(PyArray1::from_vec(py, out).reshape([r, k])?.into_any())
}

/// `b` as a 2-D uint8 array when it is one, or a structured array of GGUF blocks (a field
/// `d` and a field `qs`, as `gptcore.gguf` hands out Q8_0 / Q4_0 tensors) viewed as its bytes.
fn block_bytes<'py>(b: &Bound<'py, PyAny>) -> Option<PyReadonlyArray2<'py, u8>> {
    if let Ok(a) = b.extract::<PyReadonlyArray2<u8>>() {
        return Some(a);
    }
    let fields = b.getattr("dtype").ok()?.getattr("names").ok()?;
    let names: Vec<String> = fields.extract().ok()?;
    if names != ["d", "qs"] {
        return None;
    }
    let bytes = b.call_method1("view", ("u1",)).ok()?;
    bytes.extract::<PyReadonlyArray2<u8>>().ok()
}

/// A right-hand side packed in a storage format (float32 products).
pub struct StoredPacked {
    inner: Packed<f32>,
    format: WeightFormat,
}

impl StoredPacked {
    /// Packs a 2-D float32 array (rounded to `f`; a block format: quantized along K, down
    /// each column), uint16 array (the patterns of a 16-bit `f`) or, for a block format, its
    /// file blocks: N rows of `K / 32` blocks (GGUF's layout of a `(N, K)` weight matrix, the
    /// transpose of the `(K, N)` matrix packed), as uint8 or as a structured array of blocks.
    pub fn new(py: Python<'_>, b: &Bound<'_, PyAny>, f: WeightFormat) -> PyResult<Self> {
        let codec = match f {
            WeightFormat::Stored(s) => s.block_codec(),
            WeightFormat::Full => None,
        };
        if let (Some(c), Some(a)) = (codec, block_bytes(b)) {
            let (n, row) = (a.shape()[0], a.shape()[1]);
            if row % c.file_block_bytes != 0 {
                return Err(PyValueError::new_err(format!(
                    "PackedMatrix: rows of {row} bytes are no whole number of {} blocks ({} bytes each)",
                    f.name(),
                    c.file_block_bytes
                )));
            }
            let k = row / c.file_block_bytes * 32;
            let bytes: Vec<u8> = match a.as_slice() {
                Ok(s) => s.to_vec(),
                Err(_) => a.as_array().iter().copied().collect(),
            };
            let inner = detach(py, || Packed::pack_blocks(&bytes, k, n, f))?.map_err(to_py_err)?;
            return Ok(StoredPacked { inner, format: f });
        }
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
            return Err(PyTypeError::new_err(if codec.is_some() {
                format!(
                    "PackedMatrix: with dtype={:?}, b must be a 2-D float32 array (quantized to \
                     {0} along K, down each column) or the {0} blocks of its transpose (a 2-D uint8 \
                     array, or a structured array of blocks as a GGUF reader gives them)",
                    f.name()
                )
            } else {
                format!(
                    "PackedMatrix: with dtype={:?}, b must be a 2-D float32 array (rounded to \
                     {0}) or a 2-D uint16 array of {0} bit patterns",
                    f.name()
                )
            }));
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
    m.add_function(wrap_pyfunction!(_quantize_blocks, m)?)?;
    m.add_function(wrap_pyfunction!(_widen_blocks, m)?)?;
    Ok(())
}
