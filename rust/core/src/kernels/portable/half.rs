//! Portable kernels against half-size B: the plain tile loop, each B value widened (exactly)
//! as it is read. Every family falls back on these when it has no half-size kernels of its own.

use super::fma::RowFma;
use super::gemm::{tile, MR};
use crate::formats::PanelValue;
use crate::half::HalfFormat;
use crate::kernels::GemmKernels;

/// # Safety
/// As for [`super::gemm::kernel`], with B holding 16-bit values.
pub unsafe fn kernel<T: RowFma, H: HalfFormat + PanelValue>(
    rows: usize,
    cols: usize,
    kc: usize,
    a: *const T,
    b: *const H,
    ldb: usize,
    hoff: usize,
    c: *mut T,
    ldc: usize,
    accumulate: bool,
) {
    // float32 -> T is exact for both compute types.
    let widen = |v: H| T::from_f64(v.to_f32() as f64);
    tile(rows, cols, kc, a, b, ldb, hoff, c, ldc, accumulate, widen)
}

pub fn half_kernels<T: RowFma, H: HalfFormat + PanelValue>() -> GemmKernels<T, H> {
    GemmKernels {
        mr: MR,
        tile: kernel::<T, H>,
        tile_copy: None,
        tile_prefetch: None,
        wide: None,
        stream: None,
        pack_a_panel: None,
        fetch_next_a: false,
    }
}
