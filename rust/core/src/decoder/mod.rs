//! The decoder: the shared layers, each in its own file, the model families built from them
//! (`families/`, one folder each), and the forward pass.
//!
//! ```text
//! x = wte[ids] (+ pos(t))          learned, sinusoidal or none (rotary)        embedding.rs
//! for each block:  x = x + Attn(Norm1(x))     norm.rs, self_attention.rs, rotary.rs, block.rs
//!                  x = x + MLP(Norm2(x))      mlp.rs (GELU or SwiGLU)
//! logits = Norm_f(x) Whead                    (Whead = wte^T when tied)
//! ```
//!
//! A family ([`Family`]) chooses the layers and names the tensors: GPT-2 (LayerNorm, GELU,
//! learned positions) and Llama (RMSNorm, SwiGLU, rotary positions, grouped-query attention).
//!
//! One routine, [`Model::run`], processes new positions of a batch of sequences, appending
//! their keys and values to a [`KvCache`]. A whole forward pass is `run` on an empty cache; a
//! decode step is `run` with one new position. Both execute the same per-row arithmetic, so
//! cached decoding reproduces the full forward bit for bit. The tensors' names and shapes are
//! defined once, in `schema.rs`.

mod block;
mod config;
mod embedding;
mod families;
mod float;
mod linear;
mod mlp;
mod norm;
mod pass;
pub mod rotary;
pub mod schema;
mod self_attention;
mod stacked;
pub mod storage;
mod tensor;
mod workspace;

pub use crate::formats::WeightFormat;
pub use block::Block;
pub use config::{Config, Family, Positions};
pub use embedding::Embedding;
pub use families::{layout, schema, validate};
pub use float::Float;
pub use linear::Linear;
pub use norm::Norm;
pub use pass::{Pass, Segment};
pub use rotary::{Rope, RopeScaling};
pub use schema::{Layout, Tensor, TensorSpec};
pub use storage::{
    storage, Fetch, Fetched, Packed, PackedWeights, Table, TableRows, WeightStorage,
};

use crate::buffer_pool::BufferPool;
use crate::gemm::{MatRef, Options};
use crate::kv_cache::{HeadKv, KvCache};
use crate::profile::Phases;
use crate::Result;
use embedding::Added;
use mlp::Mlp;
use rotary::Rotary;
use schema::{export, Exported, LinearSpec, MlpSpec, PositionSpec, QkvSpec, Source};
use std::collections::HashMap;
use std::sync::Arc;
use workspace::{Workspace, WorkspacePool};

pub struct Model<T: Float> {
    pub cfg: Config,
    pub embedding: Embedding<T>,
    pub blocks: Vec<Block<T>>,
    pub norm_f: Norm<T>,
    /// The frequencies of rotary positions (None: positions are added to the embedding).
    pub rotary: Option<Rotary>,
    /// The LM head `(d, V)`: `wte^T` when tied, else `lm_head.weight^T`, packed once (in the
    /// weights' format).
    pub head: Packed<T>,
    format: WeightFormat,
    layout: Layout,
    /// Work buffers of finished passes, taken by the next ones (see [`Workspace`]).
    workspaces: WorkspacePool<T>,
    /// Logits buffers handed back by their users, for the next passes' logits.
    outputs: Arc<BufferPool<T>>,
}

/// A large tensor of a model ([`Model::stored_tensors`]).
enum Large<'m, T: Float> {
    Table(&'m Table<T>),
    Matrix(LargeMatrix<'m, T>),
}

/// A weight matrix as held, or the columns `c0 .. c0 + n` of one (a part of a stacked product).
struct LargeMatrix<'m, T: Float> {
    w: &'m Packed<T>,
    c0: usize,
    n: usize,
}

impl<'m, T: Float> LargeMatrix<'m, T> {
    fn whole(w: &'m Packed<T>) -> Self {
        LargeMatrix {
            w,
            c0: 0,
            n: w.cols(),
        }
    }

    /// The columns of `w` from `c0` that hold the tensor `spec`.
    fn of(w: &'m Packed<T>, c0: usize, spec: &LinearSpec) -> Large<'m, T> {
        Large::Matrix(LargeMatrix {
            w,
            c0,
            n: spec.k_n().1,
        })
    }

    /// The matrix's bytes, or a part's share by its columns.
    fn nbytes(&self) -> usize {
        let cols = self.w.cols().max(1);
        self.w.nbytes() / cols * self.n
            + if self.n == cols {
                self.w.nbytes() % cols
            } else {
                0
            }
    }
}

/// What a call to [`Model::run`] asks for.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// `batch x t_new` token ids, row-major.
    pub ids: &'a [u32],
    pub batch: usize,
    pub t_new: usize,
    pub logits: Logits,
    pub causal: bool,
    /// Keep the residual stream before block 0 and after each block.
    pub want_hidden: bool,
}

/// What [`Model::run`] returns.
pub struct RunOutput<T> {
    /// Logits, `(rows, vocab)`, rows as asked for by [`Logits`].
    pub logits: Vec<T>,
    /// Residual stream before block 0 and after each block: `(n_layers + 1, B * T_new, d)`.
    pub hidden: Option<Vec<T>>,
    /// The final residual stream `(B * T_new, d)` (before the final norm), when logits were not
    /// asked for.
    pub final_x: Option<Vec<T>>,
}

/// One sequence's part of a [`Model::step_many`] step.
pub struct SeqStep<'a, T> {
    /// The sequence's keys and values (a cache of one sequence); the new ones are appended.
    pub cache: &'a mut KvCache<T>,
    /// The new tokens (at least one).
    pub ids: &'a [u32],
    /// Logits for every new token, not only the last.
    pub all_logits: bool,
}

/// What [`Model::step_many`] returns.
pub struct StepOutput<T> {
    /// The logits, `(rows, vocab)`: each sequence's rows in the order of the step's sequences.
    pub logits: Vec<T>,
    /// Rows of `logits` per sequence: 1, or its new tokens when it asked for all.
    pub rows: Vec<usize>,
}

/// The heads of every sequence of a ragged step, moved (not copied) into one cache whose
/// layer `l` holds sequence `s`'s heads at `s * n_kv_heads ..`, and moved back when dropped
/// (even by a panic, so no sequence is left without its heads).
struct Joined<'s, 'a, T: Float> {
    seqs: &'s mut [SeqStep<'a, T>],
    cache: KvCache<T>,
}

impl<'s, 'a, T: Float> Joined<'s, 'a, T> {
    fn new(seqs: &'s mut [SeqStep<'a, T>], n_layers: usize, nkv: usize) -> Self {
        let mut layers: Vec<Vec<HeadKv<T>>> = (0..n_layers)
            .map(|_| Vec::with_capacity(seqs.len() * nkv))
            .collect();
        for s in seqs.iter_mut() {
            for (joined, own) in layers.iter_mut().zip(&mut s.cache.layers) {
                joined.append(own);
            }
        }
        Joined {
            cache: KvCache {
                batch: seqs.len(),
                n_heads: nkv,
                layers,
            },
            seqs,
        }
    }

    /// Every sequence back to `parts[s].1` positions (a failed step).
    fn truncate(&mut self, parts: &[(usize, usize)]) {
        let nkv = self.cache.n_heads;
        for layer in &mut self.cache.layers {
            for (s, heads) in layer.chunks_mut(nkv).enumerate() {
                heads.iter_mut().for_each(|h| h.truncate(parts[s].1));
            }
        }
    }
}

impl<T: Float> Drop for Joined<'_, '_, T> {
    fn drop(&mut self) {
        let nkv = self.cache.n_heads;
        for (li, layer) in self.cache.layers.iter_mut().enumerate() {
            let mut heads = layer.drain(..);
            for s in self.seqs.iter_mut() {
                s.cache.layers[li].extend(heads.by_ref().take(nkv));
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    All,
    Last,
    None,
}

impl<T: Float> Model<T> {
    /// Build from the tensors the family's schema names; checks every shape against it.
    pub fn new(cfg: Config, weights: &HashMap<String, Tensor<'_, T>>) -> Result<Self> {
        Self::with_format(cfg, weights, WeightFormat::Full, None)
    }

    /// Build with the weight matrices (the LM head included) and the embedding tables stored
    /// as `format` (a block format keeps the position table in `T`); biases and norm
    /// parameters stay in `T`. The large tensors come from `fetch` as the source stores them
    /// when it has them ([`Fetched`]: 16-bit patterns, a block format's file blocks, float32
    /// values, or "kept in `T`"; one at a time, so no full-precision copy of the model need
    /// exist), else from `weights`, rounded or quantized to the format (round to nearest even;
    /// ggml's reference quantizers). Either way the model computes exactly what the `T` model
    /// with the values it stores (rounded, or quantized and dequantized) computes.
    pub fn with_format(
        cfg: Config,
        weights: &HashMap<String, Tensor<'_, T>>,
        format: WeightFormat,
        fetch: Option<&Fetch<'_>>,
    ) -> Result<Self> {
        validate(&cfg)?;
        let layout = layout(&cfg);
        let src = Source {
            full: weights,
            format,
            fetch,
        };
        // The packed matrices live and die with the model: gathered into shared regions of
        // huge pages (see `memory::gathered`).
        let (embedding, blocks, norm_f, head) = crate::memory::gathered(|| -> Result<_> {
            let embedding = Embedding::load(&layout, &src)?;
            let blocks = layout
                .blocks
                .iter()
                .map(|b| Block::load(b, &src))
                .collect::<Result<Vec<_>>>()?;
            let norm_f = Norm::load(&layout.norm_f, &src)?;
            // The head multiplies by W^T where W is (V, d): a transposed view, packed once.
            let (d, v) = (cfg.d_model, cfg.vocab_size);
            let head = match &layout.lm_head {
                None => embedding.wte.pack_transposed(v, d)?,
                Some(s) => src.matrix(s, true)?,
            };
            Ok((embedding, blocks, norm_f, head))
        })?;
        let rotary = match &layout.positions {
            PositionSpec::Rotary(rope) => Some(Rotary::new(rope.clone(), cfg.d_head)),
            _ => None,
        };
        Ok(Model {
            cfg,
            embedding,
            blocks,
            norm_f,
            rotary,
            head,
            format,
            layout,
            workspaces: WorkspacePool::default(),
            outputs: Arc::new(BufferPool::default()),
        })
    }

    /// The pool that logits buffers come from: a caller done with a result of [`Model::run`]
    /// may hand its `logits` back with [`BufferPool::give_back`].
    pub fn outputs(&self) -> &Arc<BufferPool<T>> {
        &self.outputs
    }

    /// Every weight the model computes with, under its Hugging Face name, as
    /// `(name, shape, row-major values)` in the schema's order and shapes (packed matrices
    /// unpacked; `lm_head.weight` only when untied).
    pub fn export(&self) -> Exported<T> {
        let layout = &self.layout;
        let mut out = Vec::new();
        self.embedding.export(layout, &mut out);
        for (blk, spec) in self.blocks.iter().zip(&layout.blocks) {
            blk.export(spec, &mut out);
        }
        self.norm_f.export(&layout.norm_f, &mut out);
        if let Some(s) = &layout.lm_head {
            // The head is packed as W^T (d x V); the checkpoint stores W (V x d).
            let (d, v) = (self.cfg.d_model, self.cfg.vocab_size);
            let wt = self.head.unpack();
            let mut w = crate::memory::zeroed::<T>(v * d);
            for r in 0..d {
                for c in 0..v {
                    w[c * d + r] = wt[r * v + c];
                }
            }
            export(&mut out, s, w);
        }
        out
    }

    /// How the weight matrices and embedding tables are stored.
    pub fn weight_format(&self) -> WeightFormat {
        self.format
    }

    /// The large tensors as the model holds them, under their names: the embedding tables, the
    /// blocks' matrices and the head (`lm_head.weight`, also when it is the token embedding's
    /// transpose, packed of its own). The parts of a stacked product (Llama's Q, K, V) are
    /// its columns `c0 .. c0 + n`.
    fn large_tensors(&self) -> Vec<(&str, Large<'_, T>)> {
        let layout = &self.layout;
        let mut out = vec![(layout.wte.name.as_str(), Large::Table(&self.embedding.wte))];
        if let (PositionSpec::Learned(s), Added::Learned(t)) =
            (&layout.positions, &self.embedding.positions)
        {
            out.push((s.name.as_str(), Large::Table(t)));
        }
        for (blk, spec) in self.blocks.iter().zip(&layout.blocks) {
            match &spec.attn.qkv {
                QkvSpec::Fused(l) => out.push((
                    l.weight.name.as_str(),
                    LargeMatrix::of(&blk.attn.qkv.w, 0, l),
                )),
                QkvSpec::Stacked(parts) => {
                    let mut c0 = 0;
                    for p in parts {
                        out.push((
                            p.weight.name.as_str(),
                            LargeMatrix::of(&blk.attn.qkv.w, c0, p),
                        ));
                        c0 += p.k_n().1;
                    }
                }
            }
            out.push((
                spec.attn.out.weight.name.as_str(),
                LargeMatrix::of(&blk.attn.proj.w, 0, &spec.attn.out),
            ));
            match (&blk.mlp, &spec.mlp) {
                (Mlp::Gelu { fc, proj }, MlpSpec::Gelu { fc: sf, proj: sp }) => {
                    out.push((sf.weight.name.as_str(), LargeMatrix::of(&fc.w, 0, sf)));
                    out.push((sp.weight.name.as_str(), LargeMatrix::of(&proj.w, 0, sp)));
                }
                (
                    Mlp::SwiGlu { gate, up, down },
                    MlpSpec::SwiGlu {
                        gate: sg,
                        up: su,
                        down: sd,
                    },
                ) => {
                    out.push((sg.weight.name.as_str(), LargeMatrix::of(&gate.w, 0, sg)));
                    out.push((su.weight.name.as_str(), LargeMatrix::of(&up.w, 0, su)));
                    out.push((sd.weight.name.as_str(), LargeMatrix::of(&down.w, 0, sd)));
                }
                _ => unreachable!("an MLP is held as its spec says"),
            }
        }
        out.push((
            "lm_head.weight",
            Large::Matrix(LargeMatrix::whole(&self.head)),
        ));
        out
    }

    /// Each large tensor's name, the format it is held in and the bytes it takes (see
    /// [`Model::nbytes`] for the total; the parts of a stacked product share its bytes by
    /// their columns).
    pub fn stored_tensors(&self) -> Vec<(String, WeightFormat, usize)> {
        self.large_tensors()
            .into_iter()
            .map(|(name, t)| match t {
                Large::Table(t) => (name.to_string(), t.format(), t.nbytes()),
                Large::Matrix(m) => (name.to_string(), m.w.format(), m.nbytes()),
            })
            .collect()
    }

    /// The file blocks of the tensor `name` when the model holds it in a block format: a run
    /// of blocks along K for each output of a matrix (each column of a `(k, n)` matrix, each
    /// row of an `(n, k)` one; each row of a table and of `lm_head.weight`), see
    /// [`crate::formats::block`]; `None` otherwise.
    pub fn stored_blocks(&self, name: &str) -> Option<(WeightFormat, Vec<u8>)> {
        let (_, t) = self.large_tensors().into_iter().find(|(n, _)| *n == name)?;
        match t {
            Large::Table(t) => Some((t.format(), t.blocks()?)),
            Large::Matrix(m) => {
                let all = m.w.blocks()?;
                let run = all.len() / m.w.cols().max(1);
                Some((m.w.format(), all[m.c0 * run..(m.c0 + m.n) * run].to_vec()))
            }
        }
    }

    /// An empty cache for `batch` sequences: `n_kv_heads` key/value heads per layer and
    /// sequence.
    pub fn new_cache(&self, batch: usize) -> KvCache<T> {
        KvCache::new(
            self.cfg.n_layers,
            batch,
            self.cfg.n_kv_heads,
            self.cfg.d_head(),
        )
    }

    /// Bytes of the packed and plain weights held.
    pub fn nbytes(&self) -> usize {
        let blocks: usize = self.blocks.iter().map(|b| b.nbytes()).sum();
        self.embedding.nbytes() + blocks + self.head.nbytes()
    }

    /// Process the new positions of `req` after the positions already in `cache`.
    ///
    /// `cache == None` runs on a scratch cache that holds one layer at a time (a plain
    /// forward pass). `check` is called between layers; an error from it stops the run.
    pub fn run(
        &self,
        req: &Request<'_>,
        cache: Option<&mut KvCache<T>>,
        check: &(dyn Fn() -> Result<()> + Sync),
    ) -> Result<RunOutput<T>> {
        let (batch, t_new) = (req.batch, req.t_new);
        if req.ids.len() != batch * t_new {
            return crate::value_error!(
                "ids: expected {} values for shape ({batch}, {t_new}), got {}",
                batch * t_new,
                req.ids.len()
            );
        }
        if let Some(&bad) = req.ids.iter().find(|&&i| i as usize >= self.cfg.vocab_size) {
            return crate::value_error!(
                "ids: token id {bad} is out of range [0, {})",
                self.cfg.vocab_size
            );
        }
        let heads_rows = |logits: Logits| -> Option<Vec<usize>> {
            match logits {
                Logits::None => None,
                Logits::All => Some((0..batch * t_new).collect()),
                Logits::Last => Some((0..batch).map(|b| b * t_new + t_new - 1).collect()),
            }
        };
        let mut ws = self.workspaces.take();
        let out = match cache {
            Some(c) => {
                if c.batch != batch {
                    self.workspaces.give_back(ws);
                    return crate::value_error!(
                        "cache holds {} sequences, ids has {batch}",
                        c.batch
                    );
                }
                let p0 = c.len();
                if !req.causal && p0 > 0 {
                    self.workspaces.give_back(ws);
                    return crate::value_error!(
                        "causal=False is only available for a full forward pass"
                    );
                }
                let pass = Pass::uniform(batch, t_new, p0, self.cfg.d_model, req.causal);
                let rows = heads_rows(req.logits);
                // A step that fails part-way (an interrupt, an allocation) leaves the cache
                // holding exactly the positions it held before.
                let out = self.forward(
                    req.ids,
                    &pass,
                    c,
                    true,
                    rows.as_deref(),
                    req.want_hidden,
                    check,
                    &mut ws,
                );
                if out.is_err() {
                    c.truncate(p0);
                }
                out
            }
            None => {
                let nkv = self.cfg.n_kv_heads;
                let mut kv = match ws.kv.take() {
                    Some(mut c) if c.batch == batch && c.n_heads == nkv => {
                        c.clear();
                        c
                    }
                    _ => KvCache::new(1, batch, nkv, self.cfg.d_head()),
                };
                let pass = Pass::uniform(batch, t_new, 0, self.cfg.d_model, req.causal);
                let rows = heads_rows(req.logits);
                let out = self.forward(
                    req.ids,
                    &pass,
                    &mut kv,
                    false,
                    rows.as_deref(),
                    req.want_hidden,
                    check,
                    &mut ws,
                );
                ws.kv = Some(kv);
                out
            }
        };
        self.workspaces.give_back(ws);
        out
    }

    /// One step over several sequences, each with its own cache and position: the new tokens
    /// of every sequence (one for a sequence being decoded, a chunk of its prompt for one being
    /// prefilled) go through every layer as the rows of one pass. Every matrix product runs
    /// over all the rows at once; the embedding and the rotary positions use each row's own
    /// position, and attention reads each sequence's own keys and values. A row's arithmetic
    /// does not depend on the other rows, so each sequence's logits are, bit for bit, those of
    /// [`Model::run`] on that sequence alone with its cache.
    ///
    /// Each cache holds one sequence ([`Model::new_cache`]`(1)`); the sequences' new keys and
    /// values are appended to their caches. The logits are each sequence's last new row, or
    /// every new row when it asks for them, in the order of `seqs`. Errors name the input:
    /// `ids[i]` or `caches[i]`. A step that fails leaves every cache as it was.
    pub fn step_many(
        &self,
        seqs: &mut [SeqStep<'_, T>],
        check: &(dyn Fn() -> Result<()> + Sync),
    ) -> Result<StepOutput<T>> {
        let cfg = &self.cfg;
        let (nl, nkv, dh, v) = (cfg.n_layers, cfg.n_kv_heads, cfg.d_head(), cfg.vocab_size);
        for (i, s) in seqs.iter().enumerate() {
            let c = &*s.cache;
            let fits = c.layers.len() == nl
                && c.layers
                    .iter()
                    .all(|l| l.len() == nkv && l.iter().all(|h| h.dh == dh));
            if c.batch != 1 || c.n_heads != nkv || !fits {
                return crate::value_error!(
                    "caches[{i}]: expected a cache of one sequence made by this model, got one of \
                     {} sequences and {} key/value heads",
                    c.batch,
                    c.n_heads
                );
            }
            if s.ids.is_empty() {
                return crate::value_error!("ids[{i}]: no new tokens (a step needs at least one)");
            }
            if let Some(&bad) = s.ids.iter().find(|&&t| t as usize >= v) {
                return crate::value_error!("ids[{i}]: token id {bad} is out of range [0, {v})");
            }
            let end = c.len() + s.ids.len();
            if let Some(why) = self.position_limit().filter(|_| end > cfg.n_ctx) {
                return crate::value_error!(
                    "ids[{i}]: sequence length {end} exceeds the model's context n_ctx = {} ({why})",
                    cfg.n_ctx
                );
            }
        }
        if seqs.is_empty() {
            return Ok(StepOutput {
                logits: Vec::new(),
                rows: Vec::new(),
            });
        }
        let parts: Vec<(usize, usize)> =
            seqs.iter().map(|s| (s.ids.len(), s.cache.len())).collect();
        let pass = Pass::ragged(&parts, cfg.d_model, true);
        let ids: Vec<u32> = seqs.iter().flat_map(|s| s.ids.iter().copied()).collect();
        let mut rows = Vec::new();
        let mut counts = Vec::with_capacity(seqs.len());
        for (s, seg) in seqs.iter().zip(&pass.segments) {
            let first = if s.all_logits {
                seg.row0
            } else {
                seg.row0 + seg.rows - 1
            };
            rows.extend(first..seg.row0 + seg.rows);
            counts.push(seg.row0 + seg.rows - first);
        }
        let mut ws = self.workspaces.take();
        let mut joined = Joined::new(seqs, nl, nkv);
        let out = self.forward(
            &ids,
            &pass,
            &mut joined.cache,
            true,
            Some(&rows),
            false,
            check,
            &mut ws,
        );
        if out.is_err() {
            joined.truncate(&parts);
        }
        drop(joined);
        self.workspaces.give_back(ws);
        Ok(StepOutput {
            logits: out?.logits,
            rows: counts,
        })
    }

    /// Why positions stop at `n_ctx` (None: sinusoidal positions have no end).
    fn position_limit(&self) -> Option<&'static str> {
        match self.cfg.positions {
            Positions::Learned => Some("learned positions"),
            Positions::Rotary(_) => Some("rotary positions"),
            Positions::Sinusoidal => None,
        }
    }

    /// The forward pass over the new positions of `pass`: embedding, the blocks, the head
    /// (for the rows `logits` lists, in that order; None: no head, the final residual stream
    /// is returned). With `persistent`, `cache` holds every layer and keeps the new positions;
    /// otherwise it holds one layer, reused by each block in turn. Segment `s` of the pass
    /// reads and appends to heads `s * n_kv_heads ..` of each layer.
    #[allow(clippy::too_many_arguments)]
    fn forward(
        &self,
        ids: &[u32],
        pass: &Pass,
        cache: &mut KvCache<T>,
        persistent: bool,
        logits: Option<&[usize]>,
        want_hidden: bool,
        check: &(dyn Fn() -> Result<()> + Sync),
        ws: &mut Workspace<T>,
    ) -> Result<RunOutput<T>> {
        let cfg = &self.cfg;
        let d = cfg.d_model;
        if let Some(why) = self.position_limit() {
            if let Some(s) = pass.segments.iter().find(|s| s.p0 + s.rows > cfg.n_ctx) {
                return crate::value_error!(
                    "sequence length {} exceeds the model's context n_ctx = {} ({why})",
                    s.p0 + s.rows,
                    cfg.n_ctx
                );
            }
        }
        // The cosines and sines of the new positions, shared by every block.
        let mut rope = std::mem::take(&mut ws.rope);
        let rotary = self.rotary.as_ref().map(|r| {
            rope.cos.clear();
            rope.sin.clear();
            for (p0, n) in pass.table_runs() {
                rope.push_run(r, p0, n);
            }
            &rope
        });
        let rows = pass.rows();
        let mut ph = Phases::new();
        let mut x = self.embedding.forward(ids, &pass.positions)?; // (rows, d)
        let mut hidden = want_hidden.then(|| Vec::with_capacity((cfg.n_layers + 1) * rows * d));
        if let Some(h) = hidden.as_mut() {
            h.extend_from_slice(&x);
        }
        ph.mark("embedding");
        // Rows whose logits are asked for, when not every row's: in the last block the other
        // rows only append their keys and values (nothing else of theirs reaches an output).
        let kept = match logits {
            Some(r) if !want_hidden && !self.blocks.is_empty() => pass.kept(r),
            _ => None,
        };
        let last = self.blocks.len().saturating_sub(1);
        for (li, blk) in self.blocks.iter().enumerate() {
            check()?;
            let heads: &mut [HeadKv<T>] = if persistent {
                &mut cache.layers[li]
            } else {
                let l = &mut cache.layers[0];
                l.iter_mut().for_each(|hk| hk.clear());
                l
            };
            // x += attn(norm1(x)); x += mlp(norm2(x))
            let keep = match (&kept, logits) {
                (Some(k), Some(r)) if li == last => Some((k, r)),
                _ => None,
            };
            blk.forward(&mut x, heads, pass, ws, rotary, &mut ph, keep);
            if let Some(h) = hidden.as_mut() {
                h.extend_from_slice(&x);
            }
        }
        ws.rope = rope;
        check()?;
        let mut final_x = None;
        let logits = match logits {
            None => {
                final_x = Some(x);
                Vec::new()
            }
            // The last block left the rows asked for, in order, as rows 0 .. of x.
            Some(r) if kept.is_some() => self.head_logits(&x[..r.len() * d], r.len(), &mut ws.h)?,
            // Every row in order: the residual stream as it is.
            Some(r) if r.len() == rows && r.iter().enumerate().all(|(i, &j)| i == j) => {
                self.head_logits(&x, rows, &mut ws.h)? // (rows, V)
            }
            Some(r) => {
                let mut picked = Vec::with_capacity(r.len() * d);
                for &row in r {
                    picked.extend_from_slice(&x[row * d..(row + 1) * d]);
                }
                self.head_logits(&picked, r.len(), &mut ws.h)? // (picked rows, V)
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
        let req = Request {
            ids,
            batch,
            t_new: t,
            logits: Logits::None,
            causal: true,
            want_hidden: false,
        };
        let out = self.run(&req, None, check)?;
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

    /// `Norm_f(x) @ Whead` for `rows` rows.
    fn head_logits(&self, x: &[T], rows: usize, h: &mut Vec<T>) -> Result<Vec<T>> {
        let d = self.cfg.d_model;
        self.norm_f.forward(x, h, d);
        let v = self.cfg.vocab_size;
        // The product writes every value, so a kept buffer's stale contents do not matter.
        let mut out = self.outputs.take(rows.saturating_mul(v), "logits")?;
        let a = MatRef::from_slice(h, rows, d);
        self.head.gemm(a, &mut out, v, &Options::default());
        Ok(out)
    }
}

#[cfg(test)]
mod format_tests;
#[cfg(test)]
mod llama_tests;
#[cfg(test)]
mod step_tests;
#[cfg(test)]
mod tests;
