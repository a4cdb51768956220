//! What the right-hand side of a product can hold: the compute types themselves, or storage
//! that the kernels widen exactly to float32 as they load it.

use crate::half::{Bf16, F16};
use crate::Element;

/// What a packed right-hand side can hold: the compute types themselves, or 16-bit storage
/// ([`Bf16`], [`F16`]) that the kernels widen to float32 as they load it.
pub trait PanelValue: Copy + Send + Sync + 'static {
    /// Columns in one panel (the same for every kernel of the type).
    const PANEL_NR: usize;
    /// Whether a panel may be stored as two halves (see [`crate::gemm::PackedB`]), for a family
    /// that asks for them: float32 and float64 (a step of a panel is two cache lines or
    /// more), not 16-bit values (a step is one line, which a half-width strip reads half of
    /// anyway).
    const HALVES: bool;
    /// The padding value of a partial last panel.
    const PAD: Self;
    /// Largest depth block (the loops' tuning may set another).
    const PANEL_KC_MAX: usize;
}

impl<T: Element> PanelValue for T {
    const PANEL_NR: usize = T::NR;
    const HALVES: bool = true;
    const PAD: Self = T::ZERO;
    const PANEL_KC_MAX: usize = T::KC_MAX;
}

/// 16-bit values use float32's panel width (the kernels widen one 16-lane half at a time)
/// and its depth blocks.
macro_rules! half_panel {
    ($h:ty) => {
        impl PanelValue for $h {
            const PANEL_NR: usize = <f32 as Element>::NR;
            const HALVES: bool = false;
            const PAD: Self = <$h>::ZERO_BITS;
            const PANEL_KC_MAX: usize = <f32 as Element>::KC_MAX;
        }
    };
}
impl Bf16 {
    pub const ZERO_BITS: Bf16 = Bf16(0);
}
impl F16 {
    pub const ZERO_BITS: F16 = F16(0);
}
half_panel!(Bf16);
half_panel!(F16);
