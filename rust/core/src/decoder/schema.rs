//! The tensors of a model and the layers they make. A family's `schema.rs`
//! (`decoder/families/*/`) builds a [`Layout`] from a config out of the shared specs below:
//! the one definition of every name and shape, which loading ([`super::Model::new`]),
//! exporting ([`super::Model::export`]) and Python's validation, weight initialisation and
//! documentation ([`super::schema()`]) all read.

use super::rotary::Rope;
pub use super::tensor::{Tensor, TensorSpec};

pub fn spec(name: String, shape: &[usize], kind: &'static str) -> TensorSpec {
    TensorSpec {
        name,
        shape: shape.to_vec(),
        kind,
    }
}

/// `x @ W + b` mapping `k` inputs to `n` outputs. W is stored `(k, n)` (GPT-2's `Conv1D`) or,
/// when `transposed`, `(n, k)` (`torch.nn.Linear`); b is `(n,)` when present.
#[derive(Clone, Debug)]
pub struct LinearSpec {
    pub weight: TensorSpec,
    pub bias: Option<TensorSpec>,
    pub transposed: bool,
}

impl LinearSpec {
    /// A `Conv1D` weight `(k, n)`.
    pub fn conv1d(prefix: &str, k: usize, n: usize, bias: bool, kind: &'static str) -> Self {
        LinearSpec {
            weight: spec(format!("{prefix}.weight"), &[k, n], kind),
            bias: bias.then(|| spec(format!("{prefix}.bias"), &[n], "bias")),
            transposed: false,
        }
    }

    /// A `torch.nn.Linear` weight `(n, k)`.
    pub fn linear(prefix: &str, k: usize, n: usize, bias: bool, kind: &'static str) -> Self {
        LinearSpec {
            weight: spec(format!("{prefix}.weight"), &[n, k], kind),
            bias: bias.then(|| spec(format!("{prefix}.bias"), &[n], "bias")),
            transposed: true,
        }
    }

    /// `(k, n)`: inputs and outputs.
    pub fn k_n(&self) -> (usize, usize) {
        let s = &self.weight.shape;
        if self.transposed {
            (s[1], s[0])
        } else {
            (s[0], s[1])
        }
    }
}

/// A normalisation over the model width and its parameters `(d,)`.
#[derive(Clone, Debug)]
pub enum NormSpec {
    /// `(x - mean) / sqrt(var + eps)`, then `* gamma + beta` when affine.
    LayerNorm {
        affine: Option<(TensorSpec, TensorSpec)>,
        eps: f64,
    },
    /// `x / sqrt(mean(x^2) + eps) * weight`.
    RmsNorm { weight: TensorSpec, eps: f64 },
}

impl NormSpec {
    pub fn layer_norm(prefix: &str, d: usize, affine: bool, eps: f64) -> Self {
        NormSpec::LayerNorm {
            affine: affine.then(|| {
                (
                    spec(format!("{prefix}.weight"), &[d], "ln_weight"),
                    spec(format!("{prefix}.bias"), &[d], "ln_bias"),
                )
            }),
            eps,
        }
    }

    pub fn rms_norm(prefix: &str, d: usize, eps: f64) -> Self {
        NormSpec::RmsNorm {
            weight: spec(format!("{prefix}.weight"), &[d], "ln_weight"),
            eps,
        }
    }
}

/// The query, key and value projections, computed as one product whose columns are
/// `[Q | K | V]` (`n_heads * d_head`, then `n_kv_heads * d_head` twice; head `h` in columns
/// `h * d_head ..` of its part).
#[derive(Clone, Debug)]
pub enum QkvSpec {
    /// One tensor holding all three (GPT-2's `c_attn`).
    Fused(LinearSpec),
    /// Three `nn.Linear` tensors, stacked into one product when loaded.
    Stacked(Vec<LinearSpec>),
}

/// An attention layer: projections and head counts (query head `h` reads key/value head
/// `h / (n_heads / n_kv_heads)`).
#[derive(Clone, Debug)]
pub struct AttentionSpec {
    pub qkv: QkvSpec,
    /// `(n_heads * d_head) -> d`.
    pub out: LinearSpec,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub d_head: usize,
}

/// The MLP of a block.
#[derive(Clone, Debug)]
pub enum MlpSpec {
    /// `GELU(x W_fc + b_fc) W_proj + b_proj` (tanh form).
    Gelu { fc: LinearSpec, proj: LinearSpec },
    /// `down(silu(gate(x)) * up(x))`.
    SwiGlu {
        gate: LinearSpec,
        up: LinearSpec,
        down: LinearSpec,
    },
}

/// One pre-norm block: `x += attn(norm1(x)); x += mlp(norm2(x))`.
#[derive(Clone, Debug)]
pub struct BlockSpec {
    pub norm1: NormSpec,
    pub attn: AttentionSpec,
    pub norm2: NormSpec,
    pub mlp: MlpSpec,
}

/// How positions enter the model.
#[derive(Clone, Debug)]
pub enum PositionSpec {
    /// A table `(n_ctx, d)` added to the token embedding.
    Learned(TensorSpec),
    /// The fixed sinusoidal encoding added to the token embedding.
    Sinusoidal,
    /// Queries and keys rotated inside attention.
    Rotary(Rope),
}

/// Every layer and tensor of a model, in the order of the forward pass.
#[derive(Clone, Debug)]
pub struct Layout {
    /// `(V, d)`: row `v` is token `v`.
    pub wte: TensorSpec,
    pub positions: PositionSpec,
    pub blocks: Vec<BlockSpec>,
    pub norm_f: NormSpec,
    /// `(V, d)`, untied heads only (logits are `h @ W^T`).
    pub lm_head: Option<TensorSpec>,
}

impl Layout {
    /// Every tensor, flattened in canonical order.
    pub fn tensors(&self) -> Vec<&TensorSpec> {
        fn norm<'a>(out: &mut Vec<&'a TensorSpec>, n: &'a NormSpec) {
            match n {
                NormSpec::LayerNorm {
                    affine: Some((g, b)),
                    ..
                } => out.extend([g, b]),
                NormSpec::LayerNorm { affine: None, .. } => {}
                NormSpec::RmsNorm { weight, .. } => out.push(weight),
            }
        }
        fn linear<'a>(out: &mut Vec<&'a TensorSpec>, l: &'a LinearSpec) {
            out.push(&l.weight);
            out.extend(&l.bias);
        }
        let mut out = vec![&self.wte];
        if let PositionSpec::Learned(wpe) = &self.positions {
            out.push(wpe);
        }
        for b in &self.blocks {
            norm(&mut out, &b.norm1);
            match &b.attn.qkv {
                QkvSpec::Fused(l) => linear(&mut out, l),
                QkvSpec::Stacked(parts) => parts.iter().for_each(|l| linear(&mut out, l)),
            }
            linear(&mut out, &b.attn.out);
            norm(&mut out, &b.norm2);
            match &b.mlp {
                MlpSpec::Gelu { fc, proj } => {
                    linear(&mut out, fc);
                    linear(&mut out, proj);
                }
                MlpSpec::SwiGlu { gate, up, down } => {
                    linear(&mut out, gate);
                    linear(&mut out, up);
                    linear(&mut out, down);
                }
            }
        }
        norm(&mut out, &self.norm_f);
        out.extend(&self.lm_head);
        out
    }
}

pub use super::storage::Source;

/// Exported weights: `(name, shape, row-major values)`.
pub type Exported<T> = Vec<(String, Vec<usize>, Vec<T>)>;

/// Appends `values` under `spec`'s name and shape.
pub fn export<T>(out: &mut Exported<T>, spec: &TensorSpec, values: Vec<T>) {
    out.push((spec.name.clone(), spec.shape.clone(), values));
}

/// Columns `c0 .. c0 + n` of the row-major `(k, width)` matrix `w`, stored as `spec` wants a
/// `(k, n)` weight: as they are, or transposed to `(n, k)`.
pub fn stored_columns<T: Copy>(
    w: &[T],
    k: usize,
    width: usize,
    c0: usize,
    n: usize,
    transposed: bool,
) -> Vec<T> {
    let mut out = Vec::with_capacity(k * n);
    if transposed {
        for c in c0..c0 + n {
            out.extend((0..k).map(|r| w[r * width + c]));
        }
    } else {
        for r in 0..k {
            out.extend_from_slice(&w[r * width + c0..r * width + c0 + n]);
        }
    }
    out
}
