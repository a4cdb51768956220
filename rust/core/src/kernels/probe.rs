//! The FMA probe's chains (see [`super::peak`] for the rate it measures): every chain runs
//! `x <- x * MUL + ADD` from its own start (the chains differ, so the compiler cannot merge
//! them, and none starts at the fixed point, which it would fold away); [`chain`] is the
//! scalar reference of one, [`scalar`] the probe of a family without vectors of its own, and
//! `fma_probe!` makes a family's probe on its vectors.

use crate::Element;

/// Independent chains of one probe round: the scalar probe's, and the most a family's may run.
pub const CHAINS: usize = 12;
/// Chains of the NEON probe (32 vector registers).
pub const CHAINS_NEON: usize = 16;
/// Each step of a chain: `x * MUL + ADD`.
pub const MUL: f64 = 0.5;
pub const ADD: f64 = 1.0;

/// Where chain `i` starts: never at the step's fixed point (2), where the compiler would see
/// that the chain never changes and drop it.
pub const fn start(i: usize) -> f64 {
    (i + 3) as f64
}

/// What a probe returns: the sum over every chain's lanes after the rounds (so that the work
/// is used), the chains and the lanes of each (a round is `2 * chains * lanes` FLOPs).
pub type Probe = (f64, usize, usize);

/// One chain, `rounds` steps from `start`, in scalar arithmetic.
pub fn chain<T: Element>(rounds: usize, start: T) -> T {
    let (m, c) = (T::from_f64(MUL), T::from_f64(ADD));
    (0..rounds).fold(start, |x, _| x.mul_add(m, c))
}

/// The probe of a family without vectors of its own: scalar chains.
pub fn scalar<T: Element>(rounds: usize) -> Probe {
    let (m, c) = (T::from_f64(MUL), T::from_f64(ADD));
    let mut acc: [T; CHAINS] = std::array::from_fn(|i| T::from_f64(start(i)));
    for _ in 0..rounds {
        for a in acc.iter_mut() {
            *a = a.mul_add(m, c);
        }
    }
    (acc.iter().map(|x| x.to_f64()).sum(), CHAINS, 1)
}

/// A family's probe on its vectors: `$chains` chains of `$lanes` lanes, `$splat` a value into
/// every lane, `$fma(x, m, c)` is `x * m + c` in every lane, `$lane0` reads the first lane (all
/// lanes of a chain are equal).
macro_rules! fma_probe {
    ($name:ident, $T:ty, $feature:literal, $chains:expr, $lanes:expr, $splat:path, $fma:path,
     $lane0:path) => {
        /// The FMA probe on this family's vectors (see `kernels::probe`).
        ///
        /// # Safety
        /// The CPU has the family's instructions.
        #[target_feature(enable = $feature)]
        pub(super) unsafe fn $name(rounds: usize) -> $crate::kernels::probe::Probe {
            use $crate::kernels::probe::{start, ADD, MUL};
            let (m, c) = ($splat(MUL as $T), $splat(ADD as $T));
            let mut acc = [$splat(0.0); $chains];
            for (i, a) in acc.iter_mut().enumerate() {
                *a = $splat(start(i) as $T);
            }
            for _ in 0..rounds {
                for a in acc.iter_mut() {
                    *a = $fma(*a, m, c);
                }
            }
            let sum: f64 = acc.iter().map(|&v| $lane0(v) as f64).sum();
            (sum * $lanes as f64, $chains, $lanes)
        }
    };
}
pub(super) use fma_probe;
