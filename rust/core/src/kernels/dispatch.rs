//! Which micro-kernel runs: detected once from the CPU, overridable for tests.
//!
//! Order of preference: AVX-512F, then AVX2+FMA, then NEON (aarch64), then the portable
//! kernel (any CPU). `GPTCORE_KERNEL=avx512|avx2|neon|portable` or [`set_kernel`] forces one
//! (if the CPU has it).
//! What each family needs of the CPU is the family's own business (`Family::supported`).

use super::contract::{GemmKernels, TransposeFn};
use super::family::Family;
use super::portable;
use super::probe::Probe;
use crate::formats::{for_each_stored_format, WidensTo};
use crate::Element;
use std::sync::atomic::{AtomicU8, Ordering};

/// Makes [`Kernel`] (a variant per family, in the table's order of preference, with its name
/// and whether it is built for this architecture) and `with_family!` from the table of
/// families below. `$d` is a `$` for the inner macro's own variables.
macro_rules! families {
    ($d:tt $($variant:ident, $name:literal, $family:path, $built:meta;)+) => {
        /// A kernel family (see [`crate::kernels`]).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Kernel {
            $($variant),+
        }

        impl Kernel {
            /// Every family, best first.
            pub const ALL: [Kernel; [$($name),+].len()] = [$(Kernel::$variant),+];

            pub fn name(self) -> &'static str {
                match self {
                    $(Kernel::$variant => $name),+
                }
            }

            /// Whether the family is compiled for this architecture.
            pub fn built(self) -> bool {
                match self {
                    $(Kernel::$variant => cfg!($built)),+
                }
            }
        }

        /// Calls `$body` with `$F` bound to the family type of kernel `$k`.
        macro_rules! with_family {
            ($d k:expr, $d F:ident => $d body:expr) => {
                match $d k {
                    $(
                        #[cfg($built)]
                        Kernel::$variant => {
                            type $d F = $family;
                            $d body
                        }
                    )+
                    // The families not built for this architecture (never supported).
                    #[allow(unreachable_patterns)]
                    _ => {
                        type $d F = portable::Portable;
                        $d body
                    }
                }
            };
        }
    };
}

// The kernel families, best first: variant, name (`GPTCORE_KERNEL`, `set_kernel`), the
// family's type, and where it is built.
families! { $
    Avx512, "avx512", super::avx512::Avx512, target_arch = "x86_64";
    Avx2, "avx2", super::avx2::Avx2, target_arch = "x86_64";
    Neon, "neon", super::neon::Neon, target_arch = "aarch64";
    Portable, "portable", super::portable::Portable, all();
}

impl Kernel {
    pub fn from_name(s: &str) -> Option<Kernel> {
        Kernel::ALL
            .into_iter()
            .find(|k| k.name() == s.trim().to_ascii_lowercase())
    }

    /// Whether this CPU can run the kernel.
    pub fn supported(self) -> bool {
        self.built() && self.family_supported()
    }

    /// The kernel as [`ACTIVE`] holds it: its place in [`Kernel::ALL`], from 1 (0: none yet).
    fn code(self) -> u8 {
        Kernel::ALL
            .iter()
            .position(|&k| k == self)
            .map_or(0, |i| i as u8 + 1)
    }

    fn from_code(c: u8) -> Option<Kernel> {
        (c as usize)
            .checked_sub(1)
            .and_then(|i| Kernel::ALL.get(i).copied())
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
    /// allows them (float32, float64): the gemm loops' `PackedB` says how.
    pub fn half_panels(self) -> bool {
        with_family!(self, F => F::HALF_PANELS)
    }
}

/// Per-type table of the kernels.
pub trait HasKernels: Element {
    fn gemm_kernels(k: Kernel) -> GemmKernels<Self>;
    /// The family's way of moving rows into columns, if it has one of its own.
    fn transposer(k: Kernel) -> Option<TransposeFn<Self>>;
    /// The portable kernels against B stored as `W`: what every family runs for a format it
    /// has no kernels of its own for (and, for a format not yet registered, the kernels to
    /// give it).
    fn portable_kernels<W: WidensTo<Self>>() -> GemmKernels<Self, W>;
}

impl HasKernels for f32 {
    fn gemm_kernels(k: Kernel) -> GemmKernels<f32> {
        with_family!(k, F => F::gemm_f32())
    }
    fn transposer(k: Kernel) -> Option<TransposeFn<f32>> {
        with_family!(k, F => F::transpose_f32())
    }
    fn portable_kernels<W: WidensTo<f32>>() -> GemmKernels<f32, W> {
        portable::stored_kernels()
    }
}

impl HasKernels for f64 {
    fn gemm_kernels(k: Kernel) -> GemmKernels<f64> {
        with_family!(k, F => F::gemm_f64())
    }
    fn transposer(k: Kernel) -> Option<TransposeFn<f64>> {
        with_family!(k, F => F::transpose_f64())
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
    ($($W:ty => $method:ident in $kind:ident),* $(,)?) => {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The table's families have distinct names and codes that lead back to them; the portable
    /// family is built everywhere, and what is built here is what this architecture compiles.
    #[test]
    fn the_family_table_names_every_kernel_once() {
        assert_eq!(Kernel::from_code(0), None);
        for (i, k) in Kernel::ALL.into_iter().enumerate() {
            assert_eq!(Kernel::from_code(k.code()), Some(k));
            assert_eq!(Kernel::from_name(k.name()), Some(k));
            assert_eq!(Kernel::from_name(&k.name().to_uppercase()), Some(k));
            assert!(Kernel::ALL[..i].iter().all(|o| o.name() != k.name()));
        }
        assert_eq!(Kernel::from_code(Kernel::ALL.len() as u8 + 1), None);
        assert_eq!(Kernel::from_name("sse2"), None);
        let built: Vec<&str> = Kernel::ALL
            .iter()
            .filter(|k| k.built())
            .map(|k| k.name())
            .collect();
        #[cfg(target_arch = "x86_64")]
        assert_eq!(built, ["avx512", "avx2", "portable"]);
        #[cfg(target_arch = "aarch64")]
        assert_eq!(built, ["neon", "portable"]);
        assert_eq!(*Kernel::ALL.last().unwrap(), Kernel::Portable);
        assert!(Kernel::Portable.supported());
    }

    /// The stored formats for which family `k` has kernels of its own (a tile kernel other
    /// than the portable one), and those among them with a wide kernel too.
    fn own_formats(k: Kernel) -> (Vec<&'static str>, Vec<&'static str>) {
        macro_rules! own {
            ($($W:ty => $method:ident in $kind:ident),* $(,)?) => {{
                let (mut own, mut wide) = (Vec::new(), Vec::new());
                $(
                    let name = <$W as crate::formats::StorageFormat>::FORMAT_NAME;
                    let ours = <f32 as KernelsFor<$W>>::kernels_for(k);
                    let portable = f32::portable_kernels::<$W>();
                    if ours.tile as usize != portable.tile as usize {
                        own.push(name);
                        if ours.wide.is_some() {
                            wide.push(name);
                        }
                    }
                )*
                (own, wide)
            }};
        }
        for_each_stored_format!(own)
    }

    /// Every vector family this CPU runs has kernels of its own for every stored format (the
    /// AVX2 family needs F16C for them), so that the sweeps over `available()` in the products'
    /// tests run them; and the families with a wide kernel against float32 B (AVX-512, NEON)
    /// have one against 16-bit B too.
    #[test]
    fn vector_families_have_kernels_of_their_own_for_every_format() {
        let all: Vec<&str> = crate::formats::StoredFormat::all()
            .iter()
            .map(|f| f.name())
            .collect();
        for k in available() {
            let (own, wide) = own_formats(k);
            #[cfg(target_arch = "x86_64")]
            let has_own = match k {
                Kernel::Avx2 => std::arch::is_x86_feature_detected!("f16c"),
                _ => k != Kernel::Portable,
            };
            #[cfg(not(target_arch = "x86_64"))]
            let has_own = k != Kernel::Portable;
            if has_own {
                assert_eq!(own, all, "{k:?}");
            } else if k == Kernel::Portable {
                assert!(own.is_empty(), "{own:?}");
            }
            if matches!(k, Kernel::Avx512 | Kernel::Neon) {
                assert!(
                    ["bfloat16", "float16"].iter().all(|f| wide.contains(f)),
                    "{k:?}: {wide:?}"
                );
            }
        }
        #[cfg(target_arch = "aarch64")]
        assert!(available().contains(&Kernel::Neon));
    }
}
