//! Portable kernels against half-size B: the plain tile loop, each B value widened (exactly)
//! as it is read. Every family falls back on these when it has no half-size kernels of its own.

use super::fma::RowFma;
use super::gemm::MR;
use crate::gemm::PanelValue;
use crate::half::HalfFormat;
use crate::kernels::{b_at, GemmKernels};

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
    let h = H::PANEL_NR / 2;
    let mut acc = [[T::ZERO; 32]; MR];
    if accumulate {
        for i in 0..rows {
            for j in 0..cols {
                acc[i][j] = *c.add(i * ldc + j);
            }
        }
    }
    let mut bw = [T::ZERO; 32];
    for kk in 0..kc {
        let bk = b.add(kk * ldb);
        for j in 0..cols {
            // float32 -> T is exact for both compute types.
            bw[j] = T::from_f64((*b_at(bk, hoff, h, j)).to_f32() as f64);
        }
        let ak = a.add(kk * MR);
        for (i, row) in acc.iter_mut().enumerate().take(rows) {
            T::fma_row(*ak.add(i), &bw, row);
        }
    }
    for i in 0..rows {
        for j in 0..cols {
            *c.add(i * ldc + j) = acc[i][j];
        }
    }
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
    }
}
