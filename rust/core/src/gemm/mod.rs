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
pub mod pack;
mod reference;
mod stream;
pub mod tuning;
mod view;

pub use crate::kernels::{
    available, current as current_kernel, detect, require as require_kernel, set_kernel, Kernel,
};
pub use buffers::{GemmElement, B_SCRATCH_MAX_BYTES};
pub use loops::{B_CHUNK_BYTES, MC, NC_PANELS, ROW_QUANTUM};
pub use pack::{PackedB, PanelValue, PACKED_ALIGN};
pub use reference::gemm_reference;
pub use view::MatRef;

use crate::kernels::{KernelsFor, STREAM_ROWS};
use crate::Element;
use pack::{pack_a, KBlocks};

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
/// panels from the cache. With the AVX-512 kernels on the 2-core AMD EPYC (Zen 4), in place
/// against packed in the call from 96 to 256 rows (768 x 2304, 3072 x 768, 768 x 768, 768 x 3072;
/// the two alternating call by call, medians of the paired ratios): 0.80-1.09 on one thread,
/// 0.83-1.10 on two, mostly below 1.
pub const IN_PLACE_MAX_ROWS: usize = 64;

/// The same, for a family with a copying tile kernel (the first row tile of each row block
/// copies the panels it reads, the others read the copy: the packing is done by a kernel that
/// computes at the same time, while B comes from memory). With the AVX2 kernels on the 2-core
/// AMD EPYC (Zen 4), in place against packed in the call (call by call, medians of the paired
/// ratios), 96 to 256 rows of 768 x 2304, 3072 x 768, 768 x 768, 768 x 3072 and 768 x 50257:
/// float32 0.99-1.15 on one thread and 1.03-1.15 on two, float64 0.92-1.11 and 0.99-1.23
/// (below 1 only at 256 x 768 x 768 and 256 x 768 x 50257 on one thread, and 192 x 768 x 3072
/// float64 on two); at 512 rows 1.02-1.06 on one thread but 0.94-1.20 on two, at 1024 rows
/// 0.97-1.09.
pub const IN_PLACE_MAX_ROWS_COPYING: usize = 256;

impl<'a, T: GemmElement> Rhs<'a, T> {
    /// A plain B for a product of `m` rows on `kernel`: read in place up to
    /// [`IN_PLACE_MAX_ROWS`] rows ([`IN_PLACE_MAX_ROWS_COPYING`] with a family that has a
    /// copying tile kernel) when its layout allows (unit column stride, positive row stride),
    /// else packed in the call. Either way the product has the same bits.
    pub fn plain(b: MatRef<'a, T>, m: usize, kernel: Kernel) -> Rhs<'a, T> {
        let max_rows = if T::gemm_kernels(kernel).tile_copy.is_some() {
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

/// How a product runs.
#[derive(Clone, Copy)]
pub struct Options<'a, T> {
    /// The kernel family (it must be supported by the CPU); the active one by default.
    pub kernel: Kernel,
    /// Run on every finished tile of C (see [`Epilogue`]).
    pub epilogue: Option<Epilogue<'a, T>>,
}

impl<T> Default for Options<'_, T> {
    fn default() -> Self {
        Options {
            kernel: current_kernel(),
            epilogue: None,
        }
    }
}

impl<'a, T> Options<'a, T> {
    pub fn with_kernel(kernel: Kernel) -> Self {
        Options {
            kernel,
            epilogue: None,
        }
    }
    pub fn then(epilogue: Epilogue<'a, T>) -> Self {
        Options {
            epilogue: Some(epilogue),
            ..Default::default()
        }
    }
}

/// A finished block of C handed to an [`Epilogue`]: rows `i0 .. i0 + rows`, columns
/// `j0 .. j0 + cols`.
pub struct Tile<'a, T> {
    pub i0: usize,
    pub j0: usize,
    pub rows: usize,
    pub cols: usize,
    ptr: *mut T,
    ld: usize,
    _life: std::marker::PhantomData<&'a mut T>,
}

impl<T> Tile<'_, T> {
    /// A tile at (i0, j0) of `rows x cols` values starting at `ptr`, rows `ld` apart; the
    /// caller hands it to one epilogue call only.
    pub(crate) fn new(
        i0: usize,
        j0: usize,
        rows: usize,
        cols: usize,
        ptr: *mut T,
        ld: usize,
    ) -> Self {
        Tile {
            i0,
            j0,
            rows,
            cols,
            ptr,
            ld,
            _life: Default::default(),
        }
    }

    /// The first value of the tile; row r starts `r * ld()` values after it.
    pub fn as_mut_ptr(&mut self) -> *mut T {
        self.ptr
    }

    /// Distance between the starts of consecutive rows.
    pub fn ld(&self) -> usize {
        self.ld
    }

    /// Row `r` of the tile: columns `j0 .. j0 + cols` of row `i0 + r` of C.
    #[inline(always)]
    pub fn row(&mut self, r: usize) -> &mut [T] {
        assert!(r < self.rows);
        // SAFETY: the tile's rows lie inside C and belong to the running call alone.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(r * self.ld), self.cols) }
    }
}

/// Work on finished parts of C: `f(tile)` receives a block of C once its values are final,
/// while they are still in the cache (one call per micro-kernel tile). Every element of C is
/// passed exactly once; tiles may come in any order and from any thread.
pub type Epilogue<'a, T> = &'a (dyn Fn(Tile<'_, T>) + Sync);

/// The right-hand side as the kernels read it.
pub(crate) enum BSource<'a, T: PanelValue> {
    /// Packed into `NR`-column panels ([`PackedB`]).
    Packed(&'a PackedB<T>),
    /// Read in place (unit column stride): whole panels from B's rows, the partial last panel
    /// from `edge` (its columns packed).
    Rows {
        b: MatRef<'a, T>,
        edge: Option<PackedB<T>>,
        kb: KBlocks,
    },
}

impl<T: PanelValue> BSource<'_, T> {
    fn rows(&self) -> usize {
        match self {
            BSource::Packed(p) => p.rows(),
            BSource::Rows { b, .. } => b.rows,
        }
    }
    fn cols(&self) -> usize {
        match self {
            BSource::Packed(p) => p.cols(),
            BSource::Rows { b, .. } => b.cols,
        }
    }
    fn kb(&self) -> KBlocks {
        match self {
            BSource::Packed(p) => p.kb,
            BSource::Rows { kb, .. } => *kb,
        }
    }
    /// Panel `jp` of depth block `p`: its first value, the distance between its depth steps
    /// and its second half's offset (see the kernels' contract).
    #[inline(always)]
    fn panel(&self, p: usize, jp: usize) -> (*const T, usize, usize) {
        match self {
            BSource::Packed(pb) => {
                let (ldb, hoff) = pb.layout(pb.kb.block(p).1);
                (pb.panel(p, jp), ldb, hoff)
            }
            BSource::Rows { b, edge, kb } => {
                let (k0, kc) = kb.block(p);
                if (jp + 1) * T::PANEL_NR <= b.cols {
                    // SAFETY: row k0, column jp * NR lies inside B.
                    let ptr = unsafe {
                        b.ptr
                            .offset(k0 as isize * b.rs + (jp * T::PANEL_NR) as isize)
                    };
                    (ptr, b.rs as usize, T::PANEL_NR / 2)
                } else {
                    let edge = edge.as_ref().expect("a partial panel is packed");
                    let (ldb, hoff) = edge.layout(kc);
                    (edge.panel(p, 0), ldb, hoff)
                }
            }
        }
    }
    /// Whether B is read in place (not from packed panels).
    #[inline(always)]
    fn in_place(&self) -> bool {
        matches!(self, BSource::Rows { .. })
    }
    /// The distance between panels `jp` and `jp + 1` ... `jp + 3` when the four can go to the
    /// wide kernel together (each laid out as panel `jp`).
    #[inline(always)]
    fn wide_stride(&self, p: usize, jp: usize) -> Option<usize> {
        match self {
            BSource::Packed(_) => Some(self.kb().block(p).1 * T::PANEL_NR),
            BSource::Rows { b, .. } => ((jp + 4) * T::PANEL_NR <= b.cols).then_some(T::PANEL_NR),
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
            let one_piece_f64 = T::gemm_kernels(opts.kernel).tile_copy.is_some()
                && l2_holds_one_slab(tuning::l2_bytes());
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
                let rest = unsafe {
                    MatRef::from_raw(b.ptr.offset(full as isize), b.rows, b.cols - full, b.rs, 1)
                };
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
pub fn gemm_packed<T: GemmElement + KernelsFor<W>, W: PanelValue>(
    a: MatRef<'_, T>,
    b: &PackedB<W>,
    c: &mut [T],
    ldc: usize,
    opts: &Options<'_, T>,
) {
    run(a, &BSource::Packed(b), c, ldc, opts)
}

/// Bytes of one slab of B packed for a product with `Rhs::PackHere` (see `pack_by_slabs`):
/// half of a 2 MiB L2 cache.
pub const SLAB_BYTES: usize = 1 << 20;

/// Rows of A from which a plain float64 B is packed in one piece rather than in slabs, with a
/// family whose tile reads a panel in several passes (one that has a copying tile kernel:
/// AVX2). Every slab makes the loops read all of A again, from the L3 cache; in one piece the
/// row blocks pack A as they go and read B back from memory or the L3 cache. With the AVX2
/// kernels on the 2-core AMD EPYC (Zen 4), one piece against slabs, alternating call by call
/// in one process (medians of 9-11 paired ratios), float64, 768 to 2048 rows of 768 x 2304,
/// 768 x 3072 and 768 x 768: 1.06-1.18 on one thread, 1.04-1.20 on two; 3072 x 768 0.97-1.16;
/// 384 and 512 rows 1.01-1.06. float32 ranged 0.95-1.09 at 768 and 1024 rows, so it keeps the
/// slabs, and so does the AVX-512 family (one piece 0.92-1.07).
///
/// Only where the L2 cache holds no more than one slab (see `l2_holds_one_slab`): on the
/// 2-core Intel Xeon with a 2 MiB L2, slabs against one piece, alternating process by process
/// (three rounds, one thread, medians of five paired ratios against OpenBLAS's Haswell
/// kernels), ran 1.02-1.05 x at 768 x 768 x 2304, 1024 x 768 x 2304 and 1024 x 768 x 3072
/// float64 in every round, and 0.98-1.02 x at 1024 rows on two threads.
pub const ONE_PIECE_MIN_ROWS_F64: usize = 768;

/// Whether an L2 cache of `l2` bytes holds at most one slab of [`SLAB_BYTES`] beside what the
/// loops keep there (less than two slabs), or its size is unknown: then a plain float64 B of
/// [`ONE_PIECE_MIN_ROWS_F64`] rows or more is packed in one piece by a family whose tile reads
/// a panel in several passes.
fn l2_holds_one_slab(l2: Option<usize>) -> bool {
    l2.is_none_or(|bytes| bytes < 2 * tuning::slab_bytes())
}

/// How many slabs B is packed in for a `Rhs::PackHere` product of `m` rows against a (k x n)
/// B on `threads` threads (1: one piece). Slabs of at most [`SLAB_BYTES`], as few as can be,
/// their count a multiple of the thread count (each thread takes whole slabs), of equal widths
/// in whole panels, to within one panel ([`slab_columns`]: 14 slabs of a 144-panel B are 10 of
/// 10 panels and 4 of 11, where slabs of one rounded width were 13 of 11 and a last one of 1,
/// which left a thread idle for most of a slab); but never narrower than a column group of the
/// loops (A is read once per slab, as it is once per group in one piece). One piece for a row
/// block of at most one tile quantum (each slab would be used by one tile), for a B that fits
/// one slab, for float64 from [`ONE_PIECE_MIN_ROWS_F64`] rows when the family's tile reads a
/// panel in several passes and the L2 holds at most one slab (`one_piece_f64`), where the group
/// width leaves too few slabs to share out evenly, and where a slab is more than four times
/// [`SLAB_BYTES`] (a deep B: no cache holds such a slab, and each thread keeps its slab buffer
/// between products).
fn slab_count<T: Element>(
    m: usize,
    k: usize,
    n: usize,
    threads: usize,
    one_piece_f64: bool,
) -> usize {
    let bytes = PackedB::<T>::packed_len(k, n).saturating_mul(std::mem::size_of::<T>());
    let count = bytes.div_ceil(tuning::slab_bytes());
    let float64 = std::mem::size_of::<T>() == 8;
    if m <= loops::ROW_QUANTUM
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
        || (count % threads != 0 && count < 4 * threads)
        || slab_bytes > 4 * tuning::slab_bytes()
    {
        1
    } else {
        count
    }
}

/// Columns `j0..j1` of slab `s` of `count` over `n` columns: whole panels of `nr` columns
/// (the last slab ends at `n`), the panels shared out as evenly as they go.
fn slab_columns(s: usize, count: usize, n: usize, nr: usize) -> (usize, usize) {
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
///
/// Measured with the AVX2 path forced on the 2-core Sapphire Rapids Xeon against OpenBLAS's
/// Haswell kernels (medians of 7 samples alternating in one process), gptcore/numpy in one
/// piece -> in slabs, 128 / 256 / 1024 x 768 x 2304:
/// - one thread: float32 0.87 / 0.93 / 0.91 -> 0.97 / 0.93 / 0.96, float64 0.69 / 0.79 /
///   0.82 -> 0.95 / 0.98 / 0.86;
/// - two threads: float32 0.81 / 0.80 / 0.86 -> 0.90 / 0.88 / 0.87, float64 0.78 / 0.75 /
///   0.83 -> 0.87 / 0.88 / 0.82.
///
/// 256 x 3072 x 768 (A is read once per slab, and here it is four times B's slab): float32
/// 0.88 -> 0.90 on one thread (one piece on two: three group-wide slabs cannot be shared
/// evenly), float64 0.81 -> 0.84 on one thread and 0.88 -> 0.82 on two, within this machine's
/// noise of about 7 %.
fn pack_by_slabs<T: GemmElement>(
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
                        m,
                        w,
                        pb.kb,
                        loops::APanels {
                            packed: crate::threads::SendPtr(apack.as_ptr() as *mut T),
                            source: None,
                        },
                        &BSource::Packed(&pb),
                        cptr.get().add(j0),
                        ldc,
                        epilogue,
                    );
                }
                *buf = pb.into_data();
            });
        });
    });
}

/// Pack A with the family's tile height and run the loops.
fn run<T: GemmElement + KernelsFor<W>, W: PanelValue>(
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
                m,
                n,
                kb,
                apanels,
                b,
                c.as_mut_ptr(),
                ldc,
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
mod half_tests;
#[cfg(test)]
mod tests;
