//! The FMA probe (see `kernels::probe`) on 128-bit NEON registers.

use crate::kernels::probe::{fma_probe, CHAINS_NEON};
use std::arch::aarch64::*;

/// `x * m + c` in every lane.
#[inline(always)]
unsafe fn fma_f32x4(x: float32x4_t, m: float32x4_t, c: float32x4_t) -> float32x4_t {
    vfmaq_f32(c, x, m)
}
#[inline(always)]
unsafe fn fma_f64x2(x: float64x2_t, m: float64x2_t, c: float64x2_t) -> float64x2_t {
    vfmaq_f64(c, x, m)
}
#[inline(always)]
unsafe fn lane0_f32(v: float32x4_t) -> f32 {
    vgetq_lane_f32::<0>(v)
}
#[inline(always)]
unsafe fn lane0_f64(v: float64x2_t) -> f64 {
    vgetq_lane_f64::<0>(v)
}

fma_probe!(
    fma_f32,
    f32,
    "neon",
    CHAINS_NEON,
    4,
    vdupq_n_f32,
    fma_f32x4,
    lane0_f32
);
fma_probe!(
    fma_f64,
    f64,
    "neon",
    CHAINS_NEON,
    2,
    vdupq_n_f64,
    fma_f64x2,
    lane0_f64
);
