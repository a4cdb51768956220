//! The GPT decoder: configuration, weights (pre-packed once), and the forward pass.
//!
//! ```text
//! x = wte[ids] + pos(t)                        (learned table or sinusoidal)
//! for each block:  x = x + Attn(LN1(x)) Wo + bo
//!                  x = x + GELU(LN2(x) Wfc + bfc) Wproj + bproj
//! logits = LN_f(x) Whead                       (Whead = wte^T when tied)
//! ```
//!
//! One routine, [`Model::run`], processes new positions of a batch of sequences, appending
//! their keys and values to a [`KvCache`]. A whole forward pass is `run` on an empty cache; a
//! decode step is `run` with one new position. Both execute the same per-row arithmetic, so
//! cached decoding reproduces the full forward bit for bit.

use crate::attention::{attend_block, Scratch};
use crate::buffer_pool::BufferPool;
use crate::gemm::kernels::HasKernels;
use crate::gemm::{self, GemmElement, MatRef, PackedB, Tile};
use crate::kv_cache::{HeadKv, KvCache, KB};
use crate::ops::{self, Transcendental};
use crate::threads::{self, SendPtr};
use crate::Result;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Phase timings printed to stderr when `GPTCORE_PROFILE=1` (for tuning; off by default).
struct Phases {
    on: bool,
    t: std::time::Instant,
    acc: Vec<(&'static str, f64)>,
}

impl Phases {
    fn new() -> Self {
        static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let on = *ON.get_or_init(|| {
            std::env::var("GPTCORE_PROFILE")
                .map(|v| v == "1")
                .unwrap_or(false)
        });
        Phases {
            on,
            t: std::time::Instant::now(),
            acc: Vec::new(),
        }
    }
    fn mark(&mut self, name: &'static str) {
        if self.on {
            let dt = self.t.elapsed().as_secs_f64();
            match self.acc.iter_mut().find(|(n, _)| *n == name) {
                Some((_, v)) => *v += dt,
                None => self.acc.push((name, dt)),
            }
            self.t = std::time::Instant::now();
        }
    }
}

impl Drop for Phases {
    fn drop(&mut self) {
        if self.on {
            let total: f64 = self.acc.iter().map(|(_, v)| v).sum();
            let parts: Vec<String> = self
                .acc
                .iter()
                .map(|(n, v)| format!("{n} {:.1}ms", v * 1e3))
                .collect();
            eprintln!(
                "gptcore profile: total {:.1}ms: {}",
                total * 1e3,
                parts.join(", ")
            );
        }
    }
}

/// Floating-point types the decoder runs in.
pub trait Float: GemmElement + HasKernels + Transcendental {}
impl Float for f32 {}
impl Float for f64 {}

#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub vocab_size: usize,
    pub n_ctx: usize,
    pub d_model: usize,
    pub n_heads: usize,
    pub n_layers: usize,
    pub d_ff: usize,
    pub sinusoidal: bool,
    pub tied: bool,
    pub ln_eps: f64,
}

impl Config {
    pub fn d_head(&self) -> usize {
        self.d_model / self.n_heads
    }
    pub fn validate(&self) -> Result<()> {
        if self.vocab_size == 0
            || self.d_model == 0
            || self.n_heads == 0
            || self.d_ff == 0
            || self.n_ctx == 0
        {
            return crate::value_error!(
                "config: vocab_size, n_ctx, d_model, n_heads and d_ff must be >= 1"
            );
        }
        if self.d_model % self.n_heads != 0 {
            return crate::value_error!(
                "config: d_model ({}) must be divisible by n_heads ({})",
                self.d_model,
                self.n_heads
            );
        }
        Ok(())
    }
}

/// `x @ W + b` with W packed once.
pub struct Linear<T: Float> {
    pub w: PackedB<T>,
    pub b: Option<Vec<T>>,
}

/// What a linear layer does with its output while it is still in the cache.
enum After<'a, T> {
    /// Nothing more than the bias.
    Bias,
    /// Bias, then GELU.
    Gelu,
    /// Bias, then add the result into this residual stream (`x += out`).
    AddInto(&'a mut [T]),
}

impl<T: Float> Linear<T> {
    /// `out (rows x n) = x (rows x k) @ W + b`, then `after` on every element. The bias, the
    /// GELU and the residual addition run on each tile of the product as soon as it is final
    /// (the same operations, in the same order, as separate passes over `out`).
    fn apply(&self, x: &[T], rows: usize, out: &mut Vec<T>, after: After<'_, T>) {
        let (k, n) = (self.w.rows(), self.w.cols());
        // The product writes every element of `out`, so a buffer of the right size is reused
        // as it is (no zero fill).
        crate::memory::resize_for_overwrite(out, rows * n);
        let bias = self.b.as_deref();
        let (gelu, resid) = match after {
            After::Bias => (false, None),
            After::Gelu => (true, None),
            After::AddInto(r) => {
                assert_eq!(r.len(), rows * n, "residual stream size");
                (false, Some(SendPtr(r.as_mut_ptr())))
            }
        };
        let epilogue = |mut t: Tile<'_, T>| finish_tile(&mut t, bias, gelu, resid, n);
        gemm::gemm_then(MatRef::from_slice(x, rows, k), &self.w, out, n, &epilogue);
    }
}

/// The epilogue of [`Linear::apply`] on one finished tile: `+ bias`, then GELU, then added into
/// the residual stream (row stride `n`). The loops are compiled for AVX-512 too (chosen at run
/// time); they hold no fused operations, so every copy gives the same bits.
fn finish_tile<T: Float>(
    t: &mut Tile<'_, T>,
    bias: Option<&[T]>,
    gelu: bool,
    resid: Option<SendPtr<T>>,
    n: usize,
) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f")]
        unsafe fn wide<T: Float>(
            t: &mut Tile<'_, T>,
            bias: Option<&[T]>,
            gelu: bool,
            resid: Option<SendPtr<T>>,
            n: usize,
        ) {
            finish_tile_impl(t, bias, gelu, resid, n)
        }
        if std::arch::is_x86_feature_detected!("avx512f") {
            return unsafe { wide(t, bias, gelu, resid, n) };
        }
    }
    finish_tile_impl(t, bias, gelu, resid, n)
}

#[inline(always)]
fn finish_tile_impl<T: Float>(
    t: &mut Tile<'_, T>,
    bias: Option<&[T]>,
    gelu: bool,
    resid: Option<SendPtr<T>>,
    n: usize,
) {
    // Each element gets + bias, then GELU, then goes into the residual stream: the steps run
    // over the whole tile one after the other, which keeps every element's order.
    let (i0, j0, rows, cols) = (t.i0, t.j0, t.rows, t.cols);
    if let Some(b) = bias {
        for r in 0..rows {
            for (v, &bj) in t.row(r).iter_mut().zip(&b[j0..j0 + cols]) {
                *v += bj;
            }
        }
    }
    if gelu {
        let ld = t.ld();
        // SAFETY: the tile's rows are valid for reads and writes.
        unsafe { T::gelu_rows(t.as_mut_ptr(), rows, cols, ld) };
    }
    if let Some(x) = resid {
        // The next tile down (the product's next call) reads the residual rows below these:
        // ask for them now, since rows n values apart are not a pattern the hardware follows.
        #[cfg(target_arch = "x86_64")]
        for r in rows..2 * rows {
            let p = x.get().wrapping_add((i0 + r) * n + j0);
            let bytes = cols * std::mem::size_of::<T>();
            for off in (0..bytes).step_by(64) {
                // SAFETY: a prefetch never faults, whatever the address.
                unsafe {
                    std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                        (p as *const i8).wrapping_add(off),
                    )
                };
            }
        }
        for r in 0..rows {
            // SAFETY: row i0 + r, columns j0.. of the residual stream match this row of the
            // tile, which the product hands to exactly one call.
            let xs =
                unsafe { std::slice::from_raw_parts_mut(x.get().add((i0 + r) * n + j0), cols) };
            for (a, &v) in xs.iter_mut().zip(t.row(r).iter()) {
                *a += v;
            }
        }
    }
}

/// LayerNorm parameters (None: no affine).
pub struct Norm<T> {
    pub affine: Option<(Vec<T>, Vec<T>)>,
}

pub struct Block<T: Float> {
    pub ln1: Norm<T>,
    pub qkv: Linear<T>,
    pub proj: Linear<T>,
    pub ln2: Norm<T>,
    pub fc: Linear<T>,
    pub fc_proj: Linear<T>,
}

pub struct Model<T: Float> {
    pub cfg: Config,
    pub wte: Vec<T>,
    pub wpe: Option<Vec<T>>,
    pub blocks: Vec<Block<T>>,
    pub ln_f: Norm<T>,
    pub head: PackedB<T>,
    /// Work buffers of finished passes, taken by the next ones (see [`Workspace`]).
    workspaces: Mutex<Vec<Workspace<T>>>,
    /// Logits buffers handed back by their users, for the next passes' logits.
    outputs: Arc<BufferPool<T>>,
}

/// The activation buffers of one pass (LayerNorm output, QKV, attention output, projection
/// output, MLP hidden) and the one-layer key/value cache of a plain forward.
///
/// A model keeps the buffers of finished passes and hands them to the next pass, so a
/// forward does not allocate them again: fresh memory costs a page fault and a zeroing pass
/// per page on first touch (on a virtual machine that returns freed memory to its host, a
/// host fault too), which at T = 1024 came to several percent of the forward. At most
/// `MAX_WORKSPACES` are kept (one per thread running passes at the same time), each only up
/// to `MAX_WORKSPACE_BYTES`; they are freed with the model.
struct Workspace<T> {
    h: Vec<T>,
    qkv: Vec<T>,
    att: Vec<T>,
    y: Vec<T>,
    u: Vec<T>,
    kv: Option<KvCache<T>>,
}

const MAX_WORKSPACES: usize = 4;
const MAX_WORKSPACE_BYTES: usize = 512 << 20;

impl<T: Float> Workspace<T> {
    fn new() -> Self {
        Workspace {
            h: Vec::new(),
            qkv: Vec::new(),
            att: Vec::new(),
            y: Vec::new(),
            u: Vec::new(),
            kv: None,
        }
    }

    fn nbytes(&self) -> usize {
        let kv: usize = self.kv.as_ref().map_or(0, |c| {
            c.layers
                .iter()
                .flatten()
                .map(|h| h.kt.capacity() + h.v.capacity())
                .sum()
        });
        (self.h.capacity()
            + self.qkv.capacity()
            + self.att.capacity()
            + self.y.capacity()
            + self.u.capacity()
            + kv)
            * std::mem::size_of::<T>()
    }
}

/// What [`Model::run`] returns.
pub struct RunOutput<T> {
    /// Logits, `(rows, vocab)`, rows as asked for by [`Logits`].
    pub logits: Vec<T>,
    /// Residual stream before block 0 and after each block: `(n_layers + 1, B * T_new, d)`.
    pub hidden: Option<Vec<T>>,
    /// The final residual stream `(B * T_new, d)` (before LN_f), when logits were not asked for.
    pub final_x: Option<Vec<T>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    All,
    Last,
    None,
}

/// Run `f(row_index, row)` over the rows of a row-major buffer, in parallel when large.
fn for_rows<T: Send>(buf: &mut [T], width: usize, f: impl Fn(usize, &mut [T]) + Sync + Send) {
    if width == 0 {
        return;
    }
    let rows = buf.len() / width;
    if buf.len() >= 1 << 15 && threads::num_threads() > 1 {
        // Chunks of rows about 8K values each, so an item is worth handing out.
        let per = (8192 / width).max(1);
        let ptr = SendPtr(buf.as_mut_ptr());
        threads::parallel_for(rows.div_ceil(per), |c| {
            for i in c * per..((c + 1) * per).min(rows) {
                // SAFETY: row i lies inside `buf` and belongs to chunk c alone.
                let r = unsafe { std::slice::from_raw_parts_mut(ptr.get().add(i * width), width) };
                f(i, r);
            }
        });
    } else {
        buf.chunks_mut(width).enumerate().for_each(|(i, r)| f(i, r));
    }
}

fn layernorm<T: Float>(x: &[T], out: &mut Vec<T>, d: usize, norm: &Norm<T>, eps: T) {
    crate::memory::resize_for_overwrite(out, x.len());
    let aff = norm
        .affine
        .as_ref()
        .map(|(g, b)| (g.as_slice(), b.as_slice()));
    for_rows(out, d, |i, row| {
        ops::layernorm_row(&x[i * d..(i + 1) * d], row, aff, eps)
    });
}

/// A named weight handed to [`Model::new`]: its shape and row-major data.
pub struct Tensor<'a, T> {
    pub shape: Vec<usize>,
    pub data: &'a [T],
}

impl<T: Float> Model<T> {
    /// Build from Hugging Face GPT-2 names (without "transformer."); checks every shape.
    pub fn new(
        cfg: Config,
        weights: &HashMap<String, Tensor<'_, T>>,
        attn_bias: bool,
        mlp_bias: bool,
        ln_affine: bool,
    ) -> Result<Self> {
        cfg.validate()?;
        let (d, v, f) = (cfg.d_model, cfg.vocab_size, cfg.d_ff);
        let get = |name: &str, shape: &[usize]| -> Result<&[T]> {
            match weights.get(name) {
                None => crate::value_error!(
                    "weights: missing tensor {name:?} (expected shape {shape:?})"
                ),
                Some(t) if t.shape != shape => crate::value_error!(
                    "weights: tensor {name:?} has shape {:?}, expected {shape:?}",
                    t.shape
                ),
                Some(t) if t.data.len() != shape.iter().product::<usize>() => {
                    crate::value_error!(
                        "weights: tensor {name:?} holds {} values for shape {shape:?}",
                        t.data.len()
                    )
                }
                Some(t) => Ok(t.data),
            }
        };
        let norm = |prefix: &str| -> Result<Norm<T>> {
            Ok(Norm {
                affine: if ln_affine {
                    Some((
                        get(&format!("{prefix}.weight"), &[d])?.to_vec(),
                        get(&format!("{prefix}.bias"), &[d])?.to_vec(),
                    ))
                } else {
                    None
                },
            })
        };
        let linear = |prefix: &str, k: usize, n: usize, bias: bool| -> Result<Linear<T>> {
            let w = get(&format!("{prefix}.weight"), &[k, n])?;
            Ok(Linear {
                w: PackedB::try_pack(MatRef::from_slice(w, k, n))?,
                b: if bias {
                    Some(get(&format!("{prefix}.bias"), &[n])?.to_vec())
                } else {
                    None
                },
            })
        };
        let wte = get("wte.weight", &[v, d])?.to_vec();
        let wpe = if cfg.sinusoidal {
            None
        } else {
            Some(get("wpe.weight", &[cfg.n_ctx, d])?.to_vec())
        };
        let mut blocks = Vec::with_capacity(cfg.n_layers);
        for i in 0..cfg.n_layers {
            let p = format!("h.{i}");
            blocks.push(Block {
                ln1: norm(&format!("{p}.ln_1"))?,
                qkv: linear(&format!("{p}.attn.c_attn"), d, 3 * d, attn_bias)?,
                proj: linear(&format!("{p}.attn.c_proj"), d, d, attn_bias)?,
                ln2: norm(&format!("{p}.ln_2"))?,
                fc: linear(&format!("{p}.mlp.c_fc"), d, f, mlp_bias)?,
                fc_proj: linear(&format!("{p}.mlp.c_proj"), f, d, mlp_bias)?,
            });
        }
        let ln_f = norm("ln_f")?;
        // The head multiplies by W^T where W is (V, d): a transposed view, packed once.
        let head_src: &[T] = if cfg.tied {
            &wte
        } else {
            get("lm_head.weight", &[v, d])?
        };
        let head =
            PackedB::try_pack(unsafe { MatRef::from_raw(head_src.as_ptr(), d, v, 1, d as isize) })?;
        Ok(Model {
            cfg,
            wte,
            wpe,
            blocks,
            ln_f,
            head,
            workspaces: Mutex::new(Vec::new()),
            outputs: Arc::new(BufferPool::default()),
        })
    }

    /// The pool that logits buffers come from: a caller done with a result of [`Model::run`]
    /// may hand its `logits` back with [`BufferPool::give_back`].
    pub fn outputs(&self) -> &Arc<BufferPool<T>> {
        &self.outputs
    }

    fn take_workspace(&self) -> Workspace<T> {
        let mut pool = self.workspaces.lock().unwrap_or_else(|e| e.into_inner());
        pool.pop().unwrap_or_else(Workspace::new)
    }

    fn return_workspace(&self, ws: Workspace<T>) {
        if ws.nbytes() > MAX_WORKSPACE_BYTES {
            return;
        }
        let mut pool = self.workspaces.lock().unwrap_or_else(|e| e.into_inner());
        if pool.len() < MAX_WORKSPACES {
            pool.push(ws);
        }
    }

    /// Every weight the model computes with, under its Hugging Face name, as
    /// `(name, shape, row-major values)` (packed matrices unpacked; `lm_head.weight` only
    /// when untied).
    pub fn export(&self) -> Vec<(String, Vec<usize>, Vec<T>)> {
        let (d, v) = (self.cfg.d_model, self.cfg.vocab_size);
        let mut out = vec![("wte.weight".to_string(), vec![v, d], self.wte.clone())];
        if let Some(wpe) = &self.wpe {
            out.push(("wpe.weight".into(), vec![self.cfg.n_ctx, d], wpe.clone()));
        }
        let norm = |out: &mut Vec<(String, Vec<usize>, Vec<T>)>, name: &str, n: &Norm<T>| {
            if let Some((g, b)) = &n.affine {
                out.push((format!("{name}.weight"), vec![g.len()], g.clone()));
                out.push((format!("{name}.bias"), vec![b.len()], b.clone()));
            }
        };
        let linear = |out: &mut Vec<(String, Vec<usize>, Vec<T>)>, name: &str, l: &Linear<T>| {
            out.push((
                format!("{name}.weight"),
                vec![l.w.rows(), l.w.cols()],
                l.w.unpack(),
            ));
            if let Some(b) = &l.b {
                out.push((format!("{name}.bias"), vec![b.len()], b.clone()));
            }
        };
        for (i, blk) in self.blocks.iter().enumerate() {
            norm(&mut out, &format!("h.{i}.ln_1"), &blk.ln1);
            linear(&mut out, &format!("h.{i}.attn.c_attn"), &blk.qkv);
            linear(&mut out, &format!("h.{i}.attn.c_proj"), &blk.proj);
            norm(&mut out, &format!("h.{i}.ln_2"), &blk.ln2);
            linear(&mut out, &format!("h.{i}.mlp.c_fc"), &blk.fc);
            linear(&mut out, &format!("h.{i}.mlp.c_proj"), &blk.fc_proj);
        }
        norm(&mut out, "ln_f", &self.ln_f);
        if !self.cfg.tied {
            // The head is packed as W^T (d x V); the checkpoint stores W (V x d).
            let wt = self.head.unpack();
            let mut w = vec![T::ZERO; v * d];
            for r in 0..d {
                for c in 0..v {
                    w[c * d + r] = wt[r * v + c];
                }
            }
            out.push(("lm_head.weight".into(), vec![v, d], w));
        }
        out
    }

    pub fn new_cache(&self, batch: usize) -> KvCache<T> {
        KvCache::new(
            self.cfg.n_layers,
            batch,
            self.cfg.n_heads,
            self.cfg.d_head(),
        )
    }

    /// Bytes of the packed and plain weights held.
    pub fn nbytes(&self) -> usize {
        let sz = std::mem::size_of::<T>();
        let lin = |l: &Linear<T>| l.w.nbytes() + l.b.as_ref().map_or(0, |b| b.len() * sz);
        let blocks: usize = self
            .blocks
            .iter()
            .map(|b| lin(&b.qkv) + lin(&b.proj) + lin(&b.fc) + lin(&b.fc_proj))
            .sum();
        (self.wte.len() + self.wpe.as_ref().map_or(0, |w| w.len())) * sz
            + blocks
            + self.head.nbytes()
    }

    /// Process `t_new` new positions of each of the `batch` sequences (`ids` is
    /// `batch x t_new`, row-major), after the positions already in `cache`.
    ///
    /// `cache == None` runs on a scratch cache that holds one layer at a time (a plain
    /// forward pass). `check` is called between layers; an error from it stops the run.
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &self,
        ids: &[u32],
        batch: usize,
        t_new: usize,
        cache: Option<&mut KvCache<T>>,
        logits: Logits,
        causal: bool,
        want_hidden: bool,
        check: &(dyn Fn() -> Result<()> + Sync),
    ) -> Result<RunOutput<T>> {
        let cfg = &self.cfg;
        let (nh, dh) = (cfg.n_heads, cfg.d_head());
        if ids.len() != batch * t_new {
            return crate::value_error!(
                "ids: expected {} values for shape ({batch}, {t_new}), got {}",
                batch * t_new,
                ids.len()
            );
        }
        if let Some(&bad) = ids.iter().find(|&&i| i as usize >= cfg.vocab_size) {
            return crate::value_error!(
                "ids: token id {bad} is out of range [0, {})",
                cfg.vocab_size
            );
        }
        let mut ws = self.take_workspace();
        let out = match cache {
            Some(c) => {
                // A step that fails part-way (an interrupt, an allocation) leaves the cache
                // holding exactly the positions it held before.
                let before = c.len();
                let out = self.run_on(
                    ids,
                    batch,
                    t_new,
                    c,
                    true,
                    logits,
                    causal,
                    want_hidden,
                    check,
                    &mut ws,
                );
                if out.is_err() {
                    c.truncate(before);
                }
                out
            }
            None => {
                let mut kv = match ws.kv.take() {
                    Some(mut c) if c.batch == batch && c.n_heads == nh => {
                        c.clear();
                        c
                    }
                    _ => KvCache::new(1, batch, nh, dh),
                };
                let out = self.run_on(
                    ids,
                    batch,
                    t_new,
                    &mut kv,
                    false,
                    logits,
                    causal,
                    want_hidden,
                    check,
                    &mut ws,
                );
                ws.kv = Some(kv);
                out
            }
        };
        self.return_workspace(ws);
        out
    }

    #[allow(clippy::too_many_arguments)]
    fn run_on(
        &self,
        ids: &[u32],
        batch: usize,
        t_new: usize,
        cache: &mut KvCache<T>,
        persistent: bool,
        logits: Logits,
        causal: bool,
        want_hidden: bool,
        check: &(dyn Fn() -> Result<()> + Sync),
        ws: &mut Workspace<T>,
    ) -> Result<RunOutput<T>> {
        let cfg = &self.cfg;
        let (d, nh, dh) = (cfg.d_model, cfg.n_heads, cfg.d_head());
        if cache.batch != batch {
            return crate::value_error!("cache holds {} sequences, ids has {batch}", cache.batch);
        }
        let p0 = cache.len();
        if !causal && (persistent && p0 > 0) {
            return crate::value_error!("causal=False is only available for a full forward pass");
        }
        if !cfg.sinusoidal && p0 + t_new > cfg.n_ctx {
            return crate::value_error!(
                "sequence length {} exceeds the model's context n_ctx = {} (learned positions)",
                p0 + t_new,
                cfg.n_ctx
            );
        }
        let rows = batch * t_new;
        // Embedding: x = wte[id] + pos.
        let mut x = crate::memory::try_zeroed::<T>(rows.saturating_mul(d), "residual stream")?;
        for_rows(&mut x, d, |r, row| {
            let pos = p0 + r % t_new;
            let id = ids[r] as usize;
            let e = &self.wte[id * d..(id + 1) * d];
            match &self.wpe {
                Some(wpe) => {
                    let pe = &wpe[pos * d..(pos + 1) * d];
                    for c in 0..d {
                        row[c] = e[c] + pe[c];
                    }
                }
                None => {
                    ops::sinusoidal_row(pos, row);
                    for c in 0..d {
                        row[c] = e[c] + row[c];
                    }
                }
            }
        });
        let mut hidden = if want_hidden {
            Some(Vec::with_capacity((cfg.n_layers + 1) * rows * d))
        } else {
            None
        };
        if let Some(h) = hidden.as_mut() {
            h.extend_from_slice(&x);
        }
        let eps = T::from_f64(cfg.ln_eps);
        let spec = T::spec(gemm::current_kernel());
        let mut ph = Phases::new();
        ph.mark("embed");
        let Workspace {
            h, qkv, att, y, u, ..
        } = ws;
        for (li, blk) in self.blocks.iter().enumerate() {
            check()?;
            let heads = if persistent {
                &mut cache.layers[li]
            } else {
                let l = &mut cache.layers[0];
                l.iter_mut().for_each(|hk| hk.clear());
                l
            };
            // Attention sub-block.
            layernorm(&x, h, d, &blk.ln1, eps);
            ph.mark("layernorm");
            blk.qkv.apply(h, rows, qkv, After::Bias);
            ph.mark("qkv");
            // Append this layer's keys and values for the new positions.
            let qkv_ref: &[T] = qkv;
            let fill = |(idx, hk): (usize, &mut HeadKv<T>)| {
                let (b, hh) = (idx / nh, idx % nh);
                hk.reserve(p0 + t_new);
                for t in 0..t_new {
                    let r = (b * t_new + t) * 3 * d;
                    hk.push(
                        &qkv_ref[r + d + hh * dh..r + d + (hh + 1) * dh],
                        &qkv_ref[r + 2 * d + hh * dh..r + 2 * d + (hh + 1) * dh],
                    );
                }
            };
            if rows * d >= 1 << 14 {
                let hp = SendPtr(heads.as_mut_ptr());
                // SAFETY: item idx touches heads[idx] alone.
                threads::parallel_for(heads.len(), |idx| {
                    fill((idx, unsafe { &mut *hp.get().add(idx) }))
                });
            } else {
                heads.iter_mut().enumerate().for_each(fill);
            }
            ph.mark("kv append");
            // Every (row, head) block of `att` is written by exactly one attention item.
            crate::memory::resize_for_overwrite(att, rows * d);
            // Work items: (sequence, head, query block aligned to KB).
            let mut items = Vec::new();
            for b in 0..batch {
                for hh in 0..nh {
                    let mut t = p0;
                    while t < p0 + t_new {
                        let end = ((t / KB + 1) * KB).min(p0 + t_new);
                        items.push((b, hh, t, end - t));
                        t = end;
                    }
                }
            }
            let heads_ref: &Vec<HeadKv<T>> = heads;
            let att_ptr = SendPtr(att.as_mut_ptr());
            let qkv_ptr = SendPtr(qkv.as_ptr() as *mut T);
            let work = |&(b, hh, q0, nq): &(usize, usize, usize, usize),
                        scratch: &mut Scratch<T>| {
                let r0 = b * t_new + (q0 - p0);
                // SAFETY: query rows and output rows of this item are inside the buffers, and
                // each item writes a disjoint (rows, head columns) region of `att`.
                unsafe {
                    attend_block(
                        spec,
                        &heads_ref[b * nh + hh],
                        qkv_ptr.get().add(r0 * 3 * d + hh * dh),
                        3 * d,
                        q0,
                        nq,
                        att_ptr.get().add(r0 * d + hh * dh),
                        d,
                        causal,
                        scratch,
                    );
                }
            };
            let flops = (items.len() * KB * KB * dh) as f64;
            if items.len() > 1 && flops > 1e5 && threads::num_threads() > 1 {
                threads::parallel_for_init(items.len(), Scratch::default, |s, i| {
                    work(&items[i], s)
                });
            } else {
                let mut s = Scratch::default();
                items.iter().for_each(|it| work(it, &mut s));
            }
            ph.mark("attention");
            blk.proj.apply(att, rows, y, After::AddInto(&mut x));
            ph.mark("attn proj");
            // MLP sub-block.
            layernorm(&x, h, d, &blk.ln2, eps);
            ph.mark("layernorm");
            blk.fc.apply(h, rows, u, After::Gelu);
            ph.mark("mlp fc + gelu");
            blk.fc_proj.apply(u, rows, y, After::AddInto(&mut x));
            ph.mark("mlp proj");
            if let Some(hd) = hidden.as_mut() {
                hd.extend_from_slice(&x);
            }
        }
        check()?;
        let mut final_x = None;
        let logits = match logits {
            Logits::None => {
                final_x = Some(x);
                Vec::new()
            }
            Logits::All => self.head_logits(&x, rows, h)?,
            Logits::Last => {
                let mut last = Vec::with_capacity(batch * d);
                for b in 0..batch {
                    let r = b * t_new + t_new - 1;
                    last.extend_from_slice(&x[r * d..(r + 1) * d]);
                }
                self.head_logits(&last, batch, h)?
            }
        };
        ph.mark("head");
        Ok(RunOutput {
            logits,
            hidden,
            final_x,
        })
    }

    /// Log-probability of `targets[r]` at every position r of `ids` (`batch x t`), computing
    /// the logits `chunk` rows at a time so the full logits never exist at once.
    pub fn token_logprobs(
        &self,
        ids: &[u32],
        batch: usize,
        t: usize,
        targets: &[u32],
        chunk: usize,
        check: &(dyn Fn() -> Result<()> + Sync),
    ) -> Result<Vec<f64>> {
        if targets.len() != ids.len() {
            return crate::value_error!(
                "targets: expected {} values, got {}",
                ids.len(),
                targets.len()
            );
        }
        if let Some(&bad) = targets.iter().find(|&&i| i as usize >= self.cfg.vocab_size) {
            return crate::value_error!(
                "targets: token id {bad} is out of range [0, {})",
                self.cfg.vocab_size
            );
        }
        let out = self.run(ids, batch, t, None, Logits::None, true, false, check)?;
        let x = out.final_x.expect("final residual requested");
        let (d, v) = (self.cfg.d_model, self.cfg.vocab_size);
        let rows = batch * t;
        let chunk = chunk.max(1);
        let mut res = vec![0.0f64; rows];
        let mut h = Vec::new();
        let mut r0 = 0;
        while r0 < rows {
            let n = chunk.min(rows - r0);
            let z = self.head_logits(&x[r0 * d..(r0 + n) * d], n, &mut h)?;
            for i in 0..n {
                let row = &z[i * v..(i + 1) * v];
                let m = row
                    .iter()
                    .fold(f64::NEG_INFINITY, |a, &b| a.max(b.to_f64()));
                let s: f64 = row.iter().map(|&b| (b.to_f64() - m).exp()).sum();
                res[r0 + i] = row[targets[r0 + i] as usize].to_f64() - (m + s.ln());
            }
            self.outputs.give_back(z);
            r0 += n;
        }
        Ok(res)
    }

    /// `LN_f(x) @ Whead` for `rows` rows.
    fn head_logits(&self, x: &[T], rows: usize, h: &mut Vec<T>) -> Result<Vec<T>> {
        let d = self.cfg.d_model;
        layernorm(x, h, d, &self.ln_f, T::from_f64(self.cfg.ln_eps));
        let v = self.cfg.vocab_size;
        // The product writes every value, so a kept buffer's stale contents do not matter.
        let mut out = self.outputs.take(rows.saturating_mul(v), "logits")?;
        gemm::gemm(MatRef::from_slice(h, rows, d), &self.head, &mut out, v);
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
