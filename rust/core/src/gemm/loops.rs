//! The loop nest around the micro-kernels.
//!
//! ```text
//! LOOP 5  work items: (column chunk, row block) pairs, shared out to the threads
//! LOOP 4    column groups of NC panels inside the chunk (the group's C tile stays in L2)
//! LOOP 3      depth blocks of KC (A and B are packed block by block; a large A is packed here,
//!             a row block's panels of the depth block by the first item that reaches them)
//! LOOP 2        row tiles of MR inside the row block            (`macro_kernel`)
//! LOOP 1          panels of NR inside the group: the tile kernel (or the wide kernel, four
//!                 panels at once, for a row block of at most WIDE_ROWS rows)
//! ```
//!
//! Against packed panels, with a family that has a prefetching tile kernel, the row tiles of
//! one (group, depth block) fetch the packed B of the next one into L2 while they compute
//! (see [`Ahead`]).
//!
//! For B read in place, with a family that has a copying tile kernel, the first row tile of
//! LOOP 2 copies the panels it reads and the others read the copy (see `macro_kernel`). A row
//! block of at most 36 rows against packed panels, with a family's prefetching tile kernel,
//! swaps LOOPS 2 and 1 and cuts each panel into depth chunks, each fetched two chunks ahead
//! (see `few_rows_in_chunks`).
//!
//! Every item computes a disjoint block of C through all depth blocks in order, so each element's
//! chain is continued block after block by one thread (the exactness contract).
//!
//! Large products are held by the L2 cache that A, B (with the part fetched ahead) and C
//! share more than by any one stream: the block sizes keep a row block's A, a group's B and the
//! group's C tile there together.
//!
//! For a family whose tile kernel does not prefetch A itself (the AVX2 one, whose depth step
//! has no room for it), the loops fetch the next row tile's A micro-panel into L2 while the
//! current tile goes through the group's panels, an equal slice before each panel: with a deep
//! K a row block's packed A is larger than L2, and each tile's micro-panel would otherwise come
//! back from the L3 cache on demand, once per column group.
//!
//! The measurements behind these choices are in `benches/JOURNAL.md`.

use super::options::{Epilogue, Tile};
use super::pack::{pack_a_into, pack_a_panel, packs_on_every_thread, KBlocks, PackedB};
use super::source::BSource;
use super::tuning::{self, ROW_QUANTUM};
use super::view::MatRef;
use crate::formats::StorageFormat;
use crate::kernels::{
    BPanel, CTile, GemmKernels, PrefetchRun, TileArgs, TileAux, WideArgs, WIDE_PANELS, WIDE_ROWS,
};
use crate::threads;
use crate::Element;
use std::sync::atomic::{AtomicU8, Ordering};

/// Values of A from which the work items pack A as they go (a row block's panels of one depth
/// block right before their first use), when there are at least as many row blocks as threads:
/// the first column group then reads them from L2 instead of from the L3 cache or memory after
/// a pass over all of A.
pub const A_LAZY_MIN: usize = 1 << 18;

/// How the product is cut into work items.
struct Plan {
    /// Row blocks: block `ib` is rows `block_rows(ib)`.
    mblocks: usize,
    tiles: usize,
    /// Panels per column chunk, and the chunk count.
    per_chunk: usize,
    nchunks: usize,
    panels: usize,
    nthreads: usize,
    /// For few rows through the wide kernel: the panels in `shares` equal contiguous shares
    /// (one a thread), each cut into `pieces` chunks; see [`Plan::chunk`].
    shares: Option<(usize, usize)>,
}

impl Plan {
    fn new<W: StorageFormat>(m: usize, n: usize, kb: KBlocks, wide: bool) -> Plan {
        let nthreads = if !tuning::runs_on_every_thread(m, kb.k, n) {
            1
        } else {
            threads::available()
        };
        Plan::for_threads::<W>(m, n, kb, wide, nthreads)
    }

    fn for_threads<W: StorageFormat>(
        m: usize,
        n: usize,
        kb: KBlocks,
        wide: bool,
        nthreads: usize,
    ) -> Plan {
        let panels = n.div_ceil(W::PANEL_NR);
        // Row blocks of at most about MC rows, made of whole 12-row tiles shared out as evenly
        // as possible, so parallel work items are of equal size.
        let tiles = m.div_ceil(ROW_QUANTUM);
        let mblocks = m.div_ceil(tuning::mc()).min(tiles);
        // Enough column chunks that every thread has several items of equal size.
        let want_items = if nthreads == 1 { 1 } else { nthreads * 4 };
        let nchunks = want_items.div_ceil(mblocks).clamp(1, panels);
        let mut per_chunk = panels.div_ceil(nchunks);
        let panel_bytes = W::panel_units(kb.k) * std::mem::size_of::<W>();
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
        if wide && m <= WIDE_ROWS {
            // Few rows run the wide kernel, four panels at a time. Chunks of whole multiples of
            // four panels leave the threads unequal shares when the panels do not divide so
            // (a model width of 576 is 18 panels: chunks of 4, 4, 4, 4 and 2, three of them for
            // one thread); instead each thread's share is equal to a panel, cut into pieces of
            // multiples of four but the last (whose remainder is one wide call of 1-3 panels).
            let shares = nthreads.min(panels).max(1);
            let pieces = (panels / shares / 4).clamp(1, 4);
            return Plan {
                mblocks,
                tiles,
                per_chunk,
                nchunks: shares * pieces,
                panels,
                nthreads,
                shares: Some((shares, pieces)),
            };
        }
        Plan {
            mblocks,
            tiles,
            per_chunk,
            nchunks: panels.div_ceil(per_chunk),
            panels,
            nthreads,
            shares: None,
        }
    }

    /// Panels `(jp0, jp1)` of column chunk `jc`. With shares, the chunks go round by round,
    /// one piece of every share a round (consecutive items, taken by the threads in turn, are
    /// of about equal size), piece `r` of share `s` being chunk `r * shares + s`.
    fn chunk(&self, jc: usize) -> (usize, usize) {
        match self.shares {
            None => {
                let jp0 = jc * self.per_chunk;
                (jp0, (jp0 + self.per_chunk).min(self.panels))
            }
            Some((shares, pieces)) => {
                let (r, s) = (jc / shares, jc % shares);
                let (lo, hi) = (s * self.panels / shares, (s + 1) * self.panels / shares);
                let cut = |k: usize| {
                    if k == pieces {
                        hi
                    } else {
                        lo + k * (hi - lo) / pieces / 4 * 4
                    }
                };
                (cut(r), cut(r + 1))
            }
        }
    }

    /// Rows `(i0, i1)` of row block `ib`.
    fn block_rows(&self, ib: usize, m: usize) -> (usize, usize) {
        let (t, b) = (self.tiles, self.mblocks);
        (
            (ib * t / b) * ROW_QUANTUM,
            ((ib + 1) * t / b * ROW_QUANTUM).min(m),
        )
    }
}

/// `C = A B` (`m x n`) from A's panels (`kernels.mr` rows each) and `b` in depth blocks `kb`,
/// with `epilogue` on each tile once it is final.
///
/// # Safety
/// `c` holds `m` rows of `n` writable values, `c.ldc` apart, that nothing else reads or writes
/// during the call.
pub(super) unsafe fn run<T: Element, W: StorageFormat>(
    kernels: GemmKernels<T, W>,
    kb: KBlocks,
    a: APanels<'_, T>,
    b: &BSource<'_, W>,
    c: CTile<T>,
    (m, n): (usize, usize),
    epilogue: Option<Epilogue<'_, T>>,
) {
    let CTile { ptr: c, ldc } = c;
    let plan = Plan::new::<W>(m, n, kb, kernels.wide.is_some());
    // Few rows whose every panel goes to a wide kernel that reads only their values take A
    // compact (step k's rows at `k * m ..`), or one contiguous row in place: no MR-row panels,
    // whose padding every other thread would read from this one's cache (benches/JOURNAL.md).
    let compact = match a.source {
        Some(src) if kernels.wide_compact_a && m <= WIDE_ROWS && b.all_wide(n) => {
            if m == 1 && src.cs == 1 {
                Some(threads::SendPtr(src.ptr as *mut T))
            } else {
                for kk in 0..kb.k {
                    for i in 0..m {
                        // SAFETY: the buffer holds M rounded up to MR, times K values (>= m K).
                        *a.packed.get().add(kk * m + i) = src.at(i, kk);
                    }
                }
                Some(a.packed)
            }
        }
        _ => None,
    };
    // A still to be packed: by the work items as they go, a (row block, depth block) at a
    // time, for a large A with a row block for every thread (a flag for each: `NOT_PACKED`,
    // `PACKING`, `PACKED`), else all of it now.
    let mut lazy: Option<(MatRef<'_, T>, Vec<AtomicU8>)> = None;
    if let (Some(src), None) = (a.source, compact.as_ref()) {
        let k = kb.k;
        if m * k >= A_LAZY_MIN && plan.mblocks >= plan.nthreads {
            let flags = (0..plan.mblocks * kb.count).map(|_| AtomicU8::new(NOT_PACKED));
            lazy = Some((src, flags.collect()));
        } else {
            let parallel = packs_on_every_thread(m, k, n);
            pack_a_into(src, &kernels, kb, parallel, a.packed.get());
        }
    }
    let a = &a;
    let cptr = threads::SendPtr(c);
    let out = Out {
        ptr: cptr,
        ldc,
        n,
        epilogue,
    };
    // LOOP 5: work items, column chunk major (consecutive items, the threads' current ones,
    // share a chunk).
    let item = |idx: usize| {
        let (jc, ib) = (idx / plan.mblocks, idx % plan.mblocks);
        let (i0, i1) = plan.block_rows(ib, m);
        let (jp0, jp1) = plan.chunk(jc);
        // LOOP 4: column groups, each taken through every depth block before the next.
        let group = tuning::nc_panels();
        let mut g0 = jp0;
        while g0 < jp1 {
            let g1 = (g0 + group).min(jp1);
            // LOOP 3: depth blocks.
            for p in 0..kb.count {
                let (k0, kc) = kb.block(p);
                if let Some((src, flags)) = &lazy {
                    let flag = &flags[ib * kb.count + p];
                    // SAFETY: the buffer holds the packed A; the flag is this row block's and
                    // this depth block's alone.
                    unsafe { ensure_packed(*src, a.packed, &kernels, kb, flag, (i0, i1), p) };
                }
                let (ablock, a_step) = match &compact {
                    Some(base) => (base.get().wrapping_add(m * k0) as *const T, m),
                    None => (
                        a.packed
                            .get()
                            .wrapping_add(m.div_ceil(kernels.mr) * kernels.mr * k0)
                            as *const T,
                        kernels.mr,
                    ),
                };
                // The packed B this item reads next: the group's next depth block, else the
                // next group's first.
                let ahead = match (b, kernels.tile_prefetches) {
                    (BSource::Packed(pb), true) if p + 1 < kb.count => {
                        Some(Ahead::of(pb, kb, p + 1, (g0, g1)))
                    }
                    (BSource::Packed(pb), true) if g1 < jp1 => {
                        Some(Ahead::of(pb, kb, 0, (g1, (g1 + group).min(jp1))))
                    }
                    _ => None,
                };
                macro_kernel(&DepthBlock {
                    kernels: &kernels,
                    p,
                    kc,
                    last: p + 1 == kb.count,
                    ablock,
                    a_step,
                    b,
                    rows: (i0, i1),
                    panels: (g0, g1),
                    out: &out,
                    ahead,
                });
            }
            g0 = g1;
        }
    };
    let items = plan.mblocks * plan.nchunks;
    if plan.nthreads == 1 || items == 1 {
        (0..items).for_each(item);
    } else {
        threads::parallel_for(items, item);
    }
}

/// A's panels for [`run`]: in `packed` (M rounded up to MR, times K values, the layout of
/// `pack_a`), and, when `source` is given, still to be packed there from it.
pub(super) struct APanels<'a, T> {
    pub packed: threads::SendPtr<T>,
    pub source: Option<MatRef<'a, T>>,
}

/// The states of a lazily packed (row block, depth block) of A.
const NOT_PACKED: u8 = 0;
const PACKING: u8 = 1;
const PACKED: u8 = 2;

/// Packs the panels of rows `i0..i1` of depth block `p` of `src` into `packed`, unless another
/// work item has (then waits until they are there).
///
/// # Safety
/// `packed` holds M rounded up to MR, times K values; `flag` belongs to these rows and this
/// depth block alone.
unsafe fn ensure_packed<T: Element, W>(
    src: MatRef<'_, T>,
    packed: threads::SendPtr<T>,
    kernels: &GemmKernels<T, W>,
    kb: KBlocks,
    flag: &AtomicU8,
    (i0, i1): (usize, usize),
    p: usize,
) {
    if flag.load(Ordering::Acquire) == PACKED {
        return;
    }
    if flag
        .compare_exchange(NOT_PACKED, PACKING, Ordering::Acquire, Ordering::Acquire)
        .is_ok()
    {
        let mr = kernels.mr;
        for ip in i0 / mr..i1.div_ceil(mr) {
            pack_a_panel(src, kernels.pack_a_panel, mr, kb, p, ip, packed.get());
        }
        flag.store(PACKED, Ordering::Release);
    } else {
        // Another item is packing these panels (tens of microseconds of work).
        let mut spins = 0u32;
        while flag.load(Ordering::Acquire) != PACKED {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

/// Where the results go.
struct Out<'f, T> {
    ptr: threads::SendPtr<T>,
    ldc: usize,
    n: usize,
    epilogue: Option<Epilogue<'f, T>>,
}

impl<T> Out<'_, T> {
    /// C's element (i, j).
    #[inline(always)]
    fn at(&self, i: usize, j: usize) -> *mut T {
        // SAFETY (for callers): (i, j) lies inside C.
        unsafe { self.ptr.get().add(i * self.ldc + j) }
    }

    /// C's block from element (i, j), as a kernel writes it.
    #[inline(always)]
    fn tile(&self, i: usize, j: usize) -> CTile<T> {
        CTile {
            ptr: self.at(i, j),
            ldc: self.ldc,
        }
    }

    /// Hands rows `i0..i1`, columns `j0..j0+cols` of C (final now) to the epilogue.
    #[inline(always)]
    fn finish(&self, i0: usize, i1: usize, j0: usize, cols: usize) {
        if let Some(f) = self.epilogue {
            f(Tile::new(i0, j0, i1 - i0, cols, self.at(i0, j0), self.ldc));
        }
    }
}

/// Packed B to fetch into L2 ahead of its use: `lines` cache lines from `start` (the panels of
/// one column group in one depth block, which lie one after the other).
///
/// Each (group, depth block) of a work item is read from memory by its first row tile, and
/// from L2 by the others. Left to the first tile alone, that fetch asks for the whole group
/// (384 KiB of float32 panels) in the time of one tile, several times what one core draws from
/// memory, while memory idles during the other tiles; two threads doing so at once slow each
/// other. Instead every row tile of the current (group, depth block) prefetches an equal,
/// consecutive slice of the next one ([`Ahead::slice`]), spread over its depth steps by the
/// family's prefetching tile kernel, and the next first tile finds its panels in L2.
#[derive(Clone, Copy)]
struct Ahead<W> {
    start: *const W,
    lines: usize,
}

impl<W: StorageFormat> Ahead<W> {
    /// Panels `g0..g1` of depth block `p` of `pb`.
    fn of(pb: &PackedB<W>, kb: KBlocks, p: usize, (g0, g1): (usize, usize)) -> Self {
        let bytes = (g1 - g0) * W::panel_units(kb.block(p).1) * std::mem::size_of::<W>();
        Ahead {
            start: pb.panel(p, g0),
            lines: bytes.div_ceil(64),
        }
    }
}

impl<W> Ahead<W> {
    /// `values` values from `start` on (whole cache lines).
    fn run(start: *const W, values: usize) -> Self {
        Ahead {
            start,
            lines: (values * std::mem::size_of::<W>()).div_ceil(64),
        }
    }

    /// Fetches slice `s` of `count` into L2 at once.
    #[inline(always)]
    fn fetch_slice(self, s: usize, count: usize) {
        let run = self.slice(s, count);
        for l in 0..run.lines {
            crate::kernels::prefetch_l2(run.ptr.wrapping_add(l * 64));
        }
    }

    /// Slice `s` of `count` equal, consecutive slices: its start and cache lines.
    fn slice(self, s: usize, count: usize) -> PrefetchRun {
        let per = self.lines.div_ceil(count);
        let first = (s * per).min(self.lines);
        PrefetchRun {
            ptr: self.start.cast::<u8>().wrapping_add(first * 64),
            lines: per.min(self.lines - first),
        }
    }
}

/// LOOPS 2 and 1 for one depth block: the rows of a row block against the panels of a column
/// group ([`DepthBlock`]); few rows take up to four panels at a time through the wide kernel,
/// at most [`FEW_ROWS_CHUNKED`] rows against packed panels go in depth chunks with a prefetching
/// tile kernel ([`few_rows_in_chunks`]), and the rest go through [`row_tiles`].
///
/// Row tile outer and panels inner: a tile's A micro-panel is read again for each panel of the
/// group right after the read before (from L1 or L2), and the group's B panels of this depth
/// block (8 x kc x NR values) come from L2 for every tile after the first. With panels outer,
/// each panel would read the row block's whole A block (MC x kc) again.
#[inline(always)]
fn macro_kernel<T: Element, W: StorageFormat>(blk: &DepthBlock<'_, T, W>) {
    let DepthBlock {
        kernels, b, out, ..
    } = *blk;
    let (i0, i1) = blk.rows;
    let mut jp = blk.panels.0;
    if let (Some(wide), true) = (kernels.wide, i1 - i0 <= WIDE_ROWS) {
        // Few rows: up to WIDE_PANELS panels at a time through the wide kernel.
        let nr = W::PANEL_NR;
        while jp < blk.panels.1 {
            let panels = (blk.panels.1 - jp).min(WIDE_PANELS);
            let Some(bstride) = b.wide_stride(blk.p, jp, panels) else {
                break;
            };
            let j0 = jp * nr;
            let args = WideArgs {
                rows: i1 - i0,
                panels,
                cols_last: nr.min(out.n - (jp + panels - 1) * nr),
                kc: blk.kc,
                a: blk.a_tile(i0),
                a_step: blk.a_step,
                b: b.panel(blk.p, jp),
                bstride,
                c: out.tile(i0, j0),
                accumulate: blk.p > 0,
            };
            // SAFETY: the A panel holds kc * mr values, each of the four B panels kc steps of
            // NR readable values laid out as the panel says (bstride between panels); the C
            // block at (i0, j0) lies inside C and belongs to this item alone.
            unsafe { wide(&args) };
            if blk.last {
                out.finish(i0, i1, j0, (panels - 1) * nr + args.cols_last);
            }
            jp += panels;
        }
    }
    // The tile kernels read packed A (a compact A goes with panels the wide kernel takes all).
    debug_assert!(jp == blk.panels.1 || blk.a_step == kernels.mr);
    if let (true, BSource::Packed(pb)) = (kernels.tile_prefetches, b) {
        if i1 - i0 <= FEW_ROWS_CHUNKED {
            few_rows_in_chunks(blk, pb, jp);
            return;
        }
    }
    if kernels.tile_copies && i1 - i0 > kernels.mr && b.in_place() {
        // B read in place, by a family whose tile reads a panel in several passes: the first
        // row tile copies each panel as it reads it (from memory) into a packed buffer of this
        // thread, and the other row tiles read that copy, in whole cache lines one after the
        // other, instead of B's rows again (rows a multiple of 2 KiB apart fall in one or two
        // of the L1 cache's sets, so a tile of several passes finds none of a panel in L1
        // again).
        let len = (blk.panels.1 - jp) * blk.kc * W::PANEL_NR;
        with_group_buffer(len, |buf| row_tiles(blk, jp, Some(buf)))
    } else {
        row_tiles(blk, jp, None)
    }
}

/// One depth block `p` (`kc` steps, the last of K when `last`) of one work item: its rows, the
/// panels of its column group, the packed A of the depth block, and the packed B the row
/// tiles fetch ahead, if any ([`Ahead`]).
struct DepthBlock<'a, T, W> {
    kernels: &'a GemmKernels<T, W>,
    p: usize,
    kc: usize,
    last: bool,
    /// A of this depth block: packed (`mr` rows a panel, `kc` steps, `a_step` = mr), or for
    /// a row block that goes to the wide kernel alone, compact (`a_step` = its rows).
    ablock: *const T,
    a_step: usize,
    b: &'a BSource<'a, W>,
    rows: (usize, usize),
    panels: (usize, usize),
    out: &'a Out<'a, T>,
    ahead: Option<Ahead<W>>,
}

impl<T, W> DepthBlock<'_, T, W> {
    /// The A micro-panel of the row tile from row `i`.
    #[inline(always)]
    fn a_tile(&self, i: usize) -> *const T {
        let mr = self.kernels.mr;
        self.ablock.wrapping_add((i / mr) * self.a_step * self.kc)
    }
}

/// LOOP 2, row tiles of the row block, each through LOOP 1, the panels `jp..` of the group,
/// with the tile kernel. `copy`: the buffer the first row tile copies the panels it reads into
/// (NR values a step, a panel after the other), which the other row tiles then read. Else,
/// with a prefetching tile kernel, every tile fetches a slice of `blk.ahead`.
///
/// Row tile outer and panels inner: a tile's A micro-panel is read again for each panel right
/// after the read before, and the group's B panels come from L2 for every tile after the first.
#[inline(always)]
fn row_tiles<T: Element, W: StorageFormat>(
    blk: &DepthBlock<'_, T, W>,
    jp: usize,
    copy: Option<*mut W>,
) {
    let DepthBlock {
        kernels, b, out, ..
    } = *blk;
    let ((i0, i1), g1) = (blk.rows, blk.panels.1);
    let (mr, nr, kc) = (kernels.mr, W::PANEL_NR, blk.kc);
    // Tile calls of this (group, depth block), each of which prefetches a slice of `ahead`.
    let calls = (i1 - i0).div_ceil(mr) * (g1 - jp);
    let ahead = blk.ahead.filter(|_| kernels.tile_prefetches);
    let mut i = i0;
    while i < i1 {
        let rows = mr.min(i1 - i);
        let a = blk.a_tile(i);
        // The next row tile's A micro-panel, for a family that fetches it ahead.
        let next_a = (kernels.fetch_next_a && i + rows < i1)
            .then(|| Ahead::run(a.wrapping_add(mr * kc), mr * kc));
        for q in jp..g1 {
            if let Some(next_a) = next_a {
                next_a.fetch_slice(q - jp, g1 - jp);
            }
            let j0 = q * nr;
            let mut args = TileArgs {
                rows,
                cols: nr.min(out.n - j0),
                kc,
                a,
                b: b.panel(blk.p, q),
                c: out.tile(i, j0),
                accumulate: blk.p > 0,
            };
            let mut aux = TileAux::NONE;
            if let Some(buf) = copy {
                let dst = buf.wrapping_add((q - jp) * kc * nr);
                if i == i0 {
                    aux.copy_to = Some(dst);
                } else {
                    args.b = BPanel {
                        ptr: dst,
                        ldb: nr,
                        hoff: nr / 2,
                    };
                }
            } else if let Some(ahead) = ahead {
                let call = (i - i0) / mr * (g1 - jp) + (q - jp);
                aux.prefetch = Some(ahead.slice(call, calls));
            }
            // SAFETY: the A panel holds kc * mr values, the B panel kc steps of NR readable
            // values laid out as `args.b` says (the copy: in row order, NR apart; the buffer
            // holds kc steps of NR values for each panel of the group from jp); the C tile at
            // (i, j0) lies inside C and belongs to this item. Prefetched addresses are never
            // read.
            unsafe { (kernels.tile)(&args, &aux) };
            if blk.last {
                out.finish(i, i + rows, j0, args.cols);
            }
        }
        i += rows;
    }
}

/// Depth steps of one chunk in [`few_rows_in_chunks`]: 96 steps are 12 KiB of a packed panel
/// (NR = 32 float32 or 16 float64 values a step, half of them in each half of the panel).
pub const FEW_ROWS_CHUNK: usize = 96;

/// How far ahead of the chunk they compute the row tiles of [`few_rows_in_chunks`] fetch packed
/// B: this many chunks (24 KiB of float32 panels).
pub const FEW_ROWS_AHEAD: usize = 2;

/// Row blocks of at most this many rows (three row quanta) take packed panels in depth chunks,
/// with a family that has a prefetching tile kernel.
pub const FEW_ROWS_CHUNKED: usize = 3 * ROW_QUANTUM;

/// LOOPS 2 and 1 for a row block of at most [`FEW_ROWS_CHUNKED`] rows against the packed panels
/// `jp..` of the group, all with the family's prefetching tile kernel: panels outer,
/// each panel taken in depth chunks of [`FEW_ROWS_CHUNK`] steps, and every row tile through a
/// chunk before the next chunk (the tiles' C values stay in L1 in between, and each element's
/// chain goes on from them in the same order: the bits do not change).
///
/// Here every panel comes from memory once and is then read again from L1 by the other row
/// tiles, and by the AVX2 tile in two half-panel passes. So that memory keeps working while
/// the tiles compute, the tiles of each chunk fetch into L2 the packed B that lies
/// [`FEW_ROWS_AHEAD`] chunks further on, each tile an equal slice of a chunk's lines, spread
/// over its depth steps (a chunk fetched in one burst by one tile would leave memory idle during
/// the others, fetching and computing taking turns). The panels `jp..` of one depth block lie
/// one after the other, so that is where these tiles read next; past their end the fetch goes
/// on in `ahead` (the packed B this row block reads next, see [`Ahead`]). Beyond
/// [`FEW_ROWS_CHUNKED`] rows the chunks do not pay (`benches/JOURNAL.md`).
#[inline(always)]
fn few_rows_in_chunks<T: Element, W: StorageFormat>(
    blk: &DepthBlock<'_, T, W>,
    pb: &PackedB<W>,
    jp: usize,
) {
    let DepthBlock {
        kernels,
        p,
        kc,
        out,
        ..
    } = *blk;
    let ((i0, i1), g1) = (blk.rows, blk.panels.1);
    let (n, nr, mr) = (out.n, W::PANEL_NR, kernels.mr);
    let h = nr / 2;
    let tiles = (i1 - i0).div_ceil(mr);
    // The panels jp..g1 of this depth block: `region` units from `start`, then `ahead`.
    let start = pb.panel(p, jp);
    let panel_units = W::panel_units(kc);
    let region = (g1 - jp) * panel_units;
    // Chunks of `chunk_len` steps (the last one shorter). Halves: an even count of them per
    // panel, so that the runs below pair them within a panel.
    let halves = pb.halves();
    let nchunks = 2 * kc.div_ceil(2 * FEW_ROWS_CHUNK);
    let chunk_len = if halves {
        kc.div_ceil(nchunks).max(1)
    } else {
        FEW_ROWS_CHUNK
    };
    for q in jp..g1 {
        let j0 = q * nr;
        let cols = nr.min(n - j0);
        let b = pb.b_panel(p, q);
        let mut s = 0;
        let mut chunk = 0;
        while s < kc {
            let len = chunk_len.min(kc - s);
            // The run the tiles fetch, one chunk's worth of lines. Step by step: the lines
            // FEW_ROWS_AHEAD chunks on. Halves: in one half of a panel, an even chunk the
            // first half of the pair of chunks FEW_ROWS_AHEAD on from the pair it is in, an
            // odd one their second half (each half of a panel lies whole, and a pair of chunks
            // never spans two panels).
            let at = if halves {
                let half = chunk % 2;
                let target = chunk - half + FEW_ROWS_AHEAD;
                let (panel, first) = ((q - jp) + target / nchunks, target % nchunks);
                panel * panel_units + half * b.hoff + first * chunk_len * h
            } else {
                (q - jp) * panel_units + W::panel_units(s + FEW_ROWS_AHEAD * chunk_len)
            };
            let run = Ahead {
                start: match blk.ahead {
                    Some(next) if at >= region => next.start.wrapping_add(at - region),
                    _ => start.wrapping_add(at),
                },
                lines: (W::panel_units(len) * std::mem::size_of::<W>()).div_ceil(64),
            };
            let mut i = i0;
            while i < i1 {
                let args = TileArgs {
                    rows: mr.min(i1 - i),
                    cols,
                    kc: len,
                    // The A panel of the tile holds mr values a step; this chunk starts s
                    // steps in.
                    a: blk.a_tile(i).wrapping_add(s * mr),
                    b: b.from_step(s),
                    c: out.tile(i, j0),
                    accumulate: p > 0 || s > 0,
                };
                let aux = TileAux {
                    copy_to: None,
                    prefetch: Some(run.slice((i - i0) / mr, tiles)),
                };
                // SAFETY: the A panel holds kc * mr values and the chunk's len steps start s
                // steps in; the packed panel holds kc steps laid out as `b` says, and so does
                // its chunk from step s; the C tile at (i, j0) lies inside C and belongs to
                // this item. Prefetched addresses are never read.
                unsafe { (kernels.tile)(&args, &aux) };
                i += args.rows;
            }
            s += len;
            chunk += 1;
        }
        if blk.last {
            out.finish(i0, i1, j0, cols);
        }
    }
}

#[cfg(test)]
mod ahead_tests {
    use super::Ahead;

    /// The slices of a run of lines are consecutive, cover it exactly and differ in length by
    /// at most one slice's rounding, whatever the counts (more slices than lines too).
    #[test]
    fn slices_cover_the_run_once_in_order() {
        let run = [0f32; 16];
        let base = run.as_ptr();
        for lines in [0usize, 1, 7, 64, 768, 6145] {
            for count in [1usize, 2, 3, 11, 88, 1000] {
                let ahead = Ahead { start: base, lines };
                let mut next = 0;
                for s in 0..count {
                    let slice = ahead.slice(s, count);
                    let (start, len) = (slice.ptr, slice.lines);
                    let first = (start as usize - base as usize) / 64;
                    assert_eq!(
                        first.min(lines),
                        next.min(lines),
                        "lines={lines} count={count} s={s}"
                    );
                    assert!(len <= lines.div_ceil(count));
                    next = first + len;
                }
                assert_eq!(next, lines, "lines={lines} count={count}");
            }
        }
    }

    /// A run of values covers whole cache lines (a partial last line counted), and fetching
    /// its slices reads nothing: a run past the end of a buffer, or from null, is harmless.
    #[test]
    fn runs_of_values_span_whole_lines_and_fetching_never_reads() {
        let panel = [0f64; 6 * 256];
        assert_eq!(Ahead::run(panel.as_ptr(), 6 * 256).lines, 6 * 256 * 8 / 64);
        assert_eq!(Ahead::run(panel.as_ptr(), 1).lines, 1);
        assert_eq!(Ahead::run(panel.as_ptr(), 0).lines, 0);
        assert_eq!(Ahead::run([0f32; 17].as_ptr(), 17).lines, 2);
        let beyond = Ahead::run(panel.as_ptr().wrapping_add(6 * 256), 6 * 256);
        let null = Ahead::run(std::ptr::null::<f32>(), 1 << 20);
        for s in 0..8 {
            beyond.fetch_slice(s, 8);
            null.fetch_slice(s, 8);
        }
    }
}

#[cfg(test)]
mod plan_tests {
    use super::{KBlocks, Plan};
    use crate::formats::Bf16;

    /// Few rows: the chunks cover the panels once, each thread's share (one piece of it a
    /// round) is within a panel of the others', and every piece but a share's last holds whole
    /// groups of four panels.
    #[test]
    fn few_row_chunks_share_the_panels_equally() {
        for threads in 1..=4 {
            for panels in [
                1usize, 2, 3, 5, 7, 18, 28, 30, 36, 48, 72, 96, 152, 1536, 1571,
            ] {
                let n = panels * 32 - 5;
                let plan = Plan::for_threads::<Bf16>(1, n, KBlocks::new(576, 576), true, threads);
                let (shares, pieces) = plan.shares.expect("few rows take shares");
                assert_eq!(plan.nchunks, shares * pieces);
                let mut got = vec![0usize; panels];
                let mut share_len = vec![0usize; shares];
                for jc in 0..plan.nchunks {
                    let (jp0, jp1) = plan.chunk(jc);
                    assert!(jp0 <= jp1 && jp1 <= panels, "panels={panels} jc={jc}");
                    let last_piece = jc / shares + 1 == pieces;
                    assert!(
                        last_piece || (jp1 - jp0) % 4 == 0,
                        "panels={panels} jc={jc}"
                    );
                    got[jp0..jp1].iter_mut().for_each(|g| *g += 1);
                    share_len[jc % shares] += jp1 - jp0;
                }
                assert!(
                    got.iter().all(|&g| g == 1),
                    "panels={panels} threads={threads}"
                );
                let (lo, hi) = (share_len.iter().min(), share_len.iter().max());
                assert!(hi.unwrap() - lo.unwrap() <= 1, "{share_len:?}");
            }
        }
    }
}

thread_local! {
    /// The buffer of `with_group_buffer`, kept between products (at most a column group of
    /// one depth block: 384 KiB for float32, 256 KiB for float64).
    static GROUP_COPY: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `f` on room for `len` values of `W` in this thread's buffer for copied panels (a fresh one
/// when the thread's own is in use further up its stack).
fn with_group_buffer<W: Copy, R>(len: usize, f: impl FnOnce(*mut W) -> R) -> R {
    // Room to start the copy on a cache line, as packed panels do (see `PackedB`).
    const LINE: usize = super::pack::PACKED_ALIGN;
    let words = (len * std::mem::size_of::<W>()).div_ceil(8) + LINE / 8;
    let run = |v: &mut Vec<u64>| {
        if v.len() < words {
            v.resize(words, 0);
        }
        let skip = super::pack::line_start::<u64>(v.as_ptr() as usize);
        f(v[skip..].as_mut_ptr() as *mut W)
    };
    GROUP_COPY.with(|b| match b.try_borrow_mut() {
        Ok(mut v) => run(&mut v),
        Err(_) => run(&mut Vec::new()),
    })
}
