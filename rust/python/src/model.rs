//! `NativeModel` and `NativeCache`: the decoder behind `gptcore.Model`.
//!
//! The Python layer validates names, shapes, dtypes and ids, and hands over C-contiguous
//! arrays of the compute dtype; this layer builds the Rust model (packing every weight matrix
//! once, without the GIL) and runs forward passes and decode steps without the GIL, checking
//! for Ctrl-C between layers.

use crate::convert::{detach, to_py_err};
use crate::pooled::{into_array, Poolable};
use gptcore_core::decoder::{
    Config, Family, Fetched, Float, Logits, Model, Positions, Request, Rope, RopeScaling, SeqStep,
    Tensor, TensorSpec,
};
use gptcore_core::formats::WeightFormat;
use gptcore_core::kv_cache::KvCache;
use gptcore_core::Error;
use numpy::{
    PyArray1, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2, PyReadonlyArrayDyn,
    PyUntypedArrayMethods,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

enum AnyModel {
    F32(Model<f32>),
    F64(Model<f64>),
}

enum AnyCache {
    F32(KvCache<f32>),
    F64(KvCache<f64>),
}

#[pyclass(frozen, module = "gptcore._native")]
pub struct NativeModel {
    inner: AnyModel,
    /// Unique per model: a cache remembers which model made it.
    id: u64,
}

static NEXT_MODEL_ID: AtomicU64 = AtomicU64::new(1);

/// Keys and values of a batch of sequences, kept between decode steps.
///
/// The keys and values sit behind a mutex that a step holds while it runs without the GIL.
/// Nothing here ever waits for that mutex while holding the GIL (a step that finds it taken
/// is refused; `clear` and `nbytes` wait with the GIL released), so a cache shared between
/// threads cannot deadlock the interpreter.
#[pyclass(frozen, module = "gptcore._native")]
pub struct NativeCache {
    inner: Mutex<AnyCache>,
    batch: usize,
    len: AtomicUsize,
    model_id: u64,
    dtype: &'static str,
}

impl NativeCache {
    /// Run `f` on the keys and values, waiting for the mutex with the GIL released.
    fn with_detached<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut AnyCache) -> R + Send,
    ) -> R {
        py.detach(|| f(&mut self.inner.lock().unwrap_or_else(|e| e.into_inner())))
    }
}

#[pymethods]
impl NativeCache {
    /// Positions held.
    #[getter]
    fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }
    #[getter]
    fn batch(&self) -> usize {
        self.batch
    }
    #[getter]
    fn nbytes(&self, py: Python<'_>) -> usize {
        self.with_detached(py, |c| match c {
            AnyCache::F32(c) => c.nbytes(),
            AnyCache::F64(c) => c.nbytes(),
        })
    }
    fn clear(&self, py: Python<'_>) {
        self.with_detached(py, |c| match c {
            AnyCache::F32(c) => c.clear(),
            AnyCache::F64(c) => c.clear(),
        });
        self.len.store(0, Ordering::Release);
    }
}

/// `c.name`, or `default` when `c` has no such attribute or it is None.
fn attr_or<'py, T: for<'a> FromPyObject<'a, 'py>>(
    c: &Bound<'py, PyAny>,
    name: &str,
    default: T,
) -> PyResult<T> {
    match c.getattr(name) {
        Ok(v) if !v.is_none() => Ok(v.extract().map_err(Into::into)?),
        _ => Ok(default),
    }
}

/// The rotary settings of a `GPTConfig`: `rope_theta` and `rope_scaling` (None, or an object
/// with `rope_type` and the type's parameters).
fn rope_from_py(c: &Bound<'_, PyAny>) -> PyResult<Rope> {
    let theta: f64 = c.getattr("rope_theta")?.extract()?;
    let s = c.getattr("rope_scaling")?;
    let scaling = if s.is_none() {
        RopeScaling::Default
    } else {
        let kind: String = s.getattr("rope_type")?.extract()?;
        let f = |name: &str| -> PyResult<f64> { s.getattr(name)?.extract() };
        match kind.as_str() {
            "default" => RopeScaling::Default,
            "linear" => RopeScaling::Linear {
                factor: f("factor")?,
            },
            "llama3" => RopeScaling::Llama3 {
                factor: f("factor")?,
                low_freq_factor: f("low_freq_factor")?,
                high_freq_factor: f("high_freq_factor")?,
                original_max_position_embeddings: f("original_max_position_embeddings")?,
            },
            other => {
                return Err(PyValueError::new_err(format!(
                    "config: rope type {other:?} is not supported (known: {})",
                    RopeScaling::TYPES.join(", ")
                )))
            }
        }
    };
    Ok(Rope { theta, scaling })
}

/// The core's [`Config`] read from a `gptcore.GPTConfig` (one object crosses the boundary).
/// Python's `bias` switches the MLP biases (`attn_bias` the q/k/v ones and `attn_out_bias`
/// the output projection's, already resolved by `GPTConfig`), and `pos` is "learned",
/// "sinusoidal" or "rotary".
fn config_from_py(c: &Bound<'_, PyAny>) -> PyResult<Config> {
    let pos: String = c.getattr("pos")?.extract()?;
    let family: String = attr_or(c, "family", "gpt2".to_string())?;
    let n_heads: usize = c.getattr("n_heads")?.extract()?;
    let attn_bias: bool = c.getattr("attn_bias")?.extract()?;
    let positions = match pos.as_str() {
        "learned" => Positions::Learned,
        "sinusoidal" => Positions::Sinusoidal,
        "rotary" => Positions::Rotary(rope_from_py(c)?),
        _ => {
            return Err(PyValueError::new_err(format!(
                "config: pos must be 'learned', 'sinusoidal' or 'rotary', got {pos:?}"
            )))
        }
    };
    Ok(Config {
        family: Family::parse(&family).map_err(to_py_err)?,
        vocab_size: c.getattr("vocab_size")?.extract()?,
        n_ctx: c.getattr("n_ctx")?.extract()?,
        d_model: c.getattr("d_model")?.extract()?,
        n_heads,
        n_kv_heads: attr_or(c, "n_kv_heads", n_heads)?,
        d_head: c.getattr("d_head")?.extract()?,
        n_layers: c.getattr("n_layers")?.extract()?,
        d_ff: c.getattr("d_ff")?.extract()?,
        positions,
        tied: c.getattr("tied")?.extract()?,
        ln_eps: c.getattr("ln_eps")?.extract()?,
        attn_bias,
        attn_out_bias: attr_or(c, "attn_out_bias", attn_bias)?,
        mlp_bias: c.getattr("bias")?.extract()?,
        ln_affine: c.getattr("ln_affine")?.extract()?,
    })
}

/// The tensor schema of a `GPTConfig`: `[(name, shape, kind), ...]` in canonical order.
#[pyfunction]
pub fn tensor_schema(
    config: &Bound<'_, PyAny>,
) -> PyResult<Vec<(String, Vec<usize>, &'static str)>> {
    let cfg = config_from_py(config)?;
    gptcore_core::decoder::validate(&cfg).map_err(to_py_err)?;
    Ok(gptcore_core::decoder::schema(&cfg)
        .into_iter()
        .map(|t| (t.name, t.shape, t.kind))
        .collect())
}

/// The weights dict's arrays of dtype T (C-contiguous), borrowed for the build.
fn weight_arrays<'py, T: numpy::Element + gptcore_core::Element>(
    weights: &Bound<'py, PyDict>,
) -> PyResult<Vec<(String, PyReadonlyArrayDyn<'py, T>)>> {
    let mut arrays = Vec::new();
    for (k, v) in weights.iter() {
        let name: String = k.extract()?;
        let arr = v.extract::<PyReadonlyArrayDyn<'py, T>>().map_err(|_| {
            PyTypeError::new_err(format!(
                "weights[{name:?}] must be a numpy array of dtype {}",
                T::NAME
            ))
        })?;
        if !arr.is_c_contiguous() {
            return Err(PyValueError::new_err(format!(
                "weights[{name:?}] must be C-contiguous"
            )));
        }
        arrays.push((name, arr));
    }
    Ok(arrays)
}

/// The arrays as the core's named tensors.
fn tensor_map<'a, T: numpy::Element>(
    arrays: &'a [(String, PyReadonlyArrayDyn<'_, T>)],
) -> PyResult<HashMap<String, Tensor<'a, T>>> {
    let mut map = HashMap::new();
    for (name, arr) in arrays {
        map.insert(
            name.clone(),
            Tensor {
                shape: arr.shape().to_vec(),
                data: arr.as_slice()?,
            },
        );
    }
    Ok(map)
}

fn build<T: Float + numpy::Element>(
    py: Python<'_>,
    cfg: Config,
    weights: &Bound<'_, PyDict>,
) -> PyResult<Model<T>> {
    let arrays = weight_arrays::<T>(weights)?;
    let map = tensor_map(&arrays)?;
    detach(py, || Model::new(cfg, &map))?.map_err(to_py_err)
}

/// What `fetch(name)` returned, as the core takes it: None; a uint16 array (the patterns of
/// the model's 16-bit format); a uint8 array (the file blocks of its block format); a float32
/// array (values to store in the model's format); or a tuple `(format name, array)` for a
/// tensor held in another format (`("float32", None)`: the weights dict's values as they are).
fn fetched(name: &str, r: &Bound<'_, PyAny>, format: WeightFormat) -> PyResult<Option<Fetched>> {
    fn vec_of<T: numpy::Element + Copy>(a: PyReadonlyArrayDyn<'_, T>) -> Vec<T> {
        match a.as_slice() {
            Ok(s) => s.to_vec(),
            Err(_) => a.as_array().iter().copied().collect(),
        }
    }
    if r.is_none() {
        return Ok(None);
    }
    let (format, arr) = match r.extract::<(String, Bound<'_, PyAny>)>() {
        Ok((f, a)) if f == "float32" && a.is_none() => return Ok(Some(Fetched::Full)),
        Ok((f, a)) => (crate::formats::parse_format("fetch: format", &f)?, a),
        Err(_) => (format, r.clone()),
    };
    if let Ok(a) = arr.extract::<PyReadonlyArrayDyn<'_, u16>>() {
        return Ok(Some(Fetched::Bits16(format, vec_of(a))));
    }
    if let Ok(a) = arr.extract::<PyReadonlyArrayDyn<'_, u8>>() {
        return Ok(Some(Fetched::Blocks(format, vec_of(a))));
    }
    if let Ok(a) = arr.extract::<PyReadonlyArrayDyn<'_, f32>>() {
        return Ok(Some(Fetched::Values(vec_of(a))));
    }
    Err(PyTypeError::new_err(format!(
        "fetch({name:?}) must return None, a uint16, uint8 or float32 array, or a tuple \
         (format, array)"
    )))
}

/// A float32 model with stored weights (see [`NativeModel::new`]).
fn build_stored(
    py: Python<'_>,
    cfg: Config,
    weights: &Bound<'_, PyDict>,
    format: WeightFormat,
    fetch: Option<Py<PyAny>>,
) -> PyResult<Model<f32>> {
    let arrays = weight_arrays::<f32>(weights)?;
    let map = tensor_map(&arrays)?;
    // The fetch callback runs Python: it takes the interpreter for each tensor.
    let pending: Mutex<Option<PyErr>> = Mutex::new(None);
    let call = |spec: &TensorSpec| -> gptcore_core::Result<Option<Fetched>> {
        let Some(f) = fetch.as_ref() else {
            return Ok(None);
        };
        Python::attach(|py| -> PyResult<Option<Fetched>> {
            let r = f.call1(py, (spec.name.as_str(),))?;
            fetched(&spec.name, r.bind(py), format)
        })
        .map_err(|e| {
            let msg = e.to_string();
            *pending.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
            Error::Value(msg)
        })
    };
    let out = detach(py, || Model::with_format(cfg, &map, format, Some(&call)))?;
    if let Some(e) = pending.lock().unwrap_or_else(|p| p.into_inner()).take() {
        return Err(e);
    }
    out.map_err(to_py_err)
}

/// How long a run goes between asks for pending signals (each takes the GIL, a few
/// microseconds): a Ctrl-C still stops it at once to a person, and a decode step, a few dozen
/// layers of tens of microseconds each, asks once instead of once a layer.
const SIGNAL_POLL_NS: u64 = 2_000_000;

/// Stop between layers when Python has a pending signal (Ctrl-C): the core's check between
/// layers asks Python at its first call and then once [`SIGNAL_POLL_NS`] has passed.
fn run_checked<R: Send>(
    py: Python<'_>,
    f: impl FnOnce(&(dyn Fn() -> gptcore_core::Result<()> + Sync)) -> gptcore_core::Result<R> + Send,
) -> PyResult<R> {
    let pending: Mutex<Option<PyErr>> = Mutex::new(None);
    let start = std::time::Instant::now();
    let next_ask = AtomicU64::new(0);
    let check = || -> gptcore_core::Result<()> {
        let now = start.elapsed().as_nanos() as u64;
        if now < next_ask.load(Ordering::Relaxed) {
            return Ok(());
        }
        next_ask.store(now + SIGNAL_POLL_NS, Ordering::Relaxed);
        Python::attach(|py| py.check_signals()).map_err(|e| {
            *pending.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
            Error::Value("interrupted".into())
        })
    };
    let out = detach(py, || f(&check))?;
    if let Some(e) = pending.lock().unwrap_or_else(|p| p.into_inner()).take() {
        return Err(e);
    }
    out.map_err(to_py_err)
}

/// The ids as the core takes them. Their range is checked by the Python layer (which names
/// the argument) and, for memory safety, by the core: a value that does not fit in u32 becomes
/// u32::MAX, which the core rejects as out of range.
fn ids_u32(ids: &PyReadonlyArray2<'_, i64>) -> (Vec<u32>, usize, usize) {
    let (b, t) = (ids.shape()[0], ids.shape()[1]);
    let out = ids
        .as_array()
        .iter()
        .map(|&x| u32::try_from(x).unwrap_or(u32::MAX))
        .collect();
    (out, b, t)
}

fn parse_logits(s: &str) -> PyResult<Logits> {
    match s {
        "all" => Ok(Logits::All),
        "last" => Ok(Logits::Last),
        "none" => Ok(Logits::None),
        _ => Err(PyValueError::new_err(format!(
            "logits must be 'all', 'last' or 'none', got {s:?}"
        ))),
    }
}

type RunResult<'py> = (Bound<'py, PyAny>, Option<Bound<'py, PyAny>>);

/// A run of `batch x t_new` ids.
fn request(
    ids: &[u32],
    batch: usize,
    t_new: usize,
    logits: Logits,
    causal: bool,
    want_hidden: bool,
) -> Request<'_> {
    Request {
        ids,
        batch,
        t_new,
        logits,
        causal,
        want_hidden,
    }
}

/// `m.run(req, cache)` without the GIL: the logits as an array `(rows, vocab)`, and the
/// hidden states `(n_layers + 1, batch * t_new, d)` when asked for.
fn run_model<'py, T: Float + Poolable>(
    py: Python<'py>,
    m: &Model<T>,
    req: &Request<'_>,
    cache: Option<&mut KvCache<T>>,
) -> PyResult<RunResult<'py>> {
    let (b, t) = (req.batch, req.t_new);
    let out = run_checked(py, |check| m.run(req, cache, check))?;
    let v = m.cfg.vocab_size;
    let rows = out.logits.len() / v.max(1);
    let logits = into_array(py, out.logits, m.outputs())?
        .reshape([rows, v])?
        .into_any();
    let hid = match out.hidden {
        Some(h) => Some(
            PyArray1::from_vec(py, h)
                .reshape([m.cfg.n_layers + 1, b * t, m.cfg.d_model])?
                .into_any(),
        ),
        None => None,
    };
    Ok((logits, hid))
}

/// The caches of one element type inside [`AnyCache`].
trait CacheOf: Sized {
    fn of(c: &mut AnyCache) -> Option<&mut KvCache<Self>>;
}
impl CacheOf for f32 {
    fn of(c: &mut AnyCache) -> Option<&mut KvCache<f32>> {
        match c {
            AnyCache::F32(c) => Some(c),
            AnyCache::F64(_) => None,
        }
    }
}
impl CacheOf for f64 {
    fn of(c: &mut AnyCache) -> Option<&mut KvCache<f64>> {
        match c {
            AnyCache::F64(c) => Some(c),
            AnyCache::F32(_) => None,
        }
    }
}

/// `m.step_many` over the locked caches without the GIL: the logits `(rows, vocab)` and the
/// rows of each sequence.
fn step_many_model<'py, T: Float + Poolable + CacheOf>(
    py: Python<'py>,
    m: &Model<T>,
    guards: &mut [std::sync::MutexGuard<'_, AnyCache>],
    ids: &[Vec<u32>],
    all_logits: &[bool],
) -> PyResult<(Bound<'py, PyAny>, Vec<usize>)> {
    let mut steps = Vec::with_capacity(ids.len());
    for (i, ((g, ids), &all)) in guards.iter_mut().zip(ids).zip(all_logits).enumerate() {
        let cache = T::of(g).ok_or_else(|| {
            PyTypeError::new_err(format!(
                "step_many: caches[{i}] was made by a model of another dtype"
            ))
        })?;
        steps.push(SeqStep {
            cache,
            ids,
            all_logits: all,
        });
    }
    let out = run_checked(py, |check| m.step_many(&mut steps, check))?;
    let v = m.cfg.vocab_size;
    let rows = out.logits.len() / v.max(1);
    let logits = into_array(py, out.logits, m.outputs())?
        .reshape([rows, v])?
        .into_any();
    Ok((logits, out.rows))
}

#[pymethods]
impl NativeModel {
    /// `weight_dtype` ("bfloat16" / "float16" / "q8_0" / "q4_0", float32 models only) stores
    /// the weight matrices and embedding tables in that format; `fetch(name)` then returns a
    /// large tensor as its source stores it (see [`fetched`]), or None to round (quantize) the
    /// tensor in `weights`.
    #[new]
    #[pyo3(signature = (weights, config, dtype, weight_dtype=None, fetch=None))]
    fn new(
        py: Python<'_>,
        weights: &Bound<'_, PyDict>,
        config: &Bound<'_, PyAny>,
        dtype: &str,
        weight_dtype: Option<&str>,
        fetch: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let cfg = config_from_py(config)?;
        if let Some(wd) = weight_dtype {
            let format = crate::formats::parse_format("weight_dtype", wd)?;
            if dtype != "float32" {
                return Err(PyValueError::new_err(format!(
                    "weight_dtype={wd:?} needs dtype 'float32' ({wd} weights, float32 \
                     arithmetic), got dtype {dtype:?}"
                )));
            }
            let inner = AnyModel::F32(build_stored(py, cfg, weights, format, fetch)?);
            return Ok(NativeModel {
                inner,
                id: NEXT_MODEL_ID.fetch_add(1, Ordering::Relaxed),
            });
        }
        let inner = match dtype {
            "float32" => AnyModel::F32(build(py, cfg, weights)?),
            "float64" => AnyModel::F64(build(py, cfg, weights)?),
            _ => {
                return Err(PyValueError::new_err(format!(
                    "dtype must be 'float32' or 'float64', got {dtype:?}"
                )))
            }
        };
        Ok(NativeModel {
            inner,
            id: NEXT_MODEL_ID.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// Forward pass over ids (B, T) int64: returns (logits (rows, V), hidden or None).
    #[pyo3(signature = (ids, logits="all", causal=true, hidden=false))]
    fn forward<'py>(
        &self,
        py: Python<'py>,
        ids: PyReadonlyArray2<'py, i64>,
        logits: &str,
        causal: bool,
        hidden: bool,
    ) -> PyResult<RunResult<'py>> {
        let mode = parse_logits(logits)?;
        match &self.inner {
            AnyModel::F32(m) => {
                let (v, b, t) = ids_u32(&ids);
                run_model(py, m, &request(&v, b, t, mode, causal, hidden), None)
            }
            AnyModel::F64(m) => {
                let (v, b, t) = ids_u32(&ids);
                run_model(py, m, &request(&v, b, t, mode, causal, hidden), None)
            }
        }
    }

    /// An empty key/value cache for `batch` sequences.
    fn new_cache(&self, batch: usize) -> PyResult<NativeCache> {
        if batch == 0 {
            return Err(PyValueError::new_err("batch must be >= 1"));
        }
        let inner = match &self.inner {
            AnyModel::F32(m) => AnyCache::F32(m.new_cache(batch)),
            AnyModel::F64(m) => AnyCache::F64(m.new_cache(batch)),
        };
        Ok(NativeCache {
            inner: Mutex::new(inner),
            batch,
            len: AtomicUsize::new(0),
            model_id: self.id,
            dtype: self.dtype(),
        })
    }

    /// Process new positions ids (B, T_new) after those in `cache`; returns logits.
    #[pyo3(signature = (cache, ids, logits="last"))]
    fn step<'py>(
        &self,
        py: Python<'py>,
        cache: &Bound<'py, NativeCache>,
        ids: PyReadonlyArray2<'py, i64>,
        logits: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mode = parse_logits(logits)?;
        let cache = cache.get();
        if cache.dtype != self.dtype() {
            return Err(PyTypeError::new_err(format!(
                "step: the cache was made by a model of another dtype ({}; this model computes in {})",
                cache.dtype,
                self.dtype()
            )));
        }
        if cache.model_id != self.id {
            return Err(PyValueError::new_err(
                "step: this cache was made by another model (use model.new_cache())",
            ));
        }
        let mut guard = cache
            .inner
            .try_lock()
            .map_err(|_| PyValueError::new_err("cache is in use by another thread"))?;
        let out = match (&self.inner, &mut *guard) {
            (AnyModel::F32(m), AnyCache::F32(c)) => {
                let (v, b, t) = ids_u32(&ids);
                run_model(py, m, &request(&v, b, t, mode, true, false), Some(c))?
            }
            (AnyModel::F64(m), AnyCache::F64(c)) => {
                let (v, b, t) = ids_u32(&ids);
                run_model(py, m, &request(&v, b, t, mode, true, false), Some(c))?
            }
            _ => {
                return Err(PyTypeError::new_err(
                    "cache was made by a model of another dtype",
                ))
            }
        };
        let n = match &*guard {
            AnyCache::F32(c) => c.len(),
            AnyCache::F64(c) => c.len(),
        };
        cache.len.store(n, Ordering::Release);
        Ok(out.0)
    }

    /// One step over several sequences, each with its own one-sequence cache: `ids[i]` (T_i,)
    /// int64 are appended to `caches[i]`. Returns the logits `(rows, V)`, each sequence's last
    /// new row (every new row where `all_logits[i]`) in order, and the rows per sequence.
    #[pyo3(signature = (caches, ids, all_logits=None))]
    fn step_many<'py>(
        &self,
        py: Python<'py>,
        caches: Vec<Bound<'py, NativeCache>>,
        ids: Vec<PyReadonlyArray1<'py, i64>>,
        all_logits: Option<Vec<bool>>,
    ) -> PyResult<(Bound<'py, PyAny>, Vec<usize>)> {
        let all = all_logits.unwrap_or_else(|| vec![false; caches.len()]);
        if ids.len() != caches.len() || all.len() != caches.len() {
            return Err(PyValueError::new_err(format!(
                "step_many: caches, ids and all_logits must have one entry per sequence, got {}, {} and {}",
                caches.len(),
                ids.len(),
                all.len()
            )));
        }
        for (i, c) in caches.iter().enumerate() {
            let cache = c.get();
            if cache.dtype != self.dtype() {
                return Err(PyTypeError::new_err(format!(
                    "step_many: caches[{i}] was made by a model of another dtype ({}; this model computes in {})",
                    cache.dtype,
                    self.dtype()
                )));
            }
            if cache.model_id != self.id {
                return Err(PyValueError::new_err(format!(
                    "step_many: caches[{i}] was made by another model (use model.new_cache())"
                )));
            }
            if cache.batch != 1 {
                return Err(PyValueError::new_err(format!(
                    "step_many: caches[{i}] holds {} sequences; step_many takes one-sequence caches (new_cache(1))",
                    cache.batch
                )));
            }
            if let Some(j) = caches[..i].iter().position(|o| o.is(c)) {
                return Err(PyValueError::new_err(format!(
                    "step_many: caches[{i}] is the same cache as caches[{j}]"
                )));
            }
        }
        let mut guards = Vec::with_capacity(caches.len());
        for (i, c) in caches.iter().enumerate() {
            guards.push(c.get().inner.try_lock().map_err(|_| {
                PyValueError::new_err(format!(
                    "step_many: caches[{i}] is in use by another thread"
                ))
            })?);
        }
        let ids: Vec<Vec<u32>> = ids
            .iter()
            .map(|a| {
                a.as_array()
                    .iter()
                    .map(|&x| u32::try_from(x).unwrap_or(u32::MAX))
                    .collect()
            })
            .collect();
        let out = match &self.inner {
            AnyModel::F32(m) => step_many_model(py, m, &mut guards, &ids, &all),
            AnyModel::F64(m) => step_many_model(py, m, &mut guards, &ids, &all),
        };
        for (c, g) in caches.iter().zip(&guards) {
            let n = match &**g {
                AnyCache::F32(c) => c.len(),
                AnyCache::F64(c) => c.len(),
            };
            c.get().len.store(n, Ordering::Release);
        }
        out
    }

    /// Log-probabilities of targets (B, T) given ids (B, T), float64, logits in chunks.
    fn token_logprobs<'py>(
        &self,
        py: Python<'py>,
        ids: PyReadonlyArray2<'py, i64>,
        targets: PyReadonlyArray2<'py, i64>,
        chunk: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        if ids.shape() != targets.shape() {
            return Err(PyValueError::new_err("targets must have the shape of ids"));
        }
        let out = match &self.inner {
            AnyModel::F32(m) => {
                let (v, b, t) = ids_u32(&ids);
                let (tg, _, _) = ids_u32(&targets);
                run_checked(py, |check| m.token_logprobs(&v, b, t, &tg, chunk, check))?
            }
            AnyModel::F64(m) => {
                let (v, b, t) = ids_u32(&ids);
                let (tg, _, _) = ids_u32(&targets);
                run_checked(py, |check| m.token_logprobs(&v, b, t, &tg, chunk, check))?
            }
        };
        Ok(PyArray1::from_vec(py, out).into_any())
    }

    /// The weights the model computes with, as a dict of new numpy arrays.
    fn export<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        macro_rules! put {
            ($m:expr) => {
                for (name, shape, data) in detach(py, || $m.export())? {
                    out.set_item(name, PyArray1::from_vec(py, data).reshape(shape)?)?;
                }
            };
        }
        match &self.inner {
            AnyModel::F32(m) => put!(m),
            AnyModel::F64(m) => put!(m),
        }
        Ok(out)
    }

    #[getter]
    fn dtype(&self) -> &'static str {
        match &self.inner {
            AnyModel::F32(_) => "float32",
            AnyModel::F64(_) => "float64",
        }
    }

    /// How the weight matrices and embedding tables are stored: "bfloat16", "float16",
    /// "q8_0", "q4_0", or None (the compute dtype).
    #[getter]
    fn weight_dtype(&self) -> Option<&'static str> {
        let f = match &self.inner {
            AnyModel::F32(m) => m.weight_format(),
            AnyModel::F64(m) => m.weight_format(),
        };
        (f != WeightFormat::Full).then(|| f.name())
    }

    /// Each weight matrix and embedding table as the model holds it: `(name, format, bytes)`,
    /// the format "float32" / "float64" for the compute dtype (`lm_head.weight` is the packed
    /// head, also when it is the token embedding's transpose).
    fn stored_tensors(&self) -> Vec<(String, &'static str, usize)> {
        let (list, dtype) = match &self.inner {
            AnyModel::F32(m) => (m.stored_tensors(), "float32"),
            AnyModel::F64(m) => (m.stored_tensors(), "float64"),
        };
        list.into_iter()
            .map(|(n, f, b)| {
                (
                    n,
                    if f == WeightFormat::Full {
                        dtype
                    } else {
                        f.name()
                    },
                    b,
                )
            })
            .collect()
    }

    /// The file blocks of the tensor `name` when the model holds it in a block format:
    /// `(format, uint8 array)`, a run of blocks along K for each column of a `(k, n)` matrix
    /// (for each row of a table or of `lm_head.weight`); None otherwise.
    fn stored_blocks<'py>(
        &self,
        py: Python<'py>,
        name: &str,
    ) -> PyResult<Option<(&'static str, Bound<'py, PyAny>)>> {
        let got = match &self.inner {
            AnyModel::F32(m) => detach(py, || m.stored_blocks(name))?,
            AnyModel::F64(m) => detach(py, || m.stored_blocks(name))?,
        };
        Ok(match got {
            Some((f, b)) => Some((f.name(), PyArray1::from_vec(py, b).into_any())),
            None => None,
        })
    }

    /// Bytes of weights held (packed matrices included).
    #[getter]
    fn nbytes(&self) -> usize {
        match &self.inner {
            AnyModel::F32(m) => m.nbytes(),
            AnyModel::F64(m) => m.nbytes(),
        }
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(tensor_schema, m)?)?;
    m.add_class::<NativeModel>()?;
    m.add_class::<NativeCache>()?;
    Ok(())
}
