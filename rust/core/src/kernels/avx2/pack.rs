//! Packing A panels of 12 or 6 rows (the tile heights of the x86 families; AVX suffices, so
//! the AVX-512 family uses these too) with in-register 4 x 4 transposes: eight (f32) or four
//! (f64) depth steps at a time, each group of four rows transposed, and for MR = 6 the last two
//! rows interleaved into pairs (one 64-bit or 128-bit store a depth step). The loops around
//! pack the remaining depth steps. A plain copy: values are moved bit for bit. (One value at a
//! time, packing took twice as long, a few per cent of a large product.) The same four-row
//! transposes move any number of four-row groups into columns with any distance between steps
//! (`transpose_f32`, `transpose_f64`): attention's keys of a partly filled K^T panel.

use crate::kernels::transpose::four_row_groups;
use std::arch::x86_64::*;

/// Rows `r0 .. r1`, depth steps `from .. kc`, one value at a time (the rows after the last
/// whole group of four).
///
/// # Safety
/// As for [`pack_rows_f32`].
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

/// Depth steps `kk .. kk + 8` of four rows (`src + i * rs + k`) to `dst[k * ldd + i]`: each
/// row's eight values in one load, transposed in registers, four values a store.
///
/// # Safety
/// The rows hold those steps, `dst` the places; the CPU supports AVX.
#[inline(always)]
unsafe fn four_rows_f32(src: *const f32, rs: isize, kk: usize, dst: *mut f32, ldd: usize) {
    let row = |i: isize| _mm256_loadu_ps(src.offset(i * rs + kk as isize));
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
        let d = dst.add((kk + j) * ldd);
        _mm_storeu_ps(d, _mm256_castps256_ps128(v));
        _mm_storeu_ps(d.add(4 * ldd), _mm256_extractf128_ps::<1>(v));
    }
}

/// Depth steps `kk .. kk + 4` of four rows to `dst[k * ldd + i]`, as [`four_rows_f32`] does.
///
/// # Safety
/// As for [`four_rows_f32`].
#[inline(always)]
unsafe fn four_rows_f64(src: *const f64, rs: isize, kk: usize, dst: *mut f64, ldd: usize) {
    let row = |i: isize| _mm256_loadu_pd(src.offset(i * rs + kk as isize));
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
        _mm256_storeu_pd(dst.add((kk + j) * ldd), v);
    }
}

/// # Safety
/// See [`crate::kernels::TransposeFn`]; the CPU supports AVX.
#[target_feature(enable = "avx")]
pub(crate) unsafe fn transpose_f32(
    src: *const f32,
    rs: isize,
    groups: usize,
    kc: usize,
    dst: *mut f32,
    ldd: usize,
) -> usize {
    four_row_groups((src, rs), groups, kc, dst, 8, |s, kk, d| {
        four_rows_f32(s, rs, kk, d, ldd)
    })
}

/// # Safety
/// See [`crate::kernels::TransposeFn`]; the CPU supports AVX.
#[target_feature(enable = "avx")]
pub(crate) unsafe fn transpose_f64(
    src: *const f64,
    rs: isize,
    groups: usize,
    kc: usize,
    dst: *mut f64,
    ldd: usize,
) -> usize {
    four_row_groups((src, rs), groups, kc, dst, 4, |s, kk, d| {
        four_rows_f64(s, rs, kk, d, ldd)
    })
}

/// # Safety
/// See [`crate::kernels::PackPanelFn`]; the CPU supports AVX.
#[target_feature(enable = "avx")]
pub(crate) unsafe fn pack_rows_f32<const MR: usize>(
    src: *const f32,
    rs: isize,
    kc: usize,
    dst: *mut f32,
) -> usize {
    let mut kk = 0;
    while kk + 8 <= kc {
        for g in 0..MR / 4 {
            four_rows_f32(src.offset(4 * g as isize * rs), rs, kk, dst.add(4 * g), MR);
        }
        if MR % 4 == 2 {
            // The last two rows as pairs: eight depth steps, one 64-bit store each.
            let row =
                |i: usize| _mm256_loadu_ps(src.offset((MR - 2 + i) as isize * rs + kk as isize));
            let (r0, r1) = (row(0), row(1));
            let lo = _mm256_castps_pd(_mm256_unpacklo_ps(r0, r1)); // k0 k1 | k4 k5 (pairs)
            let hi = _mm256_castps_pd(_mm256_unpackhi_ps(r0, r1)); // k2 k3 | k6 k7
            let halves = [
                (0, _mm256_castpd256_pd128(lo)),
                (2, _mm256_castpd256_pd128(hi)),
                (4, _mm256_extractf128_pd::<1>(lo)),
                (6, _mm256_extractf128_pd::<1>(hi)),
            ];
            for (j, v) in halves {
                // Each pair of values as one 64-bit integer (bits moved as they are; a store
                // that needs no alignment).
                let v = _mm_castpd_si128(v);
                let d = dst.add((kk + j) * MR + MR - 2);
                _mm_storel_epi64(d.cast(), v);
                _mm_storel_epi64(d.add(MR).cast(), _mm_unpackhi_epi64(v, v));
            }
        } else {
            copy_rows::<f32, MR>(src, rs, MR / 4 * 4, MR, kk, kk + 8, dst);
        }
        kk += 8;
    }
    kk
}

/// # Safety
/// See [`crate::kernels::PackPanelFn`]; the CPU supports AVX.
#[target_feature(enable = "avx")]
pub(crate) unsafe fn pack_rows_f64<const MR: usize>(
    src: *const f64,
    rs: isize,
    kc: usize,
    dst: *mut f64,
) -> usize {
    let mut kk = 0;
    while kk + 4 <= kc {
        for g in 0..MR / 4 {
            four_rows_f64(src.offset(4 * g as isize * rs), rs, kk, dst.add(4 * g), MR);
        }
        if MR % 4 == 2 {
            // The last two rows as pairs: four depth steps, one 128-bit store each.
            let row =
                |i: usize| _mm256_loadu_pd(src.offset((MR - 2 + i) as isize * rs + kk as isize));
            let (r0, r1) = (row(0), row(1));
            let lo = _mm256_unpacklo_pd(r0, r1); // k0 | k2 (pairs)
            let hi = _mm256_unpackhi_pd(r0, r1); // k1 | k3
            let halves = [
                (0, _mm256_castpd256_pd128(lo)),
                (1, _mm256_castpd256_pd128(hi)),
                (2, _mm256_extractf128_pd::<1>(lo)),
                (3, _mm256_extractf128_pd::<1>(hi)),
            ];
            for (j, v) in halves {
                _mm_storeu_pd(dst.add((kk + j) * MR + MR - 2), v);
            }
        } else {
            copy_rows::<f64, MR>(src, rs, MR / 4 * 4, MR, kk, kk + 4, dst);
        }
        kk += 4;
    }
    kk
}
