//! Packing: copying operands into the micro-panel layouts the kernels stream.
//!
//! The depth K is cut into blocks of at most `T::KC_MAX` (equal sizes, so K = 768 becomes two
//! blocks of 384 rather than 512 + 256). Inside block `p`, a packed operand is a sequence of
//! micro-panels: for A, panels of `mr` rows stored k-major (`mr` values per k); for B, panels
//! of `T::NR` columns stored k-major (`NR` values per k). B's last panel is padded with zero
//! columns, so the kernels never read outside the packed buffers; A's last panel has room for
//! `mr` rows, of which the kernels read only the live ones.

use super::MatRef;
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
    /// (start, length) of block p.
    #[inline(always)]
    pub fn block(&self, p: usize) -> (usize, usize) {
        let start = p * self.kc;
        (start, self.kc.min(self.k - start))
    }
}

/// A right-hand side packed once into NR-column panels, reusable for many products.
pub struct PackedB<T: Element> {
    pub(crate) data: Vec<T>,
    k: usize,
    n: usize,
    pub(crate) kb: KBlocks,
}

impl<T: Element> PackedB<T> {
    /// Pack a (K x N) matrix given with any strides (panics if memory runs out; see
    /// [`PackedB::try_pack`]).
    pub fn pack(b: MatRef<'_, T>) -> PackedB<T> {
        Self::try_pack(b).expect("out of memory packing a matrix")
    }

    /// Pack a (K x N) matrix given with any strides, or `Error::Memory` stating the bytes.
    pub fn try_pack(b: MatRef<'_, T>) -> crate::Result<PackedB<T>> {
        let len = Self::packed_len(b.rows, b.cols);
        let data = crate::memory::try_zeroed::<T>(len, "packing a matrix")?;
        Ok(Self::pack_into(b, data))
    }

    /// Values a packed (K x N) matrix holds (its last panel padded to NR columns).
    pub fn packed_len(k: usize, n: usize) -> usize {
        n.div_ceil(T::NR).saturating_mul(T::NR).saturating_mul(k)
    }

    /// The storage back, for [`PackedB::pack_into`] to reuse.
    pub fn into_data(self) -> Vec<T> {
        self.data
    }

    /// Pack a (K x N) matrix into `data`, which must hold exactly [`PackedB::packed_len`]
    /// values; its old values may be anything (every value is written, the padding columns
    /// with zeros).
    pub fn pack_into(b: MatRef<'_, T>, mut data: Vec<T>) -> PackedB<T> {
        let (k, n) = (b.rows, b.cols);
        assert_eq!(
            data.len(),
            Self::packed_len(k, n),
            "packed buffer of the wrong length"
        );
        let kb = KBlocks::new(k, super::tuning::kc_max::<T>());
        let panels = n.div_ceil(T::NR);
        let npad = panels * T::NR;
        if k > 0 && n < npad {
            // The last panel's padding columns (the loops below write the live ones only).
            let j0 = npad - T::NR;
            for p in 0..kb.count {
                let (k0, kc) = kb.block(p);
                let base = npad * k0 + (panels - 1) * T::NR * kc;
                for kk in 0..kc {
                    data[base + kk * T::NR + (n - j0)..base + (kk + 1) * T::NR].fill(T::ZERO);
                }
            }
        }
        if k > 0 && n > 0 {
            let work = k * n;
            let ptr = threads::SendPtr(data.as_mut_ptr());
            if b.cs == 1 {
                // Rows of B (the common case): a few rows at a time, each row read from start
                // to end and cut into its panels' segments of NR values (a fixed-size copy).
                // Reading panel by panel instead strode down all K rows once per panel.
                const ROWS: usize = 16;
                let pack_rows = move |it: usize| {
                    for kr in it * ROWS..(it * ROWS + ROWS).min(k) {
                        let p = kr / kb.kc;
                        let (k0, kc) = kb.block(p);
                        let src = b.row_ptr(kr);
                        for jp in 0..panels {
                            let j0 = jp * T::NR;
                            // SAFETY: step kr - k0 of panel (p, jp) is NR values of `data`
                            // that no other row writes; the pad columns stay zero.
                            unsafe {
                                let dst = ptr
                                    .get()
                                    .add(npad * k0 + jp * T::NR * kc + (kr - k0) * T::NR);
                                if j0 + T::NR <= n {
                                    std::ptr::copy_nonoverlapping(src.add(j0), dst, T::NR);
                                } else {
                                    std::ptr::copy_nonoverlapping(src.add(j0), dst, n - j0);
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
                    let j0 = jp * T::NR;
                    let nc = T::NR.min(n - j0);
                    for p in 0..kb.count {
                        let (k0, kc) = kb.block(p);
                        // SAFETY: panel (p, jp) occupies a disjoint range of `data`.
                        let dst = unsafe { ptr.get().add(npad * k0 + jp * T::NR * kc) };
                        if along_k {
                            for j in 0..nc {
                                for kk in 0..kc {
                                    unsafe { *dst.add(kk * T::NR + j) = b.at(k0 + kk, j0 + j) };
                                }
                            }
                        } else {
                            for kk in 0..kc {
                                for j in 0..nc {
                                    unsafe { *dst.add(kk * T::NR + j) = b.at(k0 + kk, j0 + j) };
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
        PackedB { data, k, n, kb }
    }

    /// The matrix back in row-major (K x N) order.
    pub fn unpack(&self) -> Vec<T> {
        let (k, n) = (self.k, self.n);
        let mut out = vec![T::ZERO; k * n];
        for p in 0..self.kb.count {
            let (k0, kc) = self.kb.block(p);
            for jp in 0..n.div_ceil(T::NR) {
                let src = self.panel(p, jp);
                let j0 = jp * T::NR;
                for kk in 0..kc {
                    for j in 0..T::NR.min(n - j0) {
                        out[(k0 + kk) * n + j0 + j] = unsafe { *src.add(kk * T::NR + j) };
                    }
                }
            }
        }
        out
    }

    pub fn rows(&self) -> usize {
        self.k
    }
    pub fn cols(&self) -> usize {
        self.n
    }
    /// Bytes held by the packed copy.
    pub fn nbytes(&self) -> usize {
        self.data.len() * std::mem::size_of::<T>()
    }
    /// Pointer to panel `jp` of depth block `p`.
    #[inline(always)]
    pub(crate) fn panel(&self, p: usize, jp: usize) -> *const T {
        let (k0, kc) = self.kb.block(p);
        let npad = self.n.div_ceil(T::NR) * T::NR;
        unsafe { self.data.as_ptr().add(npad * k0 + jp * T::NR * kc) }
    }
}

/// Pack all of A (M x K, any strides) into `mr`-row panels, block by block.
/// Layout: block p starts at `mpad * k0`; panel ip of block p at `ip * mr * kc` inside it.
///
/// `out` is grown when it is too short and otherwise reused as it is, without clearing it
/// first (a serial pass over megabytes before the parallel packing): every value of a live
/// row is written here. The rows padding the last panel (when `mr` does not divide M) keep
/// whatever the buffer held: every kernel takes the number of live rows and reads only
/// those, so they are never read. (Writing zeros there cost a one-row product eleven
/// zeros per depth step, a tenth of its time with B in the cache.)
pub(crate) fn pack_a<T: Element>(a: MatRef<'_, T>, mr: usize, kb: KBlocks, out: &mut Vec<T>) {
    let (m, k) = (a.rows, a.cols);
    let panels = m.div_ceil(mr);
    let mpad = panels * mr;
    if out.len() < mpad * k {
        *out = crate::memory::zeroed(mpad * k);
    }
    if m == 0 || k == 0 {
        return;
    }
    let ptr = threads::SendPtr(out.as_mut_ptr());
    #[cfg(target_arch = "x86_64")]
    let simd_pack = std::arch::is_x86_feature_detected!("avx");
    #[cfg(not(target_arch = "x86_64"))]
    let simd_pack = false;
    let pack_panel = move |ip: usize| {
        let i0 = ip * mr;
        let rows = mr.min(m - i0);
        for p in 0..kb.count {
            let (k0, kc) = kb.block(p);
            // SAFETY: panel (p, ip) occupies a disjoint range of `out`.
            let dst = unsafe { ptr.get().add(mpad * k0 + ip * mr * kc) };
            if a.cs == 1 && rows == mr && (mr == 12 || mr == 6) && simd_pack {
                // SAFETY: mr rows of kc readable values from (i0, k0); dst holds mr * kc.
                let src = unsafe { a.ptr.offset(i0 as isize * a.rs + k0 as isize) };
                unsafe {
                    if mr == 12 {
                        pack_rows::<T, 12>(src, a.rs, kc, dst);
                    } else {
                        pack_rows::<T, 6>(src, a.rs, kc, dst);
                    }
                }
            } else if a.cs == 1 {
                for i in 0..rows {
                    let src = unsafe { a.ptr.offset((i0 + i) as isize * a.rs + k0 as isize) };
                    for kk in 0..kc {
                        unsafe { *dst.add(kk * mr + i) = *src.add(kk) };
                    }
                }
            } else {
                for kk in 0..kc {
                    for i in 0..rows {
                        unsafe { *dst.add(kk * mr + i) = a.at(i0 + i, k0 + kk) };
                    }
                }
            }
        }
    };
    if m * k >= 1 << 17 {
        threads::parallel_for(panels, pack_panel);
    } else {
        (0..panels).for_each(pack_panel);
    }
}

/// `MR` (12 or 6) rows of `kc` values (row stride `rs`, consecutive columns) into the `MR`-row
/// panel layout `dst[kk * MR + i]`, eight (f32) or four (f64) depth steps at a time: each group
/// of four rows by in-register 4 x 4 transposes instead of one scalar load and store per value,
/// the rows after the last whole group (two when MR = 6) one value at a time. A plain copy:
/// the values are moved bit for bit. (For MR = 6, on 1024 x 3072 one thread: float64 packing
/// took 40 ms one value at a time against 20 ms for MR = 12 with the transposes, about 3 % of
/// the product; float32 21 against 17 ms.)
///
/// # Safety
/// The CPU supports AVX (checked by the caller when `pack_rows` is reachable, see `pack_a`);
/// `src + i * rs + kk` is readable for i < MR, kk < kc; `dst` holds MR * kc values.
#[inline(always)]
unsafe fn pack_rows<T: Element, const MR: usize>(src: *const T, rs: isize, kc: usize, dst: *mut T) {
    #[cfg(target_arch = "x86_64")]
    {
        // Element is implemented for f32 and f64 only: the size tells which.
        if std::mem::size_of::<T>() == 4 {
            return pack_rows_f32::<MR>(src as *const f32, rs, kc, dst as *mut f32);
        } else {
            return pack_rows_f64::<MR>(src as *const f64, rs, kc, dst as *mut f64);
        }
    }
    #[allow(unreachable_code)]
    copy_rows::<T, MR>(src, rs, 0, MR, 0, kc, dst)
}

/// Rows `r0 .. r1`, depth steps `from .. kc` of [`pack_rows`], one value at a time (what the
/// vector loops leave, and the whole copy where they do not exist).
///
/// # Safety
/// As for [`pack_rows`].
#[inline(always)]
unsafe fn copy_rows<T: Copy, const MR: usize>(
    src: *const T,
    rs: isize,
    r0: usize,
    r1: usize,
    from: usize,
    kc: usize,
    dst: *mut T,
) {
    for kk in from..kc {
        for i in r0..r1 {
            *dst.add(kk * MR + i) = *src.offset(i as isize * rs + kk as isize);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn pack_rows_f32<const MR: usize>(src: *const f32, rs: isize, kc: usize, dst: *mut f32) {
    use std::arch::x86_64::*;
    let mut kk = 0;
    while kk + 8 <= kc {
        for g in 0..MR / 4 {
            let row =
                |i: isize| _mm256_loadu_ps(src.offset((4 * g as isize + i) * rs + kk as isize));
            let (r0, r1, r2, r3) = (row(0), row(1), row(2), row(3));
            let t0 = _mm256_unpacklo_ps(r0, r1); // r0k0 r1k0 r0k1 r1k1 | k4 k5
            let t1 = _mm256_unpackhi_ps(r0, r1); // r0k2 r1k2 r0k3 r1k3 | k6 k7
            let t2 = _mm256_unpacklo_ps(r2, r3);
            let t3 = _mm256_unpackhi_ps(r2, r3);
            // Four rows of depth kk + j in the low half, of kk + 4 + j in the high half.
            let cols = [
                _mm256_shuffle_ps::<0x44>(t0, t2),
                _mm256_shuffle_ps::<0xEE>(t0, t2),
                _mm256_shuffle_ps::<0x44>(t1, t3),
                _mm256_shuffle_ps::<0xEE>(t1, t3),
            ];
            for (j, v) in cols.into_iter().enumerate() {
                let d = dst.add((kk + j) * MR + 4 * g);
                _mm_storeu_ps(d, _mm256_castps256_ps128(v));
                _mm_storeu_ps(d.add(4 * MR), _mm256_extractf128_ps::<1>(v));
            }
        }
        copy_rows::<f32, MR>(src, rs, MR / 4 * 4, MR, kk, kk + 8, dst);
        kk += 8;
    }
    copy_rows::<f32, MR>(src, rs, 0, MR, kk, kc, dst);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn pack_rows_f64<const MR: usize>(src: *const f64, rs: isize, kc: usize, dst: *mut f64) {
    use std::arch::x86_64::*;
    let mut kk = 0;
    while kk + 4 <= kc {
        for g in 0..MR / 4 {
            let row =
                |i: isize| _mm256_loadu_pd(src.offset((4 * g as isize + i) * rs + kk as isize));
            let (r0, r1, r2, r3) = (row(0), row(1), row(2), row(3));
            let t0 = _mm256_unpacklo_pd(r0, r1); // r0k0 r1k0 | r0k2 r1k2
            let t1 = _mm256_unpackhi_pd(r0, r1); // r0k1 r1k1 | r0k3 r1k3
            let t2 = _mm256_unpacklo_pd(r2, r3);
            let t3 = _mm256_unpackhi_pd(r2, r3);
            let cols = [
                _mm256_permute2f128_pd::<0x20>(t0, t2),
                _mm256_permute2f128_pd::<0x20>(t1, t3),
                _mm256_permute2f128_pd::<0x31>(t0, t2),
                _mm256_permute2f128_pd::<0x31>(t1, t3),
            ];
            for (j, v) in cols.into_iter().enumerate() {
                _mm256_storeu_pd(dst.add((kk + j) * MR + 4 * g), v);
            }
        }
        copy_rows::<f64, MR>(src, rs, MR / 4 * 4, MR, kk, kk + 4, dst);
        kk += 4;
    }
    copy_rows::<f64, MR>(src, rs, 0, MR, kk, kc, dst);
}
