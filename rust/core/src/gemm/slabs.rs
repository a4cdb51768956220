//! A plain B packed for one product in slabs of columns, each packed and multiplied by one
//! thread in its own cache ([`pack_by_slabs`]), and how many slabs that takes.

use super::buffers::GemmElement;
use super::loops;
use super::options::{Epilogue, Options, Tile};
use super::pack::{pack_a, KBlocks, PackedB};
use super::source::BSource;
use super::tuning;
use super::view::MatRef;
use crate::kernels::CTile;
use crate::Element;

/// Rows of A from which a plain float64 B is packed in one piece rather than in slabs, with a
/// family whose tile reads a panel in several passes (one that has a copying tile kernel:
/// AVX2). Every slab makes the loops read all of A again, from the L3 cache; in one piece the
/// row blocks pack A as they go and read B back from memory or the L3 cache, which for float64
/// and that many rows costs less. float32, and the AVX-512 family, keep the slabs.
///
/// Only where the L2 cache holds no more than one slab (see `l2_holds_one_slab`): with a
/// larger L2 the slabs stay ahead. The measurements are in `benches/JOURNAL.md`.
pub const ONE_PIECE_MIN_ROWS_F64: usize = 768;

/// Whether an L2 cache of `l2` bytes holds at most one slab of [`tuning::SLAB_BYTES`] beside what the
/// loops keep there (less than two slabs), or its size is unknown: then a plain float64 B of
/// [`ONE_PIECE_MIN_ROWS_F64`] rows or more is packed in one piece by a family whose tile reads
/// a panel in several passes.
pub(super) fn l2_holds_one_slab(l2: Option<usize>) -> bool {
    l2.is_none_or(|bytes| bytes < 2 * tuning::slab_bytes())
}

/// How many slabs B is packed in for a `Rhs::PackHere` product of `m` rows against a (k x n)
/// B on `threads` threads (1: one piece). Slabs of at most [`tuning::SLAB_BYTES`], as few as can be,
/// their count a multiple of the thread count (each thread takes whole slabs), of equal widths
/// in whole panels, to within one panel ([`slab_columns`]: 14 slabs of a 144-panel B are 10 of
/// 10 panels and 4 of 11, where slabs of one rounded width were 13 of 11 and a last one of 1,
/// which left a thread idle for most of a slab); but never narrower than a column group of the
/// loops (A is read once per slab, as it is once per group in one piece). One piece for a row
/// block of at most one tile quantum (each slab would be used by one tile), for a B that fits
/// one slab, for float64 from [`ONE_PIECE_MIN_ROWS_F64`] rows when the family's tile reads a
/// panel in several passes and the L2 holds at most one slab (`one_piece_f64`), where the group
/// width leaves too few slabs to share out evenly, and where a slab is more than four times
/// [`tuning::SLAB_BYTES`] (a deep B: no cache holds such a slab, and each thread keeps its slab buffer
/// between products).
pub(super) fn slab_count<T: Element>(
    m: usize,
    k: usize,
    n: usize,
    threads: usize,
    one_piece_f64: bool,
) -> usize {
    let bytes = PackedB::<T>::packed_len(k, n).saturating_mul(std::mem::size_of::<T>());
    let count = bytes.div_ceil(tuning::slab_bytes());
    let float64 = std::mem::size_of::<T>() == 8;
    if m <= tuning::ROW_QUANTUM
        || count <= 1
        || (one_piece_f64 && float64 && m >= ONE_PIECE_MIN_ROWS_F64)
    {
        return 1;
    }
    let panels = n.div_ceil(T::NR);
    let count = (count.div_ceil(threads) * threads).min(panels / tuning::nc_panels());
    let widest = panels.div_ceil(count.max(1)) * T::NR;
    let slab_bytes = PackedB::<T>::packed_len(k, widest).saturating_mul(std::mem::size_of::<T>());
    if count <= 1
        || (!count.is_multiple_of(threads) && count < 4 * threads)
        || slab_bytes > 4 * tuning::slab_bytes()
    {
        1
    } else {
        count
    }
}

/// Columns `j0..j1` of slab `s` of `count` over `n` columns: whole panels of `nr` columns
/// (the last slab ends at `n`), the panels shared out as evenly as they go.
pub(super) fn slab_columns(s: usize, count: usize, n: usize, nr: usize) -> (usize, usize) {
    let panels = n.div_ceil(nr);
    let at = |s: usize| (s * panels / count * nr).min(n);
    (at(s), at(s + 1))
}

/// `C = A B` for a B packed for this product only, in `slabs` slabs of columns
/// ([`slab_columns`]): A is packed once; then each thread takes whole slabs, packs one into a buffer of
/// its own and multiplies it by all of A while it is still in that core's cache, instead of B
/// being packed into memory first and read back (and without the threads waiting for each
/// other between slabs). Every element's chain is the one of the single-piece product (slabs
/// cut columns, never the depth), so the bits are the same.
pub(super) fn pack_by_slabs<T: GemmElement>(
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    slabs: usize,
    c: &mut [T],
    ldc: usize,
    opts: &Options<'_, T>,
) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert_eq!(k, b.rows, "inner dimensions differ");
    assert!(m > 0 && n > 0 && (1..=n.div_ceil(T::NR)).contains(&slabs) && ldc >= n);
    assert!(c.len() >= (m - 1) * ldc + n, "output too short");
    assert!(opts.kernel.supported(), "kernel not supported on this CPU");
    let kernels = T::gemm_kernels(opts.kernel);
    let kb = KBlocks::new(k, tuning::kc_max::<T>());
    let cptr = crate::threads::SendPtr(c.as_mut_ptr());
    // B's values, only ever read.
    let (bptr, brs, bcs) = (crate::threads::SendPtr(b.ptr as *mut T), b.rs, b.cs);
    T::with_a_buffer(|apack| {
        pack_a(a, &kernels, kb, n, apack);
        let apack = &*apack;
        // Inside an item, the packing and the loops run on the item's thread alone (a loop
        // started from inside another runs where it is).
        crate::threads::parallel_for(slabs, |s| {
            let (j0, j1) = slab_columns(s, slabs, n, T::NR);
            let w = j1 - j0;
            // SAFETY: columns j0 .. j0 + w of B, a subset of its elements.
            let part =
                unsafe { MatRef::from_raw(bptr.get().offset(j0 as isize * bcs), k, w, brs, bcs) };
            T::with_slab_buffer(|buf| {
                crate::memory::resize_for_overwrite(buf, PackedB::<T>::buffer_len(k, w));
                let pb = PackedB::pack_into_for(part, std::mem::take(buf), opts.kernel);
                let shifted = |mut t: Tile<'_, T>| {
                    t.j0 += j0;
                    if let Some(f) = opts.epilogue {
                        f(t)
                    }
                };
                let epilogue: Option<Epilogue<'_, T>> =
                    opts.epilogue.map(|_| &shifted as Epilogue<'_, T>);
                // SAFETY: columns j0 .. j0 + w of C's m rows, checked above to lie inside `c`;
                // no other slab writes them.
                unsafe {
                    loops::run(
                        kernels,
                        pb.kb,
                        loops::APanels {
                            packed: crate::threads::SendPtr(apack.as_ptr() as *mut T),
                            source: None,
                        },
                        &BSource::Packed(&pb),
                        CTile {
                            ptr: cptr.get().add(j0),
                            ldc,
                        },
                        (m, w),
                        epilogue,
                    );
                }
                *buf = pb.into_data();
            });
        });
    });
}
