//! Micro-kernels: one file per instruction set. Each computes a `rows x cols` tile
//! (rows <= MR, cols <= NR) of C from a packed A micro-panel (MR values per k) and a B
//! micro-panel of NR values per k, `ldb` apart (NR when packed; the row stride when B is read
//! in place):
//!
//! `c[i][j] = fma(a[k][i], b[k][j], c[i][j])` for k = 0, 1, ..., kc-1 in ascending order,
//! starting from 0 (`accumulate == false`) or from the value already in C (later depth
//! blocks). That is exactly the naive `mul_add` loop, so every kernel gives the same bits.

#[cfg(target_arch = "x86_64")]
pub mod avx2;
#[cfg(target_arch = "x86_64")]
pub mod avx512;
pub mod portable;

use super::dispatch::Kernel;
use crate::Element;

/// `(rows, cols, kc, a_panel, b_panel, ldb, c, ldc, accumulate)`.
pub type KernelFn<T> =
    unsafe fn(usize, usize, usize, *const T, *const T, usize, *mut T, usize, bool);

/// `(rows, cols_last, kc, a_panel, b_panel, ldb, b_stride, c, ldc, accumulate)`: up to 3 rows
/// against 4 consecutive B panels (`b_stride` apart), the last with `cols_last` live columns.
pub type WideFn<T> =
    unsafe fn(usize, usize, usize, *const T, *const T, usize, usize, *mut T, usize, bool);

/// `(rows, cols, k, a, lda, b, ldb, c, ldc)`: C (rows x cols) = A (rows x k, rows `lda` apart,
/// unit column stride) times B read in place (`k` rows `ldb` apart); up to [`STREAM_ROWS`] rows.
pub type StreamFn<T> =
    unsafe fn(usize, usize, usize, *const T, usize, *const T, usize, *mut T, usize);

/// A micro-kernel and its tile height, and optionally a kernel for few rows and 4 panels and
/// one for few rows against a B read in place along whole rows.
#[derive(Clone, Copy)]
pub struct KernelSpec<T> {
    pub mr: usize,
    pub run: KernelFn<T>,
    pub wide: Option<WideFn<T>>,
    pub stream: Option<StreamFn<T>>,
}

/// Rows up to which the wide kernel is used.
pub const WIDE_ROWS: usize = 3;

/// Rows up to which the stream kernel can be used.
pub const STREAM_ROWS: usize = 8;

/// Per-type table of the kernels.
pub trait HasKernels: Element {
    fn spec(k: Kernel) -> KernelSpec<Self>;
}

impl HasKernels for f32 {
    fn spec(k: Kernel) -> KernelSpec<f32> {
        match k {
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => KernelSpec {
                mr: avx512::MR_F32,
                run: avx512::kernel_f32,
                wide: Some(avx512::wide_f32),
                stream: Some(avx512::stream_f32),
            },
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => KernelSpec {
                mr: avx2::MR_F32,
                run: avx2::kernel_f32,
                wide: Some(avx2::wide_f32),
                stream: Some(avx2::stream_f32),
            },
            _ => KernelSpec {
                mr: portable::MR,
                run: portable::kernel::<f32>,
                wide: None,
                stream: None,
            },
        }
    }
}

impl HasKernels for f64 {
    fn spec(k: Kernel) -> KernelSpec<f64> {
        match k {
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => KernelSpec {
                mr: avx512::MR_F64,
                run: avx512::kernel_f64,
                wide: Some(avx512::wide_f64),
                stream: Some(avx512::stream_f64),
            },
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => KernelSpec {
                mr: avx2::MR_F64,
                run: avx2::kernel_f64,
                wide: Some(avx2::wide_f64),
                stream: Some(avx2::stream_f64),
            },
            _ => KernelSpec {
                mr: portable::MR,
                run: portable::kernel::<f64>,
                wide: None,
                stream: None,
            },
        }
    }
}
