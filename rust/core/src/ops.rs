//! Row-wise operations of the decoder: LayerNorm, RMSNorm, GELU (tanh form), SiLU, exp, bias
//! and residual adds, softmax, and the sinusoidal position encoding.
//!
//! Every operation works on one row at a time with a fixed order of operations, so a row's
//! result never depends on the other rows, on the thread count or on the CPU's vector width.
//! float64 uses the C library's `exp` and `tanh` (the lesson's arithmetic); float32 uses
//! polynomial `exp`/`tanh` built only from multiplies and adds (never fused), written so that
//! the compiler vectorises them; they run compiled for the active kernel family
//! ([`crate::kernels::Kernel::vectorized`]) and give the same bits in every family.

use crate::Element;

/// Per-type transcendental kernels over slices.
pub trait Transcendental: Element {
    /// `x[i] = exp(x[i])`.
    fn exp_inplace(x: &mut [Self]);
    /// `x[i] = gelu_tanh(x[i])`.
    fn gelu_inplace(x: &mut [Self]);
    /// [`Transcendental::gelu_inplace`] on `rows` rows of `cols` values, `ld` apart (one
    /// dispatch for a whole tile of a product).
    ///
    /// # Safety
    /// Every `ptr + r * ld + j` (r < rows, j < cols) is valid for reads and writes.
    unsafe fn gelu_rows(ptr: *mut Self, rows: usize, cols: usize, ld: usize) {
        for r in 0..rows {
            Self::gelu_inplace(std::slice::from_raw_parts_mut(ptr.add(r * ld), cols));
        }
    }
    /// The first half of an online-softmax step on a row of raw scores: scales every value
    /// of `row` by `scale` and returns `max(m_old, max row)`.
    ///
    /// Inlined into its caller, without a dispatch of its own, as is
    /// [`Transcendental::exp_sum`]: attention calls them row after row from code already
    /// compiled for the kernel family ([`crate::kernels::Kernel::vectorized`]), the first for
    /// every row of a block before the second for any, so that the rows' chains overlap.
    fn scale_max(row: &mut [Self], scale: Self, m_old: Self) -> Self;
    /// The second half: replaces `row[..valid]` by `exp(row - m)` and `row[valid..]` by 0, and
    /// returns the sum of the row.
    fn exp_sum(row: &mut [Self], valid: usize, m: Self) -> Self;
    /// `exp(x)` of one value, inlined into its caller (the same bits as
    /// [`Transcendental::exp_inplace`]).
    fn exp_one(x: Self) -> Self;
    /// Sum and sum of squared deviations for LayerNorm: `(sum x, sum (x - mean)^2)` where
    /// mean = first / n (the order of each sum is fixed by the type's implementation).
    fn moments(x: &[Self]) -> (Self, Self);
    /// Sum of squares for RMSNorm, `sum x^2`, in the order of [`Transcendental::moments`]'
    /// second sum.
    fn sum_squares(x: &[Self]) -> Self;
    /// `x[i] = silu(g[i]) * x[i]` with `silu(v) = v / (1 + exp(-v))` (SwiGLU: the gate's
    /// SiLU times the up projection), on `rows` rows of `cols` values, `x`'s rows `ldx`
    /// apart and `g`'s `ldg` apart.
    ///
    /// # Safety
    /// Every `x + r * ldx + j` and `g + r * ldg + j` (r < rows, j < cols) is valid, `x` for
    /// writes too.
    unsafe fn silu_mul_rows(
        x: *mut Self,
        ldx: usize,
        g: *const Self,
        ldg: usize,
        rows: usize,
        cols: usize,
    );
}

impl Transcendental for f64 {
    /// float64 keeps the lesson's plain left-to-right sums.
    #[inline(always)]
    fn scale_max(row: &mut [f64], scale: f64, m_old: f64) -> f64 {
        let mut mx = m_old;
        for v in row.iter_mut() {
            *v *= scale;
            mx = mx.max(*v);
        }
        mx
    }
    #[inline(always)]
    fn exp_sum(row: &mut [f64], valid: usize, m: f64) -> f64 {
        for v in row[..valid].iter_mut() {
            *v = (*v - m).exp();
        }
        for v in row[valid..].iter_mut() {
            *v = 0.0;
        }
        let mut sum = 0.0;
        for &v in row[..valid].iter() {
            sum += v;
        }
        sum
    }
    fn moments(x: &[f64]) -> (f64, f64) {
        let mut sum = 0.0;
        for &v in x {
            sum += v;
        }
        let mean = sum / x.len() as f64;
        let mut sq = 0.0;
        for &v in x {
            let d = v - mean;
            sq += d * d;
        }
        (sum, sq)
    }
    fn sum_squares(x: &[f64]) -> f64 {
        let mut sq = 0.0;
        for &v in x {
            sq += v * v;
        }
        sq
    }
    unsafe fn silu_mul_rows(
        x: *mut f64,
        ldx: usize,
        g: *const f64,
        ldg: usize,
        rows: usize,
        cols: usize,
    ) {
        for r in 0..rows {
            let xs = std::slice::from_raw_parts_mut(x.add(r * ldx), cols);
            let gs = std::slice::from_raw_parts(g.add(r * ldg), cols);
            for (a, &v) in xs.iter_mut().zip(gs) {
                *a *= v / (1.0 + (-v).exp());
            }
        }
    }
    fn exp_inplace(x: &mut [f64]) {
        for v in x {
            *v = v.exp();
        }
    }
    #[inline(always)]
    fn exp_one(x: f64) -> f64 {
        x.exp()
    }
    fn gelu_inplace(x: &mut [f64]) {
        let c = (2.0f64 / std::f64::consts::PI).sqrt();
        for v in x {
            let t = *v;
            *v = 0.5 * t * (1.0 + (c * (t + 0.044715 * t * (t * t))).tanh());
        }
    }
}

/// exp for f32 from multiplies and adds: Cody-Waite reduction by ln 2, a degree-6 polynomial,
/// and scaling by 2^n through the exponent bits. Within 2 ulp of the correctly rounded value
/// for x in [-87.3, 88.3]; 0 below (so exp(-inf) = 0), exp(88.3) above, NaN stays NaN.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23: adding and subtracting it rounds to an integer
    let xc = x.clamp(-87.3, 88.3);
    let t = xc * LOG2E + MAGIC;
    let n = t - MAGIC;
    // The integer n read from t's low mantissa bits (t and MAGIC share an exponent): the same
    // value as `n as i32`, in integer arithmetic that stays vectorised (a float-to-int `as`
    // saturates and checks for NaN lane by lane).
    let n_int = t.to_bits() as i32 - MAGIC.to_bits() as i32;
    let r = (xc - n * LN2_HI) - n * LN2_LO;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 5.000_000_1e-1;
    let e = (p * (r * r) + r) + 1.0;
    let scale = f32::from_bits(((n_int + 127) as u32) << 23);
    let y = e * scale;
    if x < -87.3 {
        0.0
    } else if x.is_nan() {
        x
    } else {
        y
    }
}

/// tanh for f32 as 1 - 2 / (exp(2y) + 1) (absolute error below 2e-7).
#[inline(always)]
pub fn tanh_f32(y: f32) -> f32 {
    1.0 - 2.0 / (exp_f32(2.0 * y) + 1.0)
}

/// GELU, tanh approximation, for f32 (the lesson's expression and order).
#[inline(always)]
pub fn gelu_f32(t: f32) -> f32 {
    const C: f32 = 0.797_884_6; // sqrt(2/pi)
    0.5 * t * (1.0 + tanh_f32(C * (t + 0.044715 * t * (t * t))))
}

/// SiLU for f32: `t / (1 + exp(-t))`.
#[inline(always)]
pub fn silu_f32(t: f32) -> f32 {
    t / (1.0 + exp_f32(-t))
}

#[inline(always)]
fn silu_mul_rows_generic(
    x: *mut f32,
    ldx: usize,
    g: *const f32,
    ldg: usize,
    rows: usize,
    cols: usize,
) {
    for r in 0..rows {
        // SAFETY: guaranteed by the caller of `Transcendental::silu_mul_rows`.
        let (xs, gs) = unsafe {
            (
                std::slice::from_raw_parts_mut(x.add(r * ldx), cols),
                std::slice::from_raw_parts(g.add(r * ldg), cols),
            )
        };
        for (a, &v) in xs.iter_mut().zip(gs) {
            *a *= silu_f32(v);
        }
    }
}

#[inline(always)]
fn exp_slice_generic(x: &mut [f32]) {
    for v in x.iter_mut() {
        *v = exp_f32(*v);
    }
}

#[inline(always)]
fn gelu_slice_generic(x: &mut [f32]) {
    for v in x.iter_mut() {
        *v = gelu_f32(*v);
    }
}

#[inline(always)]
fn gelu_rows_generic(ptr: *mut f32, rows: usize, cols: usize, ld: usize) {
    for r in 0..rows {
        // SAFETY: guaranteed by the caller of `Transcendental::gelu_rows`.
        gelu_slice_generic(unsafe { std::slice::from_raw_parts_mut(ptr.add(r * ld), cols) });
    }
}

const LANES: usize = 16;

/// Lane-parallel sum: 16 running sums (element i goes to lane i % 16), combined in a fixed
/// order at the end. Deterministic for a given slice, and vectorisable.
#[inline(always)]
fn lane_sum(x: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            acc[l] += c[l];
        }
    }
    for (l, &v) in chunks.remainder().iter().enumerate() {
        acc[l] += v;
    }
    lane_total(acc)
}

/// The lanes of a [`lane_sum`] combined, lane 0 first.
#[inline(always)]
fn lane_total(acc: [f32; LANES]) -> f32 {
    let mut s = 0.0;
    for a in acc {
        s += a;
    }
    s
}

#[inline(always)]
fn scale_max_generic(row: &mut [f32], scale: f32, m_old: f32) -> f32 {
    let mut mx = [m_old; LANES];
    let mut chunks = row.chunks_exact_mut(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            let v = c[l] * scale;
            c[l] = v;
            mx[l] = if v > mx[l] { v } else { mx[l] };
        }
    }
    for (l, v) in chunks.into_remainder().iter_mut().enumerate() {
        *v *= scale;
        mx[l] = if *v > mx[l] { *v } else { mx[l] };
    }
    let mut m = mx[0];
    for &v in &mx[1..] {
        m = if v > m { v } else { m };
    }
    m
}

/// exp and the sum in one pass, the sum in [`lane_sum`]'s lanes and order.
#[inline(always)]
fn exp_sum_generic(row: &mut [f32], valid: usize, m: f32) -> f32 {
    let mut acc = [0.0f32; LANES];
    let (head, tail) = row.split_at_mut(valid);
    let mut chunks = head.chunks_exact_mut(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            let e = exp_f32(c[l] - m);
            c[l] = e;
            acc[l] += e;
        }
    }
    for (l, v) in chunks.into_remainder().iter_mut().enumerate() {
        let e = exp_f32(*v - m);
        *v = e;
        acc[l] += e;
    }
    tail.fill(0.0);
    lane_total(acc)
}

#[inline(always)]
fn moments_generic(x: &[f32]) -> (f32, f32) {
    let sum = lane_sum(x);
    let mean = sum / x.len() as f32;
    let mut acc = [0.0f32; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            let d = c[l] - mean;
            acc[l] += d * d;
        }
    }
    for (l, &v) in chunks.remainder().iter().enumerate() {
        let d = v - mean;
        acc[l] += d * d;
    }
    (sum, lane_total(acc))
}

#[inline(always)]
fn sum_squares_generic(x: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            acc[l] += c[l] * c[l];
        }
    }
    for (l, &v) in chunks.remainder().iter().enumerate() {
        acc[l] += v * v;
    }
    lane_total(acc)
}

/// Runs `f` compiled for the active kernel family's vector instructions (the operations and
/// their order are the same in every family, no fused operations are introduced: so are the
/// bits).
#[inline(always)]
fn vectorized<R>(f: impl FnOnce() -> R) -> R {
    crate::kernels::current().vectorized(f)
}

/// float32 sums run in 16 lanes (a fixed order, so still deterministic and row-local).
impl Transcendental for f32 {
    #[inline(always)]
    fn scale_max(row: &mut [f32], scale: f32, m_old: f32) -> f32 {
        scale_max_generic(row, scale, m_old)
    }
    #[inline(always)]
    fn exp_sum(row: &mut [f32], valid: usize, m: f32) -> f32 {
        exp_sum_generic(row, valid, m)
    }
    #[inline(always)]
    fn exp_one(x: f32) -> f32 {
        exp_f32(x)
    }
    fn moments(x: &[f32]) -> (f32, f32) {
        vectorized(
            #[inline(always)]
            || moments_generic(x),
        )
    }
    fn sum_squares(x: &[f32]) -> f32 {
        vectorized(
            #[inline(always)]
            || sum_squares_generic(x),
        )
    }
    unsafe fn silu_mul_rows(
        x: *mut f32,
        ldx: usize,
        g: *const f32,
        ldg: usize,
        rows: usize,
        cols: usize,
    ) {
        vectorized(
            #[inline(always)]
            || silu_mul_rows_generic(x, ldx, g, ldg, rows, cols),
        )
    }
    fn exp_inplace(x: &mut [f32]) {
        vectorized(
            #[inline(always)]
            || exp_slice_generic(x),
        )
    }
    fn gelu_inplace(x: &mut [f32]) {
        vectorized(
            #[inline(always)]
            || gelu_slice_generic(x),
        )
    }
    unsafe fn gelu_rows(ptr: *mut f32, rows: usize, cols: usize, ld: usize) {
        vectorized(
            #[inline(always)]
            || gelu_rows_generic(ptr, rows, cols, ld),
        )
    }
}

/// LayerNorm of one row: mean = sum/n, population variance = sum((x-mean)^2)/n (plain
/// left-to-right sums in float64, 16-lane sums in float32), `(x - mean) / sqrt(var + eps)`,
/// then `* gamma + beta` when given.
pub fn layernorm_row<T: Transcendental>(
    x: &[T],
    out: &mut [T],
    affine: Option<(&[T], &[T])>,
    eps: T,
) {
    // (The element loops below stop at the shortest slice: every one must hold the row.)
    assert!(
        out.len() >= x.len(),
        "layernorm_row: output shorter than the row"
    );
    if let Some((g, b)) = affine {
        assert!(
            g.len() >= x.len() && b.len() >= x.len(),
            "layernorm_row: short gamma or beta"
        );
    }
    let n = T::from_f64(x.len() as f64);
    let (sum, sq) = T::moments(x);
    let mean = sum / n;
    let var = sq / n;
    let den = (var + eps).sqrt();
    // Element by element, compiled for the family's vectors (the same operations, unfused).
    vectorized(
        #[inline(always)]
        || match affine {
            Some((g, b)) => {
                for (((o, &v), &gi), &bi) in out.iter_mut().zip(x).zip(g).zip(b) {
                    *o = (v - mean) / den * gi + bi;
                }
            }
            None => {
                for (o, &v) in out.iter_mut().zip(x) {
                    *o = (v - mean) / den;
                }
            }
        },
    )
}

/// RMSNorm of one row: `ms = sum(x^2) / n` (a plain left-to-right sum in float64, 16-lane
/// sums in float32), `x / sqrt(ms + eps) * w`.
pub fn rmsnorm_row<T: Transcendental>(x: &[T], out: &mut [T], w: &[T], eps: T) {
    // (The element loop below stops at the shortest slice: every one must hold the row.)
    assert!(
        out.len() >= x.len() && w.len() >= x.len(),
        "rmsnorm_row: output or weight shorter than the row"
    );
    let n = T::from_f64(x.len() as f64);
    let ms = T::sum_squares(x) / n;
    let den = (ms + eps).sqrt();
    vectorized(
        #[inline(always)]
        || {
            for ((o, &v), &wi) in out.iter_mut().zip(x).zip(w) {
                *o = v / den * wi;
            }
        },
    )
}

/// Softmax of one row in place: subtract the max, exp, plain sum, divide.
pub fn softmax_row<T: Transcendental>(x: &mut [T]) {
    let mut m = T::neg_infinity();
    for &v in x.iter() {
        m = m.max(v);
    }
    for v in x.iter_mut() {
        *v = *v - m;
    }
    T::exp_inplace(x);
    let mut s = T::ZERO;
    for &v in x.iter() {
        s += v;
    }
    for v in x.iter_mut() {
        *v = *v / s;
    }
}

/// The sinusoidal position encoding of (0-based) position `pos` into `out` (width d):
/// with 1-based t = pos + 1 and 1-based column i, `div = 10000^(2 floor((i-1)/2) / d)`,
/// odd i: sin(t / div), even i: cos(t / div). Computed in f64.
pub fn sinusoidal_row<T: Element>(pos: usize, out: &mut [T]) {
    let d = out.len() as f64;
    let t = (pos + 1) as f64;
    for (c, o) in out.iter_mut().enumerate() {
        let div = 10000f64.powf((2 * (c / 2)) as f64 / d);
        let v = if c % 2 == 0 {
            (t / div).sin()
        } else {
            (t / div).cos()
        };
        *o = T::from_f64(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_exponent_from_bits_equals_the_cast() {
        // For every f32 the reduction can meet, the exponent read from the bits of
        // `x * log2(e) + MAGIC` equals the rounded integer converted with `as`.
        const MAGIC: f32 = 12_582_912.0;
        let (lo, hi) = ((-87.3f32).to_bits(), 88.3f32.to_bits());
        let check = |x: f32| {
            let t = x * std::f32::consts::LOG2_E + MAGIC;
            assert_eq!(
                t.to_bits() as i32 - MAGIC.to_bits() as i32,
                (t - MAGIC) as i32,
                "x = {x}"
            );
        };
        // Every 61st bit pattern of the positive and negative ranges, plus the ends.
        for b in (0..=hi).step_by(61).chain([hi]) {
            check(f32::from_bits(b));
        }
        for b in (0x8000_0000..=lo).step_by(61).chain([lo]) {
            check(f32::from_bits(b));
        }
    }

    fn ulps(a: f32, b: f32) -> u32 {
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs() as u32
    }

    #[test]
    fn exp_f32_is_within_two_ulp() {
        let mut worst = 0;
        let mut x = -87.0f32;
        while x < 88.0 {
            let want = (x as f64).exp() as f32;
            worst = worst.max(ulps(exp_f32(x), want));
            x += 0.0013;
        }
        assert!(worst <= 2, "worst {worst} ulp");
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(-1e9), 0.0);
        assert!(exp_f32(f32::NAN).is_nan());
    }

    #[test]
    fn vectorised_paths_agree_with_scalar() {
        let xs: Vec<f32> = (0..1000).map(|i| (i as f32 - 500.0) * 0.037).collect();
        let mut a = xs.clone();
        f32::exp_inplace(&mut a);
        let mut g = xs.clone();
        f32::gelu_inplace(&mut g);
        for i in 0..xs.len() {
            assert_eq!(a[i].to_bits(), exp_f32(xs[i]).to_bits());
            assert_eq!(g[i].to_bits(), gelu_f32(xs[i]).to_bits());
            let want = {
                let t = xs[i] as f64;
                0.5 * t
                    * (1.0
                        + ((2.0 / std::f64::consts::PI).sqrt() * (t + 0.044715 * t * t * t)).tanh())
            };
            assert!(
                (g[i] as f64 - want).abs() <= 4e-7 * (1.0 + want.abs()),
                "gelu({}) = {} vs {}",
                xs[i],
                g[i],
                want
            );
        }
    }

    #[test]
    fn tanh_f32_accuracy() {
        let mut y = -12.0f32;
        while y < 12.0 {
            assert!(
                (tanh_f32(y) as f64 - (y as f64).tanh()).abs() < 2.5e-7,
                "tanh({y})"
            );
            y += 0.001;
        }
    }

    #[test]
    fn layernorm_matches_definition() {
        let x = [1.0f64, 2.0, 4.0, 8.0];
        let mut out = [0.0; 4];
        layernorm_row(&x, &mut out, None, 1e-5);
        let mean = 15.0 / 4.0;
        let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / 4.0;
        for i in 0..4 {
            assert!((out[i] - (x[i] - mean) / (var + 1e-5f64).sqrt()).abs() < 1e-15);
        }
    }

    #[test]
    fn rmsnorm_matches_definition() {
        let x: Vec<f64> = (0..37).map(|i| (i as f64 * 0.71).sin() * 3.0).collect();
        let w: Vec<f64> = (0..37).map(|i| 0.5 + i as f64 / 37.0).collect();
        let mut out = vec![0.0; 37];
        rmsnorm_row(&x, &mut out, &w, 1e-6);
        let ms = x.iter().map(|v| v * v).sum::<f64>() / 37.0;
        for i in 0..37 {
            assert!((out[i] - x[i] / (ms + 1e-6f64).sqrt() * w[i]).abs() < 1e-14);
        }
        // float32: its 16-lane sums stay within rounding of the float64 result.
        let x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
        let w32: Vec<f32> = w.iter().map(|&v| v as f32).collect();
        let mut o32 = vec![0.0f32; 37];
        rmsnorm_row(&x32, &mut o32, &w32, 1e-6);
        for i in 0..37 {
            assert!(
                (o32[i] as f64 - out[i]).abs() < 2e-6 * (1.0 + out[i].abs()),
                "{i}"
            );
        }
    }

    #[test]
    fn silu_times_up_matches_definition() {
        let g: Vec<f32> = (0..203).map(|i| (i as f32 - 100.0) * 0.11).collect();
        let u: Vec<f32> = (0..203).map(|i| (i as f32 * 0.3).cos()).collect();
        let mut a = u.clone();
        // SAFETY: one row of 203 values in each.
        unsafe { f32::silu_mul_rows(a.as_mut_ptr(), 203, g.as_ptr(), 203, 1, 203) };
        let g64: Vec<f64> = g.iter().map(|&v| v as f64).collect();
        let mut b: Vec<f64> = u.iter().map(|&v| v as f64).collect();
        // SAFETY: as above.
        unsafe { f64::silu_mul_rows(b.as_mut_ptr(), 203, g64.as_ptr(), 203, 1, 203) };
        for i in 0..203 {
            assert_eq!(
                a[i].to_bits(),
                (silu_f32(g[i]) * u[i]).to_bits(),
                "vectorised {i}"
            );
            let t = g[i] as f64;
            let want = t / (1.0 + (-t).exp()) * u[i] as f64;
            assert_eq!(b[i], want);
            assert!(
                (a[i] as f64 - want).abs() <= 3e-7 * (1.0 + want.abs()),
                "{i}"
            );
        }
        assert!(silu_f32(-200.0) <= 0.0 && silu_f32(-200.0) > -1e-35);
        assert_eq!(silu_f32(200.0), 200.0);
        assert!(silu_f32(f32::NAN).is_nan());
    }

    #[test]
    fn sinusoidal_first_row() {
        let mut r = [0.0f64; 4];
        sinusoidal_row(0, &mut r);
        assert_eq!(r[0], 1f64.sin());
        assert_eq!(r[1], 1f64.cos());
        assert_eq!(r[2], (1.0 / 100f64).sin());
    }
}
