//! One call's new positions, as every layer of the pass sees them.

use crate::kernels::Kernel;

/// One call's new positions: `ids` is `batch x t_new` (row-major), after `p0` cached positions.
pub struct Pass {
    pub batch: usize,
    pub t_new: usize,
    pub p0: usize,
    pub d: usize,
    pub causal: bool,
    /// The kernel family the whole pass runs with.
    pub kernel: Kernel,
}

impl Pass {
    /// Rows of the activations, `B * T_new`.
    pub fn rows(&self) -> usize {
        self.batch * self.t_new
    }
}
