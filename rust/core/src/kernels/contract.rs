//! The contract between the loops and a family's micro-kernels: one signature per kind of
//! kernel, each taking its arguments as a struct ([`TileArgs`] and [`TileAux`], [`WideArgs`],
//! [`StreamArgs`]), the table of one family's kernels for one element and storage type
//! ([`GemmKernels`]), and the one row dispatch every family's kernels use ([`by_rows!`]). See
//! the module documentation of [`crate::kernels`] for what the kernels compute.

pub use crate::formats::BPanel;

/// C as a kernel writes it: the first value of its block and the distance between rows.
#[derive(Clone, Copy, Debug)]
pub struct CTile<T> {
    pub ptr: *mut T,
    pub ldc: usize,
}

/// One call of a tile kernel: a `rows x cols` tile of C (`rows <= mr`, `cols <= NR`) over
/// `kc` depth steps.
#[derive(Clone, Copy, Debug)]
pub struct TileArgs<T, W> {
    pub rows: usize,
    pub cols: usize,
    pub kc: usize,
    /// The packed A micro-panel: `mr` values a depth step, of which the first `rows` are read.
    pub a: *const T,
    /// The B micro-panel: `kc` steps of NR values laid out as [`BPanel`] says.
    pub b: BPanel<W>,
    pub c: CTile<T>,
    /// Continue each element's chain from the value in C (a later depth block); else start
    /// it at zero.
    pub accumulate: bool,
}

/// A run of cache lines to fetch into L2: `lines` lines from `ptr` on (never read).
#[derive(Clone, Copy, Debug)]
pub struct PrefetchRun {
    pub ptr: *const u8,
    pub lines: usize,
}

/// What a tile kernel does beside its tile (BLIS's auxiliary information). The loops ask for
/// each only of a kernel whose table says it does it ([`GemmKernels::tile_copies`],
/// [`GemmKernels::tile_prefetches`]), and for at most one of them at a time.
#[derive(Clone, Copy, Debug)]
pub struct TileAux<W> {
    /// Copy the B panel read, all NR values of each of its `kc` steps, bit for bit into here
    /// in row order (NR values a step: `ldb = NR`, `hoff = NR / 2` for the tiles that read
    /// the copy). For B read in place by a tile that reads a panel in several passes.
    pub copy_to: Option<*mut W>,
    /// Fetch this run into L2, spread evenly over the depth steps, at most a line a step (the
    /// packed B the loops read next).
    pub prefetch: Option<PrefetchRun>,
}

impl<W> TileAux<W> {
    /// Nothing beside the tile.
    pub const NONE: TileAux<W> = TileAux {
        copy_to: None,
        prefetch: None,
    };
}

/// The tile kernel: `W` is what B holds, `T` itself or a storage format the kernel widens
/// exactly to `T` as it loads it (the contract then holds for the widened values).
pub type TileFn<T, W = T> = unsafe fn(&TileArgs<T, W>, &TileAux<W>);

/// One call of a wide kernel: up to [`WIDE_ROWS`] rows against `panels` (1 to
/// [`WIDE_PANELS`]) consecutive B panels (`bstride` units apart, each laid out as `b` says),
/// the last with `cols_last` live columns; C is `rows x ((panels - 1) NR + cols_last)`. Row
/// `i`'s value of A at depth step `k` is `a[k * a_step + i]`: a packed A panel (`a_step` =
/// MR), or, for a family whose wide kernel reads no other value of A
/// ([`GemmKernels::wide_compact_a`]), a compact copy (`a_step` = rows) or the one row itself
/// (`a_step` = 1).
#[derive(Clone, Copy, Debug)]
pub struct WideArgs<T, W> {
    pub rows: usize,
    pub panels: usize,
    pub cols_last: usize,
    pub kc: usize,
    pub a: *const T,
    pub a_step: usize,
    pub b: BPanel<W>,
    pub bstride: usize,
    pub c: CTile<T>,
    pub accumulate: bool,
}

impl<T, W> WideArgs<T, W> {
    /// The tile of the columns from panel `q` (panels of `nr` columns) to the last live one,
    /// with `b` the address of panel `q`'s B (the caller knows the unit of `bstride`): what a
    /// wide kernel built on a family's tile kernel hands to it for panel `q` on.
    ///
    /// # Safety
    /// `q < self.panels`, so that panel `q`'s C columns lie inside the call's C.
    #[inline(always)]
    pub unsafe fn tile_from(&self, q: usize, nr: usize, b: *const W) -> TileArgs<T, W> {
        TileArgs {
            rows: self.rows,
            cols: (self.panels - 1 - q) * nr + self.cols_last,
            kc: self.kc,
            a: self.a,
            b: BPanel { ptr: b, ..self.b },
            c: CTile {
                ptr: self.c.ptr.add(q * nr),
                ..self.c
            },
            accumulate: self.accumulate,
        }
    }
}

pub type WideFn<T, W = T> = unsafe fn(&WideArgs<T, W>);

/// One call of a stream kernel: C (`rows x cols`, `rows <= STREAM_ROWS`) = A (`rows x k`,
/// rows `lda` apart, unit column stride) times B read in place (`k` rows `ldb` apart).
#[derive(Clone, Copy, Debug)]
pub struct StreamArgs<T, W> {
    pub rows: usize,
    pub cols: usize,
    pub k: usize,
    pub a: *const T,
    pub lda: usize,
    pub b: *const W,
    pub ldb: usize,
    pub c: CTile<T>,
}

pub type StreamFn<T, W = T> = unsafe fn(&StreamArgs<T, W>);

/// `(src, rs, kc, dst) -> steps`: packs depth steps `0 .. steps` (a prefix of `0 .. kc` the
/// family chooses) of `mr` full rows (`src + i * rs + k`) into `dst[k * mr + i]`; the caller
/// copies the remaining steps. A plain copy: values are moved bit for bit.
pub type PackPanelFn<T> = unsafe fn(*const T, isize, usize, *mut T) -> usize;

/// `(src, rs, groups, kc, dst, ldd) -> steps`: moves depth steps `0 .. steps` (a prefix of
/// `0 .. kc` the family chooses) of rows `0 .. 4 * groups` (`src + i * rs + k`) to
/// `dst[k * ldd + i]`; the caller moves the remaining steps. A plain copy: values are moved
/// bit for bit.
pub type TransposeFn<T> = unsafe fn(*const T, isize, usize, usize, *mut T, usize) -> usize;

/// Rows up to which the wide kernel is used.
pub const WIDE_ROWS: usize = 3;

/// Panels at most one wide call takes.
pub const WIDE_PANELS: usize = 4;

/// Rows up to which the stream kernel can be used.
pub const STREAM_ROWS: usize = 8;

/// One family's matrix-multiply kernels for one element type `T` (A and C) and what B holds
/// (`W`: `T`, or a storage format below it).
#[derive(Clone, Copy)]
pub struct GemmKernels<T, W = T> {
    /// Rows of a tile (divides 12).
    pub mr: usize,
    pub tile: TileFn<T, W>,
    /// Whether the tile kernel copies the panel it reads when asked ([`TileAux::copy_to`]),
    /// for a family whose tile reads a panel in several passes: for B read in place, a row
    /// block's first tile copies each panel and the other tiles read the copy. Else every
    /// tile reads B in place.
    pub tile_copies: bool,
    /// Whether the tile kernel prefetches a run of packed B when asked
    /// ([`TileAux::prefetch`]): against packed panels the row tiles of a column group and
    /// depth block each fetch a slice of the next one into L2, and a row block of at most 36
    /// rows takes each panel in depth chunks, the row tiles of a chunk fetching the packed B
    /// two chunks on (see `gemm::loops`). Else whole depth blocks, no such prefetch.
    pub tile_prefetches: bool,
    pub wide: Option<WideFn<T, W>>,
    /// Whether the wide kernel reads only the `rows` values of A a depth step, one at a time:
    /// then the loops hand a product of at most [`WIDE_ROWS`] rows its A compact or in place
    /// (see [`WideArgs`]) instead of packing it in MR-row panels, whose padding the other
    /// threads would read from the packing thread's cache. Else `a_step` is always MR.
    pub wide_compact_a: bool,
    pub stream: Option<StreamFn<T, W>>,
    pub pack_a_panel: Option<PackPanelFn<T>>,
    /// Whether the loops fetch the next row tile's A micro-panel into L2 while the current
    /// tile goes through the panels of its column group (a slice before each panel), for a
    /// family whose tile kernel leaves A to the hardware prefetcher (see `gemm::loops`).
    pub fetch_next_a: bool,
}

/// `$body` with the constant `$R` bound to `$rows`, for each row count listed: the one row
/// dispatch of every family's kernels (a kernel monomorphised for its row count). Any other
/// count breaks the kernels' contract (the loops hand a kernel at most its tile's rows, and at
/// least one), so it stops the program rather than leave C unwritten.
macro_rules! by_rows {
    ($rows:expr, [$($r:literal),+ $(,)?], $R:ident => $body:expr) => {
        match $rows {
            $(
                $r => {
                    const $R: usize = $r;
                    $body
                }
            )+
            rows => unreachable!(
                "a kernel called for {} rows (it takes {})",
                rows,
                stringify!($($r),+)
            ),
        }
    };
}
pub(crate) use by_rows;

/// `$body` with the constant `$P` bound to `$panels`, a wide call's panel count (1 to 4).
/// (The x86-64 families' wide kernels use it.)
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_macros))]
macro_rules! by_panels {
    ($panels:expr, $P:ident => $body:expr) => {
        match $panels {
            4 => {
                const $P: usize = 4;
                $body
            }
            3 => {
                const $P: usize = 3;
                $body
            }
            2 => {
                const $P: usize = 2;
                $body
            }
            1 => {
                const $P: usize = 1;
                $body
            }
            panels => unreachable!(
                "a wide kernel called for {} panels (it takes 1 to 4)",
                panels
            ),
        }
    };
}
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_imports))]
pub(crate) use by_panels;

#[cfg(test)]
mod tests {
    /// The dispatch binds the row count as a constant, and an unlisted count stops.
    #[test]
    fn by_rows_binds_each_listed_count_and_stops_on_others() {
        fn rows_of<const R: usize>() -> usize {
            R
        }
        for r in 1..=3usize {
            assert_eq!(by_rows!(r, [1, 2, 3], R => rows_of::<R>() * 10), r * 10);
        }
        let stopped = std::panic::catch_unwind(|| by_rows!(4usize, [1, 2, 3], R => R));
        assert!(stopped.is_err());
    }
}
