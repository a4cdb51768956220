//! The compute types stored as themselves: float32 and float64 panels, which the kernels read
//! as they are (widening is the identity).

use super::format::{widen_values, BPanel, StorageFormat, ValueFormat, WidensTo};

/// `$t` as a format: panels of `$nr` columns, depth blocks of at most `$kc` steps.
macro_rules! compute_format {
    ($t:ty, $name:literal, $nr:expr, $kc:expr) => {
        // SAFETY: zero bits are +0.0; a step of a panel is PANEL_NR values.
        unsafe impl StorageFormat for $t {
            const FORMAT_NAME: &'static str = $name;
            const BLOCK_K: usize = 1;
            const PANEL_NR: usize = $nr;
            const PANEL_BLOCK_UNITS: usize = $nr;
            const HALVES: bool = true;
            const ZERO_UNIT: Self = 0.0;
            const PANEL_KC_MAX: usize = $kc;
        }

        impl ValueFormat for $t {}

        impl WidensTo<$t> for $t {
            #[inline(always)]
            unsafe fn widen_step(b: &BPanel<Self>, kk: usize, out: &mut [$t]) {
                widen_values(b, kk, out, |v| v)
            }
        }
    };
}

compute_format!(f32, "float32", 32, 384);
compute_format!(f64, "float64", 16, 256);
