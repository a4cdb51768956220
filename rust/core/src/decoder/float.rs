//! The floating-point types the decoder computes in.

use crate::gemm::GemmElement;
use crate::half::{Bf16, F16};
use crate::kernels::{HasKernels, KernelsFor};
use crate::ops::Transcendental;

/// Floating-point types the decoder runs in.
pub trait Float:
    GemmElement + HasKernels + Transcendental + KernelsFor<Bf16> + KernelsFor<F16>
{
}
impl Float for f32 {}
impl Float for f64 {}
