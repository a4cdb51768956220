//! Named tensors: what the schema specifies of each ([`TensorSpec`]) and a weight as it is
//! handed in ([`Tensor`]).

/// One tensor: its name, shape, and what it is (the initialisation schemes and the 16-bit
/// storage key on the kind: `wte`, `wpe`, `ln_weight`, `ln_bias`, `c_attn`, `q_proj`,
/// `k_proj`, `v_proj`, `attn_proj`, `c_fc`, `gate_proj`, `up_proj`, `mlp_proj`, `bias`,
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
