//! AVX2+FMA micro-kernels: 3 rows x 4 ymm vectors (f32: 3 x 32, f64: 3 x 16), 12
//! accumulators (16 ymm registers in all), using the same packed B panels as the AVX-512 kernels.
//! Column edges use `vmaskmov` loads and stores.

use std::arch::x86_64::*;

pub const MR_F32: usize = 3;
pub const MR_F64: usize = 3;

macro_rules! avx2_kernel {
    ($entry:ident, $tile:ident, $T:ty, $MR:expr, $LANES:expr, $V:ty, $maskint:ty,
     $zero:ident, $loadu:ident, $maskload:ident, $maskstore:ident, $set1:ident, $fmadd:ident) => {
        #[target_feature(enable = "avx2,fma")]
        unsafe fn $tile<const M: usize>(
            cols: usize,
            kc: usize,
            a: *const $T,
            b: *const $T,
            ldb: usize,
            c: *mut $T,
            ldc: usize,
            accumulate: bool,
        ) {
            // Lane masks: lane l of vector v is live when 4*... v*LANES + l < cols.
            let mut masks = [_mm256_setzero_si256(); 4];
            for v in 0..4 {
                let mut lanes = [0 as $maskint; $LANES];
                for l in 0..$LANES {
                    if v * $LANES + l < cols {
                        lanes[l] = -1;
                    }
                }
                masks[v] = _mm256_loadu_si256(lanes.as_ptr() as *const __m256i);
            }
            let mut acc: [[$V; 4]; M] = [[$zero(); 4]; M];
            if accumulate {
                for i in 0..M {
                    for v in 0..4 {
                        acc[i][v] = $maskload(c.add(i * ldc + v * $LANES), masks[v]);
                    }
                }
            }
            let mut ap = a;
            let mut bp = b;
            for _ in 0..kc {
                // 12 accumulators + M broadcasts + one B vector = 16 ymm registers: load B
                // one vector at a time so nothing spills.
                let mut av = [$zero(); M];
                for i in 0..M {
                    av[i] = $set1(*ap.add(i));
                }
                for v in 0..4 {
                    let bv = $loadu(bp.add(v * $LANES));
                    for i in 0..M {
                        acc[i][v] = $fmadd(av[i], bv, acc[i][v]);
                    }
                }
                ap = ap.add($MR);
                bp = bp.add(ldb);
            }
            for i in 0..M {
                for v in 0..4 {
                    $maskstore(c.add(i * ldc + v * $LANES), masks[v], acc[i][v]);
                }
            }
        }

        /// # Safety
        /// The CPU supports AVX2 and FMA; `a` holds `kc * MR` values; `b` holds `kc` rows of
        /// NR readable values `ldb` apart; C has `rows` rows of `cols` writable values `ldc`
        /// apart.
        pub unsafe fn $entry(
            rows: usize,
            cols: usize,
            kc: usize,
            a: *const $T,
            b: *const $T,
            ldb: usize,
            c: *mut $T,
            ldc: usize,
            accumulate: bool,
        ) {
            match rows {
                3 => $tile::<3>(cols, kc, a, b, ldb, c, ldc, accumulate),
                2 => $tile::<2>(cols, kc, a, b, ldb, c, ldc, accumulate),
                1 => $tile::<1>(cols, kc, a, b, ldb, c, ldc, accumulate),
                _ => {}
            }
        }
    };
}

avx2_kernel!(
    kernel_f32,
    tile_f32,
    f32,
    MR_F32,
    8,
    __m256,
    i32,
    _mm256_setzero_ps,
    _mm256_loadu_ps,
    _mm256_maskload_ps,
    _mm256_maskstore_ps,
    _mm256_set1_ps,
    _mm256_fmadd_ps
);
avx2_kernel!(
    kernel_f64,
    tile_f64,
    f64,
    MR_F64,
    4,
    __m256d,
    i64,
    _mm256_setzero_pd,
    _mm256_loadu_pd,
    _mm256_maskload_pd,
    _mm256_maskstore_pd,
    _mm256_set1_pd,
    _mm256_fmadd_pd
);
