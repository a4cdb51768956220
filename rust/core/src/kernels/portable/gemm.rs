//! The portable micro-kernel: plain Rust loops over a runtime tile, against B in any storage
//! format (each depth step of the panel widened by the format's own definition as it is read).
use super::fma::RowFma;
use crate::formats::{BPanel, WidensTo};
use crate::kernels::GemmKernels;

pub const MR: usize = 4;

/// # Safety
/// `a` holds `kc * MR` values, `b` holds `kc` steps of `cols` readable values (laid out as
/// `ldb` and `hoff` say: see [`BPanel`]), and C has `rows` rows of `cols` writable values `ldc`
/// apart.
pub unsafe fn kernel<T: RowFma, W: WidensTo<T>>(
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
) {
    let b = BPanel { ptr: b, ldb, hoff };
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
        W::widen_step(&b, kk, &mut bk[..cols]);
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

/// The portable kernels for A and C of type `T` against B stored as `W`: every family's for
/// a format it has no kernels of its own for.
pub fn kernels<T: RowFma, W: WidensTo<T>>() -> GemmKernels<T, W> {
    GemmKernels {
        mr: MR,
        tile: kernel::<T, W>,
        tile_copy: None,
        tile_prefetch: None,
        wide: None,
        stream: None,
        pack_a_panel: None,
        fetch_next_a: false,
    }
}
