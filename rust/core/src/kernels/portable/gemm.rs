//! The portable micro-kernel: plain Rust loops over a runtime tile.
use super::fma::RowFma;
use crate::formats::PanelValue;
use crate::kernels::b_at;

pub const MR: usize = 4;

/// # Safety
/// `a` holds `kc * MR` values, `b` holds `kc` steps of `cols` readable values (laid out as
/// `ldb` and `hoff` say: see the kernels' contract),
/// and C has `rows` rows of `cols` writable values `ldc` apart.
pub unsafe fn kernel<T: RowFma>(
    rows: usize,
    cols: usize,
    kc: usize,
    a: *const T,
    b: *const T,
    ldb: usize,
    hoff: usize,
    c: *mut T,
    ldc: usize,
    accumulate: bool,
) {
    tile(rows, cols, kc, a, b, ldb, hoff, c, ldc, accumulate, |v| v)
}

/// The tile loop of the portable kernels, for B holding `W` values that `widen` turns (exactly)
/// into the compute type as they are read.
///
/// # Safety
/// As for [`kernel`], with B holding `W` values.
#[inline(always)]
pub(super) unsafe fn tile<T: RowFma, W: PanelValue>(
    rows: usize,
    cols: usize,
    kc: usize,
    a: *const T,
    b: *const W,
    ldb: usize,
    hoff: usize,
    c: *mut T,
    ldc: usize,
    accumulate: bool,
    widen: impl Fn(W) -> T,
) {
    let h = W::PANEL_NR / 2;
    let mut acc = [[T::ZERO; 32]; MR];
    if accumulate {
        for i in 0..rows {
            for j in 0..cols {
                acc[i][j] = *c.add(i * ldc + j);
            }
        }
    }
    // A step's B values in a row of 32 (the lanes past `cols` stay 0: their sums are never
    // stored), so that each row's update is one fixed-width loop.
    let mut bk = [T::ZERO; 32];
    for kk in 0..kc {
        let step = b.add(kk * ldb);
        for (j, v) in bk.iter_mut().enumerate().take(cols) {
            *v = widen(*b_at(step, hoff, h, j));
        }
        let ak = a.add(kk * MR);
        for (i, row) in acc.iter_mut().enumerate().take(rows) {
            T::fma_row(*ak.add(i), &bk, row);
        }
    }
    for i in 0..rows {
        for j in 0..cols {
            *c.add(i * ldc + j) = acc[i][j];
        }
    }
}
