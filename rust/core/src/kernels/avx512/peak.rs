//! The FMA probe (see `kernels::probe`) on zmm registers.

use crate::kernels::probe::fma_probe;
use std::arch::x86_64::*;

fma_probe!(
    fma_f32,
    f32,
    "avx512f",
    crate::kernels::probe::CHAINS,
    16,
    _mm512_set1_ps,
    _mm512_fmadd_ps,
    _mm512_cvtss_f32
);
fma_probe!(
    fma_f64,
    f64,
    "avx512f",
    crate::kernels::probe::CHAINS,
    8,
    _mm512_set1_pd,
    _mm512_fmadd_pd,
    _mm512_cvtsd_f64
);
