//! The fused multiply-add of the portable kernels.
//!
//! On aarch64, and on x86-64 built with FMA, `mul_add` is one instruction. On an x86-64 baseline
//! build (the portable family's code on a CPU without FMA), it is a call into the C library for
//! every product, which made the portable tile about a hundred times slower than the AVX2 one.
//! For float32 the same correctly rounded result comes from float64 arithmetic, inline and
//! vectorised: `a * b` is exact in float64 (24 + 24 significant bits), so `s = a * b + c` in
//! float64 is the exact value rounded once; rounding `s` to float32 then gives the exact value's
//! float32 rounding unless `s` lies exactly on a float32 rounding boundary (a midpoint between
//! two float32 values) while the exact value does not, or lies in float32's subnormal range. Those
//! rows (rare) are recomputed with [`fma_f32`], which rounds the float64 sum to odd first.

use crate::Element;

/// `a * b + c` for a row of 32 lanes: `acc[j] = fma(a, b[j], acc[j])`, rounded once, the bits of
/// `mul_add` on every platform.
pub trait RowFma: Element {
    fn fma_row(a: Self, b: &[Self; 32], acc: &mut [Self; 32]);
}

/// The row by `mul_add`: one instruction each where the build has FMA.
#[inline(always)]
fn mul_add_row<T: Element>(a: T, b: &[T; 32], acc: &mut [T; 32]) {
    for j in 0..32 {
        acc[j] = a.mul_add(b[j], acc[j]);
    }
}

impl RowFma for f64 {
    #[inline(always)]
    fn fma_row(a: f64, b: &[f64; 32], acc: &mut [f64; 32]) {
        mul_add_row(a, b, acc)
    }
}

impl RowFma for f32 {
    #[inline(always)]
    fn fma_row(a: f32, b: &[f32; 32], acc: &mut [f32; 32]) {
        if cfg!(all(target_arch = "x86_64", not(target_feature = "fma"))) {
            fma_row_f32_by_f64(a, b, acc)
        } else {
            mul_add_row(a, b, acc)
        }
    }
}

/// [`RowFma::fma_row`] for float32 from float64 arithmetic (see the module's documentation).
#[inline(always)]
pub fn fma_row_f32_by_f64(a: f32, b: &[f32; 32], acc: &mut [f32; 32]) {
    let mut out = [0.0f32; 32];
    let mut recheck = false;
    for j in 0..32 {
        let s = a as f64 * b[j] as f64 + acc[j] as f64;
        out[j] = s as f32;
        recheck |= near_boundary(s);
    }
    if recheck {
        for j in 0..32 {
            out[j] = fma_f32(a, b[j], acc[j]);
        }
    }
    *acc = out;
}

/// Whether rounding `s` to float32 may differ from rounding the exact value it was rounded from:
/// `s`'s 29 bits below float32's precision are exactly one half (a float32 midpoint), or `s` is
/// nonzero and below float32's smallest normal value in magnitude (fewer significant bits
/// there). Read from the high word alone: a nonzero sum of float32 products and values is at
/// least 2^-298 in magnitude, so its high word is nonzero, and a zero `s` is exact (the lanes
/// past a tile's last column hold zeros and must not send every edge row to the recheck).
#[inline(always)]
fn near_boundary(s: f64) -> bool {
    let bits = s.to_bits();
    let midpoint = (bits as u32) & 0x1FFF_FFFF == 0x1000_0000;
    let high = (bits >> 32) as u32 & 0x7FFF_FFFF;
    // 0 < high < 0x3810_0000 (2^-126), in one unsigned comparison.
    let small = high.wrapping_sub(1) < 0x380F_FFFF;
    midpoint | small
}

/// `a * b + c` rounded once to float32, from float64 arithmetic: the float64 sum `s` of the
/// exact product and `c`, its rounding error (Knuth's two-sum, exact), and `s` rounded to odd (if
/// inexact, the neighbour with an odd last bit on the exact value's side) before the rounding to
/// float32, which is then correct (53 bits >= 24 + 2). Overflow, infinities, NaN and signed zeros
/// come out as from a hardware FMA.
#[inline(always)]
pub fn fma_f32(a: f32, b: f32, c: f32) -> f32 {
    let p = a as f64 * b as f64;
    let c = c as f64;
    let s = p + c;
    let t = s - p;
    let err = (p - (s - t)) + (c - t);
    let bits = s.to_bits();
    // err is 0 when s is exact, NaN when s is infinite or NaN: then s is kept.
    let inexact = (err < 0.0) | (err > 0.0);
    let fix = inexact & (bits & 1 == 0);
    // One step away from zero when the exact value lies beyond s, else towards zero.
    let step: u64 = if (err > 0.0) == (s > 0.0) {
        1
    } else {
        u64::MAX
    };
    f64::from_bits(bits.wrapping_add(if fix { step } else { 0 })) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A xorshift stream of float32 values of every kind: normal and subnormal of any
    /// exponent, both signs, zeros, infinities, NaN, the extremes.
    struct Values(u64);

    impl Values {
        fn bits(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn next(&mut self) -> f32 {
            const SPECIAL: [f32; 12] = [
                0.0,
                -0.0,
                1.0,
                f32::MIN_POSITIVE,
                1e-45,
                f32::MAX,
                f32::INFINITY,
                f32::NEG_INFINITY,
                f32::NAN,
                3e38,
                1e-38,
                1.0 + f32::EPSILON,
            ];
            let v = self.bits();
            let x = match v % 8 {
                0 => SPECIAL[(v >> 8) as usize % SPECIAL.len()],
                1 | 2 => f32::from_bits((v >> 16) as u32), // any exponent
                _ => f32::from_bits((v >> 16) as u32 & 0x3FFF_FFFF | 0x3000_0000), // near 1
            };
            if v & (1 << 40) != 0 {
                -x
            } else {
                x
            }
        }
    }

    fn same(x: f32, y: f32) -> bool {
        x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())
    }

    /// Triples whose float64 sum lands exactly on a float32 midpoint while the exact value
    /// lies below it: `a = 1 + k 2^-23`, `b = 2^-24 (1 - k 2^-23)`, `c = 1 + m 2^-23`, so that
    /// `a b + c = c + 2^-24 - k^2 2^-70`.
    fn midpoint_cases() -> Vec<(f32, f32, f32)> {
        let mut v = Vec::new();
        for k in 1..40u32 {
            for m in [1u32, 2, 3, 77, 1 << 20] {
                let a = 1.0 + k as f32 * f32::EPSILON;
                let b = (1.0 - k as f32 * f32::EPSILON) * 2f32.powi(-24);
                let c = 1.0 + m as f32 * f32::EPSILON;
                v.push((a, b, c));
                v.push((-a, b, -c));
            }
        }
        v
    }

    #[test]
    fn fma_f32_is_mul_add_bit_for_bit() {
        let mut g = Values(0x9E37_79B9_7F4A_7C15);
        for r in 0..2_000_000 {
            let (a, b) = (g.next(), g.next());
            let c = if r % 3 == 0 {
                // Near -a*b: cancellation, results far below the operands.
                -((a as f64 * b as f64) as f32) * (1.0 + f32::EPSILON * ((r % 5) as f32 - 2.0))
            } else {
                g.next()
            };
            let (want, got) = (a.mul_add(b, c), fma_f32(a, b, c));
            assert!(
                same(want, got),
                "fma({a:e}, {b:e}, {c:e}) = {want:e}, got {got:e}"
            );
        }
        for (a, b, c) in midpoint_cases() {
            assert!(same(a.mul_add(b, c), fma_f32(a, b, c)), "{a:e} {b:e} {c:e}");
        }
    }

    #[test]
    fn fma_row_by_f64_is_mul_add_bit_for_bit() {
        // The cases the recheck exists for: rounding the float64 sum alone gets them wrong.
        let cases = midpoint_cases();
        let wrong = cases
            .iter()
            .filter(|&&(a, b, c)| !same((a as f64 * b as f64 + c as f64) as f32, a.mul_add(b, c)))
            .count();
        assert!(wrong > cases.len() / 4, "{wrong} of {}", cases.len());
        let mut g = Values(0x2545_F491_4F6C_DD1D);
        let mut rows: Vec<(f32, [f32; 32], [f32; 32])> = (0..50_000)
            .map(|_| {
                (
                    g.next(),
                    std::array::from_fn(|_| g.next()),
                    std::array::from_fn(|_| g.next()),
                )
            })
            .collect();
        // Rows of ordinary values (mostly the fast path), one midpoint case placed in some.
        for (n, &(a, b, c)) in cases.iter().enumerate() {
            let mut row = (a, [0.0f32; 32], [0.0f32; 32]);
            for j in 0..32 {
                row.1[j] = b * (1.0 + j as f32 * 0.125);
                row.2[j] = 0.5 + j as f32;
            }
            row.1[n % 32] = b;
            row.2[n % 32] = c;
            rows.push(row);
        }
        for (a, b, acc) in rows {
            let mut got = acc;
            fma_row_f32_by_f64(a, &b, &mut got);
            let mut dispatched = acc;
            f32::fma_row(a, &b, &mut dispatched);
            for j in 0..32 {
                let want = a.mul_add(b[j], acc[j]);
                assert!(same(want, got[j]), "{a:e} {:e} {:e}", b[j], acc[j]);
                assert!(same(want, dispatched[j]));
            }
        }
    }
}
