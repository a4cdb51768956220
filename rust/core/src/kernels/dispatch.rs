//! Which micro-kernel runs: detected once from the CPU, overridable for tests.
//!
//! Order of preference: AVX-512F, then AVX2+FMA, then NEON (aarch64), then the portable
//! kernel (any CPU). `GPTCORE_KERNEL=avx512|avx2|neon|portable` or [`set_kernel`] forces one
//! (if the CPU has it).
//! What each family needs of the CPU is the family's own business (`Family::supported`).

use super::contract::GemmKernels;
use super::family::Family;
#[cfg(target_arch = "aarch64")]
use super::neon;
use super::portable;
use super::probe::Probe;
#[cfg(target_arch = "x86_64")]
use super::{avx2, avx512};
use crate::formats::{for_each_stored_format, WidensTo};
use crate::Element;
use std::sync::atomic::{AtomicU8, Ordering};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    Avx512,
    Avx2,
    Neon,
    Portable,
}

impl Kernel {
    pub const ALL: [Kernel; 4] = [Kernel::Avx512, Kernel::Avx2, Kernel::Neon, Kernel::Portable];

    pub fn name(self) -> &'static str {
        match self {
            Kernel::Avx512 => "avx512",
            Kernel::Avx2 => "avx2",
            Kernel::Neon => "neon",
            Kernel::Portable => "portable",
        }
    }

    pub fn from_name(s: &str) -> Option<Kernel> {
        Kernel::ALL
            .into_iter()
            .find(|k| k.name() == s.trim().to_ascii_lowercase())
    }

    /// Whether the kernel is compiled for this architecture (x86-64: avx512, avx2; aarch64:
    /// neon; portable everywhere).
    pub fn built(self) -> bool {
        match self {
            Kernel::Avx512 | Kernel::Avx2 => cfg!(target_arch = "x86_64"),
            Kernel::Neon => cfg!(target_arch = "aarch64"),
            Kernel::Portable => true,
        }
    }

    /// Whether this CPU can run the kernel.
    pub fn supported(self) -> bool {
        self.built() && self.family_supported()
    }

    fn code(self) -> u8 {
        match self {
            Kernel::Avx512 => 1,
            Kernel::Avx2 => 2,
            Kernel::Portable => 3,
            Kernel::Neon => 4,
        }
    }

    fn from_code(c: u8) -> Option<Kernel> {
        match c {
            1 => Some(Kernel::Avx512),
            2 => Some(Kernel::Avx2),
            3 => Some(Kernel::Portable),
            4 => Some(Kernel::Neon),
            _ => None,
        }
    }
}

/// The kernels this CPU supports, best first.
pub fn available() -> Vec<Kernel> {
    Kernel::ALL.into_iter().filter(|k| k.supported()).collect()
}

/// The best kernel this CPU supports.
pub fn detect() -> Kernel {
    available()[0]
}

static ACTIVE: AtomicU8 = AtomicU8::new(0);

/// The kernel in use.
pub fn current() -> Kernel {
    if let Some(k) = Kernel::from_code(ACTIVE.load(Ordering::Relaxed)) {
        return k;
    }
    let k = std::env::var("GPTCORE_KERNEL")
        .ok()
        .and_then(|s| Kernel::from_name(&s))
        .filter(|k| k.supported())
        .unwrap_or_else(detect);
    ACTIVE.store(k.code(), Ordering::Relaxed);
    k
}

/// `k` when this CPU runs it, else `Error::Value` naming it and the kernels that run here.
pub fn require(k: Kernel) -> crate::Result<Kernel> {
    if k.supported() {
        return Ok(k);
    }
    crate::value_error!(
        "kernel {:?} is not supported on this CPU (available: {})",
        k.name(),
        available()
            .iter()
            .map(|k| k.name())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Force a kernel (`None` returns to the detected best).
pub fn set_kernel(k: Option<Kernel>) -> crate::Result<Kernel> {
    let k = match k {
        None => detect(),
        Some(k) => require(k)?,
    };
    ACTIVE.store(k.code(), Ordering::Relaxed);
    Ok(k)
}

/// Calls `$body` with `$F` bound to the family type of kernel `$k`.
macro_rules! with_family {
    ($k:expr, $F:ident => $body:expr) => {
        match $k {
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => {
                type $F = avx512::Avx512;
                $body
            }
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => {
                type $F = avx2::Avx2;
                $body
            }
            #[cfg(target_arch = "aarch64")]
            Kernel::Neon => {
                type $F = neon::Neon;
                $body
            }
            // Portable, and the kernels not built for this architecture (never supported).
            #[allow(unreachable_patterns)]
            _ => {
                type $F = portable::Portable;
                $body
            }
        }
    };
}

/// Kernel `k`'s FMA probe ([`super::peak`]), float64 when `double`.
///
/// # Safety
/// The CPU supports `k`.
pub(super) unsafe fn fma_probe(k: Kernel, double: bool, rounds: usize) -> Probe {
    with_family!(k, F => if double { F::fma_probe_f64(rounds) } else { F::fma_probe_f32(rounds) })
}

impl Kernel {
    /// Runs `f` compiled for this family's instructions (plain code where the CPU lacks them:
    /// the bits are the same either way, only the speed differs). `f` should call
    /// `#[inline(always)]` code so that it is compiled inside the family's context.
    #[inline(always)]
    pub fn vectorized<R>(self, f: impl FnOnce() -> R) -> R {
        if !self.supported() {
            return f();
        }
        // SAFETY: checked just above.
        with_family!(self, F => unsafe { F::vectorized(f) })
    }

    fn family_supported(self) -> bool {
        with_family!(self, F => F::supported())
    }

    /// Whether B panels packed for this kernel are stored as two halves where the value type
    /// allows them (float32, float64): see [`crate::gemm::PackedB`].
    pub fn half_panels(self) -> bool {
        with_family!(self, F => F::HALF_PANELS)
    }
}

/// Per-type table of the kernels.
pub trait HasKernels: Element {
    fn gemm_kernels(k: Kernel) -> GemmKernels<Self>;
    /// The portable kernels against B stored as `W`: what every family runs for a format it
    /// has no kernels of its own for (and, for a format not yet registered, the kernels to
    /// give it).
    fn portable_kernels<W: WidensTo<Self>>() -> GemmKernels<Self, W>;
}

impl HasKernels for f32 {
    fn gemm_kernels(k: Kernel) -> GemmKernels<f32> {
        with_family!(k, F => F::gemm_f32())
    }
    fn portable_kernels<W: WidensTo<f32>>() -> GemmKernels<f32, W> {
        portable::stored_kernels()
    }
}

impl HasKernels for f64 {
    fn gemm_kernels(k: Kernel) -> GemmKernels<f64> {
        with_family!(k, F => F::gemm_f64())
    }
    fn portable_kernels<W: WidensTo<f64>>() -> GemmKernels<f64, W> {
        portable::stored_kernels()
    }
}

/// The kernels for A and C of type `Self` against a B holding `W` (every family: the
/// portable ones where a family has none of its own).
pub trait KernelsFor<W>: Element {
    fn kernels_for(k: Kernel) -> GemmKernels<Self, W>;
}

impl<T: HasKernels> KernelsFor<T> for T {
    #[inline]
    fn kernels_for(k: Kernel) -> GemmKernels<T, T> {
        T::gemm_kernels(k)
    }
}

/// Each stored format (see [`crate::formats`]): float32 against it with the family's kernels
/// for it, float64 against it with the portable ones (the decoder's float64 reference path
/// with stored weights: exact, not tuned).
macro_rules! kernels_for_stored_formats {
    ($($W:ty => $method:ident),* $(,)?) => {
        $(
            impl KernelsFor<$W> for f32 {
                fn kernels_for(k: Kernel) -> GemmKernels<f32, $W> {
                    with_family!(k, F => F::$method())
                }
            }

            impl KernelsFor<$W> for f64 {
                fn kernels_for(_: Kernel) -> GemmKernels<f64, $W> {
                    portable::stored_kernels::<f64, $W>()
                }
            }
        )*

        /// The compute types, which have kernels against B in every stored format.
        pub trait KernelsForStored: Element $(+ KernelsFor<$W>)* {}
    };
}

for_each_stored_format!(kernels_for_stored_formats);
impl KernelsForStored for f32 {}
impl KernelsForStored for f64 {}
