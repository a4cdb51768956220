//! The contract between the loops and a family's micro-kernels: the kernels' signatures, the
//! panel layout they read, and the table of one family's kernels for one element type (see
//! the module documentation of [`crate::kernels`]).

/// `(rows, cols, kc, a_panel, b_panel, ldb, hoff, c, ldc, accumulate)`: see the module's
/// contract. `W` is what B holds: `T` itself, or 16-bit storage widened exactly to `T` on load
/// (the contract then holds for the widened values).
pub type TileFn<T, W = T> =
    unsafe fn(usize, usize, usize, *const T, *const W, usize, usize, *mut T, usize, bool);

/// The tile kernel's arguments, then `dst`: the tile kernel that also copies the B panel it
/// reads, all NR values of each of its `kc` steps, bit for bit into `dst` in row order (NR
/// values a step: `ldb = NR`, `hoff = h` for the tiles that read the copy).
pub type TileCopyFn<T, W = T> =
    unsafe fn(usize, usize, usize, *const T, *const W, usize, usize, *mut T, usize, bool, *mut W);

/// The tile kernel's arguments, then `(pf, lines)`: the tile kernel that also prefetches up to
/// `lines` cache lines from `pf` on into L2, spread over its depth steps (the packed B the
/// loops read next; the values are never read through `pf`).
pub type TilePrefetchFn<T, W = T> = unsafe fn(
    usize,
    usize,
    usize,
    *const T,
    *const W,
    usize,
    usize,
    *mut T,
    usize,
    bool,
    *const W,
    usize,
);

/// `(rows, cols_last, kc, a_panel, b_panel, ldb, hoff, b_stride, c, ldc, accumulate)`: up to
/// [`WIDE_ROWS`] rows against 4 consecutive B panels (`b_stride` apart, each addressed as in
/// the module's contract), the last with `cols_last` live columns.
pub type WideFn<T, W = T> =
    unsafe fn(usize, usize, usize, *const T, *const W, usize, usize, usize, *mut T, usize, bool);

/// Where value `j` (< NR) of a depth step lies, in values from the step's first, for a panel
/// whose second half is `hoff` values after its first (see the module's contract); `h` is
/// half the panel.
#[inline(always)]
pub const fn half_offset(j: usize, h: usize, hoff: usize) -> usize {
    if j < h {
        j
    } else {
        hoff + (j - h)
    }
}

/// Where value `j` (< NR) of a depth step that starts at `b` lies ([`half_offset`]).
#[inline(always)]
pub fn b_at<W>(b: *const W, hoff: usize, h: usize, j: usize) -> *const W {
    b.wrapping_add(half_offset(j, h, hoff))
}

/// `(rows, cols, k, a, lda, b, ldb, c, ldc)`: C (rows x cols) = A (rows x k, rows `lda` apart,
/// unit column stride) times B read in place (`k` rows `ldb` apart); up to [`STREAM_ROWS`]
/// rows.
pub type StreamFn<T, W = T> =
    unsafe fn(usize, usize, usize, *const T, usize, *const W, usize, *mut T, usize);

/// `(src, rs, kc, dst) -> steps`: packs depth steps `0 .. steps` (a prefix of `0 .. kc` the
/// family chooses) of `mr` full rows (`src + i * rs + k`) into `dst[k * mr + i]`; the caller
/// copies the remaining steps. A plain copy: values are moved bit for bit.
pub type PackPanelFn<T> = unsafe fn(*const T, isize, usize, *mut T) -> usize;

/// Rows up to which the wide kernel is used.
pub const WIDE_ROWS: usize = 3;

/// Rows up to which the stream kernel can be used.
pub const STREAM_ROWS: usize = 8;

/// One family's matrix-multiply kernels for one element type `T` (A and C) and what B holds
/// (`W`: `T`, or 16-bit storage of float32 values).
#[derive(Clone, Copy)]
pub struct GemmKernels<T, W = T> {
    /// Rows of a tile (divides 12).
    pub mr: usize,
    pub tile: TileFn<T, W>,
    /// The tile kernel copying the panel it reads ([`TileCopyFn`]), for a family whose tile
    /// reads a panel in several passes: for B read in place, a row block's first tile copies
    /// each panel and the other tiles read the copy. `None`: every tile reads B in place.
    pub tile_copy: Option<TileCopyFn<T, W>>,
    /// The tile kernel prefetching packed B ahead ([`TilePrefetchFn`]): against packed panels
    /// the row tiles of a column group and depth block each fetch a slice of the next one
    /// into L2, and a row block of at most 36 rows takes each panel in depth chunks, the row
    /// tiles of a chunk fetching the packed B two chunks on (see `gemm::loops`). `None`: the
    /// plain tile kernel, no such prefetch, whole depth blocks.
    pub tile_prefetch: Option<TilePrefetchFn<T, W>>,
    pub wide: Option<WideFn<T, W>>,
    pub stream: Option<StreamFn<T, W>>,
    pub pack_a_panel: Option<PackPanelFn<T>>,
    /// Whether the loops fetch the next row tile's A micro-panel into L2 while the current
    /// tile goes through the panels of its column group (a slice before each panel), for a
    /// family whose tile kernel leaves A to the hardware prefetcher (see `gemm::loops`).
    pub fetch_next_a: bool,
}
