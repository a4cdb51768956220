//! The portable micro-kernel: plain Rust loops over a runtime tile, against B in any storage
//! format (each depth step of the panel widened by the format's own definition as it is read).
use super::fma::RowFma;
use crate::formats::WidensTo;
#[cfg(doc)]
use crate::kernels::contract::BPanel;
use crate::kernels::contract::{by_rows, CTile, GemmKernels, TileArgs, TileAux};

pub const MR: usize = 4;

/// # Safety
/// See [`TileArgs`]: `t.a` holds `t.kc * MR` values, `t.b` `t.kc` steps of `t.cols` readable
/// values (laid out as [`BPanel`] says), and C `t.rows` (1 to MR) rows of `t.cols` writable
/// values. Nothing is done beside the tile.
pub unsafe fn kernel<T: RowFma, W: WidensTo<T>>(t: &TileArgs<T, W>, _: &TileAux<W>) {
    by_rows!(t.rows, [1, 2, 3, 4], R => tile::<R, T, W>(t))
}

/// `R` rows of the tile `t`.
#[inline(always)]
unsafe fn tile<const R: usize, T: RowFma, W: WidensTo<T>>(t: &TileArgs<T, W>) {
    let TileArgs {
        cols,
        kc,
        a,
        b,
        accumulate,
        ..
    } = *t;
    let CTile { ptr: c, ldc } = t.c;
    let mut acc = [[T::ZERO; 32]; R];
    if accumulate {
        for (i, row) in acc.iter_mut().enumerate() {
            for (j, v) in row[..cols].iter_mut().enumerate() {
                *v = *c.add(i * ldc + j);
            }
        }
    }
    // A step's B values in a row of 32 (the lanes past `cols` stay 0: their sums are never
    // stored), so that each row's update is one fixed-width loop.
    let mut bk = [T::ZERO; 32];
    for kk in 0..kc {
        W::widen_step(&b, kk, &mut bk[..cols]);
        let ak = a.add(kk * MR);
        for (i, row) in acc.iter_mut().enumerate() {
            T::fma_row(*ak.add(i), &bk, row);
        }
    }
    for (i, row) in acc.iter().enumerate() {
        for (j, &v) in row[..cols].iter().enumerate() {
            *c.add(i * ldc + j) = v;
        }
    }
}

/// The portable kernels for A and C of type `T` against B stored as `W`: every family's for
/// a format it has no kernels of its own for.
pub fn kernels<T: RowFma, W: WidensTo<T>>() -> GemmKernels<T, W> {
    GemmKernels {
        mr: MR,
        tile: kernel::<T, W>,
        tile_copies: false,
        tile_prefetches: false,
        wide: None,
        wide_compact_a: false,
        stream: None,
        pack_a_panel: None,
        fetch_next_a: false,
    }
}
