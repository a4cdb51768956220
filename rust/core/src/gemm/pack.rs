//! Packing: copying operands into the micro-panel layouts the kernels stream.
//!
//! The depth K is cut into blocks of at most `T::KC_MAX` (equal sizes, so K = 768 becomes two
//! blocks of 384 rather than 512 + 256). Inside block `p`, a packed operand is a sequence of
//! micro-panels: for A, panels of `mr` rows stored k-major (`mr` values per k); for B, panels
//! of `T::NR` columns stored k-major (`NR` values per k), or as two halves of `NR / 2` columns
//! stored k-major one after the other (see [`PackedB`]). B's last panel is padded with zero
//! columns, so the kernels never read outside the packed buffers; A's last panel has room for
//! `mr` rows, of which the kernels read only the live ones.

use super::tuning;
use super::view::MatRef;
use crate::formats::{BPanel, StorageFormat, ValueFormat, WidensTo};
use crate::kernels::{GemmKernels, Kernel};
use crate::memory::Units;
use crate::threads;
use crate::Element;

/// How K is cut into depth blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KBlocks {
    pub k: usize,
    pub kc: usize,
    pub count: usize,
}

impl KBlocks {
    pub fn new(k: usize, kc_max: usize) -> KBlocks {
        if k == 0 {
            return KBlocks { k, kc: 0, count: 0 };
        }
        let count = k.div_ceil(kc_max);
        let kc = k.div_ceil(count);
        KBlocks {
            k,
            kc,
            count: k.div_ceil(kc),
        }
    }
    /// Blocks of at most `kc_max` steps (rounded up to a multiple of `align`) whose lengths are
    /// multiples of `align`, the last one excepted: for a format whose blocks span `align`
    /// depth steps. `align == 1` is [`KBlocks::new`].
    pub fn aligned(k: usize, kc_max: usize, align: usize) -> KBlocks {
        if align <= 1 || k == 0 {
            return KBlocks::new(k, kc_max);
        }
        let kc_max = kc_max.div_ceil(align) * align;
        let count = k.div_ceil(kc_max);
        let kc = k.div_ceil(count).div_ceil(align) * align;
        KBlocks {
            k,
            kc,
            count: k.div_ceil(kc),
        }
    }

    /// The depth blocks of a B stored as `W` ([`KBlocks::aligned`] to its blocks).
    pub fn for_format<W: StorageFormat>(k: usize) -> KBlocks {
        KBlocks::aligned(k, tuning::kc_max::<W>(), W::BLOCK_K)
    }

    /// (start, length) of block p.
    #[inline(always)]
    pub fn block(&self, p: usize) -> (usize, usize) {
        let start = p * self.kc;
        (start, self.kc.min(self.k - start))
    }
}

/// Rows ahead of the row being packed that [`PackedB`]'s packing fetches into L1, for rows of at
/// most [`PREFETCH_ROW_MAX_BYTES`]: each short row (a slab of a B packed in the call) is a new
/// stream that the hardware prefetcher meets too late.
const ROWS_AHEAD: usize = 4;

/// Rows longer than this are left to the hardware prefetcher (a long row is one stream it
/// follows; fetching several ahead would not stay in L1).
const PREFETCH_ROW_MAX_BYTES: usize = 4096;

/// Packed panels start on a boundary of this many bytes (a cache line).
pub const PACKED_ALIGN: usize = 64;

/// Values of type `T` from the address `addr` (a multiple of `T`'s size, its alignment) to
/// the next cache-line boundary: where packed panels start in a buffer at `addr`.
pub(crate) fn line_start<T>(addr: usize) -> usize {
    (PACKED_ALIGN - addr % PACKED_ALIGN) % PACKED_ALIGN / std::mem::size_of::<T>()
}

/// A right-hand side packed once into NR-column panels, reusable for many products.
///
/// Panel `jp` of depth block `p` (`kc` steps) holds its values step by step (`NR` a step), or,
/// packed for a family that asks for it ([`Kernel::half_panels`]: AVX2) and float32 or float64
/// values, as two halves of `h = NR / 2` columns one after the other, each `kc` steps of `h`
/// values, so that a kernel strip of at most `h` columns reads its values in sequence (see the
/// kernels' contract in [`crate::kernels`]). Every kernel reads both layouts, with the same
/// bits. The AVX2 6 x 16 strips would read every other cache line of a panel stored step by
/// step; the AVX-512 tile reads a whole step at once, and keeps steps whole.
///
/// The panels start on a cache-line boundary inside their buffer (`start` units in), so no
/// vector load of a panel spans two lines (the allocator hands out large blocks 16 bytes past a
/// page boundary, where every other 32-byte load would span two lines).
///
/// The units' layout is the storage format's ([`StorageFormat`]): panel `jp` of depth block `p`
/// is [`StorageFormat::panel_units`]`(kc)` units, the panels of a depth block one after the
/// other, the depth blocks one after the other.
pub struct PackedB<T> {
    /// The buffer (its own, or a range of a region shared with the other matrices of a model:
    /// see [`crate::memory::gathered`]).
    data: Units<T>,
    /// Values of `data` before the first panel (fewer than a cache line's worth).
    start: usize,
    k: usize,
    n: usize,
    pub(crate) kb: KBlocks,
    /// Whether each panel is stored as two halves (else step by step).
    halves: bool,
}

impl<T: StorageFormat> PackedB<T> {
    /// Units a packed (K x N) matrix holds (its last panel padded to NR columns, its last
    /// block of a block format to whole blocks).
    pub fn packed_len(k: usize, n: usize) -> usize {
        n.div_ceil(T::PANEL_NR).saturating_mul(T::panel_units(k))
    }

    /// Units of a buffer that [`PackedB::pack_into`] can pack a (K x N) matrix into, wherever
    /// the buffer lies: [`PackedB::packed_len`] and room to start on a cache line.
    pub fn buffer_len(k: usize, n: usize) -> usize {
        Self::packed_len(k, n).saturating_add(PACKED_ALIGN / std::mem::size_of::<T>())
    }

    /// The packed units (panel after panel, block after block).
    pub fn values(&self) -> &[T] {
        &self.data[self.start..self.start + Self::packed_len(self.k, self.n)]
    }

    /// The storage back, for [`PackedB::pack_into`] to reuse (a copy of it for a matrix
    /// packed into a shared region).
    pub fn into_data(self) -> Vec<T> {
        self.data.into_vec()
    }

    /// The region the matrix lies in, when it was packed into a shared one.
    pub fn region(&self) -> Option<&crate::memory::Region> {
        self.data.region()
    }

    pub fn rows(&self) -> usize {
        self.k
    }
    pub fn cols(&self) -> usize {
        self.n
    }
    /// Bytes of the packed units.
    pub fn nbytes(&self) -> usize {
        Self::packed_len(self.k, self.n) * std::mem::size_of::<T>()
    }
    /// Whether the panels are stored as two halves (else step by step).
    pub fn halves(&self) -> bool {
        self.halves
    }

    /// The row stride and the second half's offset a kernel reads a panel of a `kc`-step
    /// depth block with (see [`BPanel`]): `NR / 2` and `kc NR / 2` for halves, `NR` and
    /// `NR / 2` step by step; a block format's blocks lie one after the other.
    #[inline(always)]
    fn layout_of(halves: bool, kc: usize) -> (usize, usize) {
        let h = T::PANEL_NR / 2;
        if T::BLOCK_K > 1 {
            (T::PANEL_BLOCK_UNITS, 0)
        } else if halves {
            (h, kc * h)
        } else {
            (T::PANEL_NR, h)
        }
    }

    /// [`PackedB::layout_of`] for this matrix's panels.
    #[inline(always)]
    pub(crate) fn layout(&self, kc: usize) -> (usize, usize) {
        Self::layout_of(self.halves, kc)
    }

    /// Pointer to panel `jp` of depth block `p`.
    #[inline(always)]
    pub(crate) fn panel(&self, p: usize, jp: usize) -> *const T {
        let (k0, kc) = self.kb.block(p);
        let panels = self.n.div_ceil(T::PANEL_NR);
        // SAFETY: the panel lies inside the packed units (k0 is a multiple of the format's
        // block depth: blocks before it are whole).
        unsafe {
            self.data
                .as_ptr()
                .add(self.start + panels * T::panel_units(k0) + jp * T::panel_units(kc))
        }
    }

    /// A matrix packed by its format's own packer (a block format's): `data[start..]` holds
    /// the [`PackedB::packed_len`] units of a (K x N) matrix, its depth blocks those of
    /// [`KBlocks::for_format`], every panel in the format's layout.
    pub fn from_packed_units(
        data: impl Into<Units<T>>,
        start: usize,
        k: usize,
        n: usize,
    ) -> PackedB<T> {
        let data = data.into();
        assert!(start * std::mem::size_of::<T>() < PACKED_ALIGN);
        assert!(
            data.len() >= start + Self::packed_len(k, n),
            "packed units too few"
        );
        PackedB {
            data,
            start,
            k,
            n,
            kb: KBlocks::for_format::<T>(k),
            halves: false,
        }
    }

    /// Panel `jp` of depth block `p` as the kernels read it.
    #[inline(always)]
    pub(crate) fn b_panel(&self, p: usize, jp: usize) -> BPanel<T> {
        let (ldb, hoff) = self.layout(self.kb.block(p).1);
        BPanel {
            ptr: self.panel(p, jp),
            ldb,
            hoff,
        }
    }

    /// The matrix back in row-major (K x N) order, every value widened to `C` (exactly:
    /// [`WidensTo`]).
    pub fn unpack_widened<C: Copy + Default>(&self) -> Vec<C>
    where
        T: WidensTo<C>,
    {
        let (k, n) = (self.k, self.n);
        let mut out = vec![C::default(); k * n];
        let mut step = vec![C::default(); T::PANEL_NR];
        for p in 0..self.kb.count {
            let (k0, kc) = self.kb.block(p);
            for jp in 0..n.div_ceil(T::PANEL_NR) {
                let b = self.b_panel(p, jp);
                let j0 = jp * T::PANEL_NR;
                let cols = T::PANEL_NR.min(n - j0);
                for kk in 0..kc {
                    // SAFETY: step kk of a panel of this matrix, laid out as `b` says.
                    unsafe { T::widen_step(&b, kk, &mut step[..cols]) };
                    out[(k0 + kk) * n + j0..][..cols].copy_from_slice(&step[..cols]);
                }
            }
        }
        out
    }
}

impl<T: ValueFormat> PackedB<T> {
    /// Pack a (K x N) matrix given with any strides (panics if memory runs out; see
    /// [`PackedB::try_pack`]).
    pub fn pack(b: MatRef<'_, T>) -> PackedB<T> {
        Self::try_pack(b).expect("out of memory packing a matrix")
    }

    /// Pack a (K x N) matrix given with any strides, or `Error::Memory` stating the bytes,
    /// laid out for the kernel in use ([`crate::kernels::current`]; any kernel
    /// reads it, with the same bits).
    pub fn try_pack(b: MatRef<'_, T>) -> crate::Result<PackedB<T>> {
        Self::try_pack_for(b, crate::kernels::current())
    }

    /// [`PackedB::try_pack`] laid out for `kernel` (see [`Kernel::half_panels`]).
    pub fn try_pack_for(b: MatRef<'_, T>, kernel: Kernel) -> crate::Result<PackedB<T>> {
        let len = Self::buffer_len(b.rows, b.cols);
        let data = crate::memory::try_zeroed_units::<T>(len, "packing a matrix")?;
        Ok(Self::pack_into_for(b, data, kernel))
    }

    /// Pack a (K x N) matrix into `data`, which must hold exactly [`PackedB::buffer_len`]
    /// values; its old values may be anything (every packed value is written, the padding
    /// columns with zeros).
    /// Laid out for the kernel in use, as [`PackedB::try_pack`].
    pub fn pack_into(b: MatRef<'_, T>, data: Vec<T>) -> PackedB<T> {
        Self::pack_into_for(b, data, crate::kernels::current())
    }

    /// [`PackedB::pack_into`] laid out for `kernel`, into a vector or a gathered buffer
    /// ([`Units`]).
    pub fn pack_into_for(
        b: MatRef<'_, T>,
        data: impl Into<Units<T>>,
        kernel: Kernel,
    ) -> PackedB<T> {
        let data = data.into();
        let start = line_start::<T>(data.as_ptr() as usize);
        Self::pack_at(b, data, start, kernel.half_panels())
    }

    /// [`PackedB::pack_into`] with the panels starting `start` values into `data` (fewer
    /// than a cache line's worth), wherever that falls, stored as halves when `halves` (and
    /// the value type allows them).
    pub(crate) fn pack_at(
        b: MatRef<'_, T>,
        data: impl Into<Units<T>>,
        start: usize,
        halves: bool,
    ) -> PackedB<T> {
        let mut data = data.into();
        let halves = halves && T::HALVES;
        let (k, n) = (b.rows, b.cols);
        assert_eq!(
            data.len(),
            Self::buffer_len(k, n),
            "packed buffer of the wrong length"
        );
        assert!(start * std::mem::size_of::<T>() < PACKED_ALIGN);
        let len = Self::packed_len(k, n);
        let vals = &mut data[start..start + len];
        let kb = KBlocks::for_format::<T>(k);
        let panels = n.div_ceil(T::PANEL_NR);
        let npad = panels * T::PANEL_NR;
        if k > 0 && n < npad {
            // The last panel's padding columns (the loops below write the live ones only).
            let j0 = npad - T::PANEL_NR;
            for p in 0..kb.count {
                let (k0, kc) = kb.block(p);
                let base = npad * k0 + (panels - 1) * T::PANEL_NR * kc;
                for kk in 0..kc {
                    for j in n - j0..T::PANEL_NR {
                        vals[base + Self::offset(halves, kc, kk, j)] = T::ZERO_UNIT;
                    }
                }
            }
        }
        if k > 0 && n > 0 {
            let work = k * n;
            let ptr = threads::SendPtr(vals.as_mut_ptr());
            if b.cs == 1 {
                // Rows of B (the common case): a few rows at a time, each row read from start
                // to end and cut into its panels' segments of NR values (a fixed-size copy).
                // Reading panel by panel instead strode down all K rows once per panel.
                const ROWS: usize = 16;
                // Short rows (a slab of a B packed in the call) are fetched ROWS_AHEAD rows
                // ahead: each is a new stream the hardware prefetcher meets too late.
                let row_bytes = n * std::mem::size_of::<T>();
                let fetch_ahead = row_bytes <= PREFETCH_ROW_MAX_BYTES;
                let pack_rows = move |it: usize| {
                    for kr in it * ROWS..(it * ROWS + ROWS).min(k) {
                        let p = kr / kb.kc;
                        let (k0, kc) = kb.block(p);
                        let src = b.row_ptr(kr);
                        if fetch_ahead && kr + ROWS_AHEAD < k {
                            let next = b.row_ptr(kr + ROWS_AHEAD) as *const u8;
                            for off in (0..row_bytes).step_by(64) {
                                crate::kernels::prefetch(next.wrapping_add(off));
                            }
                            crate::kernels::prefetch(next.wrapping_add(row_bytes - 1));
                        }
                        for jp in 0..panels {
                            let j0 = jp * T::PANEL_NR;
                            // SAFETY: step kr - k0 of panel (p, jp) is NR values of `data`
                            // that no other row writes; the pad columns stay zero.
                            unsafe {
                                let panel = ptr.get().add(npad * k0 + jp * T::PANEL_NR * kc);
                                let live = (n - j0).min(T::PANEL_NR);
                                let h = T::PANEL_NR / 2;
                                // Values `from .. from + len` of the segment to their place.
                                let put = |from: usize, len: usize| {
                                    std::ptr::copy_nonoverlapping(
                                        src.add(j0 + from),
                                        panel.add(Self::offset(halves, kc, kr - k0, from)),
                                        len,
                                    )
                                };
                                if live == T::PANEL_NR {
                                    // A whole panel's segment: two copies of a length known
                                    // when compiling (moves in registers, where a length known
                                    // only when running calls `memcpy` for each half).
                                    put(0, h);
                                    put(h, h);
                                } else {
                                    put(0, live.min(h));
                                    if live > h {
                                        put(h, live - h);
                                    }
                                }
                            }
                        }
                    }
                };
                let items = k.div_ceil(ROWS);
                if work >= 1 << 16 {
                    threads::parallel_for(items, pack_rows);
                } else {
                    (0..items).for_each(pack_rows);
                }
            } else {
                // Any other strides (a transposed view has unit row stride): panel by panel,
                // walking B along its smaller stride in the inner loop.
                let along_k = b.rs.unsigned_abs() < b.cs.unsigned_abs();
                let pack_panel = move |jp: usize| {
                    let j0 = jp * T::PANEL_NR;
                    let nc = T::PANEL_NR.min(n - j0);
                    for p in 0..kb.count {
                        let (k0, kc) = kb.block(p);
                        // SAFETY: panel (p, jp) occupies a disjoint range of `data`.
                        let dst = unsafe { ptr.get().add(npad * k0 + jp * T::PANEL_NR * kc) };
                        if along_k {
                            for j in 0..nc {
                                for kk in 0..kc {
                                    unsafe {
                                        *dst.add(Self::offset(halves, kc, kk, j)) =
                                            b.at(k0 + kk, j0 + j)
                                    };
                                }
                            }
                        } else {
                            for kk in 0..kc {
                                for j in 0..nc {
                                    unsafe {
                                        *dst.add(Self::offset(halves, kc, kk, j)) =
                                            b.at(k0 + kk, j0 + j)
                                    };
                                }
                            }
                        }
                    }
                };
                if work >= 1 << 16 {
                    threads::parallel_for(panels, pack_panel);
                } else {
                    (0..panels).for_each(pack_panel);
                }
            }
        }
        PackedB {
            data,
            start,
            k,
            n,
            kb,
            halves,
        }
    }

    /// The matrix back in row-major (K x N) order.
    pub fn unpack(&self) -> Vec<T> {
        let (k, n) = (self.k, self.n);
        let mut out = vec![T::ZERO_UNIT; k * n];
        for p in 0..self.kb.count {
            let (k0, kc) = self.kb.block(p);
            for jp in 0..n.div_ceil(T::PANEL_NR) {
                let src = self.panel(p, jp);
                let j0 = jp * T::PANEL_NR;
                for kk in 0..kc {
                    for j in 0..T::PANEL_NR.min(n - j0) {
                        out[(k0 + kk) * n + j0 + j] =
                            unsafe { *src.add(Self::offset(self.halves, kc, kk, j)) };
                    }
                }
            }
        }
        out
    }

    /// Where value `j` of step `kk` lies in a panel of a `kc`-step depth block.
    #[inline(always)]
    fn offset(halves: bool, kc: usize, kk: usize, j: usize) -> usize {
        let (ldb, hoff) = Self::layout_of(halves, kc);
        kk * ldb + crate::kernels::half_offset(j, T::PANEL_NR / 2, hoff)
    }
}

/// Values of A from which `pack_a` packs on every thread, for a product that runs on every
/// thread (below it, waking the other threads costs more than the packing they share).
pub const A_PARALLEL_MIN: usize = 1 << 14;

/// Pack all of A (M x K, any strides) into `mr`-row panels, block by block, with the
/// family's panel packer (`kernels.pack_a_panel`) for full panels of rows with unit column
/// stride, when it has one. `n`: the product's columns (a product too small to run on several
/// threads packs on the calling thread alone).
/// Layout: block p starts at `mpad * k0`; panel ip of block p at `ip * mr * kc` inside it.
///
/// `out` is grown when it is too short and otherwise reused as it is, without clearing it
/// first (a serial pass over megabytes before the parallel packing): every value of a live
/// row is written here. The rows padding the last panel (when `mr` does not divide M) keep
/// whatever the buffer held: every kernel takes the number of live rows and reads only
/// those, so they are never read. (Writing zeros there cost a one-row product eleven
/// zeros per depth step, a tenth of its time with B in the cache.)
pub(crate) fn pack_a<T: Element, W>(
    a: MatRef<'_, T>,
    kernels: &GemmKernels<T, W>,
    kb: KBlocks,
    n: usize,
    out: &mut Vec<T>,
) {
    let (m, k) = (a.rows, a.cols);
    reserve_a(m, k, kernels.mr, out);
    let parallel = packs_on_every_thread(m, k, n);
    // SAFETY: `out` holds M rounded up to MR, times K values.
    unsafe { pack_a_into(a, kernels, kb, parallel, out.as_mut_ptr()) };
}

/// Whether all of A is packed on every thread for an (m x k) by (k x n) product: from
/// [`A_PARALLEL_MIN`] values, for a product that runs on every thread.
pub(crate) fn packs_on_every_thread(m: usize, k: usize, n: usize) -> bool {
    m * k >= A_PARALLEL_MIN && tuning::runs_on_every_thread(m, k, n)
}

/// Grows `out` to the length of A packed by [`pack_a`] (M rounded up to `mr`, times K) when it
/// is shorter; what it holds is left as it is.
pub(crate) fn reserve_a<T: Element>(m: usize, k: usize, mr: usize, out: &mut Vec<T>) {
    let mpad = m.div_ceil(mr) * mr;
    if out.len() < mpad * k {
        *out = crate::memory::zeroed(mpad * k);
    }
}

/// [`pack_a`] into `out`, the panels shared out to the threads when `parallel`.
///
/// # Safety
/// `out` holds M rounded up to MR, times K writable values that nothing else uses meanwhile.
pub(crate) unsafe fn pack_a_into<T: Element, W>(
    a: MatRef<'_, T>,
    kernels: &GemmKernels<T, W>,
    kb: KBlocks,
    parallel: bool,
    out: *mut T,
) {
    let (m, k, mr) = (a.rows, a.cols, kernels.mr);
    if m == 0 || k == 0 {
        return;
    }
    let ptr = threads::SendPtr(out);
    let fast = kernels.pack_a_panel;
    let pack_panel = move |ip: usize| {
        for p in 0..kb.count {
            // SAFETY: `out` holds the packed A; panel (p, ip) is this call's alone.
            unsafe { pack_a_panel(a, fast, mr, kb, p, ip, ptr.get()) };
        }
    };
    if parallel {
        threads::parallel_for(m.div_ceil(mr), pack_panel);
    } else {
        (0..m.div_ceil(mr)).for_each(pack_panel);
    }
}

/// Panel `ip` (rows `ip * mr ..`, at most `mr`) of depth block `p` of A, in the layout of
/// [`pack_a`] inside `out` (`mpad * k` values, `mpad` = M rounded up to `mr`).
///
/// # Safety
/// `out` holds `mpad * k` writable values, and nothing else reads or writes panel (p, ip)
/// during the call.
pub(crate) unsafe fn pack_a_panel<T: Element>(
    a: MatRef<'_, T>,
    fast: Option<crate::kernels::PackPanelFn<T>>,
    mr: usize,
    kb: KBlocks,
    p: usize,
    ip: usize,
    out: *mut T,
) {
    let m = a.rows;
    let mpad = m.div_ceil(mr) * mr;
    let i0 = ip * mr;
    let rows = mr.min(m - i0);
    let (k0, kc) = kb.block(p);
    let dst = out.add(mpad * k0 + ip * mr * kc);
    if a.cs == 1 {
        // Rows i0 .. i0 + rows have kc readable values from column k0.
        let src = a.ptr.offset(i0 as isize * a.rs + k0 as isize);
        let done = match fast {
            // The family's packer reads mr full rows and writes mr * kc values.
            Some(f) if rows == mr => f(src, a.rs, kc, dst),
            _ => 0,
        };
        for i in 0..rows {
            for kk in done..kc {
                *dst.add(kk * mr + i) = *src.offset(i as isize * a.rs + kk as isize);
            }
        }
    } else {
        for kk in 0..kc {
            for i in 0..rows {
                *dst.add(kk * mr + i) = a.at(i0 + i, k0 + kk);
            }
        }
    }
}
