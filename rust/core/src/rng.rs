//! The lessons' random stream, reproduced bit for bit.
//!
//! The lessons ran in rustlab, whose `seed(n)` is `rand` 0.8.5
//! `StdRng::seed_from_u64(n)` (ChaCha12 from `rand_chacha` 0.3.1, keyed by `rand_core`
//! 0.6.4's PCG32 expansion of the seed) and whose `randn(m, n)` draws `m * n` samples of
//! `rand_distr` 0.4.3 `Normal(0, 1)` (the ZIGNOR ziggurat) and fills the matrix row by row.
//! The crate versions are pinned exactly in `Cargo.toml`: later releases of `rand` changed
//! these algorithms, and with them every weight of the lessons.

use crate::error::{Error, Result};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Normal};

/// rustlab's generator: `seed(n)` followed by any number of `randn` calls.
#[derive(Clone, Debug)]
pub struct RustlabRng {
    rng: StdRng,
    normal: Normal<f64>,
}

impl RustlabRng {
    /// The state right after rustlab's `seed(seed)`.
    pub fn new(seed: u64) -> Self {
        RustlabRng {
            rng: StdRng::seed_from_u64(seed),
            // Normal(0, 1) samples `0 + 1 * z` for the ziggurat's z: exactly z, as in rustlab.
            normal: Normal::new(0.0, 1.0).expect("Normal(0, 1) is valid"),
        }
    }

    /// Restart the stream, as `seed(seed)` does.
    pub fn reseed(&mut self, seed: u64) {
        self.rng = StdRng::seed_from_u64(seed);
    }

    /// One standard-normal draw.
    #[inline]
    pub fn next_normal(&mut self) -> f64 {
        self.normal.sample(&mut self.rng)
    }

    /// Fill `out` with consecutive draws, first element first.
    pub fn fill_randn(&mut self, out: &mut [f64]) {
        for x in out.iter_mut() {
            *x = self.next_normal();
        }
    }

    /// rustlab's `randn(rows, cols)`: `rows * cols` draws, row-major.
    ///
    /// Fails with [`Error::Value`] when `rows * cols` overflows and with [`Error::Memory`]
    /// when the result could not be allocated.
    pub fn randn(&mut self, rows: usize, cols: usize) -> Result<Vec<f64>> {
        let n = rows.checked_mul(cols).ok_or_else(|| {
            Error::Value(format!(
                "randn: shape ({rows}, {cols}) has more elements than fit in memory"
            ))
        })?;
        if n > (isize::MAX as usize) / std::mem::size_of::<f64>() {
            return Err(Error::Memory(format!(
                "randn: cannot allocate a ({rows}, {cols}) float64 matrix"
            )));
        }
        let mut out = Vec::new();
        out.try_reserve_exact(n).map_err(|_| {
            Error::Memory(format!(
                "randn: cannot allocate a ({rows}, {cols}) float64 matrix"
            ))
        })?;
        out.resize(n, 0.0);
        self.fill_randn(&mut out);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::RngCore;
    use rand_distr::StandardNormal;

    /// Frobenius norm with a plain left-to-right sum of squares, as rustlab's `norm`.
    fn norm(x: &[f64]) -> f64 {
        let mut s = 0.0;
        for v in x {
            s += v * v;
        }
        s.sqrt()
    }

    #[test]
    fn lesson13_input_norm_is_bit_exact() {
        // Lesson 13: seed(13); H_in = randn(4, 8); norm(H_in) prints 6.069769106017517.
        let mut r = RustlabRng::new(13);
        let h = r.randn(4, 8).unwrap();
        assert_eq!(h.len(), 32);
        assert_eq!(norm(&h), 6.069769106017517);
    }

    #[test]
    fn same_seed_same_stream_and_reseed_restarts() {
        let mut a = RustlabRng::new(14);
        let mut b = RustlabRng::new(14);
        let x = a.randn(3, 5).unwrap();
        assert_eq!(x, b.randn(3, 5).unwrap());
        a.reseed(14);
        assert_eq!(x, a.randn(3, 5).unwrap());
        let mut c = RustlabRng::new(15);
        assert_ne!(x, c.randn(3, 5).unwrap());
    }

    #[test]
    fn consecutive_calls_continue_one_stream() {
        // randn(2, 3) then randn(1, 4) equals the first 10 draws of randn(1, 10).
        let mut a = RustlabRng::new(7);
        let mut first = a.randn(2, 3).unwrap();
        first.extend(a.randn(1, 4).unwrap());
        let mut b = RustlabRng::new(7);
        assert_eq!(first, b.randn(1, 10).unwrap());
        // And the shape does not matter, only the count (row-major fill).
        let mut c = RustlabRng::new(7);
        assert_eq!(first, c.randn(10, 1).unwrap());
    }

    #[test]
    fn normal_zero_one_equals_standard_normal() {
        let mut a = RustlabRng::new(99);
        let mut b = StdRng::seed_from_u64(99);
        for _ in 0..10_000 {
            let x: f64 = StandardNormal.sample(&mut b);
            assert_eq!(a.next_normal().to_bits(), x.to_bits());
        }
    }

    #[test]
    fn seed_from_u64_is_pcg32_keyed_chacha12() {
        // rand_core 0.6.4's default seed_from_u64, written out: eight PCG32 (XSH-RR) outputs,
        // the state advanced before each, stored little-endian, key ChaCha12.
        fn pcg_seed(mut state: u64) -> [u8; 32] {
            const MUL: u64 = 6364136223846793005;
            const INC: u64 = 11634580027462260723;
            let mut seed = [0u8; 32];
            for chunk in seed.chunks_mut(4) {
                state = state.wrapping_mul(MUL).wrapping_add(INC);
                let xorshifted = (((state >> 18) ^ state) >> 27) as u32;
                let rot = (state >> 59) as u32;
                chunk.copy_from_slice(&xorshifted.rotate_right(rot).to_le_bytes());
            }
            seed
        }
        for s in [0u64, 13, 14, 0xdead_beef, u64::MAX] {
            let mut a = StdRng::seed_from_u64(s);
            let mut b = rand_chacha::ChaCha12Rng::from_seed(pcg_seed(s));
            for _ in 0..64 {
                assert_eq!(a.next_u64(), b.next_u64());
            }
        }
    }

    #[test]
    fn moments_are_standard_normal() {
        let mut r = RustlabRng::new(1);
        let x = r.randn(200, 1000).unwrap();
        let n = x.len() as f64;
        let mean = x.iter().sum::<f64>() / n;
        let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
        assert!(mean.abs() < 0.01, "mean {mean}");
        assert!((var - 1.0).abs() < 0.01, "var {var}");
    }

    #[test]
    fn empty_and_overflowing_shapes() {
        let mut r = RustlabRng::new(0);
        assert!(r.randn(0, 5).unwrap().is_empty());
        assert!(r.randn(5, 0).unwrap().is_empty());
        assert!(matches!(r.randn(usize::MAX, 2), Err(Error::Value(_))));
        assert!(matches!(r.randn(usize::MAX / 2, 1), Err(Error::Memory(_))));
        // A failed call draws nothing.
        let mut fresh = RustlabRng::new(0);
        assert_eq!(r.randn(1, 3).unwrap(), fresh.randn(1, 3).unwrap());
    }
}
