//! The FMA probe (see `kernels::probe`) on ymm registers.

use crate::kernels::probe::fma_probe;
use std::arch::x86_64::*;

fma_probe!(
    fma_f32,
    f32,
    "avx2,fma",
    crate::kernels::probe::CHAINS,
    8,
    _mm256_set1_ps,
    _mm256_fmadd_ps,
    _mm256_cvtss_f32
);
fma_probe!(
    fma_f64,
    f64,
    "avx2,fma",
    crate::kernels::probe::CHAINS,
    4,
    _mm256_set1_pd,
    _mm256_fmadd_pd,
    _mm256_cvtsd_f64
);
