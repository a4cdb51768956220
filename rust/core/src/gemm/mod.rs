//! The blocked matrix multiply `C = A B`.
//!
//! One entry point, [`gemm`], takes the right-hand side in one of three forms ([`Rhs`]) and
//! [`Options`] (the kernel family, an epilogue run on each finished tile). Inside:
//! `loops.rs` holds the five-loop nest around the family's micro-kernels, `pack.rs` the
//! packing of A and B, `stream.rs` the few-rows path against a B read in place, `buffers.rs`
//! the memory kept between calls, `reference.rs` the naive loop every kernel must equal.
//!
//! # Exactness contract
//! Every element `C[i,j]` is one accumulator that starts at 0 and receives
//! `fma(A[i,k], B[k,j], acc)` for k = 0, 1, ..., K-1 in ascending order. The first depth block
//! starts the accumulators at zero; each later block loads them back from C and continues
//! the same chain. The result is therefore bit-identical to [`gemm_reference`], whatever the
//! kernel, the block sizes or the number of threads, and rows never influence each other
//! (a one-row product gives the same bits as that row of a large product).

mod buffers;
mod loops;
mod options;
pub mod pack;
pub mod pack_blocks;
mod reference;
mod slabs;
mod source;
mod stream;
pub mod tuning;
mod view;

pub use crate::formats::StorageFormat;
pub use crate::kernels::{
    available, current as current_kernel, detect, require as require_kernel, set_kernel, Kernel,
};
pub use buffers::{GemmElement, B_SCRATCH_MAX_BYTES};
pub use options::{Epilogue, Options, Tile};
pub use pack::{PackedB, PACKED_ALIGN};
pub use reference::gemm_reference;
pub use slabs::ONE_PIECE_MIN_ROWS_F64;
pub use tuning::{B_CHUNK_BYTES, MC, NC_PANELS, ROW_QUANTUM, SLAB_BYTES};
pub use view::MatRef;

use crate::kernels::{CTile, KernelsFor, STREAM_ROWS};
use crate::Element;
use pack::KBlocks;
use slabs::{l2_holds_one_slab, pack_by_slabs, slab_count};
use source::BSource;

/// The right-hand side of a product.
pub enum Rhs<'a, T: Element> {
    /// Packed once ahead, for many products.
    Packed(&'a PackedB<T>),
    /// A plain matrix read where it is (unit column stride, positive row stride): up to
    /// `STREAM_ROWS` rows of A against a B wide enough run the family's stream kernel (whole
    /// rows of B, C kept in memory), if it has one; otherwise every whole panel of `NR` columns
    /// comes straight from B's rows (only the last, partial panel is copied). For few rows of
    /// A this beats packing B first (which reads and writes all of B once more than the
    /// product does).
    InPlace(MatRef<'a, T>),
    /// A plain matrix (any strides) packed for this product only: for more than a tile
    /// quantum of rows, in slabs of columns that each thread packs and multiplies in its own
    /// cache (`pack_by_slabs`); otherwise in one piece, into memory kept from earlier calls
    /// when there is some of the right size (fresh memory costs a page fault and a zeroing
    /// pass per page on first touch, as much as packing itself).
    PackHere(MatRef<'a, T>),
}

/// Rows of A up to which a plain B is read in place ([`Rhs::InPlace`]) rather than packed in
/// the call ([`Rhs::PackHere`]), by a family without a copying tile kernel: packing reads and
/// writes all of B once more than the product does, which more rows repay by reading the packed
/// panels from the cache (from about a hundred rows on: `benches/JOURNAL.md`).
pub const IN_PLACE_MAX_ROWS: usize = 64;

/// The same, for a family with a copying tile kernel (the first row tile of each row block
/// copies the panels it reads, the others read the copy: the packing is done by a kernel that
/// computes at the same time, while B comes from memory), which pays up to more rows.
pub const IN_PLACE_MAX_ROWS_COPYING: usize = 256;

impl<'a, T: GemmElement> Rhs<'a, T> {
    /// A plain B for a product of `m` rows on `kernel`: read in place up to
    /// [`IN_PLACE_MAX_ROWS`] rows ([`IN_PLACE_MAX_ROWS_COPYING`] with a family that has a
    /// copying tile kernel) when its layout allows (unit column stride, positive row stride),
    /// else packed in the call. Either way the product has the same bits.
    pub fn plain(b: MatRef<'a, T>, m: usize, kernel: Kernel) -> Rhs<'a, T> {
        let max_rows = if T::gemm_kernels(kernel).tile_copies {
            IN_PLACE_MAX_ROWS_COPYING
        } else {
            IN_PLACE_MAX_ROWS
        };
        if m <= max_rows && b.cs == 1 && b.rs > 0 {
            Rhs::InPlace(b)
        } else {
            Rhs::PackHere(b)
        }
    }
}

impl<T: Element> Rhs<'_, T> {
    /// (rows, cols) of B.
    pub fn shape(&self) -> (usize, usize) {
        match self {
            Rhs::Packed(p) => (p.rows(), p.cols()),
            Rhs::InPlace(v) | Rhs::PackHere(v) => (v.rows, v.cols),
        }
    }
}

/// `C = A B` (then the epilogue, if any, on every element of C: the same values as a separate
/// pass over C afterwards, without reading C back from memory). `c` is row-major with row
/// stride `ldc >= N`. `Error::Memory` when B is to be packed here and the copy cannot be
/// allocated; the other forms never fail.
pub fn gemm<T: GemmElement>(
    a: MatRef<'_, T>,
    b: Rhs<'_, T>,
    c: &mut [T],
    ldc: usize,
    opts: &Options<'_, T>,
) -> crate::Result<()> {
    match b {
        Rhs::Packed(p) => run(a, &BSource::Packed(p), c, ldc, opts),
        Rhs::PackHere(v) => {
            let one_piece_f64 =
                T::gemm_kernels(opts.kernel).tile_copies && l2_holds_one_slab(tuning::l2_bytes());
            let slabs = slab_count::<T>(
                a.rows,
                v.rows,
                v.cols,
                crate::threads::available(),
                one_piece_f64,
            );
            if slabs > 1 {
                pack_by_slabs(a, v, slabs, c, ldc, opts);
                return Ok(());
            }
            let len = PackedB::<T>::buffer_len(v.rows, v.cols);
            let buf = T::b_scratch().take(len, "packing b")?;
            let pb = PackedB::pack_into_for(v, buf, opts.kernel);
            run(a, &BSource::Packed(&pb), c, ldc, opts);
            let data = pb.into_data();
            if data.capacity() * std::mem::size_of::<T>() <= B_SCRATCH_MAX_BYTES {
                T::b_scratch().give_back(data);
            }
        }
        Rhs::InPlace(b) => {
            assert!(
                b.cs == 1 && b.rs > 0,
                "B must have unit column stride and a positive row stride"
            );
            let kernels = T::gemm_kernels(opts.kernel);
            if let (Some(stream), true) = (kernels.stream, a.rows <= STREAM_ROWS) {
                if opts.kernel.supported() && stream::stream_rows(stream, a, b, c, ldc) {
                    if let (Some(f), true) = (opts.epilogue, a.rows > 0 && b.cols > 0) {
                        f(Tile::new(0, 0, a.rows, b.cols, c.as_mut_ptr(), ldc));
                    }
                    return Ok(());
                }
            }
            // The partial last panel (if any) is packed, zero-padded, the same way as a PackedB.
            let full = b.cols / T::NR * T::NR;
            let edge = if full < b.cols {
                // SAFETY: columns full.. of B, a subset of B's elements.
                let rest =
                    unsafe { MatRef::from_raw(b.ptr.add(full), b.rows, b.cols - full, b.rs, 1) };
                Some(PackedB::try_pack_for(rest, opts.kernel)?)
            } else {
                None
            };
            let kb = KBlocks::new(b.rows, tuning::kc_max::<T>());
            run(a, &BSource::Rows { b, edge, kb }, c, ldc, opts)
        }
    }
    Ok(())
}

/// `C = A B` for a B packed ahead that holds `W` (the compute type itself, or 16-bit storage
/// the kernels widen exactly as they load it: then C is, bit for bit, the product with the
/// widened B), then the epilogue as in [`gemm`]. Never fails.
pub fn gemm_packed<T: GemmElement + KernelsFor<W>, W: StorageFormat>(
    a: MatRef<'_, T>,
    b: &PackedB<W>,
    c: &mut [T],
    ldc: usize,
    opts: &Options<'_, T>,
) {
    run(a, &BSource::Packed(b), c, ldc, opts)
}

/// Pack A with the family's tile height and run the loops.
fn run<T: GemmElement + KernelsFor<W>, W: StorageFormat>(
    a: MatRef<'_, T>,
    b: &BSource<'_, W>,
    c: &mut [T],
    ldc: usize,
    opts: &Options<'_, T>,
) {
    let (m, k, n) = (a.rows, a.cols, b.cols());
    assert_eq!(k, b.rows(), "inner dimensions differ");
    assert!(ldc >= n);
    if m == 0 || n == 0 {
        return;
    }
    assert!(c.len() >= (m - 1) * ldc + n, "output too short");
    if k == 0 {
        for i in 0..m {
            c[i * ldc..i * ldc + n].fill(T::ZERO);
        }
        if let Some(f) = opts.epilogue {
            f(Tile::new(0, 0, m, n, c.as_mut_ptr(), ldc));
        }
        return;
    }
    assert!(opts.kernel.supported(), "kernel not supported on this CPU");
    let kernels = <T as KernelsFor<W>>::kernels_for(opts.kernel);
    let kb = b.kb();
    T::with_a_buffer(|apack| {
        // Packed in the loops (all at once, or a row block at a time by the work items).
        pack::reserve_a(m, k, kernels.mr, apack);
        let apanels = loops::APanels {
            packed: crate::threads::SendPtr(apack.as_mut_ptr()),
            source: Some(a),
        };
        // SAFETY: C holds m rows of n values ldc apart (checked above), borrowed mutably here.
        unsafe {
            loops::run(
                kernels,
                kb,
                apanels,
                b,
                CTile {
                    ptr: c.as_mut_ptr(),
                    ldc,
                },
                (m, n),
                opts.epilogue,
            )
        };
    });
}

/// Convenience: `A (m x k) @ B (k x n)` for row-major slices, packing B on the fly.
pub fn matmul<T: GemmElement>(a: &[T], b: &[T], m: usize, k: usize, n: usize) -> Vec<T> {
    let pb = PackedB::pack(MatRef::from_slice(b, k, n));
    let mut c = crate::memory::zeroed::<T>(m * n);
    gemm(
        MatRef::from_slice(a, m, k),
        Rhs::Packed(&pb),
        &mut c,
        n,
        &Options::default(),
    )
    .expect("a packed product does not fail");
    c
}

#[cfg(test)]
mod format_tests;
#[cfg(test)]
mod tests;
