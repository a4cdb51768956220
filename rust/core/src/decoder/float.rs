//! The floating-point types the decoder computes in.

use crate::gemm::GemmElement;
use crate::kernels::{HasKernels, KernelsForStored};
use crate::ops::Transcendental;

/// Floating-point types the decoder runs in (with kernels against every stored format).
pub trait Float: GemmElement + HasKernels + Transcendental + KernelsForStored {}
impl Float for f32 {}
impl Float for f64 {}
