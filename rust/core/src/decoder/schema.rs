//! The tensors of a model under their Hugging Face GPT-2 names (without `transformer.`): the
//! one definition of every name and shape. [`Layout::new`] builds it from a [`Config`]; loading
//! ([`super::Model::new`]), exporting ([`super::Model::export`]) and Python's validation, weight
//! initialisation and documentation ([`schema`]) all read it from here.

pub use super::tensor::{Tensor, TensorSpec};
use super::Config;

fn spec(name: String, shape: &[usize], kind: &'static str) -> TensorSpec {
    TensorSpec {
        name,
        shape: shape.to_vec(),
        kind,
    }
}

/// `x @ W + b`: W is `(k, n)` (GPT-2's `Conv1D` orientation), b is `(n,)` when present.
#[derive(Clone, Debug)]
pub struct LinearSpec {
    pub weight: TensorSpec,
    pub bias: Option<TensorSpec>,
}

impl LinearSpec {
    fn new(prefix: &str, k: usize, n: usize, bias: bool, kind: &'static str) -> Self {
        LinearSpec {
            weight: spec(format!("{prefix}.weight"), &[k, n], kind),
            bias: bias.then(|| spec(format!("{prefix}.bias"), &[n], "bias")),
        }
    }
}

/// A LayerNorm's scale and shift `(d,)`, when affine.
#[derive(Clone, Debug)]
pub struct NormSpec {
    pub affine: Option<(TensorSpec, TensorSpec)>,
}

impl NormSpec {
    fn new(prefix: &str, d: usize, affine: bool) -> Self {
        NormSpec {
            affine: affine.then(|| {
                (
                    spec(format!("{prefix}.weight"), &[d], "ln_weight"),
                    spec(format!("{prefix}.bias"), &[d], "ln_bias"),
                )
            }),
        }
    }
}

/// Block `i`: `h.{i}.` followed by the names of its layers.
#[derive(Clone, Debug)]
pub struct BlockSpec {
    pub ln1: NormSpec,
    pub qkv: LinearSpec,
    pub proj: LinearSpec,
    pub ln2: NormSpec,
    pub fc: LinearSpec,
    pub fc_proj: LinearSpec,
}

impl BlockSpec {
    fn new(i: usize, cfg: &Config) -> Self {
        let (d, f) = (cfg.d_model, cfg.d_ff);
        let p = format!("h.{i}");
        BlockSpec {
            ln1: NormSpec::new(&format!("{p}.ln_1"), d, cfg.ln_affine),
            qkv: LinearSpec::new(
                &format!("{p}.attn.c_attn"),
                d,
                3 * d,
                cfg.attn_bias,
                "c_attn",
            ),
            proj: LinearSpec::new(
                &format!("{p}.attn.c_proj"),
                d,
                d,
                cfg.attn_bias,
                "attn_proj",
            ),
            ln2: NormSpec::new(&format!("{p}.ln_2"), d, cfg.ln_affine),
            fc: LinearSpec::new(&format!("{p}.mlp.c_fc"), d, f, cfg.mlp_bias, "c_fc"),
            fc_proj: LinearSpec::new(&format!("{p}.mlp.c_proj"), f, d, cfg.mlp_bias, "mlp_proj"),
        }
    }
}

/// Every tensor of a model, in the order of the forward pass.
#[derive(Clone, Debug)]
pub struct Layout {
    /// `(V, d)`: row `v` is token `v`.
    pub wte: TensorSpec,
    /// `(n_ctx, d)`, learned positions only.
    pub wpe: Option<TensorSpec>,
    pub blocks: Vec<BlockSpec>,
    pub ln_f: NormSpec,
    /// `(V, d)`, untied heads only (logits are `h @ W^T`).
    pub lm_head: Option<TensorSpec>,
}

impl Layout {
    pub fn new(cfg: &Config) -> Self {
        let (d, v) = (cfg.d_model, cfg.vocab_size);
        Layout {
            wte: spec("wte.weight".into(), &[v, d], "wte"),
            wpe: (!cfg.sinusoidal).then(|| spec("wpe.weight".into(), &[cfg.n_ctx, d], "wpe")),
            blocks: (0..cfg.n_layers).map(|i| BlockSpec::new(i, cfg)).collect(),
            ln_f: NormSpec::new("ln_f", d, cfg.ln_affine),
            lm_head: (!cfg.tied).then(|| spec("lm_head.weight".into(), &[v, d], "lm_head")),
        }
    }

    /// Every tensor, flattened in canonical order.
    pub fn tensors(&self) -> Vec<&TensorSpec> {
        fn norm<'a>(out: &mut Vec<&'a TensorSpec>, n: &'a NormSpec) {
            if let Some((g, b)) = &n.affine {
                out.extend([g, b]);
            }
        }
        fn linear<'a>(out: &mut Vec<&'a TensorSpec>, l: &'a LinearSpec) {
            out.push(&l.weight);
            out.extend(&l.bias);
        }
        let mut out = vec![&self.wte];
        out.extend(&self.wpe);
        for b in &self.blocks {
            norm(&mut out, &b.ln1);
            linear(&mut out, &b.qkv);
            linear(&mut out, &b.proj);
            norm(&mut out, &b.ln2);
            linear(&mut out, &b.fc);
            linear(&mut out, &b.fc_proj);
        }
        norm(&mut out, &self.ln_f);
        out.extend(&self.lm_head);
        out
    }
}

/// The schema of `cfg`: every tensor's name, shape and kind in canonical order.
pub fn schema(cfg: &Config) -> Vec<TensorSpec> {
    Layout::new(cfg).tensors().into_iter().cloned().collect()
}

pub use super::storage::Source;

/// Exported weights: `(name, shape, row-major values)`.
pub type Exported<T> = Vec<(String, Vec<usize>, Vec<T>)>;

/// Appends `values` under `spec`'s name and shape.
pub fn export<T>(out: &mut Exported<T>, spec: &TensorSpec, values: Vec<T>) {
    out.push((spec.name.clone(), spec.shape.clone(), values));
}
