//! `matmul`, `PackedMatrix`, kernel selection and thread count.

use crate::convert::{detach, to_py_err, view2};
use gptcore_core::gemm::{self, Kernel, Options, PackedB, Rhs};
use gptcore_core::threads;
use numpy::{PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

/// A right-hand side packed once for repeated products (immutable, shareable across threads),
/// laid out for the kernel in use when it is packed; every kernel reads it, with the same bits.
#[pyclass(frozen, module = "gptcore._native")]
pub struct PackedMatrix {
    pub inner: Packed,
}

pub enum Packed {
    F32(PackedB<f32>),
    F64(PackedB<f64>),
    /// A storage format below float32 (float32 products).
    Stored(crate::formats::StoredPacked),
}

#[pymethods]
impl PackedMatrix {
    #[new]
    #[pyo3(signature = (b, dtype=None))]
    fn new(py: Python<'_>, b: &Bound<'_, PyAny>, dtype: Option<&str>) -> PyResult<Self> {
        if let Some(d) = dtype {
            let f = crate::formats::parse_format("dtype", d)?;
            return Ok(PackedMatrix {
                inner: Packed::Stored(crate::formats::StoredPacked::new(py, b, f)?),
            });
        }
        if let Ok(b) = b.extract::<PyReadonlyArray2<f32>>() {
            let v = view2(&b);
            let v = v.mat();
            let p = detach(py, || PackedB::try_pack(v))?.map_err(to_py_err)?;
            return Ok(PackedMatrix {
                inner: Packed::F32(p),
            });
        }
        if let Ok(b) = b.extract::<PyReadonlyArray2<f64>>() {
            let v = view2(&b);
            let v = v.mat();
            let p = detach(py, || PackedB::try_pack(v))?.map_err(to_py_err)?;
            return Ok(PackedMatrix {
                inner: Packed::F64(p),
            });
        }
        Err(PyTypeError::new_err(
            "PackedMatrix: b must be a 2-D float32 or float64 numpy array",
        ))
    }

    #[getter]
    fn shape(&self) -> (usize, usize) {
        match &self.inner {
            Packed::F32(p) => (p.rows(), p.cols()),
            Packed::F64(p) => (p.rows(), p.cols()),
            Packed::Stored(p) => p.shape(),
        }
    }

    #[getter]
    fn dtype(&self) -> &'static str {
        match &self.inner {
            Packed::F32(_) => "float32",
            Packed::F64(_) => "float64",
            Packed::Stored(p) => p.dtype(),
        }
    }

    #[getter]
    fn nbytes(&self) -> usize {
        match &self.inner {
            Packed::F32(p) => p.nbytes(),
            Packed::F64(p) => p.nbytes(),
            Packed::Stored(p) => p.nbytes(),
        }
    }

    fn __repr__(&self) -> String {
        let (k, n) = self.shape();
        format!("PackedMatrix(shape=({k}, {n}), dtype={})", self.dtype())
    }
}

/// `a @ b` on `kernel` (the forced one, or the current one).
fn product<'py, T: gemm::GemmElement + numpy::Element>(
    py: Python<'py>,
    a: PyReadonlyArray2<'py, T>,
    b: Rhs<'_, T>,
    kernel: Kernel,
) -> PyResult<Bound<'py, PyArray2<T>>> {
    let (m, k) = (a.shape()[0], a.shape()[1]);
    let (bk, n) = b.shape();
    if k != bk {
        return Err(PyValueError::new_err(format!(
            "matmul: shapes ({m}, {k}) and ({bk}, {n}) are not aligned: a has {k} columns, b has {bk} rows"
        )));
    }
    let av = view2(&a);
    let av = av.mat();
    let len = m
        .checked_mul(n)
        .ok_or_else(|| pyo3::exceptions::PyMemoryError::new_err("matmul: output size overflows"))?;
    let mut c = gptcore_core::memory::try_zeroed::<T>(len, "matmul output").map_err(to_py_err)?;
    let opts = Options::with_kernel(kernel);
    detach(py, || gemm::gemm(av, b, &mut c, n, &opts))?.map_err(to_py_err)?;
    PyArray1::from_vec(py, c).reshape([m, n])
}

/// `a @ b` with `b` a plain array: read in place when that pays (see [`Rhs::plain`]), else
/// packed for this call.
fn product_unpacked<'py, T: gemm::GemmElement + numpy::Element>(
    py: Python<'py>,
    a: PyReadonlyArray2<'py, T>,
    b: PyReadonlyArray2<'py, T>,
    kernel: Kernel,
) -> PyResult<Bound<'py, PyArray2<T>>> {
    let bv = view2(&b);
    let bv = bv.mat();
    let m = a.shape()[0];
    product(py, a, Rhs::plain(bv, m, kernel), kernel)
}

/// Raise a Rust panic inside the native code (tests check that it becomes a Python error).
#[pyfunction]
fn _panic_for_tests(py: Python<'_>) -> PyResult<()> {
    detach(py, || -> () { panic!("deliberate panic for tests") })
}

/// `a @ b` for 2-D float arrays of one dtype; `b` may be a PackedMatrix.
#[pyfunction]
#[pyo3(signature = (a, b, kernel=None))]
fn matmul<'py>(
    py: Python<'py>,
    a: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
    kernel: Option<&str>,
) -> PyResult<Bound<'py, PyAny>> {
    // A kernel this CPU cannot run is the caller's error, stated before any work.
    let kernel = match kernel {
        None => gemm::current_kernel(),
        Some(name) => gemm::require_kernel(parse_kernel(name)?).map_err(to_py_err)?,
    };
    if let Ok(pm) = b.cast::<PackedMatrix>() {
        let pm = pm.get();
        return match &pm.inner {
            Packed::F32(p) => {
                let a = a.extract::<PyReadonlyArray2<f32>>().map_err(|_| {
                    PyTypeError::new_err(
                        "matmul: a must be a 2-D float32 array to match the float32 PackedMatrix",
                    )
                })?;
                Ok(product(py, a, Rhs::Packed(p), kernel)?.into_any())
            }
            Packed::F64(p) => {
                let a = a.extract::<PyReadonlyArray2<f64>>().map_err(|_| {
                    PyTypeError::new_err(
                        "matmul: a must be a 2-D float64 array to match the float64 PackedMatrix",
                    )
                })?;
                Ok(product(py, a, Rhs::Packed(p), kernel)?.into_any())
            }
            Packed::Stored(p) => p.product(py, a, kernel),
        };
    }
    if let (Ok(a), Ok(b)) = (
        a.extract::<PyReadonlyArray2<f32>>(),
        b.extract::<PyReadonlyArray2<f32>>(),
    ) {
        return Ok(product_unpacked(py, a, b, kernel)?.into_any());
    }
    if let (Ok(a), Ok(b)) = (
        a.extract::<PyReadonlyArray2<f64>>(),
        b.extract::<PyReadonlyArray2<f64>>(),
    ) {
        return Ok(product_unpacked(py, a, b, kernel)?.into_any());
    }
    Err(PyTypeError::new_err(
        "matmul: a and b must be 2-D numpy arrays of one dtype, float32 or float64",
    ))
}

/// The naive `mul_add` triple loop (the exactness reference), for tests.
#[pyfunction]
fn matmul_reference<'py>(
    py: Python<'py>,
    a: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    macro_rules! run {
        ($t:ty) => {
            if let (Ok(a), Ok(b)) = (
                a.extract::<PyReadonlyArray2<$t>>(),
                b.extract::<PyReadonlyArray2<$t>>(),
            ) {
                let (m, k, n) = (a.shape()[0], a.shape()[1], b.shape()[1]);
                if k != b.shape()[0] {
                    return Err(PyValueError::new_err(format!(
                        "matmul_reference: shapes ({m}, {k}) and ({}, {n}) are not aligned",
                        b.shape()[0]
                    )));
                }
                let (av, bv) = (view2(&a), view2(&b));
                let (av, bv) = (av.mat(), bv.mat());
                let mut c = vec![0.0 as $t; m * n];
                detach(py, || gemm::gemm_reference(av, bv, &mut c))?;
                return Ok(PyArray1::from_vec(py, c).reshape([m, n])?.into_any());
            }
        };
    }
    run!(f32);
    run!(f64);
    Err(PyTypeError::new_err(
        "matmul_reference: a and b must be 2-D arrays of one dtype, float32 or float64",
    ))
}

fn parse_kernel(name: &str) -> PyResult<Kernel> {
    Kernel::from_name(name).ok_or_else(|| {
        let names: Vec<String> = Kernel::ALL
            .iter()
            .map(|k| format!("'{}'", k.name()))
            .collect();
        PyValueError::new_err(format!(
            "kernel must be one of {}; got {name:?}",
            names.join(", ")
        ))
    })
}

/// Force a micro-kernel ("avx512", "avx2", "neon", "portable"), or None for the best available.
#[pyfunction]
#[pyo3(signature = (name=None))]
fn set_kernel(name: Option<&str>) -> PyResult<&'static str> {
    let k = match name {
        None => None,
        Some(n) => Some(parse_kernel(n)?),
    };
    gemm::set_kernel(k).map(|k| k.name()).map_err(to_py_err)
}

/// The active micro-kernel's name.
#[pyfunction]
fn kernel() -> &'static str {
    gemm::current_kernel().name()
}

/// Names of the micro-kernels this CPU can run, best first.
#[pyfunction]
fn available_kernels() -> Vec<&'static str> {
    gemm::available().into_iter().map(|k| k.name()).collect()
}

/// The kernel a probe runs with: `kernel`, or the active one when None.
fn probe_kernel(kernel: Option<&str>) -> PyResult<Kernel> {
    kernel.map_or_else(|| Ok(gemm::current_kernel()), parse_kernel)
}

/// A probe's time, checked: in (0, 60] seconds.
fn probe_seconds(func: &str, seconds: f64) -> PyResult<f64> {
    if seconds.is_finite() && seconds > 0.0 && seconds <= 60.0 {
        Ok(seconds)
    } else {
        Err(PyValueError::new_err(format!(
            "{func}: seconds must be in (0, 60], got {seconds}"
        )))
    }
}

/// A probe's result: `None` (the kernel cannot run here) as a ValueError.
fn probe_ran(func: &str, k: Kernel, rate: Option<f64>) -> PyResult<f64> {
    rate.ok_or_else(|| {
        PyValueError::new_err(format!(
            "{func}: kernel {:?} is not supported on this CPU",
            k.name()
        ))
    })
}

/// FLOP/s of one core's fused multiply-adds on a kernel's widest vectors, nothing else limiting
/// them (see `gptcore_core::kernels::peak`): the benchmarks' peak. `kernel` None: the active
/// one. Runs on the calling thread for about `seconds`, without the GIL.
#[pyfunction]
#[pyo3(signature = (dtype="float32", kernel=None, seconds=0.25))]
fn fma_rate(py: Python<'_>, dtype: &str, kernel: Option<&str>, seconds: f64) -> PyResult<f64> {
    let double = match dtype {
        "float32" => false,
        "float64" => true,
        _ => {
            return Err(PyValueError::new_err(format!(
                "fma_rate: dtype must be 'float32' or 'float64', got {dtype:?}"
            )))
        }
    };
    let seconds = probe_seconds("fma_rate", seconds)?;
    let k = probe_kernel(kernel)?;
    let rate = detach(py, || {
        gptcore_core::kernels::peak::fma_rate(k, double, seconds)
    })?;
    probe_ran("fma_rate", k, rate)
}

/// Largest buffer the read probe takes.
const READ_RATE_MAX_BYTES: u64 = 4 << 30;

/// Bytes/s that the thread team (`set_num_threads`) reads from a buffer of `nbytes`, each
/// thread summing its own part with a kernel's vectors, nothing else limiting it (see
/// `gptcore_core::kernels::bandwidth`): the benchmarks' read bandwidth. The best pass of
/// about `seconds`, without the GIL.
#[pyfunction]
#[pyo3(signature = (nbytes, kernel=None, seconds=0.25))]
fn read_rate(py: Python<'_>, nbytes: i64, kernel: Option<&str>, seconds: f64) -> PyResult<f64> {
    if !(1..=READ_RATE_MAX_BYTES as i64).contains(&nbytes) {
        return Err(PyValueError::new_err(format!(
            "read_rate: nbytes must be in [1, {READ_RATE_MAX_BYTES}], got {nbytes}"
        )));
    }
    let seconds = probe_seconds("read_rate", seconds)?;
    let k = probe_kernel(kernel)?;
    let rate = detach(py, || {
        gptcore_core::kernels::bandwidth::read_rate(k, nbytes as usize, seconds)
    })?
    .map_err(to_py_err)?;
    probe_ran("read_rate", k, rate)
}

#[pyfunction]
fn set_num_threads(n: i64) -> PyResult<()> {
    if n < 1 {
        return Err(PyValueError::new_err(format!(
            "set_num_threads: n must be >= 1, got {n}"
        )));
    }
    threads::set_num_threads(n as usize).map_err(to_py_err)
}

#[pyfunction]
fn get_num_threads() -> usize {
    threads::num_threads()
}

/// Block sizes of every kernel built for this architecture (x86-64: avx512, avx2, portable;
/// aarch64: neon, portable): a list of (dtype, kernel, MR, NR, KC_MAX, MC) tuples.
#[pyfunction]
fn block_sizes() -> Vec<(&'static str, &'static str, usize, usize, usize, usize)> {
    use gptcore_core::kernels::HasKernels;
    use gptcore_core::Element;
    let mut out = vec![];
    for k in Kernel::ALL.into_iter().filter(|k| k.built()) {
        out.push((
            "float32",
            k.name(),
            f32::gemm_kernels(k).mr,
            f32::NR,
            f32::KC_MAX,
            gemm::MC,
        ));
        out.push((
            "float64",
            k.name(),
            f64::gemm_kernels(k).mr,
            f64::NR,
            f64::KC_MAX,
            gemm::MC,
        ));
    }
    out
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PackedMatrix>()?;
    m.add_function(wrap_pyfunction!(matmul, m)?)?;
    m.add_function(wrap_pyfunction!(matmul_reference, m)?)?;
    m.add_function(wrap_pyfunction!(set_kernel, m)?)?;
    m.add_function(wrap_pyfunction!(kernel, m)?)?;
    m.add_function(wrap_pyfunction!(available_kernels, m)?)?;
    m.add_function(wrap_pyfunction!(set_num_threads, m)?)?;
    m.add_function(wrap_pyfunction!(get_num_threads, m)?)?;
    m.add_function(wrap_pyfunction!(block_sizes, m)?)?;
    m.add_function(wrap_pyfunction!(fma_rate, m)?)?;
    m.add_function(wrap_pyfunction!(read_rate, m)?)?;
    m.add_function(wrap_pyfunction!(_panic_for_tests, m)?)?;
    Ok(())
}
