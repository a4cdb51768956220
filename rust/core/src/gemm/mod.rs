//! The blocked matrix multiply `C = A B`.
//!
//! The loops around the micro-kernel follow the five-loop design: the depth K is cut into
//! blocks of at most `KC_MAX` (packed B and packed A are both laid out block by block), the
//! rows of A into blocks of `MC` rows, the columns of B into panels of `NR`; the micro-kernel
//! then computes an `MR x NR` tile. Parallel work items are (row block, column range) pairs:
//! disjoint tiles of C, each computed by one thread through all depth blocks in order.
//!
//! # Exactness contract
//! Every element `C[i,j]` is one accumulator that starts at 0 and receives
//! `fma(A[i,k], B[k,j], acc)` for k = 0, 1, ..., K-1 in ascending order. The first depth block
//! starts the accumulators at zero; each later block loads them back from C and continues
//! the same chain. The result is therefore bit-identical to [`gemm_reference`], whatever the
//! kernel, the block sizes or the number of threads, and rows never influence each other
//! (a one-row product gives the same bits as that row of a large product).

pub mod dispatch;
pub mod kernels;
pub mod pack;
pub mod tuning;

pub use dispatch::{available, current as current_kernel, detect, set_kernel, Kernel};
pub use pack::PackedB;

use crate::buffer_pool::BufferPool;
use crate::threads;
use crate::Element;
use kernels::{HasKernels, KernelSpec};
use pack::{pack_a, KBlocks};
use std::cell::RefCell;

/// Rows of A handled by one work item (a multiple of every kernel's MR: 12 and 3 and 4).
pub const MC: usize = 192;

/// Panels of B (of NR columns) in one column group: a group's C tile (MC x 8 NR) stays in L2
/// while it goes through every depth block (a multiple of 4 for the wide kernel).
pub const NC_PANELS: usize = 8;

/// Packed B spanned by one column chunk when several row blocks go through a B of more than
/// four times this (a B that does not stay in the L3 cache, such as the LM head's): the row
/// blocks of a chunk run one after the other (two threads side by side), so the chunk is read
/// from memory once and then from the L3 cache, instead of once per row block.
pub const B_CHUNK_BYTES: usize = 4 << 20;

/// A borrowed strided matrix view (strides in elements, may be negative or zero).
#[derive(Clone, Copy)]
pub struct MatRef<'a, T> {
    pub ptr: *const T,
    pub rows: usize,
    pub cols: usize,
    pub rs: isize,
    pub cs: isize,
    _life: std::marker::PhantomData<&'a T>,
}

unsafe impl<T: Sync> Send for MatRef<'_, T> {}
unsafe impl<T: Sync> Sync for MatRef<'_, T> {}

impl<'a, T: Copy> MatRef<'a, T> {
    /// A view of a row-major slice.
    pub fn from_slice(data: &'a [T], rows: usize, cols: usize) -> MatRef<'a, T> {
        assert!(
            data.len() >= rows * cols,
            "slice too short for {rows}x{cols}"
        );
        MatRef {
            ptr: data.as_ptr(),
            rows,
            cols,
            rs: cols as isize,
            cs: 1,
            _life: Default::default(),
        }
    }

    /// A view from a raw pointer and strides.
    ///
    /// # Safety
    /// Every element `ptr + i*rs + j*cs` for i < rows, j < cols must be readable for `'a`.
    pub unsafe fn from_raw(
        ptr: *const T,
        rows: usize,
        cols: usize,
        rs: isize,
        cs: isize,
    ) -> MatRef<'a, T> {
        MatRef {
            ptr,
            rows,
            cols,
            rs,
            cs,
            _life: Default::default(),
        }
    }

    /// Element (i, j).
    #[inline(always)]
    pub fn at(&self, i: usize, j: usize) -> T {
        debug_assert!(i < self.rows && j < self.cols);
        unsafe { *self.ptr.offset(i as isize * self.rs + j as isize * self.cs) }
    }

    /// The address of element (i, 0) (row `i` must lie inside the view).
    #[inline(always)]
    pub fn row_ptr(&self, i: usize) -> *const T {
        debug_assert!(i < self.rows);
        self.ptr.wrapping_offset(i as isize * self.rs)
    }

    /// The first `n` columns as a view.
    pub fn cols_range(&self, n: usize) -> MatRef<'a, T> {
        assert!(n <= self.cols);
        MatRef { cols: n, ..*self }
    }

    /// Rows `r0..r0+n` as a view.
    pub fn rows_range(&self, r0: usize, n: usize) -> MatRef<'a, T> {
        assert!(r0 + n <= self.rows);
        let ptr = if n == 0 {
            self.ptr
        } else {
            unsafe { self.ptr.offset(r0 as isize * self.rs) }
        };
        MatRef {
            ptr,
            rows: n,
            ..*self
        }
    }
}

/// The reference product: the naive triple loop with `mul_add`, in the contract's order.
/// `c` is row-major (M x N).
pub fn gemm_reference<T: Element>(a: MatRef<'_, T>, b: MatRef<'_, T>, c: &mut [T]) {
    assert_eq!(a.cols, b.rows);
    let (m, n, k) = (a.rows, b.cols, a.cols);
    assert!(c.len() >= m * n);
    for i in 0..m {
        for j in 0..n {
            let mut acc = T::ZERO;
            for kk in 0..k {
                acc = a.at(i, kk).mul_add(b.at(kk, j), acc);
            }
            c[i * n + j] = acc;
        }
    }
}

thread_local! {
    static A_BUF_F32: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static A_BUF_F64: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
}

static B_SCRATCH_F32: BufferPool<f32> = BufferPool::new();
static B_SCRATCH_F64: BufferPool<f64> = BufferPool::new();

/// Types the matmul runs on.
pub trait GemmElement: HasKernels {
    fn with_a_buffer<R>(f: impl FnOnce(&mut Vec<Self>) -> R) -> R;
    /// Memory that [`try_gemm_packing_b`] packs B into, kept between calls.
    fn b_scratch() -> &'static BufferPool<Self>;
}
impl GemmElement for f32 {
    fn with_a_buffer<R>(f: impl FnOnce(&mut Vec<f32>) -> R) -> R {
        A_BUF_F32.with(|b| match b.try_borrow_mut() {
            Ok(mut v) => f(&mut v),
            Err(_) => f(&mut Vec::new()),
        })
    }
    fn b_scratch() -> &'static BufferPool<f32> {
        &B_SCRATCH_F32
    }
}
impl GemmElement for f64 {
    fn with_a_buffer<R>(f: impl FnOnce(&mut Vec<f64>) -> R) -> R {
        A_BUF_F64.with(|b| match b.try_borrow_mut() {
            Ok(mut v) => f(&mut v),
            Err(_) => f(&mut Vec::new()),
        })
    }
    fn b_scratch() -> &'static BufferPool<f64> {
        &B_SCRATCH_F64
    }
}

/// Packed copies of B made for one product are kept for later products up to this size (at
/// most [`crate::buffer_pool::MAX_KEPT`] per type); larger ones are freed after the product.
pub const B_SCRATCH_MAX_BYTES: usize = 32 << 20;

/// `C = A B` for a B given as a plain matrix (any strides) that is packed for this product
/// only. The packed copy goes to memory kept from earlier calls when there is some of the right
/// size: fresh memory costs a page fault and a zeroing pass per page on first touch (on this
/// kind of virtual machine a host fault too), as much as packing itself. `Error::Memory` when
/// the copy cannot be allocated.
pub fn try_gemm_packing_b<T: GemmElement>(
    kernel: Kernel,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    c: &mut [T],
    ldc: usize,
) -> crate::Result<()> {
    let len = PackedB::<T>::packed_len(b.rows, b.cols);
    let buf = T::b_scratch().take(len, "packing b")?;
    let pb = PackedB::pack_into(b, buf);
    gemm_with(kernel, a, &pb, c, ldc);
    let data = pb.into_data();
    if data.capacity() * std::mem::size_of::<T>() <= B_SCRATCH_MAX_BYTES {
        T::b_scratch().give_back(data);
    }
    Ok(())
}

/// `C = A B` with the active kernel. `c` is row-major with row stride `ldc >= N`.
pub fn gemm<T: GemmElement>(a: MatRef<'_, T>, b: &PackedB<T>, c: &mut [T], ldc: usize) {
    gemm_with(dispatch::current(), a, b, c, ldc)
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

/// `C = A B`, then `epilogue` applied to every element of C (see [`Epilogue`]): the same
/// values as a separate pass over C afterwards, without reading C back from memory.
pub fn gemm_then<T: GemmElement>(
    a: MatRef<'_, T>,
    b: &PackedB<T>,
    c: &mut [T],
    ldc: usize,
    epilogue: Epilogue<'_, T>,
) {
    gemm_impl(
        dispatch::current(),
        a,
        &BSource::Packed(b),
        c,
        ldc,
        Some(epilogue),
    )
}

/// `C = A B` with a given kernel (it must be supported by the CPU).
pub fn gemm_with<T: GemmElement>(
    kernel: Kernel,
    a: MatRef<'_, T>,
    b: &PackedB<T>,
    c: &mut [T],
    ldc: usize,
) {
    gemm_impl(kernel, a, &BSource::Packed(b), c, ldc, None)
}

/// `C = A B` with B read in place from its own storage instead of a packed copy. B must have
/// unit column stride and a positive row stride. Up to `STREAM_ROWS` rows of A against a B
/// wide enough run the stream kernel (whole rows of B, C kept in memory), if the kernel has
/// one; otherwise every whole panel of `NR` columns comes straight from B's rows (only the
/// last, partial panel is copied). For few rows of A this beats packing B first (which reads
/// and writes all of B once more than the product does); the results are the same bits
/// either way.
pub fn gemm_unpacked<T: GemmElement>(a: MatRef<'_, T>, b: MatRef<'_, T>, c: &mut [T], ldc: usize) {
    gemm_unpacked_with(dispatch::current(), a, b, c, ldc)
}

/// [`gemm_unpacked`] with a given kernel (it must be supported by the CPU).
pub fn gemm_unpacked_with<T: GemmElement>(
    kernel: Kernel,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    c: &mut [T],
    ldc: usize,
) {
    assert!(
        b.cs == 1 && b.rs > 0,
        "B must have unit column stride and a positive row stride"
    );
    let spec = T::spec(kernel);
    if let (Some(stream), true) = (spec.stream, a.rows <= kernels::STREAM_ROWS) {
        if kernel.supported() && stream_rows(stream, a, b, c, ldc) {
            return;
        }
    }
    // The partial last panel (if any) is packed, zero-padded, the same way as a PackedB.
    let full = b.cols / T::NR * T::NR;
    let edge = (full < b.cols).then(|| {
        // SAFETY: columns full.. of B, a subset of B's elements.
        let rest = unsafe {
            MatRef::from_raw(b.ptr.offset(full as isize), b.rows, b.cols - full, b.rs, 1)
        };
        PackedB::pack(rest)
    });
    let kb = KBlocks::new(b.rows, tuning::kc_max::<T>());
    gemm_impl(kernel, a, &BSource::Rows { b, edge, kb }, c, ldc, None)
}

/// Columns each thread's part of a stream product must have at least, else the panel path
/// runs: with shorter pieces of B's rows the streams are short and the panel path's
/// four-panel kernel was faster (a first version on 3072 x 768, two threads of 384 columns:
/// 20 against 23 GB/s; on 768 x 2304, 1152 columns each: 25 against 19).
const STREAM_MIN_COLS: usize = 512;

/// Few rows of A against B read in place along whole rows ([`kernels::StreamFn`]); the
/// columns are cut into one contiguous range per thread. Returns false (and does nothing)
/// when the ranges would be too narrow for streaming to pay.
fn stream_rows<T: GemmElement>(
    stream: kernels::StreamFn<T>,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    c: &mut [T],
    ldc: usize,
) -> bool {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    if m == 0 || n == 0 {
        return true;
    }
    let flops = m as f64 * n as f64 * k as f64;
    let nthreads = if flops < 262_144.0 {
        1
    } else {
        threads::num_threads()
    };
    if n / nthreads < STREAM_MIN_COLS {
        return false;
    }
    assert!(c.len() >= (m - 1) * ldc + n, "output too short");
    if k == 0 {
        for i in 0..m {
            c[i * ldc..i * ldc + n].fill(T::ZERO);
        }
        return true;
    }
    // One part per thread, of whole 64-byte lines, as equal as that allows.
    let parts = nthreads;
    let line = (64 / std::mem::size_of::<T>()).max(1);
    // A with unit column stride and a non-negative row stride is read where it is; otherwise
    // copied (at most STREAM_ROWS rows).
    let copy: Vec<T>;
    let (ap, lda) = if a.cs == 1 && a.rs >= 0 {
        (a.ptr, a.rs as usize)
    } else {
        copy = (0..m * k).map(|x| a.at(x / k, x % k)).collect();
        (copy.as_ptr(), k)
    };
    let ap = threads::SendPtr(ap as *mut T);
    let cp = threads::SendPtr(c.as_mut_ptr());
    let bound = |t: usize| {
        if t == parts {
            n
        } else {
            (t * n / parts) / line * line
        }
    };
    let part = |t: usize| {
        let (j0, j1) = (bound(t), bound(t + 1));
        // SAFETY: A holds m rows of k values lda apart; B's columns j0..j1 of k rows lie inside
        // B; C's block (m x (j1 - j0)) at column j0 lies inside C and belongs to this part.
        unsafe {
            stream(
                m,
                j1 - j0,
                k,
                ap.get(),
                lda,
                b.row_ptr(0).add(j0),
                b.rs as usize,
                cp.get().add(j0),
                ldc,
            )
        }
    };
    if parts == 1 {
        part(0);
    } else {
        threads::parallel_for(parts, part);
    }
    true
}

/// The right-hand side as the kernels read it.
enum BSource<'a, T: Element> {
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

impl<T: Element> BSource<'_, T> {
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
    /// Panel `jp` of depth block `p`: its first value and the distance between its depth steps.
    #[inline(always)]
    fn panel(&self, p: usize, jp: usize) -> (*const T, usize) {
        match self {
            BSource::Packed(pb) => (pb.panel(p, jp), T::NR),
            BSource::Rows { b, edge, kb } => {
                let (k0, _) = kb.block(p);
                if (jp + 1) * T::NR <= b.cols {
                    // SAFETY: row k0, column jp * NR lies inside B.
                    let ptr = unsafe { b.ptr.offset(k0 as isize * b.rs + (jp * T::NR) as isize) };
                    (ptr, b.rs as usize)
                } else {
                    let edge = edge.as_ref().expect("a partial panel is packed");
                    (edge.panel(p, 0), T::NR)
                }
            }
        }
    }
    /// The distance between panels `jp` and `jp + 1` ... `jp + 3` when the four can go to the
    /// wide kernel together (each step of each panel `ldb` after the one before).
    #[inline(always)]
    fn wide_stride(&self, p: usize, jp: usize) -> Option<usize> {
        match self {
            BSource::Packed(_) => Some(self.kb().block(p).1 * T::NR),
            BSource::Rows { b, .. } => ((jp + 4) * T::NR <= b.cols).then_some(T::NR),
        }
    }
}

fn gemm_impl<T: GemmElement>(
    kernel: Kernel,
    a: MatRef<'_, T>,
    b: &BSource<'_, T>,
    c: &mut [T],
    ldc: usize,
    epilogue: Option<Epilogue<'_, T>>,
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
        if let Some(f) = epilogue {
            f(Tile {
                i0: 0,
                j0: 0,
                rows: m,
                cols: n,
                ptr: c.as_mut_ptr(),
                ld: ldc,
                _life: Default::default(),
            });
        }
        return;
    }
    assert!(kernel.supported(), "kernel not supported on this CPU");
    let spec = T::spec(kernel);
    let kb = b.kb();
    T::with_a_buffer(|apack| {
        pack_a(a, spec.mr, kb, apack);
        run_tiles(spec, m, n, kb, apack, b, c, ldc, epilogue);
    });
}

#[allow(clippy::too_many_arguments)]
fn run_tiles<T: GemmElement>(
    spec: KernelSpec<T>,
    m: usize,
    n: usize,
    kb: KBlocks,
    apack: &[T],
    b: &BSource<'_, T>,
    c: &mut [T],
    ldc: usize,
    epilogue: Option<Epilogue<'_, T>>,
) {
    let mr = spec.mr;
    let mpad = m.div_ceil(mr) * mr;
    let panels = n.div_ceil(T::NR);
    let flops = m as f64 * n as f64 * kb.k as f64;
    let nthreads = if flops < 262_144.0 {
        1
    } else {
        threads::num_threads()
    };
    // Row blocks of at most about MC rows, made of whole 12-row tiles (every kernel's MR
    // divides 12) shared out as evenly as possible, so parallel work items are of equal size.
    let tiles = m.div_ceil(12);
    let mblocks = m.div_ceil(tuning::mc()).min(tiles);
    let block_rows = |ib: usize| -> (usize, usize) {
        (
            (ib * tiles / mblocks) * 12,
            ((ib + 1) * tiles / mblocks * 12).min(m),
        )
    };
    // Enough column chunks that every thread has several items of equal size.
    let want_items = if nthreads == 1 { 1 } else { nthreads * 4 };
    let nchunks = want_items.div_ceil(mblocks).clamp(1, panels);
    let mut per_chunk = panels.div_ceil(nchunks);
    let panel_bytes = kb.k * T::NR * std::mem::size_of::<T>();
    if mblocks > 1 && panels * panel_bytes > tuning::b_chunk_bytes() * 4 {
        let cap = (tuning::b_chunk_bytes() / panel_bytes).max(1);
        if per_chunk > cap {
            // Whole column groups per chunk when a group fits, so groups stay full width.
            let group = tuning::nc_panels();
            per_chunk = if cap >= group {
                cap / group * group
            } else {
                cap
            };
        }
    }
    if spec.wide.is_some() && m <= kernels::WIDE_ROWS {
        // Few rows run the wide kernel, four panels at a time: keep chunks whole multiples.
        per_chunk = per_chunk.div_ceil(4) * 4;
    }
    let nchunks = panels.div_ceil(per_chunk);
    let cptr = threads::SendPtr(c.as_mut_ptr());
    // Hand the rows i0..i1, columns j0..j0+cols of C (final now) to the epilogue.
    let finish = |i0: usize, i1: usize, j0: usize, cols: usize| {
        if let Some(f) = epilogue {
            // The block lies inside C and belongs to the running item alone.
            f(Tile {
                i0,
                j0,
                rows: i1 - i0,
                cols,
                ptr: unsafe { cptr.get().add(i0 * ldc + j0) },
                ld: ldc,
                _life: Default::default(),
            });
        }
    };
    let item = |idx: usize| {
        // Column chunk major: consecutive items (the threads' current ones) share a chunk.
        let jc = idx / mblocks;
        let ib = idx % mblocks;
        let (i0, i1) = block_rows(ib);
        let jp0 = jc * per_chunk;
        let jp1 = (jp0 + per_chunk).min(panels);
        // Columns in groups of NC_PANELS panels, each group taken through every depth block
        // before the next: the group's C tile stays in L2 between depth blocks.
        let mut g0 = jp0;
        let group = tuning::nc_panels();
        while g0 < jp1 {
            let g1 = (g0 + group).min(jp1);
            for p in 0..kb.count {
                let (k0, kc) = kb.block(p);
                let ablock = &apack[mpad * k0..];
                let mut jp = g0;
                if let (Some(wide), true) = (spec.wide, i1 - i0 <= kernels::WIDE_ROWS) {
                    // Few rows: four panels at a time through the wide kernel.
                    while jp + 4 <= g1 {
                        let Some(bstride) = b.wide_stride(p, jp) else {
                            break;
                        };
                        let j0 = jp * T::NR;
                        let (bp, ldb) = b.panel(p, jp);
                        let cols_last = T::NR.min(n - (jp + 3) * T::NR);
                        // SAFETY: the A panel holds kc*mr values, each of the four B panels
                        // kc steps of NR readable values ldb apart (bstride between panels);
                        // the C block at (i0, j0) lies inside C and belongs to this item alone.
                        unsafe {
                            wide(
                                i1 - i0,
                                cols_last,
                                kc,
                                ablock.as_ptr().add((i0 / mr) * mr * kc),
                                bp,
                                ldb,
                                bstride,
                                cptr.get().add(i0 * ldc + j0),
                                ldc,
                                p > 0,
                            );
                        }
                        if p + 1 == kb.count {
                            finish(i0, i1, j0, 3 * T::NR + cols_last);
                        }
                        jp += 4;
                    }
                }
                // The rest tile by tile, row tile outer and panels inner: a tile's A
                // micro-panel is read again for each panel of the group right after the read
                // before (from L1 or L2), and the group's B panels of this depth block (8 x kc x
                // NR values) come from L2 for every tile after the first. With panels outer
                // instead, each panel re-read the row block's whole A block (MC x kc): 0-12 %
                // slower on large products, float64 the most (alternating builds in one process).
                let mut i = i0;
                while i < i1 {
                    let rows = mr.min(i1 - i);
                    let ap = ablock[(i / mr) * mr * kc..].as_ptr();
                    for q in jp..g1 {
                        let j0 = q * T::NR;
                        let (bp, ldb) = b.panel(p, q);
                        let cols = T::NR.min(n - j0);
                        // SAFETY: the A panel holds kc*mr values, the B panel kc steps of NR
                        // readable values ldb apart; the C tile at (i, j0) lies inside C and
                        // belongs to this item alone.
                        unsafe {
                            (spec.run)(
                                rows,
                                cols,
                                kc,
                                ap,
                                bp,
                                ldb,
                                cptr.get().add(i * ldc + j0),
                                ldc,
                                p > 0,
                            );
                        }
                        if p + 1 == kb.count {
                            finish(i, i + rows, j0, cols);
                        }
                    }
                    i += rows;
                }
            }
            g0 = g1;
        }
    };
    let items = mblocks * nchunks;
    if nthreads == 1 || items == 1 {
        (0..items).for_each(item);
    } else {
        threads::parallel_for(items, item);
    }
}

/// Convenience: `A (m x k) @ B (k x n)` for row-major slices, packing B on the fly.
pub fn matmul<T: GemmElement>(a: &[T], b: &[T], m: usize, k: usize, n: usize) -> Vec<T> {
    let pb = PackedB::pack(MatRef::from_slice(b, k, n));
    let mut c = crate::memory::zeroed::<T>(m * n);
    gemm(MatRef::from_slice(a, m, k), &pb, &mut c, n);
    c
}

#[cfg(test)]
mod tests;
