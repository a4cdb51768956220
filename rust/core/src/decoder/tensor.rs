//! Named tensors: what the schema specifies of each ([`TensorSpec`]) and a weight as it is
//! handed in ([`Tensor`]).

/// One tensor: its name, shape, and what it is (the initialisation schemes key on the kind:
/// `wte`, `wpe`, `ln_weight`, `ln_bias`, `c_attn`, `attn_proj`, `c_fc`, `mlp_proj`, `bias`,
/// `lm_head`).
#[derive(Clone, Debug, PartialEq)]
pub struct TensorSpec {
    pub name: String,
    pub shape: Vec<usize>,
    pub kind: &'static str,
}

/// A named weight handed to [`super::Model::new`]: its shape and row-major data.
pub struct Tensor<'a, T> {
    pub shape: Vec<usize>,
    pub data: &'a [T],
}
